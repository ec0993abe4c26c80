/* Semantic checks of a loaded recipe. Each check reports the key that set the
 * offending value: for a stage, the stage itself, else the nearest earlier stage
 * that set it, else the defaults (stages inherit in that order). */
#include "recipe.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "pb_util.h"
#include "plan.h"
#include "plan_precision.h"
#include "validate_ctx.h"

/* Bounds that keep every later product in range: the planner walks all ranks, the
 * engine indexes a micro-batch's tokens with int and counts micro-batches in uint32. */
#define MAX_WORLD        (1u << 22) /* devices in a cluster */
#define MAX_SEQ_LEN      (1ull << 24)
#define MAX_BATCH_TOKENS 2147483647ull /* micro_batch x seq_len */
#define MAX_MIX_SOURCES  16
#define MAX_TOKENS       9223372036854775807ull /* 2^63 - 1: the recipe's tokens, all stages */

/* a * b, or UINT64_MAX when it overflows: a saturated product is never 0 and never
 * equal to a real layout, so the comparisons made with it fail as they should. */
static uint64_t mul_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Whether path is base or lies under it ("a.b" and "a[0]" are under "a"). */
static int path_within(const char *path, const char *base) {
    size_t n = strlen(base);
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '.' || path[n] == '[');
}

/* Whether under, a path within block path, is one the check names: keys NULL (any), the
 * block itself, or a field of it in keys, a comma-separated list ("tp,pp,cp"), or under
 * one. */
static int path_implicated(const char *under, const char *path, const char *keys) {
    size_t n = strlen(path);
    if (keys == NULL || under[n] == '\0') return 1;
    const char *f = under + n + 1;
    size_t flen = strcspn(f, ".[");
    for (const char *k = keys; *k != '\0';) {
        size_t klen = strcspn(k, ",");
        if (klen == flen && strncmp(k, f, flen) == 0) return 1;
        k += klen + (k[klen] == ',');
    }
    return 0;
}

/* Where the value at path came from, NULL when nowhere: the last --set override that
 * wrote it or a field under it that the check names (keys: path_implicated; a check of
 * parallel's tp×pp×cp that fails after --set defaults.parallel.tp=3 is the override's
 * doing, one after --set defaults.parallel.zero=1 is not), else the file's entry for
 * path, else an override that wrote a block holding it. */
static const recipe_pos *pos_origin(const recipe_doc *doc, const char *path, const char *keys) {
    const recipe_pos *set = NULL, *exact = NULL, *above = NULL;
    for (size_t k = 0; k < doc->npos; k++) {
        const recipe_pos *p = &doc->pos[k];
        if (p->set != NULL && path_within(p->path, path))
            set = path_implicated(p->path, path, keys) ? p : set;
        else if (p->set == NULL && strcmp(p->path, path) == 0)
            exact = p;
        else if (p->set != NULL && path_within(path, p->path))
            above = p;
    }
    return set ? set : exact ? exact : above;
}

/* Where field (relative to a stage, e.g. "parallel.cp") of stage i was written: the
 * stage, else the nearest earlier stage, else the defaults, else (for blocks that also
 * live at the top or in the model, like data and rope) the recipe's top level or the
 * model, else the stage itself. */
static const recipe_pos *stage_field_where(const recipe_doc *doc, long i, const char *field,
                                           const char *keys, char *path, size_t cap) {
    for (long k = i; k >= -3; k--) {
        if (k >= 0)
            snprintf(path, cap, "stages[%ld].%s", k, field);
        else if (k == -1)
            snprintf(path, cap, "defaults.%s", field);
        else if (k == -2)
            snprintf(path, cap, "%s", field);
        else
            snprintf(path, cap, "model.%s", field);
        const recipe_pos *p = pos_origin(doc, path, keys);
        if (p != NULL) return p;
    }
    snprintf(path, cap, "stages[%ld]", i);
    const recipe_pos *p = recipe_doc_find(doc, path);
    snprintf(path, cap, "stages[%ld].%s", i, field);
    return p;
}

/* Reports a problem with field: a stage-relative name when checking a stage,
 * else a recipe path ("model.n_heads"). The place is the file's line and column, or the
 * --set override that wrote the value. A block's check names the fields it reads in
 * braces, "parallel{tp,pp,cp}": only an override of one of them is its cause. */

/* " (with --set A, --nodes 2 in effect)": the overrides that were applied, for an error
 * placed in the file, which one of them may have caused (a layout that no longer fits the
 * cluster an override shrank); "" when there are none. */
static void overrides_note(const recipe_doc *doc, char *out, size_t cap) {
    size_t used = 0, shown = 0;
    out[0] = '\0';
    for (size_t k = 0; k < doc->npos && used + 1 < cap; k++) {
        const char *set = doc->pos[k].set;
        int seen = set == NULL;
        for (size_t j = 0; !seen && j < k; j++)
            seen = doc->pos[j].set != NULL && strcmp(doc->pos[j].set, set) == 0;
        if (seen) continue;
        int n = shown == 4
                    ? snprintf(out + used, cap - used, ", ...")
                    : snprintf(out + used, cap - used, "%s%s", shown ? ", " : " (with ", set);
        if (n < 0 || (size_t)n >= cap - used) break;
        used += (size_t)n;
        if (++shown > 4) break;
    }
    if (shown > 0 && used + 12 < cap) snprintf(out + used, cap - used, " in effect)");
}

/* A problem with field as vc_err reports it: its place in place (FILE:LINE:COL, or the --set
 * override that wrote the value) and "PATH: message (stage ...)(overrides)" in out.
 * Returns whether the place is in the file (at[0]:at[1], its line and column). */
static int vformat(vctx *v, const char *field0, char place[400], int at[2], char *out, size_t cap,
                   const char *fmt, va_list ap) {
    char path[256], msg[1536], stage[320] = "", note[512] = "", field[128];
    const recipe_pos *p;
    snprintf(field, sizeof field, "%s", field0);
    char *keys = strchr(field, '{');
    if (keys != NULL) *keys++ = '\0', keys[strcspn(keys, "}")] = '\0';
    if (v->stage >= 0) {
        p = stage_field_where(v->doc, v->stage, field, keys, path, sizeof path);
        snprintf(stage, sizeof stage, " (stage %ld \"%s\")", v->stage, v->stage_name);
    } else {
        snprintf(path, sizeof path, "%s", field);
        p = pos_origin(v->doc, path, keys);
        if (p == NULL) p = recipe_doc_find(v->doc, path);
    }
    int in_file = p == NULL || p->set == NULL;
    at[0] = p ? p->line : 0, at[1] = p ? p->col : 0;
    if (in_file)
        snprintf(place, 400, "%s:%d:%d", v->doc->file, at[0], at[1]);
    else
        snprintf(place, 400, "%s", p->set);
    if (in_file) overrides_note(v->doc, note, sizeof note);
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* a check of the whole recipe (a missing block) has no path to name */
    snprintf(out, cap, "%s%s%s%s%s", path, path[0] ? ": " : "", msg, stage, note);
    return in_file;
}

