#include "train_tp.h"

#include <string.h>

#include "model_moe.h"

static int tp_fail(train_tp *p, comm *c, const char *what, bt_diag *diag) {
    bt_diag_set(diag, "tensor-parallel %s (rank %d of %d): %s", what, p->rank, p->size,
                comm_error(c));
    return BT_EIO;
}

int train_tp_init(train_tp *p, comm *group, const model_config *cfg, bt_diag *diag) {
    memset(p, 0, sizeof *p);
    p->size = group ? comm_size(group) : 1;
    p->rank = group ? comm_rank(group) : 0;
    if (p->size == 1) return 0;
    p->group = group;
    int KV = cfg->n_kv_heads;
    if (p->size <= KV) return 0;
    /* KV divides tp (model_config_check): ranks [g rep, (g+1) rep) share kv head g. */
    uint32_t rep = (uint32_t)(p->size / KV), first = (uint32_t)p->rank / rep * rep;
    uint32_t ranks[64];
    if (rep > 64) {
        bt_diag_set(diag, "tensor parallelism: %u ranks sharing a kv head (at most 64)", rep);
        return BT_EUNSUPPORTED;
    }
    for (uint32_t i = 0; i < rep; i++)
        ranks[i] = (uint32_t)comm_global_rank(group, (int)(first + i));
    if (comm_split(group, ranks, rep, "tp-kv", &p->kv) != 0)
        return tp_fail(p, group, "kv-head group split", diag);
    return 0;
}

void train_tp_free(train_tp *p) {
    comm_destroy(p->kv);
    memset(p, 0, sizeof *p);
}

int train_tp_reduce_grads(train_tp *p, model *m, bt_diag *diag) {
    if (p->kv != NULL && model_tp_reduce_grads(m, p->kv) != 0)
        return tp_fail(p, p->kv, "kv-head gradient all-reduce", diag);
    if (model_moe_reduce_tp(m) != 0) return tp_fail(p, p->group, "MoE gradient all-reduce", diag);
    return 0;
}

int train_tp_max(train_tp *p, float *x, size_t n, bt_diag *diag) {
    if (p->group == NULL || n == 0) return 0;
    if (comm_allreduce(p->group, x, x, n, COMM_F32, COMM_MAX, NULL) != 0)
        return tp_fail(p, p->group, "fp8 amax all-reduce", diag);
    return 0;
}
