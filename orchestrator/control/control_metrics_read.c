/* metrics.jsonl and valid.jsonl read back (control_metrics.h): an attempt's steps and
 * records, a stage's validations. The lines are the ones control_metrics.c writes; a torn
 * last line (a writer killed mid-line) is no record. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "control_internal.h"
#include "control_metrics.h"
#include "util/buf.h"
#include "util/file.h"

/* Calls fn with each whole line of path until it returns nonzero (returned); a missing
 * file has none. */
static int read_lines(const char *path, bt_line_fn fn, void *arg, bt_diag *diag) {
    FILE *in;
    int torn, rc = bt_file_open_read(path, &in, diag);
    if (rc != 0 || in == NULL) return rc;
    rc = bt_file_lines(in, path, fn, arg, &torn, diag);
    fclose(in);
    return rc;
}

/* "moe": {"load_max_mean", "dropped", "aux_loss", "expert_load": [...]} into m. */
static void line_moe(const char *moe, control_metrics *m) {
    bt_json_line_num(moe, "{\"load_max_mean\": ", &m->moe_load_max_mean);
    bt_json_line_num(moe, ", \"dropped\": ", &m->moe_dropped);
    bt_json_line_num(moe, ", \"aux_loss\": ", &m->moe_aux_loss);
    static const char key[] = "\"expert_load\": [";
    const char *p = strstr(moe, key);
    int cap = (int)(sizeof m->moe_expert_load / sizeof m->moe_expert_load[0]);
    for (p = p ? p + sizeof key - 1 : NULL; p != NULL && *p != ']' && m->moe_experts < cap;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p) break;
        m->moe_expert_load[m->moe_experts++] = (float)v;
        for (p = end; *p == ',' || *p == ' ';)
            p++;
    }
}

/* A metrics.jsonl line into m; -1 when a field it always has is missing. */
static int line_metrics(const char *line, control_metrics *m) {
    static const struct {
        const char *key;
        size_t at;
    } nums[] = {{"{\"time\": ", offsetof(control_metrics, time)},
                {", \"loss\": ", offsetof(control_metrics, loss)},
                {", \"lr\": ", offsetof(control_metrics, lr)},
                {", \"grad_norm\": ", offsetof(control_metrics, grad_norm)},
                {", \"tokens_per_s\": ", offsetof(control_metrics, tokens_per_s)},
                {", \"mfu\": ", offsetof(control_metrics, mfu)},
                {", \"step_time_s\": ", offsetof(control_metrics, step_time_s)}};
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (bt_json_line_num(line, nums[i].key, (double *)(void *)((char *)m + nums[i].at)) != 0)
            return -1;
    if (control_metrics_line_field(line, ", \"step\": ", &m->step) != 0 ||
        control_metrics_line_field(line, ", \"memory_bytes\": ", &m->memory_bytes) != 0 ||
        control_metrics_line_field(line, ", \"skipped_steps\": ", &m->skipped_steps) != 0)
        return -1;
    bt_json_line_num(line, ", \"loss_scale\": ", &m->loss_scale); /* fp16's alone */
    m->overflow = strstr(line, ", \"overflow\": true") != NULL;
    const char *moe = strstr(line, ", \"moe\": {");
    if (moe != NULL) line_moe(moe, m);
    return 0;
}

typedef struct attempt_scan {
    uint32_t stage, attempt;
    const uint64_t *want; /* NULL: every step's (steps); else these (records) */
    size_t n_want;
    uint64_t *steps;
    size_t n, cap;
    control_metrics_kept *kept; /* records */
} attempt_scan;

/* The line's step when it is of a's attempt. */
static int attempt_step(const attempt_scan *a, const char *line, uint64_t *k) {
    uint64_t st, at;
    return control_metrics_line_field(line, ", \"stage_index\": ", &st) == 0 && st == a->stage &&
           control_metrics_line_field(line, ", \"attempt\": ", &at) == 0 && at == a->attempt &&
           control_metrics_line_field(line, ", \"step\": ", k) == 0;
}

static int attempt_line(void *arg, const char *line, size_t len, off_t at) {
    attempt_scan *a = arg;
    (void)len, (void)at;
    uint64_t k;
    if (!attempt_step(a, line, &k)) return 0;
    if (bt_grow(&a->steps, &a->cap, a->n + 1, sizeof *a->steps) != 0) return BT_ENOMEM;
    a->steps[a->n++] = k;
    return 0;
}

/* A record of a wanted step, by its place, when the line reads as one. */
static int attempt_record(void *arg, const char *line, size_t len, off_t at) {
    attempt_scan *a = arg;
    control_metrics_kept *kept = a->kept;
    control_metrics m;
    uint64_t k;
    (void)len;
    if (!attempt_step(a, line, &k) ||
        bsearch(&k, a->want, a->n_want, sizeof k, control_u64_cmp) == NULL ||
        line_metrics(line, &m) != 0)
        return 0;
    if (bt_grow(&kept->rec, &kept->cap, kept->n + 1, sizeof *kept->rec) != 0) return BT_ENOMEM;
    kept->rec[kept->n++] = (control_metrics_at){k, at};
    return 0;
}