int vc_err(vctx *v, const char *field, const char *fmt, ...) {
    char place[400], text[2800];
    int at[2];
    va_list ap;
    va_start(ap, fmt);
    int in_file = vformat(v, field, place, at, text, sizeof text, fmt, ap);
    va_end(ap);
    if (in_file)
        bt_diag_set_placed(v->diag, v->doc->file, at[0], at[1], "%s", text);
    else
        bt_diag_set(v->diag, "%s: %s", place, text);
    return BT_ERECIPE;
}

/* A warning about field, placed as vc_err places an error, on doc->warn: "FILE:LINE:COL:
 * warning: ..." as a compiler writes one, or "baton CMD: warning: --set ...: ..." for a
 * value an override wrote. */
void vc_warn(vctx *v, const char *field, const char *fmt, ...) {
    char place[400], text[2800];
    int at[2];
    va_list ap;
    va_start(ap, fmt);
    int in_file = vformat(v, field, place, at, text, sizeof text, fmt, ap);
    va_end(ap);
    const char *cmd = v->doc->warn_cmd;
    if (v->doc->warn != NULL && in_file)
        fprintf(v->doc->warn, "%s: warning: %s\n", place, text);
    else if (v->doc->warn != NULL)
        fprintf(v->doc->warn, "baton%s%s: warning: %s: %s\n", cmd ? " " : "", cmd ? cmd : "", place,
                text);
    if (v->doc->stage_warn != NULL && v->stage >= 0) {
        char line[400 + 2 + 2800];
        snprintf(line, sizeof line, "%s: %s", place, text);
        v->doc->stage_warn(v->doc->stage_warn_ctx, (size_t)v->stage, line);
    }
}

static int check_moe(vctx *v, const Baton__Model *m) {
    const Baton__Moe *e = m->moe;
    if (m->arch != BATON__MODEL__ARCH__MOE) {
        REQUIRE(e == NULL, v, "model.moe", "a moe block needs model.arch: moe (arch is llama)");
        return 0;
    }
    REQUIRE(e != NULL, v, "model.arch",
            "arch moe needs a model.moe block with n_experts, top_k "
            "and expert_ffn_dim");
    REQUIRE(e->n_experts >= 2, v, "model.moe.n_experts", "expected at least 2 experts, got %u",
            e->n_experts);
    REQUIRE(e->n_experts <= PLAN_MAX_EXPERTS, v, "model.moe.n_experts",
            "%u experts is above the limit of %u routed experts an MoE layer holds (today's "
            "largest MoEs route over 256 to 384)",
            e->n_experts, PLAN_MAX_EXPERTS);
    REQUIRE(e->top_k >= 1 && e->top_k <= e->n_experts, v, "model.moe.top_k",
            "top_k must be between 1 and n_experts (%u), got %u", e->n_experts, e->top_k);
    REQUIRE(e->expert_ffn_dim > 0, v, "model.moe.expert_ffn_dim",
            "expected a positive expert_ffn_dim");
    REQUIRE(e->every >= 1, v, "model.moe.every",
            "every must be at least 1 (an MoE layer every "
            "k-th layer)");
    REQUIRE(e->first_dense_layers < m->n_layers, v, "model.moe.first_dense_layers",
            "first_dense_layers (%u) leaves no MoE layer among %u layers", e->first_dense_layers,
            m->n_layers);
    /* at n_experts / top_k each expert already has room for every token of the batch, so
     * n_experts bounds it with room to spare; the worker's capacity, capacity_factor x
     * tokens x top_k / n_experts, is an int */
    REQUIRE(e->capacity_factor >= 0 && e->capacity_factor <= e->n_experts, v,
            "model.moe.capacity_factor",
            "capacity_factor must be 0 (no dropping) or positive, and at most n_experts (%u: "
            "from n_experts / top_k on no token is dropped), got %g",
            e->n_experts, e->capacity_factor);
    return 0;
}

static int check_model(vctx *v, const Baton__Model *m) {
    REQUIRE(m != NULL, v, "",
            "missing model: expected model: {arch, dim, n_layers, n_heads, "
            "ffn_dim, vocab_size}");
    REQUIRE(m->dim > 0, v, "model.dim", "expected a positive model dim");
    REQUIRE(m->n_layers > 0 && m->n_layers <= PLAN_MAX_LAYERS, v, "model.n_layers",
            "expected a positive number of layers, at most %u (got %u)", PLAN_MAX_LAYERS,
            m->n_layers);
    REQUIRE(m->n_heads > 0, v, "model.n_heads", "expected a positive number of heads");
    REQUIRE(m->vocab_size > 0, v, "model.vocab_size", "expected a positive vocab_size");
    REQUIRE(m->dim % m->n_heads == 0, v, "model.n_heads", "dim %u is not divisible by n_heads %u",
            m->dim, m->n_heads);
    REQUIRE((m->dim / m->n_heads) % 2 == 0 && m->dim / m->n_heads >= 4, v, "model.n_heads",
            "head dim %u (dim / n_heads) must be even and at least 4 for RoPE",
            m->dim / m->n_heads);
    uint32_t kv = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    REQUIRE(kv <= m->n_heads && m->n_heads % kv == 0, v, "model.n_kv_heads",
            "n_kv_heads %u must divide n_heads %u (grouped-query attention)", kv, m->n_heads);
    REQUIRE(m->arch == BATON__MODEL__ARCH__MOE || m->ffn_dim > 0, v, "model.ffn_dim",
            "expected a positive ffn_dim");
    /* RMSNorm adds it in float32 (model_config.c): a smaller one is 0 or subnormal there */
    REQUIRE(m->norm_eps >= FLT_MIN && m->norm_eps < 1, v, "model.norm_eps",
            "norm_eps must be at least 1.2e-38, the smallest normal float32 (RMSNorm adds it in "
            "float32, where a smaller one is 0 or subnormal), and below 1, got %g; 1e-5 is the "
            "usual",
            m->norm_eps);
    return check_moe(v, m);
}

/* nodes + spare_nodes: at most MAX_WORLD (summed in 64 bits); more than a run takes
 * (RECIPE_RUN_MAX_NODES) is refused for a run (v->naming set: baton run, resume, submit) and
 * a warning for the others (a plan of a larger cluster is still worth reading). */
