#include "train_spike.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* "K" or "K-L" into [from, to]; 0 on anything else. */
static void spike_parse_steps(const char *v, uint64_t *from, uint64_t *to) {
    char *end;
    *from = *to = 0;
    if (v == NULL || *v == '\0') return;
    unsigned long long a = strtoull(v, &end, 10), b = a;
    if (*end == '-') b = strtoull(end + 1, &end, 10);
    if (*end != '\0' || a == 0 || b < a) return;
    *from = a, *to = b;
}

static void spike_fault_setup(train_spike *s, const Baton__StageSpec *spec) {
    spike_parse_steps(getenv("BATON_FAULT_SPIKE_STEPS"), &s->fault_from, &s->fault_to);
    const char *a = getenv("BATON_FAULT_SPIKE_ATTEMPT");
    if (a != NULL && *a != '\0' && strtoul(a, NULL, 10) != spec->attempt)
        s->fault_from = s->fault_to = 0;
}

int train_spike_init(train_spike *s, backend *be, double z, size_t n_params, size_t n_opt,
                     const Baton__StageSpec *spec) {
    memset(s, 0, sizeof *s);
    spike_fault_setup(s, spec);
    if (!(z > 0) || !isfinite(z)) return 0;
    s->be = be, s->z = z, s->n_params = n_params, s->n_opt = n_opt;
    s->params = be->alloc(be, (n_params ? n_params : 1) * sizeof(float));
    s->m = be->alloc(be, (n_opt ? n_opt : 1) * sizeof(float));
    s->v = be->alloc(be, (n_opt ? n_opt : 1) * sizeof(float));
    if (s->params == NULL || s->m == NULL || s->v == NULL) {
        train_spike_free(s);
        return BT_ENOMEM;
    }
    return 0;
}

void train_spike_free(train_spike *s) {
    float *dev[3] = {s->params, s->m, s->v};
    for (int i = 0; i < 3; i++)
        if (dev[i] != NULL) s->be->free(s->be, dev[i]);
    memset(s, 0, sizeof *s);
}

int train_spike_armed(const train_spike *s) {
    return s->z > 0 && s->n >= TRAIN_SPIKE_WARMUP;
}

void train_spike_save(train_spike *s, const float *params, const optim_adamw *o) {
    s->be->copy(s->be, s->params, params, s->n_params);
    s->be->copy(s->be, s->m, o->m, s->n_opt);
    s->be->copy(s->be, s->v, o->v, s->n_opt);
    s->opt_step = o->step;
}

void train_spike_restore(const train_spike *s, float *params, optim_adamw *o) {
    s->be->copy(s->be, params, s->params, s->n_params);
    s->be->copy(s->be, o->m, s->m, s->n_opt);
    s->be->copy(s->be, o->v, s->v, s->n_opt);
    o->step = s->opt_step;
}

/* (x - mean) / std over the window's values; +inf above a constant window. */
static double spike_zscore(const double *w, uint32_t n, double x) {
    double mean = 0, var = 0;
    for (uint32_t i = 0; i < n; i++)
        mean += w[i];
    mean /= n;
    for (uint32_t i = 0; i < n; i++)
        var += (w[i] - mean) * (w[i] - mean);
    double sd = sqrt(var / n);
    if (sd > 0) return (x - mean) / sd;
    return x > mean ? INFINITY : 0;
}

int train_spike_check(const train_spike *s, double loss, double norm, double *z) {
    double zl = spike_zscore(s->loss, s->n, loss), zn = spike_zscore(s->norm, s->n, norm);
    *z = zl > zn ? zl : zn;
    return *z > s->z;
}

void train_spike_push(train_spike *s, double loss, double norm) {
    s->loss[s->next] = loss, s->norm[s->next] = norm;
    s->next = (s->next + 1) % TRAIN_SPIKE_WINDOW;
    if (s->n < TRAIN_SPIKE_WINDOW) s->n++;
    s->run = 0;
}

uint32_t train_spike_note(train_spike *s, uint64_t step, uint64_t first, uint64_t end) {
    if (s->run == 0) s->run_first_step = step, s->run_first_sample = first;
    s->run_last_step = step, s->run_end_sample = end;
    return ++s->run;
}

int train_spike_to_pb(const train_spike *s, Baton__SpikeGuardState *out, double *loss,
                      double *norm) {
    if (!(s->z > 0) || s->n == 0) return 0;
    uint32_t oldest = (s->next + TRAIN_SPIKE_WINDOW - s->n) % TRAIN_SPIKE_WINDOW;
    for (uint32_t i = 0; i < s->n; i++) {
        loss[i] = s->loss[(oldest + i) % TRAIN_SPIKE_WINDOW];
        norm[i] = s->norm[(oldest + i) % TRAIN_SPIKE_WINDOW];
    }
    baton__spike_guard_state__init(out);
    out->n_loss = out->n_grad_norm = s->n, out->loss = loss, out->grad_norm = norm;
    out->has_spikes_in_a_row = 1, out->spikes_in_a_row = s->run;
    if (s->run > 0) {
        out->has_first_spike_step = out->has_first_spike_sample = 1;
        out->first_spike_step = s->run_first_step, out->first_spike_sample = s->run_first_sample;
    }
    return 1;
}

void train_spike_forget(train_spike *s) {
    s->n = s->next = s->run = 0;
    s->run_first_step = s->run_last_step = s->run_first_sample = s->run_end_sample = 0;
}

void train_spike_from_pb(train_spike *s, const Baton__SpikeGuardState *in) {
    train_spike_forget(s);
    if (!(s->z > 0) || in == NULL || in->n_loss != in->n_grad_norm) return;
    for (size_t i = 0; i < in->n_loss; i++)
        if (!isfinite(in->loss[i]) || !isfinite(in->grad_norm[i])) return;
    size_t from = in->n_loss > TRAIN_SPIKE_WINDOW ? in->n_loss - TRAIN_SPIKE_WINDOW : 0;
    for (size_t i = from; i < in->n_loss; i++)
        train_spike_push(s, in->loss[i], in->grad_norm[i]);
    /* a run as long as a rollback's is never saved (the worker exits without saving) */
    if (in->spikes_in_a_row > 0 && in->spikes_in_a_row < TRAIN_SPIKE_ROLLBACK_AFTER &&
        in->has_first_spike_step && in->has_first_spike_sample) {
        s->run = in->spikes_in_a_row;
        s->run_first_step = in->first_spike_step, s->run_first_sample = in->first_spike_sample;
    }
}

float train_spike_fault_scale(const train_spike *s, uint64_t step) {
    return s->fault_from && step >= s->fault_from && step <= s->fault_to ? TRAIN_SPIKE_FAULT_FACTOR
                                                                         : 1.0f;
}

uint64_t train_spike_map_sample(const Baton__StageSpec *spec, uint64_t g) {
    /* Window k is in the logical indices of the mapping made by windows 0..k-1 (the
     * trainer reported it while those were in force): skipping it shifts every later
     * logical sample by its length, then the earlier windows map the result. So the newest
     * window applies first; nothing is read twice and nothing else is lost, also when a
     * window lies before an earlier one. */
    for (size_t i = spec->n_skip_samples; i-- > 0;) {
        const Baton__SkipRange *r = spec->skip_samples[i];
        if (r->to > r->from && g >= r->from) g += r->to - r->from;
    }
    return g;
}
