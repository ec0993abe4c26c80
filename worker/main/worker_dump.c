/* baton-worker --dump-params: the one-process parameters gathered from every rank and
 * written by world rank 0 (worker_dump.h). */
#include "worker_dump.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_moe.h"
#include "model_zero.h"

/* Which rank of group g failed (failed: this one did; rank: its place in g): that rank +
 * 1 (the highest where several did), 0 when none did, -1 when the vote cannot be taken.
 * Every rank calls it, so that all enter a collective after it or none does. */
static int worker_failed_rank(comm *g, int failed, int rank) {
    float f = failed ? (float)rank + 1.0f : 0.0f;
    if (comm_allreduce(g, &f, &f, 1, COMM_F32, COMM_MAX, NULL) != 0) return -1;
    return (int)f;
}

/* The dump's buffers (worker_dump_alloc). */
enum { WORKER_BUF_EXPERTS, WORKER_BUF_STAGE, WORKER_BUF_TP };

/* Test hook: BATON_FAULT_DUMP_NOMEM=EP_RANK makes that expert-parallel rank's buffer for
 * the experts' gather fail to be allocated; BATON_FAULT_DUMP_NOMEM=stage:RANK that world
 * rank's buffer for a stage's parameters, =tp:RANK that world rank's buffers for the tp
 * gather. which: the buffer asked about (WORKER_BUF_*), rank: the rank the form names. */
static int worker_fault_dump_nomem(int which, int rank) {
    const char *f = getenv("BATON_FAULT_DUMP_NOMEM");
    if (f == NULL || f[0] == '\0') return 0;
    int form = strncmp(f, "stage:", 6) == 0 ? WORKER_BUF_STAGE
               : strncmp(f, "tp:", 3) == 0  ? WORKER_BUF_TP
                                            : WORKER_BUF_EXPERTS;
    if (form == WORKER_BUF_EXPERTS && (f[0] < '0' || f[0] > '9')) return 0;
    return form == which && atoi(strchr(f, ':') ? strchr(f, ':') + 1 : f) == rank;
}

/* The floats of the largest routed expert tensor into *biggest; nonzero when a tensor's
 * slice cannot be had. */
static int worker_expert_biggest(trainer *t, size_t *biggest) {
    *biggest = 0;
    for (int i = 0; i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        if (model_tensor_slice(&t->m.cfg, i, &mt) != 0) return BT_EINVAL;
        if (mt.expert && mt.global_count > *biggest) *biggest = mt.global_count;
    }
    return 0;
}

/* The buffer for the experts' gather (worker_gather_experts) into *all: NULL without
 * expert parallelism; why (cap bytes) says what failed. */
static int worker_experts_alloc(trainer *t, float **all, char *why, size_t cap) {
    const model_config *cfg = &t->m.cfg;
    *all = NULL;
    if (t->m.ep_group == NULL) return 0;
    size_t biggest = 0;
    int rc = worker_expert_biggest(t, &biggest);
    if (rc == 0 && !worker_fault_dump_nomem(WORKER_BUF_EXPERTS, cfg->ep_rank))
        *all = malloc(((size_t)cfg->ep * biggest + 1) * sizeof **all);
    if (rc == 0 && *all == NULL) rc = BT_ENOMEM;
    if (rc != 0)
        snprintf(why, cap, "%s for the experts' gather (%zu floats)",
                 rc == BT_ENOMEM ? "out of memory" : "no tensor layout", (size_t)cfg->ep * biggest);
    return rc;
}

/* Under expert parallelism each rank holds its share of the routed experts (at their
 * places in out): every routed expert's tensor from the ep rank that holds it, into out,
 * through all (worker_experts_alloc). why (cap bytes) says what failed. */