static int check_run_nodes(vctx *v, const Baton__Cluster *c) {
    uint64_t total = (uint64_t)c->nodes + c->spare_nodes;
    REQUIRE(total <= MAX_WORLD, v, "cluster.spare_nodes",
            "%u nodes + %u spare_nodes is more than the %u baton plans for (its device limit)",
            c->nodes, c->spare_nodes, MAX_WORLD);
    if (total <= RECIPE_RUN_MAX_NODES) return 0;
    const char *field = c->nodes > RECIPE_RUN_MAX_NODES ? "cluster.nodes" : "cluster.spare_nodes";
    if (v->naming != NULL)
        return vc_err(v, field,
                      "%u nodes + %u spare_nodes is more than the %u nodes a run takes (baton run, "
                      "resume and submit; see docs/running.md)",
                      c->nodes, c->spare_nodes, RECIPE_RUN_MAX_NODES);
    vc_warn(v, field,
            "%u nodes + %u spare_nodes is more than the %u nodes a run takes: baton run and "
            "submit refuse this cluster",
            c->nodes, c->spare_nodes, RECIPE_RUN_MAX_NODES);
    return 0;
}

static int check_cluster(vctx *v, const Baton__Cluster *c) {
    REQUIRE(c != NULL, v, "", "missing cluster: expected cluster: {nodes, gpus_per_node}");
    REQUIRE(c->nodes >= 1, v, "cluster.nodes", "expected at least 1 node");
    REQUIRE(c->gpus_per_node >= 1, v, "cluster.gpus_per_node",
            "expected at least 1 device per node");
    REQUIRE((uint64_t)c->nodes * c->gpus_per_node <= MAX_WORLD, v, "cluster",
            "%u node%s × %u device%s is more than the %u devices baton plans for", c->nodes,
            c->nodes == 1 ? "" : "s", c->gpus_per_node, c->gpus_per_node == 1 ? "" : "s",
            MAX_WORLD);
    REQUIRE(c->mfu > 0 && c->mfu <= 1, v, "cluster.mfu", "mfu must be in (0, 1], got %g", c->mfu);
    return check_run_nodes(v, c);
}

/* The tokens the stages train, this one's and the recipe's up to it (steps x global_batch x
 * seq_len), at most 2^63 - 1: every data position (a stage's first sample after the
 * earlier stages', a step's samples) is then a count that fits a signed 64-bit integer. */
static int check_tokens(vctx *v) {
    const Baton__Stage *s = v->eff;
    uint64_t t = mul_sat(mul_sat(s->steps, s->global_batch), s->seq_len);
    REQUIRE(t <= MAX_TOKENS, v, "steps",
            "steps × global_batch × seq_len = %llu × %llu × %llu tokens is above the limit of "
            "%llu (2^63 - 1)",
            (unsigned long long)s->steps, (unsigned long long)s->global_batch,
            (unsigned long long)s->seq_len, MAX_TOKENS);
    REQUIRE(t <= MAX_TOKENS - v->tokens, v, "steps",
            "%llu tokens (steps × global_batch × seq_len) after the earlier stages' %llu are "
            "above the limit of %llu (2^63 - 1) for a recipe",
            (unsigned long long)t, (unsigned long long)v->tokens, MAX_TOKENS);
    v->tokens += t;
    return 0;
}

static int check_sizes(vctx *v) {
    const Baton__Stage *s = v->eff;
    REQUIRE(s->steps > 0, v, "steps", "expected a positive number of steps");
    REQUIRE(s->seq_len > 0, v, "seq_len", "expected a positive seq_len (e.g. 8K)");
    REQUIRE(s->global_batch > 0, v, "global_batch", "expected a positive global_batch (sequences)");
    REQUIRE(s->micro_batch > 0, v, "micro_batch", "expected a positive micro_batch");
    REQUIRE(s->seq_len <= MAX_SEQ_LEN, v, "seq_len",
            "seq_len %llu is above the limit of %llu (16M)", (unsigned long long)s->seq_len,
            MAX_SEQ_LEN);
    REQUIRE(mul_sat(s->micro_batch, s->seq_len) <= MAX_BATCH_TOKENS, v, "micro_batch",
            "micro_batch × seq_len = %llu × %llu tokens is above the limit of %llu",
            (unsigned long long)s->micro_batch, (unsigned long long)s->seq_len, MAX_BATCH_TOKENS);
    REQUIRE(s->global_batch <= UINT32_MAX, v, "global_batch",
            "global_batch %llu is above the limit of %u sequences",
            (unsigned long long)s->global_batch, UINT32_MAX);
    return check_tokens(v);
}

static int check_degrees(vctx *v, const Baton__Parallel *p) {
    REQUIRE(p->tp >= 1, v, "parallel.tp", "tp must be at least 1 (1: no tensor parallelism)");
    REQUIRE(p->pp >= 1, v, "parallel.pp", "pp must be at least 1 (1: no pipeline)");
    REQUIRE(p->cp >= 1, v, "parallel.cp", "cp must be at least 1 (1: no context parallelism)");
    REQUIRE(p->ep >= 1, v, "parallel.ep", "ep must be at least 1 (1: no expert parallelism)");
    REQUIRE(p->zero <= 3, v, "parallel.zero", "zero must be 0, 1, 2 or 3, got %u", p->zero);
    REQUIRE(p->virtual_stages >= 1, v, "parallel.virtual_stages",
            "virtual_stages must be at least 1");
    return 0;
}

static int check_world(vctx *v, const Baton__Parallel *p, const Baton__Cluster *c,
                       uint32_t *dp_out) {
    uint64_t world = (uint64_t)c->nodes * c->gpus_per_node;
    uint64_t inner = mul_sat(mul_sat(p->tp, p->pp), p->cp);
    uint32_t dp = p->dp;
    REQUIRE(inner <= world, v, "parallel{tp,pp,cp}",
            "tp×pp×cp = %u×%u×%u is more than the %llu devices of the cluster (%u node%s × %u)",
            p->tp, p->pp, p->cp, (unsigned long long)world, c->nodes, c->nodes == 1 ? "" : "s",
            c->gpus_per_node);
    if (dp == 0) {
        REQUIRE(world % inner == 0, v, "parallel{tp,pp,cp,dp}",
                "dp auto: tp×pp×cp = %u×%u×%u = %llu does not divide the %llu devices of the "
                "cluster (%u node%s × %u)",
                p->tp, p->pp, p->cp, (unsigned long long)inner, (unsigned long long)world, c->nodes,
                c->nodes == 1 ? "" : "s", c->gpus_per_node);
        dp = (uint32_t)(world / inner);
    }
    REQUIRE(mul_sat(inner, dp) == world, v, "parallel{tp,pp,cp,dp}",
            "tp×pp×dp×cp = %u×%u×%u×%u = %llu but the cluster has %u node%s × %u devices = "
            "%llu (set dp: auto to derive dp)",
            p->tp, p->pp, dp, p->cp, (unsigned long long)mul_sat(inner, dp), c->nodes,
            c->nodes == 1 ? "" : "s", c->gpus_per_node, (unsigned long long)world);
    *dp_out = dp;
    return 0;
}

/* parallel.stage_layers: one entry per pipeline stage (interleaved: per model chunk, in
 * model order), each at least 1, summing to the model's layers. */
