/* metrics.jsonl and TensorBoard scalars (control_metrics.h). */
#include "control_metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "control_internal.h"
#include "util/buf.h"
#include "util/file.h"

int control_metrics_line_field(const char *line, const char *key, uint64_t *out) {
    const char *k = strstr(line, key);
    if (k == NULL) return -1;
    const char *at = k + strlen(key);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(at, &end, 10);
    if (end == at || errno != 0) return -1;
    *out = v;
    return 0;
}

int control_u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The held entry of stage, or NULL. */
static control_metrics_held *metrics_held_find(const control_metrics_sink *s, uint64_t stage) {
    for (size_t i = 0; i < s->n_held; i++)
        if (s->held[i].stage == stage) return &s->held[i];
    return NULL;
}

/* Notes that metrics.jsonl holds stage's step (an entry that cannot be added, out of
 * memory, only costs a rewind that drops nothing). */
static void metrics_held_note(control_metrics_sink *s, uint64_t stage, uint64_t step) {
    control_metrics_held *h = metrics_held_find(s, stage);
    if (h == NULL && stage <= UINT32_MAX &&
        bt_grow(&s->held, &s->cap_held, s->n_held + 1, sizeof *s->held) == 0)
        h = &s->held[s->n_held++], *h = (control_metrics_held){(uint32_t)stage, step};
    if (h != NULL && step > h->step) h->step = step;
}

int control_metrics_past(const control_metrics_sink *s, uint32_t stage_index, uint64_t step) {
    for (size_t i = 0; i < s->n_held; i++)
        if (s->held[i].stage > stage_index ||
            (s->held[i].stage == stage_index && s->held[i].step >= step))
            return 1;
    return 0;
}

/* metrics.jsonl: the largest step of each stage kept, and whose the last record is. */
static void metrics_keep(void *arg, const char *line, int has, uint64_t stage, uint64_t step) {
    control_metrics_sink *s = arg;
    uint64_t at;
    if (!has) return;
    metrics_held_note(s, stage, step);
    if (control_metrics_line_field(line, ", \"attempt\": ", &at) != 0) return;
    s->have_last = 1, s->last_stage = (uint32_t)stage, s->last_attempt = (uint32_t)at;
    s->last_step = step;
}

/* cut NULL: a torn last line dropped alone; else the records cut drops too. */
static int metrics_rewind(control_metrics_sink *s, const control_jsonl_cut *cut, bt_diag *diag) {
    s->n_held = 0, s->have_last = 0;
    return control_jsonl_rewind(&s->jsonl, s->jsonl_path, cut, metrics_keep, s, diag);
}

static int valid_seen_add(control_metrics_sink *s, uint64_t stage_index, uint64_t step) {
    if (bt_grow(&s->valid_seen, &s->cap_valid_seen, s->n_valid_seen + 2, sizeof *s->valid_seen))
        return BT_ENOMEM;
    s->valid_seen[s->n_valid_seen++] = stage_index;
    s->valid_seen[s->n_valid_seen++] = step;
    return 0;
}

static int valid_seen_has(const control_metrics_sink *s, uint64_t stage_index, uint64_t step) {
    for (size_t i = 0; i + 1 < s->n_valid_seen; i += 2)
        if (s->valid_seen[i] == stage_index && s->valid_seen[i + 1] == step) return 1;
    return 0;
}

/* valid.jsonl: the (stage_index, step) pairs kept (a pair that cannot be noted, out of
 * memory, is only written again). */
static void valid_keep(void *arg, const char *line, int has, uint64_t stage, uint64_t step) {
    control_metrics_sink *s = arg;
    (void)line;
    if (has) valid_seen_add(s, stage, step);
}

static int valid_rewind(control_metrics_sink *s, const control_jsonl_cut *cut, bt_diag *diag) {
    s->n_valid_seen = 0;
    return control_jsonl_rewind(&s->valid, s->valid_path, cut, valid_keep, s, diag);
}

/* Before a write: a rewind of either file left pending (a full disk) tried again, and
 * valid.jsonl's records held back written (nothing else would write them before the
 * stage's end; metrics.jsonl's and TensorBoard's go with their next record). */
static void metrics_retry(control_metrics_sink *s) {
    if (s->valid.a.n_held > 0 && s->valid.n_cuts == 0) rec_append_flush(&s->valid.a, NULL);
    if (s->jsonl.n_cuts > 0) {
        s->n_held = 0, s->have_last = 0;
        control_jsonl_retry(&s->jsonl, s->jsonl_path, metrics_keep, s, NULL);
    }
    if (s->valid.n_cuts > 0) {
        s->n_valid_seen = 0;
        control_jsonl_retry(&s->valid, s->valid_path, valid_keep, s, NULL);
    }
}

/* path's lines read (keep gets each), the file opened for appending and a torn last line
 * (a writer killed mid-line: a line appended after it would be unreadable too) cut off. */
