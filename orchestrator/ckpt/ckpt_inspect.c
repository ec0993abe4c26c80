/* baton ckpt inspect CKPT [--json]: what a checkpoint holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "../cli.h"
#include "util/buf.h"

static void inspect_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt inspect CKPT [--json]\n\n"
               "Shows a checkpoint's recipe, stage, step, data position, training data (its\n"
               "counts at save), layout, and every tensor with its global shape, dtype,\n"
               "shard count and bytes (the model's in layer order, then each optimizer\n"
               "state's), and its fp8 scaling states: how many are active and how many are\n"
               "placeholders (scale 1, no amax recorded: the GEMMs kept in bf16, such as\n"
               "first_last_bf16's layers and the head). CKPT is a checkpoint directory or a\n"
               "run directory (its newest complete checkpoint).\n\n"
               "  --json   one JSON object instead: dir, format_version, recipe, stage_index,\n"
               "           stage, step, stage_steps, final, data_position, skipped_samples,\n"
               "           next_sample, optim_step, world, layout, skipped_steps, run_id\n"
               "           (null in older checkpoints and those of a spec no run wrote),\n"
               "           data (the training sources' path, tokens, documents at save; []\n"
               "           in older checkpoints), sample_order (1 per source; 0 by slot,\n"
               "           older), loss_scaler (fp16 only), spike_guard (the loss-spike\n"
               "           guard's window: window, spikes_in_a_row, first_spike_step\n"
               "           (null without spikes); only when saved),\n"
               "           tensors (key, shape, dtype,\n"
               "           shards, bytes; in the text's order), tensor_bytes, fp8_states,\n"
               "           fp8_active, fp8_placeholders, fp8_history_bytes and fp8 (every\n"
               "           state with its name, scale, pos, amax_history and placeholder; a\n"
               "           history that cannot be read is null, with its \"error\")\n"
               "  --help   show this help\n\n"
               "Exit status: 0 shown; 1 a checkpoint or an fp8 state that cannot be read\n"
               "(every other state is still shown), or a checkpoint removed while it was\n"
               "read; 2 usage, or CKPT is not a checkpoint.\n");
}

/* The loss-spike guard's saved window, when there is one (manifest spike_guard). */
static void inspect_spike_text(bt_buf *b, const Baton__Manifest *m) {
    const Baton__SpikeGuardState *g = m->spike_guard;
    if (g == NULL) return;
    bt_buf_printf(b, "  loss-spike guard: %zu applied step(s) in its window", g->n_loss);
    if (g->spikes_in_a_row > 0)
        bt_buf_printf(b, ", %u spike(s) in a row from step %llu", g->spikes_in_a_row,
                      (unsigned long long)g->first_spike_step);
    bt_buf_printf(b, "\n");
}