static int check_stage_layers(vctx *v, const Baton__Model *m, const Baton__Parallel *p) {
    if (p->n_stage_layers == 0) return 0;
    uint64_t want = mul_sat(p->pp, p->virtual_stages);
    REQUIRE(p->n_stage_layers == want, v, "parallel.stage_layers",
            "%zu entr%s for pp %u%s: give each pipeline %s layers, first to last",
            p->n_stage_layers, p->n_stage_layers == 1 ? "y" : "ies", p->pp,
            p->virtual_stages > 1 ? " × virtual_stages" : "",
            p->virtual_stages > 1 ? "chunk's (pp × virtual_stages of them, in model order)"
                                  : "stage's");
    uint64_t sum = 0;
    for (size_t k = 0; k < p->n_stage_layers; k++) {
        REQUIRE(p->stage_layers[k] >= 1, v, "parallel.stage_layers",
                "entry %zu is 0: every pipeline stage (or chunk) needs at least one layer", k);
        sum += p->stage_layers[k];
    }
    REQUIRE(sum == m->n_layers, v, "parallel.stage_layers",
            "the stages' layers add up to %llu but the model has n_layers %u",
            (unsigned long long)sum, m->n_layers);
    return 0;
}

static int check_model_split(vctx *v, const Baton__Model *m, const Baton__Parallel *p) {
    uint32_t kv = m->n_kv_heads ? m->n_kv_heads : m->n_heads;
    REQUIRE(m->n_heads % p->tp == 0, v, "parallel.tp",
            "tp %u does not divide n_heads %u: each tensor-parallel rank needs whole heads", p->tp,
            m->n_heads);
    REQUIRE(kv % p->tp == 0 || p->tp % kv == 0, v, "parallel.tp",
            "tp %u and n_kv_heads %u: kv heads must split evenly (tp divides them) or be "
            "replicated (they divide tp)",
            p->tp, kv);
    REQUIRE(m->ffn_dim % p->tp == 0, v, "parallel.tp", "tp %u does not divide ffn_dim %u", p->tp,
            m->ffn_dim);
    REQUIRE(m->vocab_size % p->tp == 0, v, "parallel.tp",
            "tp %u does not divide vocab_size %u (vocab-parallel embedding)", p->tp, m->vocab_size);
    uint64_t chunks = mul_sat(p->pp, p->virtual_stages);
    REQUIRE(m->n_layers >= chunks, v, "parallel.pp",
            "pp %u × virtual_stages %u = %llu pipeline chunks but the model has only %u layers",
            p->pp, p->virtual_stages, (unsigned long long)chunks, m->n_layers);
    REQUIRE(p->virtual_stages == 1 || m->n_layers % chunks == 0 || p->n_stage_layers > 0, v,
            "parallel.virtual_stages",
            "interleaved pipelines need n_layers (%u) divisible by pp × virtual_stages (%llu), or "
            "parallel.stage_layers giving each chunk's layers",
            m->n_layers, (unsigned long long)chunks);
    return check_stage_layers(v, m, p);
}

/* Of the n fields a check of the stage reads (vc_err's names, "parallel{tp,cp}" too), the
 * one an override wrote last, for vc_err to name that override; NULL when none did. */
static const char *field_set_last(const vctx *v, const char *const *fields, size_t n) {
    const char *last = NULL;
    const recipe_pos *at = NULL;
    for (size_t k = 0; k < n && v->stage >= 0; k++) {
        char field[128], path[256];
        snprintf(field, sizeof field, "%s", fields[k]);
        char *keys = strchr(field, '{');
        if (keys != NULL) *keys++ = '\0', keys[strcspn(keys, "}")] = '\0';
        const recipe_pos *p = stage_field_where(v->doc, v->stage, field, keys, path, sizeof path);
        if (p != NULL && p->set != NULL && (at == NULL || p > at)) at = p, last = fields[k];
    }
    return last;
}

static int check_sequence(vctx *v, const Baton__Model *m, const Baton__Parallel *p) {
    const Baton__Stage *s = v->eff;
    /* sequence parallelism's split: an override of seq_len, tp or cp is its cause */
    static const char *const sp_reads[] = {"seq_len", "parallel{tp,cp,sequence_parallel}"};
    const char *sp = field_set_last(v, sp_reads, 2);
    REQUIRE(p->cp == 1 || s->seq_len % (2ull * p->cp) == 0, v, "seq_len",
            "seq_len %llu must be divisible by 2×cp = %llu (load-balanced context split)",
            (unsigned long long)s->seq_len, 2ull * p->cp);
    REQUIRE(p->cp_comm != BATON__PARALLEL__CP_COMM__ULYSSES ||
                m->n_heads % mul_sat(p->tp, p->cp) == 0,
            v, "parallel.cp_comm",
            "ulysses needs n_heads %u divisible by tp×cp = %llu (heads are spread over the cp "
            "ranks)",
            m->n_heads, (unsigned long long)mul_sat(p->tp, p->cp));
    uint32_t kv_per_tp = m->n_kv_heads >= p->tp ? m->n_kv_heads / p->tp : 1;
    REQUIRE(p->cp_comm != BATON__PARALLEL__CP_COMM__ULYSSES || kv_per_tp % p->cp == 0, v,
            "parallel.cp_comm",
            "ulysses needs the kv heads of each tensor-parallel rank (%u of n_kv_heads %u over "
            "tp %u) divisible by cp %u; use cp_comm: ring",
            kv_per_tp, m->n_kv_heads, p->tp, p->cp);
    REQUIRE(!p->sequence_parallel || p->tp == 1 || (s->seq_len / p->cp) % p->tp == 0, v,
            sp ? sp : "parallel.sequence_parallel",
            "sequence parallelism needs the per-rank sequence %llu divisible by tp %u",
            (unsigned long long)(s->seq_len / p->cp), p->tp);
    return 0;
}

static int check_batch(vctx *v, uint32_t dp) {
    const Baton__Stage *s = v->eff;
    uint64_t per_step = mul_sat(s->micro_batch, dp);
    REQUIRE(s->global_batch % per_step == 0, v, "global_batch",
            "global_batch %llu is not a multiple of micro_batch × dp = %llu × %u = %llu",
            (unsigned long long)s->global_batch, (unsigned long long)s->micro_batch, dp,
            (unsigned long long)per_step);
    const Baton__Parallel *p = s->parallel;
    if (p == NULL || p->virtual_stages <= 1) return 0;
    uint64_t K = s->global_batch / per_step;
    REQUIRE(p->pp > 1, v, "parallel.virtual_stages",
            "virtual_stages %u interleaves pipeline stages: it needs pp > 1", p->virtual_stages);
    REQUIRE(K >= p->pp, v, "parallel.virtual_stages",
            "an interleaved pipeline (virtual_stages %u) needs at least pp = %u micro-batches "
            "a step, global_batch / (micro_batch × dp) = %llu",
            p->virtual_stages, p->pp, (unsigned long long)K);
    return 0;
}

