/* baton ckpt inspect CKPT [--json]: what a checkpoint holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "util/buf.h"

static void inspect_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt inspect CKPT [--json]\n\n"
               "Shows a checkpoint's recipe, stage, step, data position, layout, and every\n"
               "tensor with its global shape, dtype, shard count and bytes. CKPT is a\n"
               "checkpoint directory or a run directory (its newest complete checkpoint).\n");
}

static uint64_t inspect_bytes(const Baton__TensorEntry *e) {
    uint64_t n = 0;
    for (size_t i = 0; i < e->n_shards; i++)
        n += e->shards[i]->byte_length;
    return n;
}

static void inspect_shape(bt_buf *b, const Baton__TensorEntry *e, const char *sep) {
    for (size_t k = 0; k < e->n_global_shape; k++)
        bt_buf_printf(b, "%s%llu", k ? sep : "", (unsigned long long)e->global_shape[k]);
}

static const char *inspect_dtype(Baton__DType t) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&baton__dtype__descriptor, t);
    return v ? v->name : "?";
}

void ckpt_layout_text(bt_buf *b, const Baton__Parallel *p) {
    if (p == NULL) {
        bt_buf_printf(b, "unknown");
        return;
    }
    bt_buf_printf(b, "tp%u,pp%u", p->tp, p->pp);
    if (p->virtual_stages > 1) bt_buf_printf(b, ",v%u", p->virtual_stages);
    for (size_t k = 0; k < p->n_stage_layers; k++)
        bt_buf_printf(b, "%s%u", k ? "+" : ",layers=", p->stage_layers[k]);
    bt_buf_printf(b, ",cp%u,dp%u,ep%u,zero%u", p->cp, p->dp, p->ep, p->zero);
}

static int inspect_text(bt_buf *b, const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    (void)diag;
    uint64_t total = 0;
    bt_buf_printf(b, "checkpoint %s (format %u)\n", dir, m->format_version);
    bt_buf_printf(b, "  recipe %s, stage %u \"%s\"%s, step %llu of %llu, next global sample %llu",
                  m->recipe_name ? m->recipe_name : "?", m->stage_index,
                  m->stage_name ? m->stage_name : "?", m->stage_final ? " (final)" : "",
                  (unsigned long long)m->step, (unsigned long long)m->stage_steps,
                  (unsigned long long)(m->data_position + m->skipped_samples));
    if (m->skipped_samples > 0)
        bt_buf_printf(b, " (%llu logical + %llu skipped after loss spikes)",
                      (unsigned long long)m->data_position, (unsigned long long)m->skipped_samples);
    bt_buf_printf(b, "\n");
    bt_buf_printf(b, "  saved under ");
    ckpt_layout_text(b, m->layout);
    bt_buf_printf(b, " by %u rank(s); AdamW step %llu; %zu fp8 scaling state(s)\n", m->world,
                  (unsigned long long)m->optim_step, m->n_fp8);
    const Baton__LossScalerState *ls = m->loss_scaler;
    if (ls != NULL)
        bt_buf_printf(b,
                      "  fp16 loss scale %g (%u clean step(s) since it last changed), %llu "
                      "step(s) skipped on overflow, %llu skipped in all\n",
                      ls->scale, ls->good_steps, (unsigned long long)ls->overflow_steps,
                      (unsigned long long)m->skipped_steps);
    bt_buf_printf(b, "  %-52s %-14s %-5s %6s %12s\n", "tensor", "shape", "dtype", "shards",
                  "bytes");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const Baton__TensorEntry *e = m->tensors[i];
        bt_buf shape;
        bt_buf_init(&shape);
        inspect_shape(&shape, e, "x");
        bt_buf_printf(b, "  %-52s %-14s %-5s %6zu %12llu\n", e->key, bt_buf_str(&shape),
                      inspect_dtype(e->dtype), e->n_shards, (unsigned long long)inspect_bytes(e));
        bt_buf_free(&shape);
        total += inspect_bytes(e);
    }
    bt_buf_printf(b, "  %zu tensors, %llu bytes (%.2f MB)\n", m->n_tensors,
                  (unsigned long long)total, (double)total / 1e6);
    uint64_t hist = 0, n_hist = 0;
    for (size_t i = 0; i < m->n_fp8; i++)
        if (m->fp8[i]->history) hist += inspect_bytes(m->fp8[i]->history), n_hist++;
    if (n_hist)
        bt_buf_printf(b, "  %llu fp8 amax histories in the shards, %llu bytes (%.2f MB)\n",
                      (unsigned long long)n_hist, (unsigned long long)hist, (double)hist / 1e6);
    return 0;
}

/* State f as JSON, its history read from its shard (format 2) or the manifest; one that
 * cannot be read is null, with an "error" (and the return is nonzero, diag set). */