static void inspect_spike_json(bt_buf *b, const Baton__Manifest *m) {
    const Baton__SpikeGuardState *g = m->spike_guard;
    if (g == NULL) return;
    bt_buf_printf(b, ", \"spike_guard\": {\"window\": %zu, \"spikes_in_a_row\": %u", g->n_loss,
                  g->spikes_in_a_row);
    if (g->spikes_in_a_row > 0 && g->has_first_spike_step)
        bt_buf_printf(b, ", \"first_spike_step\": %llu}", (unsigned long long)g->first_spike_step);
    else
        bt_buf_printf(b, ", \"first_spike_step\": null}");
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

/* ---- the order tensors and fp8 states are listed in ----
 * The manifest keeps them in the order the ranks' shards were merged, which mixes a
 * tensor's optimizer moments in with the weights (and, after a pipeline stage's shards,
 * layers out of order). Listed instead: the model's tensors first, in the model's order
 * (embedding, each layer by number, the final norm, the head), then each optimizer state's
 * tensors in the same order. */

enum { INSPECT_KNOWN_STATES = 2 };
static const char *const inspect_states[INSPECT_KNOWN_STATES] = {"exp_avg", "exp_avg_sq"};

/* A layer's tensors in model_tensor_info's order (worker/engine/model.h); others (an MoE
 * layer's router and experts) after them. */
static const char *const inspect_layer_order[] = {
    "input_layernorm",  "self_attn.q_proj", "self_attn.k_proj",
    "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
    "mlp.gate.",
};
#define INSPECT_N_LAYER_ORDER (sizeof inspect_layer_order / sizeof inspect_layer_order[0])

/* Where a name sorts: its optimizer state (0 for the model's own tensor, 1.. for the
 * known states, then others), its block (embedding 0, layers 1, final norm 2, head 3,
 * anything else 4), the layer's number, and the place in the layer of what follows. */
typedef struct inspect_key {
    size_t index; /* in the manifest: the last tie-break */
    const char *state, *rest;
    size_t state_len;
    int state_rank, block;
    unsigned long long layer;
    size_t in_layer;
} inspect_key;

static int inspect_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void inspect_key_of(const char *name, size_t index, inspect_key *k) {
    *k = (inspect_key){.index = index, .state = "", .rest = name};
    const char *p = name;
    if (inspect_prefix(p, "optim.") && strchr(p + 6, '.') != NULL) {
        k->state = p + 6;
        k->state_len = (size_t)(strchr(k->state, '.') - k->state);
        k->state_rank = INSPECT_KNOWN_STATES + 1;
        for (int i = 0; i < INSPECT_KNOWN_STATES; i++)
            if (strlen(inspect_states[i]) == k->state_len &&
                strncmp(k->state, inspect_states[i], k->state_len) == 0)
                k->state_rank = i + 1;
        p = k->state + k->state_len + 1;
    }
    if (inspect_prefix(p, "model.")) p += 6; /* fp8 states name "layers.N..." and "head" */
    char *end;
    k->block = 4, k->rest = p;
    if (inspect_prefix(p, "embed_tokens")) {
        k->block = 0;
    } else if (inspect_prefix(p, "layers.") && p[7] >= '0' && p[7] <= '9') {
        k->layer = strtoull(p + 7, &end, 10);
        k->block = 1, k->rest = *end == '.' ? end + 1 : end;
        k->in_layer = INSPECT_N_LAYER_ORDER;
        for (size_t i = 0; i < INSPECT_N_LAYER_ORDER; i++)
            if (inspect_prefix(k->rest, inspect_layer_order[i])) {
                k->in_layer = i;
                break;
            }
    } else if (inspect_prefix(p, "norm")) {
        k->block = 2;
    } else if (inspect_prefix(p, "lm_head") || inspect_prefix(p, "head")) {
        k->block = 3;
    }
}

/* strcmp, but a run of digits compares as the number it spells: experts.2 before
 * experts.10. */
static int inspect_natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            while (*a == '0')
                a++;
            while (*b == '0')
                b++;
            size_t na = strspn(a, "0123456789"), nb = strspn(b, "0123456789");
            if (na != nb) return na < nb ? -1 : 1;
            int c = strncmp(a, b, na);
            if (c != 0) return c;
            a += na, b += nb;
        } else {
            if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            a++, b++;
        }
    }
    return *a ? 1 : *b ? -1 : 0;
}

#define INSPECT_CMP(x, y)                                                                          \
    do {                                                                                           \
        if ((x) != (y)) return (x) < (y) ? -1 : 1;                                                 \
    } while (0)

/* Tensors: by state, block, layer, place in the layer, then the name read naturally. */
static int inspect_tensor_cmp(const void *pa, const void *pb) {
    const inspect_key *a = pa, *b = pb;
    INSPECT_CMP(a->state_rank, b->state_rank);
    if (a->state_rank > INSPECT_KNOWN_STATES) {
        size_t n = a->state_len < b->state_len ? a->state_len : b->state_len;
        int c = strncmp(a->state, b->state, n);
        if (c != 0) return c;
        INSPECT_CMP(a->state_len, b->state_len);
    }
    INSPECT_CMP(a->block, b->block);
    INSPECT_CMP(a->layer, b->layer);
    INSPECT_CMP(a->in_layer, b->in_layer);
    int c = inspect_natural_cmp(a->rest, b->rest);
    if (c != 0) return c;
    INSPECT_CMP(a->index, b->index);
    return 0;
}

/* fp8 states: by block and layer; within a layer as saved (each GEMM's x, w, dy). */
static int inspect_fp8_cmp(const void *pa, const void *pb) {
    const inspect_key *a = pa, *b = pb;
    INSPECT_CMP(a->block, b->block);
    INSPECT_CMP(a->layer, b->layer);
    INSPECT_CMP(a->index, b->index);
    return 0;
}