/* The data the stage reads: the last of the recipe's and the stages' data blocks. */
static const Baton__Data *effective_data(const Baton__Recipe *r, long stage) {
    const Baton__Data *d = r->data;
    for (long k = 0; k <= stage; k++)
        if (r->stages[k]->data != NULL) d = r->stages[k]->data;
    return d;
}

/* Whether the stage's data block is a stage's own or an earlier stage's, not the recipe's. */
static int data_from_stage(const Baton__Recipe *r, long stage) {
    for (long k = 0; k <= stage; k++)
        if (r->stages[k]->data != NULL) return 1;
    return 0;
}

static int check_data(vctx *v, const Baton__Recipe *r) {
    const Baton__Data *d = effective_data(r, v->stage);
    if (d == NULL) return 0; /* planning needs no data; the run checks that it has some */
    /* A block without training data (only valid, or mix: []) is a mistake that baton run
     * would refuse without a place; data_from_stage says why a stage lost the recipe's. */
    REQUIRE(d->n_mix > 0 || (d->train != NULL && d->train[0] != '\0'), v, "data",
            "no training data (%sgive train or mix)",
            data_from_stage(r, v->stage) ? "a stage's data block replaces the recipe's whole; "
                                         : "");
    REQUIRE(d->n_mix <= MAX_MIX_SOURCES, v, "data.mix",
            "%zu mixture sources; at most %d are supported", d->n_mix, MAX_MIX_SOURCES);
    for (size_t i = 0; i < d->n_mix; i++) {
        char f[64];
        snprintf(f, sizeof f, "data.mix[%zu]", i);
        REQUIRE(d->mix[i]->path != NULL && d->mix[i]->path[0] != '\0', v, f,
                "every mixture source needs a path (a dataset prefix)");
        REQUIRE(d->mix[i]->weight > 0 && d->mix[i]->weight < 1e300, v, f,
                "mixture weight must be positive and finite, got %g", d->mix[i]->weight);
    }
    return 0;
}

static int check_experts(vctx *v, const Baton__Model *m, const Baton__Parallel *p, uint32_t dp) {
    if (p->ep == 1) return 0;
    REQUIRE(m->arch == BATON__MODEL__ARCH__MOE, v, "parallel.ep",
            "ep %u needs an MoE model (model.arch: moe)", p->ep);
    REQUIRE(m->moe->n_experts % p->ep == 0, v, "parallel.ep", "ep %u does not divide n_experts %u",
            p->ep, m->moe->n_experts);
    if (plan_parallel_folds_experts(p, m->moe)) {
        REQUIRE(((uint64_t)p->tp * dp * p->cp) % p->ep == 0, v, "parallel.ep",
                "ep %u must divide tp×dp×cp = %u×%u×%u: with sequence parallelism and zero "
                "0 or 1, expert-parallel ranks are taken from the tensor-, data- and "
                "context-parallel ranks",
                p->ep, p->tp, dp, p->cp);
        return 0;
    }
    REQUIRE(((uint64_t)dp * p->cp) % p->ep == 0, v, "parallel.ep",
            "ep %u must divide dp×cp = %u×%u: expert-parallel ranks are taken from the "
            "data- and context-parallel ranks%s",
            p->ep, dp, p->cp,
            p->tp > 1 ? "; with sequence_parallel and zero 0 or 1 the tensor-parallel ranks "
                        "join them"
                      : "");
    return 0;
}

/* The first of tp, cp, dp, pp (sizes in that order) larger than 1 that order does not
 * name, its index, or -1. */
static int order_omits(const char *order, const uint32_t size[4]) {
    static const char *const dims[4] = {"tp", "cp", "dp", "pp"};
    if (order == NULL || order[0] == '\0') return -1; /* the default names them all */
    for (int k = 0; k < 4; k++) {
        size_t n = strlen(dims[k]);
        int named = 0;
        for (const char *t = order; t != NULL && !named; t = strchr(t, '-'), t = t ? t + 1 : t)
            named = strncmp(t, dims[k], n) == 0 && (t[n] == '-' || t[n] == '\0');
        if (!named && size[k] > 1) return k;
    }
    return -1;
}

/* The path of the block the value at path lies in ("defaults.parallel" of
 * "defaults.parallel.order"). */
static void path_block(const char *path, char *out, size_t cap) {
    const char *dot = strrchr(path, '.');
    snprintf(out, cap, "%.*s", dot ? (int)(dot - path) : (int)strlen(path), path);
}

/* A parallel.order the stage inherits (from the defaults or an earlier stage, where it
 * suited the layout) that leaves out a dimension this stage makes larger than 1: reported
 * at the stage, where the size was written, naming the order's own place; 1 when it was
 * reported, 0 when this is not that case. */
static int order_inherited_err(vctx *v, const Baton__Parallel *p, uint32_t dp, int *rc) {
    static const char *const dims[4] = {"tp", "cp", "dp", "pp"};
    const uint32_t size[4] = {p->tp, p->cp, dp, p->pp};
    char opath[256], own[64], dpath[256], ob[256], db[256], field[64], full[64], at[400];
    const recipe_pos *op =
        stage_field_where(v->doc, v->stage, "parallel.order", NULL, opath, sizeof opath);
    snprintf(own, sizeof own, "stages[%ld].parallel.order", v->stage);
    int k = order_omits(p->order, size);
    if (op == NULL || strcmp(opath, own) == 0 || k < 0) return 0;
    if (k == 2 && p->dp == 0) /* dp auto: what made it larger is the stage's other sizes */
        snprintf(field, sizeof field, "parallel{tp,cp,pp,dp}");
    else
        snprintf(field, sizeof field, "parallel.%s", dims[k]);
    char bare[64];
    snprintf(bare, sizeof bare, "%.*s", (int)strcspn(field, "{"), field);
    stage_field_where(v->doc, v->stage, bare, strchr(field, '{') ? "tp,cp,pp,dp" : NULL, dpath,
                      sizeof dpath);
    path_block(opath, ob, sizeof ob);
    if (strchr(field, '{') == NULL)
        path_block(dpath, db, sizeof db);
    else
        snprintf(db, sizeof db, "%s", dpath);
    if (strcmp(ob, db) == 0) return 0; /* the order and the size written together */
    if (op->set != NULL)
        snprintf(at, sizeof at, "%s", op->set);
    else
        snprintf(at, sizeof at, "%s:%d:%d", v->doc->file, op->line, op->col);
    layout_order_full(p->order, full, sizeof full);
    *rc = vc_err(v, field,
                 "parallel.order \"%s\" omits %s, which is %u in this stage; the order is "
                 "inherited from %s (%s), which may leave out only dimensions of size 1: give "
                 "this stage its own parallel.order naming %s, e.g. \"%s\" (the same layout "
                 "where %s is 1)",
                 p->order, dims[k], size[k], opath, at, dims[k], full, dims[k]);
    return 1;
}