static int worker_gather_experts(trainer *t, float *out, float *all, char *why, size_t cap) {
    comm *ep = t->m.ep_group;
    const model_config *cfg = &t->m.cfg;
    int rc = 0;
    for (int i = 0; ep != NULL && rc == 0 && i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        model_tensor_slice(cfg, i, &mt); /* each one's checked by worker_experts_alloc */
        if (!mt.expert) continue;
        size_t n = mt.global_count;
        rc = comm_allgather(ep, out + model_tensor_global_offset(cfg, cfg->ep_rank, i), all, n,
                            COMM_F32, NULL);
        if (rc != 0) snprintf(why, cap, "the experts' allgather: %s", comm_error(ep));
        for (int r = 0; rc == 0 && r < cfg->ep; r++)
            memcpy(out + model_tensor_global_offset(cfg, r, i), all + (size_t)r * n,
                   n * sizeof *all);
    }
    return rc;
}

/* The dump's buffers: stage for the largest stage's parameters, all for the experts'
 * gather (worker_experts_alloc), tp for the tp gather (model_gather_bufs). */
typedef struct worker_dump_bufs {
    float *stage, *all;
    model_gather_bufs tp;
} worker_dump_bufs;

static void worker_dump_free(trainer *t, worker_dump_bufs *b) {
    free(b->stage);
    free(b->all);
    b->stage = b->all = NULL;
    model_gather_bufs_free(&t->m, &b->tp);
}

/* The buffer for the largest stage's parameters and the tp gather's; why (cap bytes)
 * says what failed. */
static int worker_stage_alloc(trainer *t, int world_rank, worker_dump_bufs *b, char *why,
                              size_t cap) {
    size_t biggest = 0;
    for (int s = 0; s < t->pp.stages; s++) {
        size_t n = model_stage_global_floats(&t->m.cfg, s);
        biggest = n > biggest ? n : biggest;
    }
    if (!worker_fault_dump_nomem(WORKER_BUF_STAGE, world_rank))
        b->stage = calloc(biggest ? biggest : 1, sizeof *b->stage);
    if (b->stage == NULL) {
        snprintf(why, cap, "out of memory for the stage's parameters (%zu floats)", biggest);
        return BT_ENOMEM;
    }
    int rc = t->m.tp_group != NULL && worker_fault_dump_nomem(WORKER_BUF_TP, world_rank)
                 ? BT_ENOMEM
                 : model_gather_bufs_alloc(&t->m, &b->tp);
    if (rc != 0)
        snprintf(why, cap,
                 "out of memory for the tp gather (%zu floats on the device and as many "
                 "in host memory)",
                 model_gather_bufs_floats(&t->m));
    return rc;
}

/* The dump's buffers, all of them before any collective of the dump (a tp gather's too,
 * sized for the largest tensor): every rank votes on them over world, so that no rank
 * waits in a collective (tp, pp, ep or ZeRO-3's dp) another one skipped, and every rank's
 * message names the rank that failed. why (cap bytes) says what failed; on failure none
 * is held. */
static int worker_dump_alloc(trainer *t, comm *world, int world_rank, worker_dump_bufs *b,
                             char *why, size_t cap) {
    memset(b, 0, sizeof *b);
    int rc = worker_stage_alloc(t, world_rank, b, why, cap);
    rc = rc ? rc : worker_experts_alloc(t, &b->all, why, cap);
    int vote = world != NULL ? worker_failed_rank(world, rc != 0, world_rank) : 0;
    if (rc == 0 && vote < 0)
        snprintf(why, cap, "the vote on the gather's buffers: %s", comm_error(world));
    else if (rc == 0 && vote > 0)
        snprintf(why, cap,
                 "rank %d could not allocate its buffers for the gather (its log says why)",
                 vote - 1);
    rc = rc ? rc : vote ? BT_EIO : 0;
    if (rc != 0) worker_dump_free(t, b);
    return rc;
}

/* The stage's one-process tensors, at their places, gathered over the tp group (and the
 * routed experts over the ep group) into b->stage. */