/* The manifest indices of m's tensors (fp8 = 0) or fp8 states (fp8 = 1) in listing order;
 * NULL when out of memory (with n > 0). */
static size_t *inspect_order(const Baton__Manifest *m, int fp8) {
    size_t n = fp8 ? m->n_fp8 : m->n_tensors;
    inspect_key *k = malloc((n ? n : 1) * sizeof *k);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (k == NULL || order == NULL) {
        free(k), free(order);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = fp8 ? m->fp8[i]->tensor : m->tensors[i]->key;
        inspect_key_of(name ? name : "", i, &k[i]);
    }
    qsort(k, n, sizeof *k, fp8 ? inspect_fp8_cmp : inspect_tensor_cmp);
    for (size_t i = 0; i < n; i++)
        order[i] = k[i].index;
    free(k);
    return order;
}

/* ---- fp8 scaling states ---- */

/* One state's history as read from the checkpoint. A placeholder is a state no amax ever
 * went into (scale 1, every history entry 0): a GEMM that stayed in bf16 (the
 * first_last_bf16 layers, the head) keeps one so that every layer saves the same set. */
typedef struct inspect_fp8 {
    float *history; /* ckpt_fp8_history_len floats; NULL when unreadable */
    uint64_t n;
    int placeholder;
    bt_diag error; /* why it could not be read */
} inspect_fp8;

/* Reads every state's history (each shard file opened once). Returns the first error's
 * code (0 when every one was read; the others are still read), NULL *out when out of
 * memory. */
static int inspect_fp8_read(const char *dir, const Baton__Manifest *m, inspect_fp8 **out,
                            bt_diag *diag) {
    inspect_fp8 *st = calloc(m->n_fp8 ? m->n_fp8 : 1, sizeof *st);
    *out = st;
    if (st == NULL) {
        bt_diag_set(diag, "out of memory for %zu fp8 states", m->n_fp8);
        return BT_ENOMEM;
    }
    int rc = 0;
    ckpt_reader rd;
    ckpt_reader_init(&rd, dir, m);
    for (size_t i = 0; i < m->n_fp8; i++) {
        const Baton__Fp8State *f = m->fp8[i];
        inspect_fp8 *s = &st[i];
        bt_diag_init(&s->error);
        s->n = ckpt_fp8_history_len(f);
        s->history = malloc((s->n ? s->n : 1) * sizeof *s->history);
        int r = s->history ? ckpt_reader_fp8(&rd, f, s->history, &s->error) : BT_ENOMEM;
        if (s->history == NULL)
            bt_diag_set(&s->error, "out of memory for an fp8 history of %llu floats",
                        (unsigned long long)s->n);
        if (r != 0) {
            free(s->history), s->history = NULL;
            if (rc == 0) rc = r, *diag = s->error;
            continue;
        }
        s->placeholder = f->scale == 1.0f;
        for (uint64_t k = 0; k < s->n && s->placeholder; k++)
            s->placeholder = s->history[k] == 0.0f;
    }
    ckpt_reader_close(&rd);
    return rc;
}

static void inspect_fp8_free(inspect_fp8 *st, size_t n) {
    for (size_t i = 0; st && i < n; i++)
        free(st[i].history);
    free(st);
}

/* The counts both listings give: states, placeholders, unreadable ones, history bytes. */
typedef struct inspect_fp8_counts {
    size_t states, placeholders, unreadable, histories;
    uint64_t history_bytes;
} inspect_fp8_counts;

static inspect_fp8_counts inspect_fp8_count(const Baton__Manifest *m, const inspect_fp8 *st) {
    inspect_fp8_counts c = {.states = m->n_fp8};
    for (size_t i = 0; i < m->n_fp8; i++) {
        c.placeholders += st[i].history != NULL && st[i].placeholder;
        c.unreadable += st[i].history == NULL;
        if (m->fp8[i]->history) c.history_bytes += inspect_bytes(m->fp8[i]->history), c.histories++;
    }
    return c;
}