static int check_layout(vctx *v, const Baton__Model *m, const Baton__Parallel *p,
                        const Baton__Cluster *c, uint32_t dp) {
    layout l;
    bt_diag d;
    bt_diag_init(&d);
    int rc;
    if (layout_init(&l, p->tp, p->cp, dp, p->pp, p->ep, plan_parallel_folds_experts(p, m->moe),
                    p->order, c->gpus_per_node, &d) != 0)
        return order_inherited_err(v, p, dp, &rc) ? rc : vc_err(v, "parallel.order", "%s", d.msg);
    /* what baton run would refuse once the ranks report their hosts (run_topology.h) */
    static const enum layout_dim hungry[] = {LAYOUT_TP, LAYOUT_CP, LAYOUT_EP};
    for (int i = 0; c->strict_topology && i < 3; i++)
        REQUIRE(!layout_any_group_crosses(&l, hungry[i]), v, "parallel{tp,cp,ep,dp,pp,order}",
                "a %s group of %u ranks spans nodes (gpus_per_node %u), which "
                "cluster.strict_topology refuses: shrink it or move it earlier in "
                "parallel.order",
                layout_dim_name(hungry[i]), l.size[hungry[i]], c->gpus_per_node);
    return 0;
}

#define MAX_GROWTH_FACTOR 65536.0 /* loss_scale.growth_factor at most (check_loss_scale) */

/* The floor the scale never backs off below (train_scaler.h): a normal float32, so that
 * 1/S is finite, and no higher than the scale starts at. An initial below the default
 * floor of 1, with no min given, is blamed on the initial. */
static int check_loss_scale_min(vctx *v, const Baton__LossScale *ls) {
    if (!ls->has_min && ls->initial < ls->min)
        return vc_err(v, "precision.loss_scale.initial",
                      "initial %g is below the loss scale's floor, loss_scale.min (%g by "
                      "default): give a min no higher than initial as well, or start at %g or "
                      "more",
                      ls->initial, ls->min, ls->min);
    REQUIRE(isfinite(ls->min) && ls->min >= FLT_MIN && ls->min <= ls->initial, v,
            "precision.loss_scale.min",
            "min must lie between 1.2e-38 (the smallest normal float32, whose inverse is "
            "finite) and initial (%g), got %g; 1 is the usual (DeepSpeed's and Megatron's "
            "default)",
            ls->initial, ls->min);
    return 0;
}

/* fp16's dynamic loss scaling (worker/engine/train_scaler.h); meaningless elsewhere:
 * bf16 has float32's exponent range, so its gradients neither overflow nor flush. The
 * worker keeps the scale and its factors in float32: they are judged as it holds them
 * (a double of 1e-50 is float 0, one of 0.99999999 is float 1). */
static int check_loss_scale(vctx *v, const Baton__Precision *pr) {
    const Baton__LossScale *ls = pr->loss_scale;
    if (ls == NULL) return 0;
    REQUIRE(pr->type == BATON__PRECISION__TYPE__FP16, v, "precision.loss_scale",
            "loss_scale applies to precision fp16 only (bf16 has float32's exponent range, "
            "fp8 scales each tensor with its own delayed scaling)");
    /* the gradients are multiplied by 1/S: S a normal float32, so that 1/S is finite */
    REQUIRE(isfinite(ls->initial) && ls->initial >= FLT_MIN && ls->initial <= FLT_MAX, v,
            "precision.loss_scale.initial",
            "initial must lie between 1.2e-38 and 3.4e38 (a normal float32, whose inverse is "
            "finite), got %g; 65536 is the usual start",
            ls->initial);
    REQUIRE(ls->growth_interval >= 1, v, "precision.loss_scale.growth_interval",
            "growth_interval must be at least 1 step");
    /* at most 2^16: one growth then already moves the gradients across 16 of fp16's 40
     * binades (6e-8 .. 65504); a larger factor is no schedule, and from 3.4e38 on it is
     * +inf in float32, where the scale would never grow */
    REQUIRE(isfinite(ls->growth_factor) && (float)ls->growth_factor > 1.0f &&
                ls->growth_factor <= MAX_GROWTH_FACTOR,
            v, "precision.loss_scale.growth_factor",
            "growth_factor must be greater than 1 in float32 (where the scaler holds it) and "
            "at most 65536 (2^16), got %.9g; 2 is the usual",
            ls->growth_factor);
    REQUIRE(ls->backoff_factor > 0 && (float)ls->backoff_factor > 0.0f &&
                (float)ls->backoff_factor < 1.0f,
            v, "precision.loss_scale.backoff_factor",
            "backoff_factor must lie strictly between 0 and 1 in float32 (where the scaler "
            "holds it), got %.9g; 0.5 is the usual",
            ls->backoff_factor);
    return check_loss_scale_min(v, ls);
}

/* Transformer Engine's default history; a longer one only slows the scales' response */
#define MAX_AMAX_HISTORY 1024

static int check_precision(vctx *v, const Baton__Model *m, const Baton__Precision *pr) {
    int rc = pr != NULL ? check_loss_scale(v, pr) : 0;
    if (rc != 0) return rc;
    if (pr == NULL || pr->type != BATON__PRECISION__TYPE__FP8) return 0;
    REQUIRE(m->dim % 16 == 0 && m->ffn_dim % 16 == 0, v, "precision{type}",
            "fp8 GEMMs need dim (%u) and ffn_dim (%u) divisible by 16", m->dim, m->ffn_dim);
    REQUIRE(pr->amax_history >= 1 && pr->amax_history <= MAX_AMAX_HISTORY, v,
            "precision.amax_history",
            "fp8 delayed scaling keeps amax_history from 1 to %u steps (Transformer Engine's "
            "default is 1024), got %u",
            MAX_AMAX_HISTORY, pr->amax_history);
    REQUIRE(pr->margin <= 8, v, "precision.margin",
            "fp8 margin is a power-of-two exponent, expected 0..8, got %u", pr->margin);
    return 0;
}

/* The nearest level that wrote field for the stage checked: its index, or -1 (the
 * defaults, or nowhere). */
static long field_level(const vctx *v, const char *field) {
    char path[256];
    for (long k = v->stage; k >= 0; k--) {
        snprintf(path, sizeof path, "stages[%ld].%s", k, field);
        if (pos_origin(v->doc, path, NULL) != NULL) return k;
    }
    return -1;
}

/* min_lr above lr where the stage (or one nearer it) lowered lr below the min_lr it
 * inherits: the lr is what changed, so the lr's place is named, and where min_lr is. */
static int lr_below_min_lr(vctx *v, const Baton__Optimizer *o) {
    char path[256], at[400];
    const recipe_pos *p =
        stage_field_where(v->doc, v->stage, "optimizer.min_lr", NULL, path, sizeof path);
    if (p != NULL && p->set != NULL)
        snprintf(at, sizeof at, "%s", p->set);
    else
        snprintf(at, sizeof at, "%s:%d:%d", v->doc->file, p ? p->line : 0, p ? p->col : 0);
    return vc_err(v, "optimizer.lr",
                  "lr %g is below min_lr %g, which this stage inherits from %s (%s): give the "
                  "stage its own min_lr, between 0 and lr",
                  o->lr, o->min_lr, path, at);
}

