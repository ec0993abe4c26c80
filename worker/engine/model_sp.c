/* Sequence parallelism's collectives (model_sp.h). */
#include "model_sp.h"

int model_sp_rows(const model *m, int n) {
    return model_sp_on(m) ? n / m->cfg.tp : n;
}

int model_sp_row0(const model *m, int n) {
    return model_sp_on(m) ? m->cfg.tp_rank * (n / m->cfg.tp) : 0;
}

void model_sp_gather(model *m, float *full, const float *local, int n) {
    if (!model_sp_on(m) || m->comm_err != 0) return;
    size_t rows = (size_t)model_sp_rows(m, n) * m->cfg.dim;
    m->comm_err = comm_allgather(m->tp_group, local, full, rows, COMM_F32, NULL);
}

void model_sp_scatter(model *m, const float *full, float *local, int n) {
    if (!model_sp_on(m) || m->comm_err != 0) return;
    size_t rows = (size_t)model_sp_rows(m, n) * m->cfg.dim;
    m->comm_err = comm_reduce_scatter(m->tp_group, full, local, rows, COMM_F32, COMM_SUM, NULL);
}

void model_sp_norm_grad(model *m, float *dw) {
    float *g = m->gacts.dnorm;
    size_t C = (size_t)m->cfg.dim;
    if (m->comm_err == 0)
        m->comm_err = comm_allreduce(m->tp_group, g, g, C, COMM_F32, COMM_SUM, NULL);
    m->be->add(m->be, dw, dw, g, C);
}
