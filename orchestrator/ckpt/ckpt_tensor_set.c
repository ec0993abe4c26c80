/* A checkpoint's tensor list against the model its manifest records (ckpt_cmds.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "model.h"

static const char *const set_moments[2] = {"optim.exp_avg.", "optim.exp_avg_sq."};

typedef struct set_ctx {
    const Baton__Manifest *m;
    const Baton__TensorEntry **sorted; /* m's entries by key */
    unsigned char *seen;               /* per sorted entry: one the model needs */
    void (*fn)(void *, const char *);
    void *ctx;
    uint64_t problems;
} set_ctx;

__attribute__((format(printf, 2, 3))) static void set_problem(set_ctx *s, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->problems++;
    if (s->fn) s->fn(s->ctx, line);
}

static int set_key_cmp(const void *a, const void *b) {
    const char *x = (*(const Baton__TensorEntry *const *)a)->key;
    const char *y = (*(const Baton__TensorEntry *const *)b)->key;
    return strcmp(x ? x : "", y ? y : "");
}

/* Every entry of key (a manifest may hold one twice), marked seen; NULL when none. */
static const Baton__TensorEntry *set_take(set_ctx *s, const char *key) {
    Baton__TensorEntry probe = {.key = (char *)key};
    const Baton__TensorEntry *pp = &probe, **hit;
    hit = bsearch(&pp, s->sorted, s->m->n_tensors, sizeof *s->sorted, set_key_cmp);
    if (hit == NULL) return NULL;
    size_t i = (size_t)(hit - s->sorted);
    while (i > 0 && set_key_cmp(&s->sorted[i - 1], &pp) == 0)
        i--;
    const Baton__TensorEntry *first = s->sorted[i];
    for (; i < s->m->n_tensors && set_key_cmp(&s->sorted[i], &pp) == 0; i++)
        s->seen[i] = 1;
    return first;
}

static void set_expect(set_ctx *s, const char *key, const model_tensor *mt) {
    const Baton__TensorEntry *e = set_take(s, key);
    if (e == NULL) {
        set_problem(s, "tensor %s, which the checkpoint's model needs, is missing", key);
        return;
    }
    int same = e->n_global_shape == (size_t)mt->ndim;
    for (int k = 0; same && k < mt->ndim; k++)
        same = e->global_shape[k] == (uint64_t)mt->global_shape[k];
    if (!same)
        set_problem(s, "tensor %s has shape %llu x %llu, the checkpoint's model's is %d x %d", key,
                    (unsigned long long)(e->n_global_shape ? e->global_shape[0] : 0),
                    (unsigned long long)(e->n_global_shape > 1 ? e->global_shape[1] : 1),
                    mt->global_shape[0], mt->ndim > 1 ? mt->global_shape[1] : 1);
}

static int set_has_moments(const Baton__Manifest *m) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i]->key && strncmp(m->tensors[i]->key, "optim.", 6) == 0) return 1;
    return 0;
}

/* The model's tensors and, when the checkpoint holds optimizer state, both moments of
 * each; then whatever else the manifest lists. */
static void set_walk(set_ctx *s, const model_config *cfg) {
    int moments = set_has_moments(s->m);
    model_tensor mt;
    for (int i = 0; model_tensor_slice(cfg, i, &mt) == 0; i++) {
        set_expect(s, mt.name, &mt);
        for (int k = 0; moments && k < 2; k++) {
            char key[160];
            snprintf(key, sizeof key, "%s%s", set_moments[k], mt.name);
            set_expect(s, key, &mt);
        }
    }
    for (size_t i = 0; i < s->m->n_tensors; i++)
        if (!s->seen[i])
            set_problem(s, "tensor %s is not one of the checkpoint's model (renamed, or foreign)",
                        s->sorted[i]->key ? s->sorted[i]->key : "(no name)");
}

uint64_t ckpt_check_tensor_set(const Baton__Manifest *m, void (*fn)(void *, const char *),
                               void *ctx) {
    set_ctx s = {.m = m, .fn = fn, .ctx = ctx};
    model_config cfg;
    bt_diag d;
    bt_diag_init(&d);
    if (m->model == NULL || model_config_from_pb(&cfg, m->model, &d) != 0) {
        set_problem(&s, "its model cannot be built, so its tensors cannot be checked: %s",
                    m->model ? d.msg : "no model in the manifest");
        return s.problems;
    }
    size_t n = m->n_tensors;
    s.sorted = malloc((n ? n : 1) * sizeof *s.sorted);
    s.seen = calloc(n ? n : 1, 1);
    if (s.sorted == NULL || s.seen == NULL) {
        set_problem(&s, "out of memory checking %zu tensor names", n);
    } else {
        memcpy(s.sorted, m->tensors, n * sizeof *s.sorted);
        qsort(s.sorted, n, sizeof *s.sorted, set_key_cmp);
        set_walk(&s, &cfg);
    }
    free(s.sorted);
    free(s.seen);
    return s.problems;
}