static int check_optimizer(vctx *v, const Baton__Optimizer *o) {
    if (o == NULL) return 0;
    REQUIRE(o->lr > 0, v, "optimizer.lr", "lr must be positive, got %g", o->lr);
    if (o->min_lr > o->lr && o->min_lr >= 0 &&
        field_level(v, "optimizer.lr") > field_level(v, "optimizer.min_lr"))
        return lr_below_min_lr(v, o);
    REQUIRE(o->min_lr >= 0 && o->min_lr <= o->lr, v, "optimizer.min_lr",
            "min_lr must be between 0 and lr (%g), got %g", o->lr, o->min_lr);
    REQUIRE(o->weight_decay >= 0, v, "optimizer.weight_decay", "weight_decay must be >= 0");
    REQUIRE(o->grad_clip >= 0, v, "optimizer.grad_clip", "grad_clip must be >= 0 (0 = off)");
    REQUIRE(o->beta1 >= 0 && o->beta1 < 1, v, "optimizer.beta1", "beta1 must be in [0, 1)");
    REQUIRE(o->beta2 >= 0 && o->beta2 < 1, v, "optimizer.beta2", "beta2 must be in [0, 1)");
    /* AdamW adds eps in float32 (optim.h): a smaller one is 0 there, or a subnormal a
     * device may flush to 0, and an element whose moments are 0 then divides 0 by 0 */
    REQUIRE(o->eps >= FLT_MIN, v, "optimizer.eps",
            "eps must be at least 1.2e-38, the smallest normal float32 (the optimizer adds it "
            "in float32, where a smaller one is 0 or subnormal), got %g; 1e-8 is the usual",
            o->eps);
    return 0;
}

static int check_policies(vctx *v) {
    const Baton__CheckpointPolicy *c = v->eff->checkpoint;
    if (c != NULL) {
        REQUIRE(c->keep >= 1, v, "checkpoint.keep", "keep must be >= 1");
    }
    const Baton__RestartPolicy *r = v->eff->restart;
    if (r != NULL && r->heartbeat_timeout != NULL)
        REQUIRE(r->heartbeat_timeout->seconds >= 1, v, "restart.heartbeat_timeout",
                "heartbeat_timeout must be at least 1s");
    if (r != NULL)
        REQUIRE(r->spike_zscore >= 0, v, "restart.spike_zscore",
                "spike_zscore must be >= 0 (0 = off), got %g: it is how many standard "
                "deviations above the recent mean a loss counts as a spike",
                r->spike_zscore);
    return 0;
}

/* A loss_scale.initial the stage gives itself, which it does not use: an fp16 stage after
 * an fp16 stage starts from the loss scale that stage ended with (plan_scale_carried). */
static void warn_scale_initial(vctx *v, const Baton__Recipe *r, const Baton__Stage *prev) {
    const Baton__Precision *own = r->stages[v->stage]->precision;
    if (own == NULL || own->loss_scale == NULL || !own->loss_scale->has_initial || prev == NULL ||
        !plan_scale_carried(prev->precision, v->eff->precision,
                            recipe_stage_reset(r, (size_t)v->stage)))
        return;
    vc_warn(v, "precision.loss_scale.initial",
            "initial %g is not used: an fp16 stage after an fp16 stage (\"%s\") starts from the "
            "loss scale that stage ended with, as it takes its moments (optimizer.reset: true "
            "starts both over)",
            own->loss_scale->initial, prev->name ? prev->name : "");
}

/* An fp8 stage in which no product runs in fp8: the LM head is always bf16, and with
 * first_last_bf16 a model of one or two layers has only a first and a last layer
 * (worker/engine/model.c). Not warned about again for a stage whose previous one ran the
 * same way. */
static void warn_fp8_idle(vctx *v, const Baton__Recipe *r, const Baton__Stage *prev) {
    const Baton__Precision *pr = v->eff->precision, *pp = prev ? prev->precision : NULL;
    uint32_t L = r->model->n_layers;
    int idle = pr && pr->type == BATON__PRECISION__TYPE__FP8 && pr->first_last_bf16 && L <= 2;
    if (!idle || (pp && pp->type == BATON__PRECISION__TYPE__FP8 && pp->first_last_bf16)) return;
    vc_warn(v, "precision{type,first_last_bf16}",
            "no GEMM runs in fp8: first_last_bf16 (true by default) keeps the first and the last "
            "layer in bf16, which are all %u layer%s of the model, and the LM head is bf16, so "
            "the stage trains as bf16 (first_last_bf16: false runs the layers in fp8)",
            L, L == 1 ? "" : "s");
}

/* What runs but likely not as meant: a seq_len beyond the context the RoPE scaling
 * extends to, or, where a stage turns the scaling off, beyond the one it extended; a scaling that
 * starts from another context than the previous stage trained at (original_max_position is the
 * pretraining context); a warmup longer than the stage, whose learning rate then never reaches its
 * peak. A stage that inherits the same settings as the stage before it is not warned about again.
 */
static void warn_stage(vctx *v, const Baton__Recipe *r) {
    const Baton__Stage *s = v->eff;
    Baton__Stage *prev = NULL;
    if (v->stage > 0 && recipe_effective_stage(v->doc, (size_t)v->stage - 1, &prev) != 0)
        return; /* out of memory: no warnings */
    vc_warn_rope_context(v, r, prev);
    const Baton__Optimizer *o = s->optimizer, *po = prev ? prev->optimizer : NULL;
    if (o != NULL && o->warmup_steps > s->steps &&
        !(po && po->warmup_steps == o->warmup_steps && prev->steps == s->steps))
        vc_warn(v, "optimizer.warmup_steps",
                "warmup_steps %llu is more than the stage's %llu steps: the learning rate never "
                "reaches lr",
                (unsigned long long)o->warmup_steps, (unsigned long long)s->steps);
    vc_warn_rope_unread(v, r);
    warn_scale_initial(v, r, prev);
    warn_fp8_idle(v, r, prev);
    if (prev) protobuf_c_message_free_unpacked(&prev->base, NULL);
}