/* bytes with a unit that keeps the figure readable: "512 B", "3.26 KB", "9.84 MB". */
static const char *inspect_size(char *buf, size_t cap, uint64_t bytes) {
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1000 && u < 5)
        v /= 1000, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}

/* The training data the stage read, with its counts at save time (older checkpoints: none). */
static void inspect_data_text(bt_buf *b, const Baton__Manifest *m) {
    for (size_t i = 0; i < m->n_data; i++) {
        const Baton__DataCounts *d = m->data[i];
        bt_buf_printf(b, "%s", i ? ", " : "  training data: ");
        bt_buf_text(b, d->path ? d->path : "?");
        bt_buf_printf(b, " (%llu tokens, %llu document%s)", (unsigned long long)d->tokens,
                      (unsigned long long)d->documents, d->documents == 1 ? "" : "s");
    }
    if (m->n_data > 1)
        bt_buf_printf(b, "; mixture order %s",
                      m->has_sample_order && m->sample_order == 1 ? "per source"
                                                                  : "by slot (older)");
    if (m->n_data > 0) bt_buf_printf(b, "\n");
}

static void inspect_data_json(bt_buf *b, const Baton__Manifest *m) {
    bt_buf_printf(b, ", \"data\": [");
    for (size_t i = 0; i < m->n_data; i++) {
        const Baton__DataCounts *d = m->data[i];
        bt_buf_printf(b, "%s{\"path\": ", i ? ", " : "");
        bt_buf_json_string(b, d->path ? d->path : "");
        bt_buf_printf(b, ", \"tokens\": %llu, \"documents\": %llu}", (unsigned long long)d->tokens,
                      (unsigned long long)d->documents);
    }
    bt_buf_printf(b, "], \"sample_order\": %u", m->has_sample_order ? m->sample_order : 0);
}