static int inspect_fp8(bt_buf *b, ckpt_reader *r, const Baton__Fp8State *f, bt_diag *diag) {
    uint64_t n = ckpt_fp8_history_len(f);
    float *h = malloc((n ? n : 1) * sizeof *h);
    int rc = h ? ckpt_reader_fp8(r, f, h, diag) : BT_ENOMEM;
    if (h == NULL)
        bt_diag_set(diag, "out of memory for an fp8 history of %llu floats", (unsigned long long)n);
    bt_buf_printf(b, "{\"name\": ");
    bt_buf_json_string(b, f->tensor ? f->tensor : "");
    bt_buf_printf(b, ", \"scale\": %.9g, \"pos\": %u, \"amax_history\": ", f->scale, f->pos);
    if (rc != 0) {
        bt_buf_printf(b, "null, \"error\": ");
        bt_buf_json_string(b, diag->msg);
    } else {
        bt_buf_printf(b, "[");
        for (uint64_t k = 0; k < n; k++)
            bt_buf_printf(b, "%s%.9g", k ? ", " : "", h[k]);
        bt_buf_printf(b, "]");
    }
    bt_buf_printf(b, "}");
    free(h);
    return rc;
}

static int inspect_json(bt_buf *b, const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    bt_buf_printf(b, "{\"dir\": ");
    bt_buf_json_string(b, dir);
    bt_buf_printf(b, ", \"format_version\": %u, \"recipe\": ", m->format_version);
    bt_buf_json_string(b, m->recipe_name ? m->recipe_name : "");
    bt_buf_printf(b, ", \"stage_index\": %u, \"stage\": ", m->stage_index);
    bt_buf_json_string(b, m->stage_name ? m->stage_name : "");
    bt_buf_printf(b,
                  ", \"step\": %llu, \"stage_steps\": %llu, \"final\": %s, \"data_position\": "
                  "%llu, \"skipped_samples\": %llu, \"next_sample\": %llu, \"optim_step\": %llu, "
                  "\"world\": %u, \"layout\": ",
                  (unsigned long long)m->step, (unsigned long long)m->stage_steps,
                  m->stage_final ? "true" : "false", (unsigned long long)m->data_position,
                  (unsigned long long)m->skipped_samples,
                  (unsigned long long)(m->data_position + m->skipped_samples),
                  (unsigned long long)m->optim_step, m->world);
    bt_buf lay;
    bt_buf_init(&lay);
    ckpt_layout_text(&lay, m->layout);
    bt_buf_json_string(b, bt_buf_str(&lay));
    bt_buf_free(&lay);
    bt_buf_printf(b, ", \"skipped_steps\": %llu", (unsigned long long)m->skipped_steps);
    if (m->loss_scaler != NULL)
        bt_buf_printf(b,
                      ", \"loss_scaler\": {\"scale\": %.17g, \"good_steps\": %u, "
                      "\"overflow_steps\": %llu}",
                      m->loss_scaler->scale, m->loss_scaler->good_steps,
                      (unsigned long long)m->loss_scaler->overflow_steps);
    bt_buf_printf(b, ", \"tensors\": [");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const Baton__TensorEntry *e = m->tensors[i];
        bt_buf_printf(b, "%s{\"key\": ", i ? ", " : "");
        bt_buf_json_string(b, e->key);
        bt_buf_printf(b, ", \"shape\": [");
        inspect_shape(b, e, ", ");
        bt_buf_printf(b, "], \"dtype\": \"%s\", \"shards\": %zu, \"bytes\": %llu}",
                      inspect_dtype(e->dtype), e->n_shards, (unsigned long long)inspect_bytes(e));
    }
    bt_buf_printf(b, "], \"fp8\": [");
    int rc = 0; /* the first unreadable history's, every state listed */
    bt_diag first;
    bt_diag_init(&first);
    ckpt_reader rd; /* each shard file opened once for every history in it */
    ckpt_reader_init(&rd, dir, m);
    for (size_t i = 0; i < m->n_fp8; i++) {
        bt_buf_printf(b, "%s", i ? ", " : "");
        bt_diag_init(diag);
        int r = inspect_fp8(b, &rd, m->fp8[i], diag);
        if (r != 0 && rc == 0) rc = r, first = *diag;
    }
    ckpt_reader_close(&rd);
    bt_buf_printf(b, "]}\n");
    *diag = first;
    return rc;
}

int ckpt_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            inspect_usage(stdout);
            return BT_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] == '-' || path != NULL) {
            fprintf(stderr, "baton ckpt inspect: unexpected argument '%s'\n", argv[i]);
            inspect_usage(stderr);
            return BT_EXIT_USAGE;
        } else {
            path = argv[i];
        }
    }
    if (path == NULL) {
        inspect_usage(stderr);
        return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    char dir[CKPT_PATH_MAX];
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(path, dir, sizeof dir, &m, &diag);
    if (rc != 0) {
        fprintf(stderr, "baton ckpt inspect: %s\n", diag.msg);
        return rc == BT_EIO ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
    }
    bt_buf b;
    bt_buf_init(&b);
    rc = (json ? inspect_json : inspect_text)(&b, dir, m, &diag);
    fputs(bt_buf_str(&b), stdout);
    if (rc != 0) fprintf(stderr, "baton ckpt inspect: %s\n", diag.msg);
    bt_buf_free(&b);
    baton__manifest__free_unpacked(m, NULL);
    return rc == 0 ? BT_EXIT_OK : BT_EXIT_FAILURE;
}