/* By step, then by place: a step's last line last. */
static int at_cmp(const void *a, const void *b) {
    const control_metrics_at *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* k's records ascending by step, one per step (its last line). */
static void kept_order(control_metrics_kept *k) {
    if (k->n > 1) qsort(k->rec, k->n, sizeof *k->rec, at_cmp);
    size_t n = 0;
    for (size_t i = 0; i < k->n; i++) {
        if (n > 0 && k->rec[n - 1].step == k->rec[i].step) n--;
        k->rec[n++] = k->rec[i];
    }
    k->n = n;
}

static int attempt_held(void *arg, const char *rec, size_t n) {
    return attempt_line(arg, rec, n, -1);
}

int control_metrics_attempt_steps(const control_metrics_sink *s, uint32_t stage_index,
                                  uint32_t attempt, uint64_t **steps, size_t *n, bt_diag *diag) {
    attempt_scan a = {.stage = stage_index, .attempt = attempt};
    int rc = read_lines(s->jsonl_path, attempt_line, &a, diag);
    /* held back in memory (a full disk): written with the next record that can be */
    rc = rc ? rc : rec_append_each_held(&s->jsonl.a, attempt_held, &a);
    if (rc != 0) free(a.steps), a.steps = NULL, a.n = 0;
    *steps = a.steps, *n = a.n;
    return rc;
}

int control_metrics_attempt_records(const control_metrics_sink *s, uint32_t stage_index,
                                    uint32_t attempt, const uint64_t *want, size_t n_want,
                                    control_metrics_kept *out, bt_diag *diag) {
    memset(out, 0, sizeof *out);
    out->path = s->jsonl_path;
    attempt_scan a = {
        .stage = stage_index, .attempt = attempt, .want = want, .n_want = n_want, .kept = out};
    int torn, rc = n_want > 0 ? bt_file_open_read(s->jsonl_path, &out->f, diag) : 0;
    if (rc == 0 && out->f != NULL)
        rc = bt_file_lines(out->f, s->jsonl_path, attempt_record, &a, &torn, diag);
    if (rc != 0) control_metrics_kept_free(out);
    kept_order(out);
    return rc;
}

int control_metrics_kept_read(control_metrics_kept *k, size_t i, control_metrics *m,
                              bt_diag *diag) {
    const control_metrics_at *r = &k->rec[i];
    errno = 0;
    ssize_t n = fseeko(k->f, r->at, SEEK_SET) == 0 ? getline(&k->line, &k->line_cap, k->f) : -1;
    int err = n < 0 ? errno : 0;
    if (err == ENOMEM) {
        bt_diag_set(diag, "%s: out of memory reading it", k->path);
        return BT_ENOMEM;
    }
    if (n <= 0 || k->line[n - 1] != '\n' || line_metrics(k->line, m) != 0 || m->step != r->step) {
        bt_diag_set(diag, "%s: cannot read back the record of step %llu at byte %lld: %s", k->path,
                    (unsigned long long)r->step, (long long)r->at,
                    err ? strerror(err) : "not the line it was");
        return BT_EIO;
    }
    return 0;
}

void control_metrics_kept_free(control_metrics_kept *k) {
    if (k->f != NULL) fclose(k->f);
    free(k->rec);
    free(k->line);
    const char *path = k->path;
    memset(k, 0, sizeof *k);
    k->path = path;
}

typedef struct valid_scan {
    uint32_t stage;
    uint64_t from;
    control_metrics_valid *v;
    size_t n, cap;
} valid_scan;

static int valid_line(void *arg, const char *line, size_t len, off_t off) {
    valid_scan *a = arg;
    (void)len, (void)off;
    uint64_t st, at, k, w;
    control_metrics_valid v;
    if (control_metrics_line_field(line, ", \"stage_index\": ", &st) != 0 || st != a->stage ||
        control_metrics_line_field(line, ", \"step\": ", &k) != 0 || k < a->from ||
        control_metrics_line_field(line, ", \"attempt\": ", &at) != 0 ||
        control_metrics_line_field(line, ", \"windows\": ", &w) != 0 ||
        bt_json_line_num(line, ", \"valid_loss\": ", &v.loss) != 0 ||
        bt_json_line_num(line, "{\"time\": ", &v.time) != 0)
        return 0;
    if (bt_grow(&a->v, &a->cap, a->n + 1, sizeof *a->v) != 0) return BT_ENOMEM;
    v.attempt = (uint32_t)at, v.step = k, v.windows = (uint32_t)w;
    a->v[a->n++] = v;
    return 0;
}

int control_metrics_valid_since(const control_metrics_sink *s, uint32_t stage_index, uint64_t from,
                                control_metrics_valid **out, size_t *n, bt_diag *diag) {
    valid_scan a = {.stage = stage_index, .from = from};
    int rc = s->valid_path[0] ? read_lines(s->valid_path, valid_line, &a, diag) : 0;
    if (rc != 0) free(a.v), a.v = NULL, a.n = 0;
    *out = a.v, *n = a.n;
    return rc;
}
