/* What a resume of a checkpoint by its own stage needs unchanged (ckpt_resume.h). */
#include "ckpt_resume.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

int ckpt_resume_model_diff(const Baton__Manifest *m, const Baton__Model *model, char *out,
                           size_t cap) {
    const Baton__Model *a = m->model, *b = model;
    if (a == NULL) {
        snprintf(out, cap, "its manifest has no model");
        return 1;
    }
    const struct {
        const char *key;
        uint64_t ckpt, stage;
    } f[] = {{"dim", a->dim, b->dim},
             {"n_layers", a->n_layers, b->n_layers},
             {"n_heads", a->n_heads, b->n_heads},
             {"n_kv_heads", a->n_kv_heads, b->n_kv_heads},
             {"ffn_dim", a->ffn_dim, b->ffn_dim},
             {"vocab_size", a->vocab_size, b->vocab_size}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].ckpt != f[i].stage) {
            snprintf(out, cap, "model.%s %llu in the checkpoint, %llu in this stage", f[i].key,
                     (unsigned long long)f[i].ckpt, (unsigned long long)f[i].stage);
            return 1;
        }
    return 0;
}

/* The seed the worker saved as the checkpoint's rng_state (its 8 bytes, little-endian):
 * 1 when it is there. */
static int resume_seed(const Baton__Manifest *m, uint64_t *seed) {
    if (!m->has_rng_state || m->rng_state.len != 8) return 0;
    *seed = 0;
    for (int i = 0; i < 8; i++)
        *seed |= (uint64_t)m->rng_state.data[i] << (8 * i);
    return 1;
}

/* Weight w of a mixture whose weights sum to total, as its share: what the draws follow,
 * so that weights scaled alike (0.8/0.2 and 8/2) are the same mixture. */
static int resume_share_differs(double w0, double t0, double w1, double t1) {
    double a = w0 / t0, b = w1 / t1;
    return fabs(a - b) > 1e-12 * fmax(fabs(a), fabs(b));
}

/* The mixture's weights: checked when every source of the checkpoint records one and the
 * spec mixes as many (other sources are the data check's to refuse). */
static int resume_weights_diff(const Baton__Manifest *m, const Baton__StageSpec *s, char *out,
                               size_t cap) {
    const Baton__Data *d = s->data;
    if (d == NULL || d->n_mix < 2 || m->n_data != d->n_mix) return 0;
    double t0 = 0, t1 = 0;
    for (size_t i = 0; i < m->n_data; i++) {
        if (!m->data[i]->has_weight || !(m->data[i]->weight > 0)) return 0;
        t0 += m->data[i]->weight, t1 += d->mix[i]->weight;
    }
    for (size_t i = 0; i < m->n_data; i++) {
        double w0 = m->data[i]->weight, w1 = d->mix[i]->weight;
        if (!resume_share_differs(w0, t0, w1, t1)) continue;
        snprintf(out, cap, "data.mix weight of %s %g -> %g (its share %.4g -> %.4g)",
                 d->mix[i]->path ? d->mix[i]->path : "?", w0, w1, w0 / t0, w1 / t1);
        return 1;
    }
    return 0;
}

int ckpt_resume_order_diff(const Baton__Manifest *m, const Baton__StageSpec *s, char *out,
                           size_t cap) {
    /* at or past the stage's steps it trains nothing more: its position reads nothing */
    if (s->stage == NULL || (m->has_step && m->step >= s->stage->steps)) return 0;
    uint64_t seed;
    if (resume_seed(m, &seed) && seed != s->seed) {
        snprintf(out, cap, "seed %llu -> %llu", (unsigned long long)seed,
                 (unsigned long long)s->seed);
        return 1;
    }
    uint64_t seq = s->stage ? s->stage->seq_len : 0;
    if (m->has_seq_len && m->seq_len > 0 && seq > 0 && m->seq_len != seq) {
        snprintf(out, cap, "seq_len %llu -> %llu", (unsigned long long)m->seq_len,
                 (unsigned long long)seq);
        return 1;
    }
    return resume_weights_diff(m, s, out, cap);
}