static int inspect_text(bt_buf *b, const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    inspect_fp8 *st = NULL;
    int rc = inspect_fp8_read(dir, m, &st, diag);
    size_t *order = inspect_order(m, 0);
    if (st == NULL || order == NULL) {
        free(order), inspect_fp8_free(st, m->n_fp8);
        bt_diag_set(diag, "out of memory listing %zu tensors", m->n_tensors);
        return BT_ENOMEM;
    }
    inspect_fp8_counts c = inspect_fp8_count(m, st);
    uint64_t total = 0;
    bt_buf t; /* names as text shows them: control characters escaped (bt_buf_text) */
    bt_buf_init(&t);
    bt_buf_printf(b, "checkpoint %s (format %u)\n", bt_buf_text_of(&t, dir), m->format_version);
    bt_buf_printf(b, "  recipe ");
    bt_buf_text(b, m->recipe_name ? m->recipe_name : "?");
    bt_buf_printf(b, ", stage %u \"%s\"%s, step %llu of %llu, next global sample %llu",
                  m->stage_index, bt_buf_text_of(&t, m->stage_name ? m->stage_name : "?"),
                  m->stage_final ? " (final)" : "", (unsigned long long)m->step,
                  (unsigned long long)m->stage_steps,
                  (unsigned long long)(m->data_position + m->skipped_samples));
    if (m->skipped_samples > 0)
        bt_buf_printf(b, " (%llu logical + %llu skipped after loss spikes)",
                      (unsigned long long)m->data_position, (unsigned long long)m->skipped_samples);
    bt_buf_printf(b, "\n");
    if (m->run_id != NULL) bt_buf_printf(b, "  saved by run %s\n", bt_buf_text_of(&t, m->run_id));
    inspect_data_text(b, m);
    bt_buf_printf(b, "  saved under ");
    ckpt_layout_text(b, m->layout);
    bt_buf_printf(b, " by %u rank(s); AdamW step %llu; %zu fp8 scaling state(s)", m->world,
                  (unsigned long long)m->optim_step, c.states);
    if (c.states)
        bt_buf_printf(b, ": %zu active, %zu placeholder(s)",
                      c.states - c.placeholders - c.unreadable, c.placeholders);
    if (c.unreadable) bt_buf_printf(b, ", %zu unreadable", c.unreadable);
    bt_buf_printf(b, "\n");
    const Baton__LossScalerState *ls = m->loss_scaler;
    if (ls != NULL)
        bt_buf_printf(b,
                      "  fp16 loss scale %g (%u clean step(s) since it last changed), %llu "
                      "step(s) skipped on overflow, %llu skipped in all\n",
                      ls->scale, ls->good_steps, (unsigned long long)ls->overflow_steps,
                      (unsigned long long)m->skipped_steps);
    inspect_spike_text(b, m);
    /* the columns as wide as their longest entry */
    int key_w = 6, shape_w = 5;
    for (size_t i = 0; i < m->n_tensors; i++) {
        bt_buf shape;
        bt_buf_init(&shape);
        inspect_shape(&shape, m->tensors[i], "x");
        int kw = (int)strlen(bt_buf_text_of(&t, m->tensors[i]->key ? m->tensors[i]->key : ""));
        int sw = (int)strlen(bt_buf_str(&shape));
        key_w = kw > key_w ? kw : key_w, shape_w = sw > shape_w ? sw : shape_w;
        bt_buf_free(&shape);
    }
    bt_buf_printf(b, "  %-*s %-*s %-5s %6s %12s\n", key_w, "tensor", shape_w, "shape", "dtype",
                  "shards", "bytes");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const Baton__TensorEntry *e = m->tensors[order[i]];
        bt_buf shape;
        bt_buf_init(&shape);
        inspect_shape(&shape, e, "x");
        bt_buf_printf(b, "  %-*s %-*s %-5s %6zu %12llu\n", key_w,
                      bt_buf_text_of(&t, e->key ? e->key : ""), shape_w, bt_buf_str(&shape),
                      inspect_dtype(e->dtype), e->n_shards, (unsigned long long)inspect_bytes(e));
        bt_buf_free(&shape);
        total += inspect_bytes(e);
    }
    char size[32];
    bt_buf_printf(b, "  %zu tensors, %llu bytes (%s)\n", m->n_tensors, (unsigned long long)total,
                  inspect_size(size, sizeof size, total));
    if (c.histories)
        bt_buf_printf(b, "  %zu fp8 amax histories in the shards, %llu bytes (%s)\n", c.histories,
                      (unsigned long long)c.history_bytes,
                      inspect_size(size, sizeof size, c.history_bytes));
    for (size_t i = 0; i < m->n_fp8; i++)
        if (st[i].history == NULL)
            bt_buf_printf(b, "  fp8 state %s: %s\n",
                          bt_buf_text_of(&t, m->fp8[i]->tensor ? m->fp8[i]->tensor : "?"),
                          st[i].error.msg);
    bt_buf_free(&t);
    free(order);
    inspect_fp8_free(st, m->n_fp8);
    return rc;
}

/* State f as JSON with its history (null, with an "error", when it cannot be read). */
static void inspect_fp8_json(bt_buf *b, const Baton__Fp8State *f, const inspect_fp8 *s) {
    bt_buf_printf(b, "{\"name\": ");
    bt_buf_json_string(b, f->tensor ? f->tensor : "");
    bt_buf_printf(b, ", \"scale\": %.9g, \"pos\": %u, \"amax_history\": ", f->scale, f->pos);
    if (s->history == NULL) {
        bt_buf_printf(b, "null, \"placeholder\": null, \"error\": ");
        bt_buf_json_string(b, s->error.msg);
    } else {
        bt_buf_printf(b, "[");
        for (uint64_t k = 0; k < s->n; k++)
            bt_buf_printf(b, "%s%.9g", k ? ", " : "", s->history[k]);
        bt_buf_printf(b, "], \"placeholder\": %s", s->placeholder ? "true" : "false");
    }
    bt_buf_printf(b, "}");
}