static int check_stage(vctx *v, const Baton__Recipe *r) {
    static const Baton__Parallel par0 = BATON__PARALLEL__INIT;
    const Baton__Parallel *p = v->eff->parallel ? v->eff->parallel : &par0;
    uint32_t dp = 0;
    int rc = check_sizes(v);
    rc = rc ? rc : check_degrees(v, p);
    rc = rc ? rc : check_world(v, p, r->cluster, &dp);
    rc = rc ? rc : check_model_split(v, r->model, p);
    rc = rc ? rc : check_sequence(v, r->model, p);
    rc = rc ? rc : check_batch(v, dp);
    rc = rc ? rc : check_experts(v, r->model, p, dp);
    rc = rc ? rc : check_layout(v, r->model, p, r->cluster, dp);
    rc = rc ? rc : check_precision(v, r->model, v->eff->precision);
    rc = rc ? rc : check_optimizer(v, v->eff->optimizer);
    rc = rc ? rc : check_policies(v);
    rc = rc ? rc : check_data(v, r);
    rc = rc ? rc : vc_check_rope(v, r);
    if (rc == 0) warn_stage(v, r);
    return rc;
}

#define NAME_RULE                                                                                  \
    "letters, digits, '.', '_' and '-', not starting with '.' (the default run directory is "      \
    "runs/<name>)"

int recipe_name_problem(const char *name, char *why, size_t cap) {
    size_t n = strlen(name),
           ok = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             "0123456789._-");
    if (n == 0)
        snprintf(why, cap, "is empty; use " NAME_RULE);
    else if (ok < n)
        snprintf(why, cap, "\"%s\" has '%c' at character %zu; use " NAME_RULE, name, name[ok],
                 ok + 1);
    else if (name[0] == '.')
        snprintf(why, cap, "\"%s\" starts with '.'; use " NAME_RULE, name);
    else
        return 0;
    return BT_ERECIPE;
}

/* The name is a path component: the default run directory is runs/<name> (and the
 * Slurm job's name), so it must stay one plain directory name inside runs/. */
static int check_recipe_name(vctx *v, const Baton__Recipe *r) {
    char why[512];
    if (r->name == NULL) return 0; /* unnamed: runs/<file stem>, checked by baton run */
    if (recipe_name_problem(r->name, why, sizeof why) == 0) return 0;
    return vc_err(v, "name", "the recipe name %s, e.g. name: tiny-cpu", why);
}

/* The rules a stage name follows since --set stages.NAME.KEY and --stage: refused, or with
 * v->naming (a run that started before the rules) only the first problem noted there. */
static int check_stage_name_chars(vctx *v, size_t i, const char *nm) {
    size_t ok = strspn(nm, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789_-");
    int number = strspn(nm, "0123456789") == strlen(nm);
    if (ok == strlen(nm) && !number) return 0;
    if (v->naming != NULL && v->naming->msg[0] != '\0') return 0;
    bt_diag *keep = v->diag;
    if (v->naming != NULL) v->diag = v->naming;
    char f[64];
    snprintf(f, sizeof f, "stages[%zu].name", i);
    if (!number)
        vc_err(v, f,
               "stage name \"%s\" has '%c' at character %zu: --set addresses a stage by name "
               "as stages.NAME.KEY, so a stage name is letters, digits, '_' and '-' (e.g. v1-5)",
               nm, nm[ok], ok + 1);
    else
        vc_err(v, f,
               "stage name \"%s\" is a number: --stage and --set stages.%s name stages by index "
               "too; give it a name with a letter",
               nm, nm);
    v->diag = keep;
    return v->naming != NULL ? 0 : BT_ERECIPE;
}

static int check_stage_names(vctx *v, const Baton__Recipe *r) {
    /* defaults is a Stage for its settings; a name there would be no stage's */
    if (r->defaults != NULL && r->defaults->name != NULL)
        return vc_err(v, "defaults.name",
                      "defaults takes no name: a stage's name goes in stages, e.g. stages: "
                      "[{name: pretrain, steps: 1000}]");
    for (size_t i = 0; i < r->n_stages; i++) {
        if (r->stages[i]->name == NULL || r->stages[i]->name[0] == '\0') {
            char f[64];
            snprintf(f, sizeof f, "stages[%zu]", i);
            return vc_err(v, f, "every stage needs a name, e.g. {name: pretrain, steps: 1000}");
        }
        if (check_stage_name_chars(v, i, r->stages[i]->name) != 0) return BT_ERECIPE;
        for (size_t j = 0; j < i; j++)
            if (r->stages[i]->name && r->stages[j]->name &&
                strcmp(r->stages[i]->name, r->stages[j]->name) == 0) {
                char f[64];
                snprintf(f, sizeof f, "stages[%zu].name", i);
                return vc_err(v, f, "duplicate stage name \"%s\" (also stages[%zu])",
                              r->stages[i]->name, j);
            }
    }
    return 0;
}

/* A data block gives its training data as train or as mix, not both: the mix would be
 * read and train silently ignored. */
static int check_data_block(vctx *v, const Baton__Data *d, const char *where) {
    if (d == NULL || d->n_mix == 0 || d->train == NULL || d->train[0] == '\0') return 0;
    char f[64];
    snprintf(f, sizeof f, "%s.train", where);
    return vc_err(v, f,
                  "train and mix both give the training data; give one: train for one dataset, "
                  "mix for several (train: %s as a mix source is {path: %s}; mix: [] drops a mix)",
                  d->train, d->train);
}

static int check_data_blocks(vctx *v, const Baton__Recipe *r) {
    int rc = check_data_block(v, r->data, "data");
    if (rc == 0 && r->defaults != NULL)
        rc = check_data_block(v, r->defaults->data, "defaults.data");
    for (size_t i = 0; rc == 0 && i < r->n_stages; i++) {
        char where[48];
        snprintf(where, sizeof where, "stages[%zu].data", i);
        rc = check_data_block(v, r->stages[i]->data, where);
    }
    return rc;
}

int recipe_validate(const recipe_doc *doc, bt_diag *diag) {
    return recipe_validate_run(doc, diag, NULL);
}

int recipe_validate_run(const recipe_doc *doc, bt_diag *diag, bt_diag *naming) {
    const Baton__Recipe *r = doc->recipe;
    vctx v = {.doc = doc, .diag = diag, .stage = -1, .naming = naming};
    if (naming != NULL) naming->msg[0] = '\0';
    int rc = check_recipe_name(&v, r);
    rc = rc ? rc : check_model(&v, r->model);
    rc = rc ? rc : check_cluster(&v, r->cluster);
    if (rc == 0 && r->n_stages == 0)
        rc = vc_err(&v, "stages",
                    "no stages: a recipe needs at least one stage, e.g. stages: "
                    "[{name: pretrain, steps: 1000}]");
    rc = rc ? rc : check_stage_names(&v, r);
    rc = rc ? rc : check_data_blocks(&v, r);
    for (size_t i = 0; rc == 0 && i < r->n_stages; i++) {
        Baton__Stage *eff = NULL;
        rc = recipe_effective_stage(doc, i, &eff);
        if (rc != 0) {
            bt_diag_set(diag, "%s: %s", doc->file, bt_strerror(rc));
            return rc;
        }
        v.stage = (long)i, v.eff = eff;
        v.stage_name = eff->name ? eff->name : "";
        rc = check_stage(&v, r);
        protobuf_c_message_free_unpacked(&eff->base, NULL);
    }
    return rc;
}