static int jsonl_open(control_metrics_sink *s, control_jsonl *j, const char *path,
                      control_jsonl_keep_fn keep, bt_diag *diag) {
    int torn, rc = control_jsonl_read(NULL, path, &torn, keep, s, diag);
    rc = rc ? rc : rec_append_open(&j->a, path, 0, diag);
    if (rc == 0 && torn) rc = control_jsonl_cut_torn(j, path, diag);
    return rc;
}

int control_metrics_open(control_metrics_sink *s, const char *run_dir, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    s->jsonl.a.fd = s->valid.a.fd = s->tb.a.fd = -1;
    if (run_dir == NULL || run_dir[0] == '\0') return 0;
    if (mkdir(run_dir, 0700) != 0 && errno != EEXIST) {
        bt_diag_set(diag, "%s: cannot create the run directory: %s", run_dir, strerror(errno));
        return BT_EIO;
    }
    snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s/metrics.jsonl", run_dir);
    snprintf(s->valid_path, sizeof s->valid_path, "%s/valid.jsonl", run_dir);
    char tb_dir[4096];
    snprintf(tb_dir, sizeof tb_dir, "%s/tb", run_dir);
    int rc = jsonl_open(s, &s->jsonl, s->jsonl_path, metrics_keep, diag);
    rc = rc ? rc : jsonl_open(s, &s->valid, s->valid_path, valid_keep, diag);
    rc = rc ? rc : tb_writer_open(&s->tb, tb_dir, diag);
    if (rc != 0) control_metrics_close(s);
    return rc;
}

void control_metrics_set_note(control_metrics_sink *s, rec_note_fn note, void *arg) {
    rec_append *all[] = {&s->jsonl.a, &s->valid.a, &s->tb.a};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        all[i]->note = note, all[i]->note_arg = arg;
}

int control_metrics_flush(control_metrics_sink *s) {
    metrics_retry(s);
    int a = rec_append_flush(&s->jsonl.a, NULL), b = rec_append_flush(&s->valid.a, NULL);
    int c = rec_append_flush(&s->tb.a, NULL);
    return a ? a : b ? b : c;
}

static void json_num(bt_buf *b, const char *key, double v) {
    if (isfinite(v))
        bt_buf_printf(b, ", \"%s\": %.17g", key, v);
    else
        bt_buf_printf(b, ", \"%s\": null", key);
}

/* "moe": {"load_max_mean", "dropped", "aux_loss", "expert_load": [...]} */
static void json_moe(bt_buf *b, const control_metrics *m) {
    bt_buf_printf(b,
                  ", \"moe\": {\"load_max_mean\": %.6g, \"dropped\": %.0f, \"aux_loss\": %.6g, "
                  "\"expert_load\": [",
                  m->moe_load_max_mean, m->moe_dropped, m->moe_aux_loss);
    for (int e = 0; e < m->moe_experts; e++)
        bt_buf_printf(b, "%s%.4g", e ? ", " : "", (double)m->moe_expert_load[e]);
    bt_buf_printf(b, "]}");
}

static int control_metrics_jsonl(control_metrics_sink *s, const control_metrics_where *w,
                                 const control_metrics *m, bt_diag *diag) {
    bt_buf b;
    bt_buf_init(&b);
    bt_buf_printf(&b, "{\"time\": %.6f, \"stage\": ", m->time);
    bt_buf_json_string(&b, w->stage_name ? w->stage_name : "");
    bt_buf_printf(&b,
                  ", \"stage_index\": %u, \"attempt\": %u, \"step\": %llu, \"global_step\": %llu",
                  w->stage_index, w->attempt, (unsigned long long)m->step,
                  (unsigned long long)(w->step_offset + m->step));
    json_num(&b, "loss", m->loss);
    json_num(&b, "lr", m->lr);
    json_num(&b, "grad_norm", m->grad_norm);
    json_num(&b, "tokens_per_s", m->tokens_per_s);
    json_num(&b, "mfu", m->mfu);
    bt_buf_printf(&b, ", \"memory_bytes\": %llu", (unsigned long long)m->memory_bytes);
    json_num(&b, "step_time_s", m->step_time_s);
    bt_buf_printf(&b, ", \"skipped_steps\": %llu", (unsigned long long)m->skipped_steps);
    if (m->loss_scale > 0) {
        json_num(&b, "loss_scale", m->loss_scale);
        bt_buf_printf(&b, ", \"overflow\": %s", m->overflow ? "true" : "false");
    }
    if (m->moe_experts > 0) json_moe(&b, m);
    bt_buf_printf(&b, "}\n");
    int oom = b.oom;
    rec_held key = {.stage = w->stage_index, .step = m->step};
    /* whole or not at all, held back while it cannot be written (rec_append.h) */
    int rc = oom ? BT_ENOMEM : rec_append_write(&s->jsonl.a, b.data, b.len, &key, diag);
    bt_buf_free(&b);
    if (oom)
        bt_diag_set(diag, "%s: out of memory for a record of step %llu", s->jsonl_path,
                    (unsigned long long)m->step);
    return rc;
}

/* A repeated step of w's stage: the stage's records of it and the steps after go, and
 * TensorBoard's events from its global step on (the header). */
