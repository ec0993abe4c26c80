/* metrics.jsonl and TensorBoard scalars (control_metrics.h). */
#include "control_metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "util/buf.h"

int control_metrics_open(control_metrics_sink *s, const char *run_dir, bt_diag *diag) {
    memset(s, 0, sizeof *s);
    if (run_dir == NULL || run_dir[0] == '\0') return 0;
    if (mkdir(run_dir, 0755) != 0 && errno != EEXIST) {
        bt_diag_set(diag, "%s: cannot create the run directory: %s", run_dir, strerror(errno));
        return BT_EIO;
    }
    snprintf(s->jsonl_path, sizeof s->jsonl_path, "%s/metrics.jsonl", run_dir);
    s->jsonl = fopen(s->jsonl_path, "ae");
    if (s->jsonl == NULL) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", s->jsonl_path, strerror(errno));
        return BT_EIO;
    }
    char tb_dir[4096];
    snprintf(tb_dir, sizeof tb_dir, "%s/tb", run_dir);
    int rc = tb_writer_open(&s->tb, tb_dir, diag);
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
    if (oom) return BT_ENOMEM;
    if (!ok) {
        bt_diag_set(diag, "%s: cannot append metrics: %s", s->jsonl_path, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

int control_metrics_write(control_metrics_sink *s, const control_metrics_where *w,
                          const control_metrics *m, bt_diag *diag) {
    if (s->jsonl == NULL) return 0;
    int rc = control_metrics_jsonl(s, w, m, diag);
    static const char *const tags[] = {"train/loss",        "train/lr",
                                       "train/grad_norm",   "train/tokens_per_s",
                                       "train/step_time_s", "train/skipped_steps",
                                       "train/loss_scale"};
    const float vals[] = {(float)m->loss,         (float)m->lr,          (float)m->grad_norm,
                          (float)m->tokens_per_s, (float)m->step_time_s, (float)m->skipped_steps,
                          (float)m->loss_scale};
    size_t n = sizeof vals / sizeof vals[0] - (m->loss_scale > 0 ? 0 : 1); /* fp16 only */
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

void control_metrics_close(control_metrics_sink *s) {
    if (s->jsonl != NULL) fclose(s->jsonl);
    s->jsonl = NULL;
    tb_writer_close(&s->tb);
}