static int inspect_json(bt_buf *b, const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    inspect_fp8 *st = NULL;
    int rc = inspect_fp8_read(dir, m, &st, diag);
    size_t *order = inspect_order(m, 0), *fp8_order = inspect_order(m, 1);
    if (st == NULL || order == NULL || fp8_order == NULL) {
        free(order), free(fp8_order), inspect_fp8_free(st, m->n_fp8);
        bt_diag_set(diag, "out of memory listing %zu tensors", m->n_tensors);
        return BT_ENOMEM;
    }
    inspect_fp8_counts c = inspect_fp8_count(m, st);
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
    bt_buf_printf(b,
                  ", \"skipped_steps\": %llu, \"run_id\": ", (unsigned long long)m->skipped_steps);
    if (m->run_id != NULL)
        bt_buf_json_string(b, m->run_id);
    else
        bt_buf_printf(b, "null");
    inspect_data_json(b, m);
    if (m->loss_scaler != NULL)
        bt_buf_printf(b,
                      ", \"loss_scaler\": {\"scale\": %.17g, \"good_steps\": %u, "
                      "\"overflow_steps\": %llu}",
                      m->loss_scaler->scale, m->loss_scaler->good_steps,
                      (unsigned long long)m->loss_scaler->overflow_steps);
    inspect_spike_json(b, m);
    bt_buf_printf(b, ", \"tensors\": [");
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const Baton__TensorEntry *e = m->tensors[order[i]];
        bt_buf_printf(b, "%s{\"key\": ", i ? ", " : "");
        bt_buf_json_string(b, e->key ? e->key : "");
        bt_buf_printf(b, ", \"shape\": [");
        inspect_shape(b, e, ", ");
        bt_buf_printf(b, "], \"dtype\": \"%s\", \"shards\": %zu, \"bytes\": %llu}",
                      inspect_dtype(e->dtype), e->n_shards, (unsigned long long)inspect_bytes(e));
        total += inspect_bytes(e);
    }
    bt_buf_printf(b,
                  "], \"tensor_bytes\": %llu, \"fp8_states\": %zu, \"fp8_active\": %zu, "
                  "\"fp8_placeholders\": %zu, \"fp8_history_bytes\": %llu, \"fp8\": [",
                  (unsigned long long)total, c.states, c.states - c.placeholders - c.unreadable,
                  c.placeholders, (unsigned long long)c.history_bytes);
    for (size_t i = 0; i < m->n_fp8; i++) {
        bt_buf_printf(b, "%s", i ? ", " : "");
        inspect_fp8_json(b, m->fp8[fp8_order[i]], &st[fp8_order[i]]);
    }
    bt_buf_printf(b, "]}\n");
    free(order), free(fp8_order);
    inspect_fp8_free(st, m->n_fp8);
    return rc;
}

/* One inspection (ckpt_gone_try) of the checkpoint path names, its listing into out;
 * opened: its manifest was read (a failure after is one fp8 state's, listed). */
typedef struct inspect_try {
    const char *path;
    int json, opened;
    bt_buf out;
} inspect_try;

static int inspect_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    inspect_try *t = ctx;
    bt_buf_free(&t->out);
    bt_buf_init(&t->out);
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(t->path, dir, cap, &m, diag);
    t->opened = rc == 0;
    if (rc != 0) return rc;
    ckpt_gone_fault(dir);
    rc = (t->json ? inspect_json : inspect_text)(&t->out, dir, m, diag);
    baton__manifest__free_unpacked(m, NULL);
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
            if (json) return cli_twice("ckpt inspect", "--json");
            json = 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "baton ckpt inspect: unknown option '%s'\n", argv[i]);
            inspect_usage(stderr);
            return BT_EXIT_USAGE;
        } else if (path != NULL) {
            fprintf(stderr, "baton ckpt inspect: one checkpoint at a time (got '%s' and '%s')\n",
                    path, argv[i]);
            return BT_EXIT_USAGE;
        } else {
            path = argv[i];
        }
    }
    if (path == NULL) {
        fprintf(stderr, "baton ckpt inspect: missing CKPT\n");
        inspect_usage(stderr);
        return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    char dir[CKPT_PATH_MAX];
    inspect_try t = {.path = path, .json = json};
    bt_buf_init(&t.out);
    int gone;
    int rc = ckpt_gone_retry("baton ckpt inspect", path, inspect_once, &t, dir, sizeof dir, &gone,
                             &diag);
    if (t.opened && !gone) fputs(bt_buf_str(&t.out), stdout); /* what could be read */
    if (rc != 0) fprintf(stderr, "baton ckpt inspect: %s\n", diag.msg);
    bt_buf_free(&t.out);
    if (rc == 0 || t.opened || gone) return rc == 0 ? BT_EXIT_OK : BT_EXIT_FAILURE;
    return rc == BT_EIO ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
}