static int control_metrics_rewind(control_metrics_sink *s, const control_metrics_where *w,
                                  uint64_t step, double wall_time, bt_diag *diag) {
    s->rewinds++;
    control_jsonl_cut cut = {w->stage_index, step};
    int rc = metrics_rewind(s, &cut, diag);
    /* TensorBoard drops valid/loss of those steps too: a new evaluation there is written */
    int vrc = rec_append_is_open(&s->valid.a) ? valid_rewind(s, &cut, diag) : 0;
    int trc = tb_writer_session_start(&s->tb, (int64_t)(w->step_offset + step), wall_time, diag);
    return rc ? rc : vrc ? vrc : trc;
}

int control_metrics_write(control_metrics_sink *s, const control_metrics_where *w,
                          const control_metrics *m, bt_diag *diag) {
    if (s->jsonl_path[0] == '\0') return 0;
    metrics_retry(s);
    const control_metrics_held *h = metrics_held_find(s, w->stage_index);
    int rc = 0;
    if (h != NULL && m->step <= h->step) rc = control_metrics_rewind(s, w, m->step, m->time, diag);
    int jrc = control_metrics_jsonl(s, w, m, diag);
    if (jrc == 0) metrics_held_note(s, w->stage_index, m->step);
    if (jrc == 0)
        s->have_last = 1, s->last_stage = w->stage_index, s->last_attempt = w->attempt,
        s->last_step = m->step;
    rc = rc ? rc : jrc;
    static const char *const tags[] = {"train/loss",        "train/lr",
                                       "train/grad_norm",   "train/tokens_per_s",
                                       "train/step_time_s", "train/skipped_steps",
                                       "train/loss_scale",  "train/overflow"};
    const float vals[] = {(float)m->loss,        (float)m->lr,
                          (float)m->grad_norm,   (float)m->tokens_per_s,
                          (float)m->step_time_s, (float)m->skipped_steps,
                          (float)m->loss_scale,  m->overflow ? 1.0f : 0.0f};
    size_t n = sizeof vals / sizeof vals[0] - (m->loss_scale > 0 ? 0 : 2); /* the last: fp16 */
    int64_t step = (int64_t)(w->step_offset + m->step);
    int trc = tb_writer_scalars(&s->tb, step, m->time, tags, vals, n, diag);
    if (trc == 0 && m->moe_experts > 0) {
        static const char *const moe_tags[] = {"moe/load_max_mean", "moe/dropped", "moe/aux_loss"};
        const float moe_vals[] = {(float)m->moe_load_max_mean, (float)m->moe_dropped,
                                  (float)m->moe_aux_loss};
        trc = tb_writer_scalars(&s->tb, step, m->time, moe_tags, moe_vals, 3, diag);
    }
    return rc ? rc : trc;
}

int control_metrics_write_valid(control_metrics_sink *s, const control_metrics_where *w,
                                uint64_t step, double loss, uint32_t windows, double time,
                                bt_diag *diag) {
    uint64_t global = w->step_offset + step;
    if (!rec_append_is_open(&s->valid.a) || valid_seen_has(s, w->stage_index, step)) return 0;
    metrics_retry(s);
    bt_buf b;
    bt_buf_init(&b);
    bt_buf_printf(&b, "{\"time\": %.6f, \"stage\": ", time);
    bt_buf_json_string(&b, w->stage_name ? w->stage_name : "");
    bt_buf_printf(&b,
                  ", \"stage_index\": %u, \"attempt\": %u, \"step\": %llu, \"global_step\": %llu",
                  w->stage_index, w->attempt, (unsigned long long)step, (unsigned long long)global);
    json_num(&b, "valid_loss", loss);
    json_num(&b, "bits_per_token", loss / log(2.0));
    bt_buf_printf(&b, ", \"windows\": %u}\n", windows);
    rec_held key = {.stage = w->stage_index, .step = step};
    int rc = b.oom ? BT_ENOMEM : rec_append_write(&s->valid.a, b.data, b.len, &key, diag);
    bt_buf_free(&b);
    rc = rc ? rc : valid_seen_add(s, w->stage_index, step);
    if (rc == BT_ENOMEM)
        bt_diag_set(diag, "%s: out of memory for the validation of step %llu", s->valid_path,
                    (unsigned long long)step);
    static const char *const tag[] = {"valid/loss"};
    const float v[] = {(float)loss};
    int trc = tb_writer_scalars(&s->tb, (int64_t)global, time, tag, v, 1, diag);
    return rc ? rc : trc;
}

void control_metrics_close(control_metrics_sink *s) {
    if (s->jsonl_path[0] != '\0') metrics_retry(s); /* a rewind pending: its last try */
    rec_append_close(&s->jsonl.a);
    rec_append_close(&s->valid.a);
    free(s->valid_seen);
    s->valid_seen = NULL, s->n_valid_seen = s->cap_valid_seen = 0;
    free(s->held);
    s->held = NULL, s->n_held = s->cap_held = 0;
    s->jsonl_path[0] = '\0'; /* writes nothing from now on */
    tb_writer_close(&s->tb);
}
