/* metrics.jsonl and valid.jsonl read back (control_metrics.h): an attempt's steps and
 * records, a stage's validations. The lines are the ones control_metrics.c writes; a torn
 * last line (a writer killed mid-line) is no record. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "control_internal.h"
#include "control_metrics.h"

typedef int (*line_fn)(void *arg, const char *line);

/* Calls fn with each whole line of path until it returns nonzero (returned); a missing
 * file has none. */
static int read_lines(const char *path, line_fn fn, void *arg, bt_diag *diag) {
    FILE *in = fopen(path, "re");
    if (in == NULL) {
        if (errno == ENOENT) return 0;
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
        return BT_EIO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0)
        if (line[n - 1] == '\n') rc = fn(arg, line);
    if (rc == 0 && ferror(in)) {
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
        rc = BT_EIO;
    }
    free(line);
    fclose(in);
    return rc;
}

/* Room in *v (elements of size bytes, *cap of them) for one more after n. */
static int grow(void **v, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return 0;
    size_t c = *cap ? 2 * *cap : 16;
    void *p = realloc(*v, c * size);
    if (p == NULL) return BT_ENOMEM;
    *v = p, *cap = c;
    return 0;
}

/* The number after key in line (json_num's, null: NaN) into *out; -1 when it has none. */
static int line_num(const char *line, const char *key, double *out) {
    const char *k = strstr(line, key);
    if (k == NULL) return -1;
    const char *at = k + strlen(key);
    if (strncmp(at, "null", 4) == 0) {
        *out = NAN;
        return 0;
    }
    char *end;
    *out = strtod(at, &end);
    return end == at ? -1 : 0;
}

/* "moe": {"load_max_mean", "dropped", "aux_loss", "expert_load": [...]} into m. */
static void line_moe(const char *moe, control_metrics *m) {
    line_num(moe, "{\"load_max_mean\": ", &m->moe_load_max_mean);
    line_num(moe, ", \"dropped\": ", &m->moe_dropped);
    line_num(moe, ", \"aux_loss\": ", &m->moe_aux_loss);
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
        if (line_num(line, nums[i].key, (double *)(void *)((char *)m + nums[i].at)) != 0) return -1;
    if (control_metrics_line_field(line, ", \"step\": ", &m->step) != 0 ||
        control_metrics_line_field(line, ", \"memory_bytes\": ", &m->memory_bytes) != 0 ||
        control_metrics_line_field(line, ", \"skipped_steps\": ", &m->skipped_steps) != 0)
        return -1;
    line_num(line, ", \"loss_scale\": ", &m->loss_scale); /* fp16's alone */
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
    control_metrics *records;
    size_t n, cap;
} attempt_scan;

static int attempt_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int attempt_line(void *arg, const char *line) {
    attempt_scan *a = arg;
    uint64_t st, at, k;
    if (control_metrics_line_field(line, ", \"stage_index\": ", &st) != 0 || st != a->stage ||
        control_metrics_line_field(line, ", \"attempt\": ", &at) != 0 || at != a->attempt ||
        control_metrics_line_field(line, ", \"step\": ", &k) != 0)
        return 0;
    if (a->want == NULL) {
        if (grow((void **)&a->steps, &a->cap, a->n, sizeof *a->steps) != 0) return BT_ENOMEM;
        a->steps[a->n++] = k;
        return 0;
    }
    if (a->n_want == 0 || bsearch(&k, a->want, a->n_want, sizeof k, attempt_cmp) == NULL) return 0;
    if (grow((void **)&a->records, &a->cap, a->n, sizeof *a->records) != 0) return BT_ENOMEM;
    if (line_metrics(line, &a->records[a->n]) == 0) a->n++;
    return 0;
}

int control_metrics_attempt_steps(const control_metrics_sink *s, uint32_t stage_index,
                                  uint32_t attempt, uint64_t **steps, size_t *n, bt_diag *diag) {
    attempt_scan a = {.stage = stage_index, .attempt = attempt};
    int rc = read_lines(s->jsonl_path, attempt_line, &a, diag);
    if (rc != 0) free(a.steps), a.steps = NULL, a.n = 0;
    *steps = a.steps, *n = a.n;
    return rc;
}

int control_metrics_attempt_records(const control_metrics_sink *s, uint32_t stage_index,
                                    uint32_t attempt, const uint64_t *want, size_t n_want,
                                    control_metrics **out, size_t *n, bt_diag *diag) {
    attempt_scan a = {.stage = stage_index, .attempt = attempt, .want = want, .n_want = n_want};
    int rc = n_want > 0 ? read_lines(s->jsonl_path, attempt_line, &a, diag) : 0;
    if (rc != 0) free(a.records), a.records = NULL, a.n = 0;
    *out = a.records, *n = a.n;
    return rc;
}

typedef struct valid_scan {
    uint32_t stage;
    uint64_t from;
    control_metrics_valid *v;
    size_t n, cap;
} valid_scan;

static int valid_line(void *arg, const char *line) {
    valid_scan *a = arg;
    uint64_t st, at, k, g, w;
    control_metrics_valid v;
    if (control_metrics_line_field(line, ", \"stage_index\": ", &st) != 0 || st != a->stage ||
        control_metrics_line_field(line, ", \"global_step\": ", &g) != 0 || g < a->from ||
        control_metrics_line_field(line, ", \"attempt\": ", &at) != 0 ||
        control_metrics_line_field(line, ", \"step\": ", &k) != 0 ||
        control_metrics_line_field(line, ", \"windows\": ", &w) != 0 ||
        line_num(line, ", \"valid_loss\": ", &v.loss) != 0 ||
        line_num(line, "{\"time\": ", &v.time) != 0)
        return 0;
    if (grow((void **)&a->v, &a->cap, a->n, sizeof *a->v) != 0) return BT_ENOMEM;
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
