/* Sequence parallelism's collectives (model_sp.h). */
#include "model_sp.h"

int model_sp_rows(const model *m, int n) {
    return model_sp_on(m) ? n / m->cfg.tp : n;
}

int model_sp_row0(const model *m, int n) {
    return model_sp_on(m) ? m->cfg.tp_rank * (n / m->cfg.tp) : 0;
}

int model_sp_init(model *m) {
    int bf16 = 0; /* some GEMM of the stage's in bf16 (setup_gemms decided) */
    for (int i = 0; i < m->n_gemm; i++)
        bf16 |= m->gemm[i].prec == BACKEND_PREC_BF16;
    if (!model_sp_on(m) || !m->cfg.comm_bf16 || m->be->pack_bf16 == NULL || !bf16) return 0;
    size_t n = (size_t)m->max_B * m->max_T * m->cfg.dim;
    m->sp16 = m->be->alloc(m->be, n * sizeof *m->sp16);
    return m->sp16 ? 0 : BT_ENOMEM;
}

void model_sp_gather(model *m, float *full, const float *local, int n, backend_prec prec) {
    if (!model_sp_on(m) || m->comm_err != 0) return;
    size_t rows = (size_t)model_sp_rows(m, n) * m->cfg.dim;
    if (prec != BACKEND_PREC_BF16 || m->sp16 == NULL) {
        m->comm_err = comm_allgather(m->tp_group, local, full, rows, COMM_F32, NULL);
        return;
    }
    uint16_t *mine = m->sp16 + (size_t)model_sp_row0(m, n) * m->cfg.dim;
    m->be->pack_bf16(m->be, mine, local, rows);
    m->comm_err = comm_allgather(m->tp_group, mine, m->sp16, rows * sizeof *mine, COMM_BYTE, NULL);
    if (m->comm_err == 0) m->be->unpack_bf16(m->be, full, m->sp16, (size_t)n * m->cfg.dim);
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
