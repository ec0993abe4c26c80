/* YaRN's inverse frequencies (worker/engine/rope.c) against float64 values of transformers'
 * _compute_yarn_parameters (modeling_rope_utils), with its "truncate" both ways: true (the
 * default) rounds the correction range's ends, floor(d(beta_fast)) and ceil(d(beta_slow)),
 * false keeps them as they are (gpt-oss's config). head_dim 32, theta 10000, factor 4,
 * original 128, beta 32 / 1: d(1) = 5.236..., so frequencies 1 to 5 differ. The recipe's
 * truncate reaches the worker's config, true unless set. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ckpt/ckpt_rope.h"
#include "model.h"
#include "rope.h"

#define HD 32

/* float64 Python of transformers' formula (the ramp between low and high, inv_freq
 * interpolated by factor where the ramp is 1 and extrapolated where it is 0) */
static const double want_truncated[HD / 2] = {
    1,
    0.49204865954155541,
    0.23717082451262847,
    0.11114246312743267,
    0.050000000000000003,
    0.021087799694638087,
    0.0079056941504209478,
    0.0044456985250973073,
    0.0025000000000000001,
    0.0014058533129758727,
    0.00079056941504209474,
    0.00044456985250973074,
    0.00025000000000000001,
    0.00014058533129758727,
    7.9056941504209485e-05,
    4.4456985250973067e-05,
};
static const double want_untruncated[HD / 2] = {
    1,
    0.48179390434089403,
    0.22563747925454336,
    0.10141394814296859,
    0.042705671988669737,
    0.015960422094307404,
    0.0079056941504209478,
    0.0044456985250973073,
    0.0025000000000000001,
    0.0014058533129758727,
    0.00079056941504209474,
    0.00044456985250973074,
    0.00025000000000000001,
    0.00014058533129758727,
    7.9056941504209485e-05,
    4.4456985250973067e-05,
};

static void check_yarn(int truncate, const double *want) {
    rope_config rc;
    rope_config_default(&rc);
    CHECK(rc.truncate == 1);
    rc.type = ROPE_YARN, rc.factor = 4, rc.original_max_position = 128;
    rc.truncate = truncate;
    double inv[HD / 2], mscale;
    CHECK(rope_config_check(&rc, HD, NULL, 0) == 0);
    rope_inv_freq(&rc, HD, inv, &mscale);
    for (int i = 0; i < HD / 2; i++)
        CHECK_REL(inv[i], want[i], 1e-14);
    CHECK_REL(mscale, 1.138629436111989, 1e-15); /* 0.1 ln 4 + 1 */
}

static void test_truncate_from_pb(void) {
    Baton__Model pb = BATON__MODEL__INIT;
    Baton__Rope rope = BATON__ROPE__INIT;
    Baton__RopeScaling sc = BATON__ROPE_SCALING__INIT;
    model_config cfg;
    bt_diag d;
    bt_diag_init(&d);
    pb.dim = 128, pb.n_layers = 2, pb.n_heads = 4, pb.ffn_dim = 176, pb.vocab_size = 256;
    sc.type = BATON__ROPE_SCALING__TYPE__YARN, sc.factor = 4, sc.original_max_position = 128;
    rope.scaling = &sc, pb.rope = &rope;
    CHECK(model_config_from_pb(&cfg, &pb, &d) == 0);
    CHECK(cfg.rope.type == ROPE_YARN && cfg.rope.truncate == 1); /* unset: true */
    sc.has_truncate = 1, sc.truncate = 0;
    CHECK(model_config_from_pb(&cfg, &pb, &d) == 0);
    CHECK(cfg.rope.truncate == 0);
}

/* An old manifest's Model: bytes with no field 9 in the RopeScaling unpack to truncate 1
 * (the descriptor's default), as do the bytes of one that says true; 0 is carried. */
static void check_wire(int has, int value, int want) {
    Baton__Model pb = BATON__MODEL__INIT;
    Baton__Rope rope = BATON__ROPE__INIT;
    Baton__RopeScaling sc = BATON__ROPE_SCALING__INIT;
    sc.has_type = sc.has_factor = sc.has_original_max_position = 1;
    sc.type = BATON__ROPE_SCALING__TYPE__YARN, sc.factor = 4, sc.original_max_position = 128;
    sc.has_truncate = has, sc.truncate = value;
    rope.scaling = &sc, pb.rope = &rope;
    uint8_t buf[256];
    size_t n = baton__rope_scaling__pack(&sc, buf);
    CHECK(n < sizeof buf && baton__model__get_packed_size(&pb) < sizeof buf);
    /* field 9, varint: tag byte 0x48; the other fields' bytes here hold none */
    CHECK((memchr(buf, 0x48, n) != NULL) == has);
    Baton__RopeScaling *u = baton__rope_scaling__unpack(NULL, n, buf);
    CHECK(u != NULL && u->has_truncate == has && u->truncate == want);
    if (u) baton__rope_scaling__free_unpacked(u, NULL);
    n = baton__model__pack(&pb, buf);
    Baton__Model *m = baton__model__unpack(NULL, n, buf);
    CHECK(m != NULL);
    if (m == NULL) return;
    model_config cfg;
    bt_diag d;
    bt_diag_init(&d);
    m->dim = 128, m->n_layers = 2, m->n_heads = 4, m->ffn_dim = 176, m->vocab_size = 256;
    CHECK(model_config_from_pb(&cfg, m, &d) == 0 && cfg.rope.truncate == want);
    baton__model__free_unpacked(m, NULL);
}

/* An init checkpoint's RoPE against the stage's: the fields that differ, named as the
 * recipe writes them; the scaling's only under the same type, and only those it uses. */
static void test_rope_diff(void) {
    Baton__Model a = BATON__MODEL__INIT, b = BATON__MODEL__INIT;
    Baton__Rope ra = BATON__ROPE__INIT, rb = BATON__ROPE__INIT;
    Baton__RopeScaling sa = BATON__ROPE_SCALING__INIT, sb = BATON__ROPE_SCALING__INIT;
    char out[512];
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 0 && out[0] == '\0');
    a.rope = &ra; /* a Rope left at its defaults is no RoPE given */
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 0);
    sa.type = sb.type = BATON__ROPE_SCALING__TYPE__YARN;
    sa.factor = sb.factor = 4, sa.original_max_position = sb.original_max_position = 64;
    ra.scaling = &sa, b.rope = &rb, rb.scaling = &sb;
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 0);
    sa.truncate = 0, rb.theta = 5e5;
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 2);
    CHECK_STR_CONTAINS(out, "rope.theta 10000 -> 500000, rope.scaling.truncate false -> true");
    sa.truncate = 1, rb.theta = 1e4, sa.low_freq_factor = 7; /* llama3's: yarn ignores it */
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 0);
    sb.type = BATON__ROPE_SCALING__TYPE__LLAMA3;
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 1);
    CHECK_STR_CONTAINS(out, "rope.scaling.type yarn -> llama3");
    rb.scaling = NULL;
    CHECK(ckpt_rope_diff(&a, &b, out, sizeof out) == 1);
    CHECK_STR_CONTAINS(out, "rope.scaling.type yarn -> none");
}

int main(void) {
    check_yarn(1, want_truncated);
    check_yarn(0, want_untruncated);
    test_truncate_from_pb();
    check_wire(0, 0, 1);
    check_wire(1, 1, 1);
    check_wire(1, 0, 0);
    test_rope_diff();
    return check_status();
}