static int worker_gather_stage(trainer *t, const worker_dump_bufs *b, char *why, size_t cap) {
    for (int i = 0, unit = -1; i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        model_tensor_info(&t->m, i, &mt);
        /* ZeRO-3: each unit gathered over the dp group once, before its first tensor */
        int u = t->m.zw ? model_zero_unit_at(&t->m, mt.offset) : -1, rc = 0;
        if (u != unit) rc = model_zero_fetch(&t->m, u), unit = u;
        size_t off = model_tensor_global_offset(&t->m.cfg, t->m.cfg.ep_rank, i);
        bt_diag d;
        bt_diag_init(&d);
        rc = rc ? rc : model_gather_tensor(&t->m, i, b->stage + off, &b->tp, &d);
        if (rc != 0 && d.msg[0]) snprintf(why, cap, "%.200s", d.msg);
        if (rc != 0) return rc;
    }
    return worker_gather_experts(t, b->stage, b->all, why, cap);
}

/* Tag of a stage's parameters on their way to stage 0 (training uses small tags). */
#define WORKER_DUMP_TAG 0x7ffffff1u

/* Writes n floats at float offset `at` of f; 1 on success. */
static int write_at(FILE *f, size_t at, const float *x, size_t n) {
    return fseeko(f, (off_t)(at * sizeof *x), SEEK_SET) == 0 && fwrite(x, sizeof *x, n, f) == n;
}

/* Stage s's gathered block (worker_gather_stage) at its places in the one-process
 * parameters: its layers are not contiguous there under an interleaved pipeline. */
static int worker_place_stage(const model_config *cfg, int s, const float *block, FILE *f) {
    model_config at = *cfg;
    at.pp_rank = s;
    int first, n, ok = 1;
    model_stage_layers(&at, &first, &n);
    size_t VC = (size_t)cfg->vocab * cfg->dim, off = 0;
    if (s == 0) ok = write_at(f, 0, block, VC), off = VC;
    for (int l = 0; l < n && ok; l++) {
        int gl = model_stage_layer(&at, l);
        size_t lo = model_global_layer_offset(cfg, gl), hi = model_global_layer_offset(cfg, gl + 1);
        ok = write_at(f, lo, block + off, hi - lo);
        off += hi - lo;
    }
    if (ok && s == (cfg->pp > 1 ? cfg->pp : 1) - 1)
        ok = write_at(f, model_global_layer_offset(cfg, cfg->n_layers), block + off,
                      (size_t)cfg->dim + VC);
    return ok;
}

/* The one-process parameters, tensor after tensor: every rank takes part (under tp the
 * slices are gathered over the tp group; under pp each stage's tensors are sent to stage 0,
 * which writes them at their places), world rank 0 writes. world: every rank's group
 * (NULL when alone), world_rank: this rank's place in it. */
int worker_dump_params(trainer *t, comm *world, int world_rank, const char *path, bt_diag *diag) {
    if (path == NULL) return 0;
    const model_config *cfg = &t->m.cfg;
    train_pp *pp = &t->pp;
    worker_dump_bufs b;
    char why[256] = "";
    int rc = worker_dump_alloc(t, world, world_rank, &b, why, sizeof why);
    FILE *f = rc == 0 && world_rank == 0 ? fopen(path, "wb") : NULL;
    int ok = world_rank != 0 || f != NULL, pp_failed = 0;
    rc = rc ? rc : worker_gather_stage(t, &b, why, sizeof why);
    for (int s = 0; rc == 0 && s < pp->stages; s++) {
        size_t n = model_stage_global_floats(cfg, s);
        if (s > 0 && pp->stage == 0)
            rc = comm_recv(pp->group, b.stage, n, COMM_F32, s, WORKER_DUMP_TAG, NULL);
        else if (s > 0 && pp->stage == s)
            rc = comm_send(pp->group, b.stage, n, COMM_F32, 0, WORKER_DUMP_TAG, NULL);
        pp_failed = rc != 0;
        if (rc == 0 && f != NULL) ok = ok && worker_place_stage(cfg, s, b.stage, f);
    }
    ok = (f == NULL || fclose(f) == 0) && ok;
    worker_dump_free(t, &b);
    if (rc != 0) {
        comm *g = pp_failed ? pp->group : t->tp.group;
        bt_diag_set(diag, "%s: cannot gather the parameters: %s", path,
                    why[0] ? why
                    : g    ? comm_error(g)
                           : bt_strerror(rc));
        return rc;
    }
    if (!ok) {
        bt_diag_set(diag, "%s: cannot write the parameters: %s", path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}
