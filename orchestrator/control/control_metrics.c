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

/* A line's stage index and its step in the stage: 0 when it has both. */
static int metrics_line_stage_step(const char *line, uint64_t *stage, uint64_t *step) {
    if (control_metrics_line_field(line, ", \"stage_index\": ", stage) != 0) return -1;
    return control_metrics_line_field(line, ", \"step\": ", step);
}

int control_u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Which lines a rewrite drops: those of stage `stage` from step `from` on (none unless
 * on). A line without a stage index and step is not ours to judge: kept. */
typedef struct jsonl_cut {
    int on;
    uint32_t stage;
    uint64_t from;
} jsonl_cut;

static const jsonl_cut jsonl_keep_all = {0, 0, 0};

/* Called for each line a scan keeps, with its stage index and step when it has them. */
typedef void (*jsonl_keep_fn)(control_metrics_sink *s, const char *line, int has, uint64_t stage,
                              uint64_t step);

typedef struct jsonl_scan_ctx {
    control_metrics_sink *s;
    const char *path;
    jsonl_cut cut;
    FILE *out;
    jsonl_keep_fn keep;
    bt_diag *diag;
} jsonl_scan_ctx;

static int jsonl_scan_line(void *arg, const char *line, size_t n, off_t at) {
    jsonl_scan_ctx *c = arg;
    (void)at;
    uint64_t stage = 0, step = 0;
    int has = metrics_line_stage_step(line, &stage, &step) == 0;
    if (has && c->cut.on && stage == c->cut.stage && step >= c->cut.from) return 0;
    c->keep(c->s, line, has, stage, step);
    if (c->out != NULL && fwrite(line, 1, n, c->out) != n) {
        bt_diag_set(c->diag, "%s.tmp: cannot write: %s", c->path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* Reads the JSON-lines file path line by line: the lines cut does not drop are kept,
 * passed to keep and copied to out unless out is NULL. *torn: the file ends in a line without its
 * newline (a writer killed mid-line), which is never kept. */
static int jsonl_scan(control_metrics_sink *s, const char *path, jsonl_cut cut, FILE *out,
                      int *torn, jsonl_keep_fn keep, bt_diag *diag) {
    *torn = 0;
    FILE *in;
    int rc = bt_file_open_read(path, &in, diag);
    if (rc != 0 || in == NULL) return rc;
    jsonl_scan_ctx c = {s, path, cut, out, keep, diag};
    rc = bt_file_lines(in, path, jsonl_scan_line, &c, torn, diag);
    fclose(in);
    return rc;
}

/* The directory entry of a rename made durable. */
static int metrics_sync_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        *slash = '\0';
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* The file without the lines cut drops: written whole to a temp file,
 * synced and renamed over it, so that a reader (baton status) sees the old file or the
 * new one, never a part; then *f reopened for appending. */
static int jsonl_rewrite(control_metrics_sink *s, const char *path, FILE **f, jsonl_cut cut,
                         jsonl_keep_fn keep, bt_diag *diag) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc, torn;
    if (*f != NULL) fclose(*f);
    *f = NULL;
    FILE *out = bt_fopen_private(tmp, "w");
    if (out == NULL) {
        bt_diag_set(diag, "%s: cannot create: %s", tmp, strerror(errno));
        rc = BT_EIO;
        goto error;
    }
    if ((rc = jsonl_scan(s, path, cut, out, &torn, keep, diag)) != 0) goto error;
    rc = BT_EIO;
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) {
        bt_diag_set(diag, "%s: cannot write: %s", tmp, strerror(errno));
        goto error;
    }
    int closed = fclose(out);
    out = NULL;
    if (closed != 0 || rename(tmp, path) != 0) {
        bt_diag_set(diag, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
        goto error;
    }
    if (metrics_sync_dir(path) != 0) {
        bt_diag_set(diag, "%s: cannot sync its directory: %s", path, strerror(errno));
        goto error;
    }
    if ((*f = bt_fopen_private(path, "a")) == NULL) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", path, strerror(errno));
        return BT_EIO;
    }
    return 0;
error:
    if (out != NULL) fclose(out);
    unlink(tmp);
    if (*f == NULL) *f = bt_fopen_private(path, "a"); /* append to what is there */
    return rc;
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
static void metrics_keep(control_metrics_sink *s, const char *line, int has, uint64_t stage,
                         uint64_t step) {
    uint64_t at;
    if (!has) return;
    metrics_held_note(s, stage, step);
    if (control_metrics_line_field(line, ", \"attempt\": ", &at) != 0) return;
    s->have_last = 1, s->last_stage = (uint32_t)stage, s->last_attempt = (uint32_t)at;
    s->last_step = step;
}

static int metrics_rewrite(control_metrics_sink *s, jsonl_cut cut, bt_diag *diag) {
    s->n_held = 0, s->have_last = 0;
    return jsonl_rewrite(s, s->jsonl_path, &s->jsonl, cut, metrics_keep, diag);
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
static void valid_keep(control_metrics_sink *s, const char *line, int has, uint64_t stage,
                       uint64_t step) {
    (void)line;
    if (has) valid_seen_add(s, stage, step);
}

static int valid_rewrite(control_metrics_sink *s, jsonl_cut cut, bt_diag *diag) {
    s->n_valid_seen = 0;
    return jsonl_rewrite(s, s->valid_path, &s->valid, cut, valid_keep, diag);
}

/* valid.jsonl's pairs, a torn last line dropped, and the file opened for appending. */
static int valid_open(control_metrics_sink *s, const char *run_dir, bt_diag *diag) {
    snprintf(s->valid_path, sizeof s->valid_path, "%s/valid.jsonl", run_dir);
    int torn, rc = jsonl_scan(s, s->valid_path, jsonl_keep_all, NULL, &torn, valid_keep, diag);
    if (rc == 0 && torn) rc = valid_rewrite(s, jsonl_keep_all, diag);
    if (rc == 0 && s->valid == NULL) s->valid = bt_fopen_private(s->valid_path, "a");
    if (rc == 0 && s->valid == NULL) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", s->valid_path, strerror(errno));
        rc = BT_EIO;
    }
    return rc;
}

int control_metrics_open(control_metrics_sink *s, const char *run_dir, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    if (run_dir == NULL || run_dir[0] == '\0') return 0;
    if (mkdir(run_dir, 0700) != 0 && errno != EEXIST) {
        bt_diag_set(diag, "%s: cannot create the run directory: %s", run_dir, strerror(errno));
        return BT_EIO;
    }
    snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s/metrics.jsonl", run_dir);
    int torn, rc = jsonl_scan(s, s->jsonl_path, jsonl_keep_all, NULL, &torn, metrics_keep, diag);
    /* a line appended after a torn one would be unreadable too */
    if (rc == 0 && torn) rc = metrics_rewrite(s, jsonl_keep_all, diag);
    if (rc != 0) {
        control_metrics_close(s);
        return rc;
    }
    if (s->jsonl == NULL) s->jsonl = bt_fopen_private(s->jsonl_path, "a");
    if (s->jsonl == NULL) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", s->jsonl_path, strerror(errno));
        return BT_EIO;
    }
    char tb_dir[4096];
    snprintf(tb_dir, sizeof tb_dir, "%s/tb", run_dir);
    rc = valid_open(s, run_dir, diag);
    rc = rc ? rc : tb_writer_open(&s->tb, tb_dir, diag);
    if (rc != 0) control_metrics_close(s);
    return rc;
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
    int ok = !b.oom && fputs(bt_buf_str(&b), s->jsonl) >= 0 && fflush(s->jsonl) == 0;
    int oom = b.oom;
    bt_buf_free(&b);
    if (oom) {
        bt_diag_set(diag, "%s: out of memory for a record of step %llu", s->jsonl_path,
                    (unsigned long long)m->step);
        return BT_ENOMEM;
    }
    if (!ok) {
        bt_diag_set(diag, "%s: cannot append metrics: %s", s->jsonl_path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* A repeated step of w's stage: the stage's records of it and the steps after go, and
 * TensorBoard's events from its global step on (the header). */
static int control_metrics_rewind(control_metrics_sink *s, const control_metrics_where *w,
                                  uint64_t step, double wall_time, bt_diag *diag) {
    s->rewinds++;
    jsonl_cut cut = {1, w->stage_index, step};
    int rc = metrics_rewrite(s, cut, diag);
    /* TensorBoard drops valid/loss of those steps too: a new evaluation there is written */
    int vrc = s->valid ? valid_rewrite(s, cut, diag) : 0;
    int trc = tb_writer_session_start(&s->tb, (int64_t)(w->step_offset + step), wall_time, diag);
    return rc ? rc : vrc ? vrc : trc;
}

int control_metrics_write(control_metrics_sink *s, const control_metrics_where *w,
                          const control_metrics *m, bt_diag *diag) {
    if (s->jsonl_path[0] == '\0') return 0;
    const control_metrics_held *h = metrics_held_find(s, w->stage_index);
    int rc = 0;
    if (h != NULL && m->step <= h->step) rc = control_metrics_rewind(s, w, m->step, m->time, diag);
    if (s->jsonl == NULL && rc == 0)
        bt_diag_set(diag, "%s: not open for appending (an earlier rewrite of it failed)",
                    s->jsonl_path);
    if (s->jsonl == NULL) return rc ? rc : BT_EIO;
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
    if (s->valid == NULL || valid_seen_has(s, w->stage_index, step)) return 0;
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
    int ok = !b.oom && fputs(bt_buf_str(&b), s->valid) >= 0 && fflush(s->valid) == 0;
    int rc = b.oom ? BT_ENOMEM : ok ? 0 : BT_EIO;
    bt_buf_free(&b);
    if (rc == BT_EIO) bt_diag_set(diag, "%s: cannot append: %s", s->valid_path, strerror(errno));
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
    if (s->jsonl != NULL) fclose(s->jsonl);
    s->jsonl = NULL;
    if (s->valid != NULL) fclose(s->valid);
    s->valid = NULL;
    free(s->valid_seen);
    s->valid_seen = NULL, s->n_valid_seen = s->cap_valid_seen = 0;
    free(s->held);
    s->held = NULL, s->n_held = s->cap_held = 0;
    s->jsonl_path[0] = '\0'; /* writes nothing from now on */
    tb_writer_close(&s->tb);
}
