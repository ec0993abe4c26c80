/* Tensor parallelism for the model: the shard arithmetic, the f/g operator pairs
 * (model_tp.h), the vocabulary-parallel loss, the one gradient reduction tensor
 * parallelism needs, and the gather of a sharded tensor.
 *
 * Why only replicated kv heads need a gradient reduction. With f at every column-parallel
 * input and g at every row-parallel output, the residual stream, the norms' inputs and the
 * gradients reaching them are identical on every rank (a reduction leaves bitwise-equal
 * results on every member), so each rank computes bitwise the same gradient for a
 * replicated norm weight: nothing to reduce, and counting it once in the gradient norm is
 * the caller's part (model_tensor.replica). A sharded weight's gradient is complete on its
 * owner (its output columns or input rows are nobody else's). A kv head replicated on
 * tp/KV ranks (tp > KV) is different: each copy sees only the query heads of its rank, so
 * the one-process gradient is the sum over the copies: model_tp_reduce_grads. Under
 * sequence parallelism (model_sp.h) each rank norms only its rows, so the norm weights'
 * gradients are summed over the group in every pass instead. */
#include "model_tp.h"

#include <stdlib.h>
#include <string.h>

void model_shard_of(const model_config *cfg, model_shard *s) {
    int tp = cfg->tp > 1 ? cfg->tp : 1, r = tp > 1 ? cfg->tp_rank : 0;
    int KV = cfg->n_kv_heads;
    memset(s, 0, sizeof *s);
    s->tp = tp, s->rank = r;
    s->heads = cfg->n_heads / tp, s->head0 = r * s->heads;
    if (KV >= tp) {
        s->kv_heads = KV / tp, s->kv_head0 = r * s->kv_heads;
    } else { /* KV divides tp: ranks [g tp/KV, (g+1) tp/KV) share kv head g */
        s->kv_heads = 1, s->kv_head0 = r * KV / tp, s->kv_replica = r % (tp / KV);
    }
    s->ffn = cfg->ffn_dim / tp, s->ffn0 = r * s->ffn;
    s->vocab = cfg->vocab / tp, s->vocab0 = r * s->vocab;
}

static void tp_allreduce(model *m, float *x, size_t n) {
    if (m->tp_group == NULL || m->comm_err != 0 || n == 0) return;
    m->comm_err = comm_allreduce(m->tp_group, x, x, n, COMM_F32, COMM_SUM, NULL);
}

void model_tp_copy_backward(model *m, float *dx, size_t n) {
    tp_allreduce(m, dx, n);
}

void model_tp_reduce_forward(model *m, float *x, size_t n) {
    tp_allreduce(m, x, n);
}

void model_tp_crossentropy_forward(model *m, int N) {
    backend *be = m->be;
    model_acts *a = &m->acts;
    const model_shard *s = &m->shard;
    size_t part = (size_t)N * 3;
    float *mine = a->ce_part + (size_t)s->rank * part;
    be->vocab_ce_partial(be, mine, a->logits, m->targets, N, s->vocab, s->vocab0);
    if (m->comm_err == 0)
        m->comm_err = comm_allgather(m->tp_group, mine, a->ce_part, part, COMM_F32, NULL);
    be->vocab_ce_combine(be, a->losses, a->ce_lse, a->ce_part, m->targets, N, s->tp);
}

int model_tp_reduce_grads(model *m, comm *kv_group) {
    if (kv_group == NULL) return 0;
    size_t C = (size_t)m->cfg.dim, hd = (size_t)m->cfg.head_dim;
    size_t qd = (size_t)m->shard.heads * hd, kvd = (size_t)m->shard.kv_heads * hd;
    for (int l = 0; l < m->n_layers; l++) {
        float *dkv = m->grads.layers[l].wqkv + qd * C; /* k_proj then v_proj rows */
        int rc = comm_allreduce(kv_group, dkv, dkv, 2 * kvd * C, COMM_F32, COMM_SUM, NULL);
        if (rc != 0) return rc;
    }
    return 0;
}

/* Copies rank r's slice t (host, t->count floats) into the global tensor out. */
static void tp_place_slice(float *out, const model_tensor *t, const float *slice) {
    size_t rows = t->ndim == 2 ? (size_t)t->shape[0] : 1;
    size_t cols = t->ndim == 2 ? (size_t)t->shape[1] : t->count;
    size_t gcols = t->ndim == 2 ? (size_t)t->global_shape[1] : t->global_count;
    for (size_t i = 0; i < rows; i++)
        memcpy(out + ((size_t)t->row0 + i) * gcols + (size_t)t->col0, slice + i * cols,
               cols * sizeof *out);
}

/* The floats of the largest tensor's slice on this rank. */
static size_t tp_biggest_slice(const model *m) {
    size_t biggest = 0;
    for (int i = 0; i < model_n_tensors(m); i++) {
        model_tensor t;
        if (model_tensor_info(m, i, &t) == 0 && t.count > biggest) biggest = t.count;
    }
    return biggest;
}

size_t model_gather_bufs_floats(const model *m) {
    return m->tp_group == NULL ? 0 : (size_t)m->shard.tp * tp_biggest_slice(m);
}

int model_gather_bufs_alloc(model *m, model_gather_bufs *b) {
    size_t bytes = model_gather_bufs_floats(m) * sizeof(float);
    b->dev = b->host = NULL;
    if (bytes == 0) return 0;
    b->dev = m->be->alloc(m->be, bytes);
    b->host = malloc(bytes);
    if (b->dev != NULL && b->host != NULL) return 0;
    model_gather_bufs_free(m, b);
    return BT_ENOMEM;
}

void model_gather_bufs_free(model *m, model_gather_bufs *b) {
    if (b->dev != NULL) m->be->free(m->be, b->dev);
    free(b->host);
    b->dev = b->host = NULL;
}

int model_gather_tensor(model *m, int i, float *out, const model_gather_bufs *b, bt_diag *diag) {
    backend *be = m->be;
    model_tensor t;
    int rc = model_tensor_info(m, i, &t);
    if (rc != 0) {
        bt_diag_set(diag, "tensor %d: no such tensor", i);
        return rc;
    }
    if (m->tp_group == NULL) {
        be->to_host(be, out, t.data, t.count * sizeof *out);
        return be->sync(be);
    }
    int tp = m->shard.tp;
    size_t bytes = (size_t)tp * t.count * sizeof(float);
    float *dev = b->dev, *host = b->host;
    if (dev == NULL || host == NULL) {
        bt_diag_set(diag, "%s's tp gather: no buffers (model_gather_bufs_alloc)", t.name);
        return BT_EINVAL;
    }
    if (comm_allgather(m->tp_group, t.data, dev, t.count, COMM_F32, NULL) != 0) {
        bt_diag_set(diag, "the tp allgather of %s: %s", t.name, comm_error(m->tp_group));
        return BT_EIO;
    }
    be->to_host(be, host, dev, bytes);
    rc = be->sync(be);
    for (int r = 0; rc == 0 && r < tp; r++) {
        model_config cr = m->cfg;
        cr.tp_rank = r;
        model_tensor tr;
        model_tensor_slice(&cr, i, &tr);
        /* a routed expert under the fold: whole, and maybe another on each tp rank */
        int mine = tr.expert && m->cfg.expert_fold ? r == m->cfg.tp_rank : tr.replica == 0;
        if (mine) tp_place_slice(out, &tr, host + (size_t)r * t.count);
    }
    return rc;
}
