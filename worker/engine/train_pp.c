#include "train_pp.h"

#include <string.h>

#include "model_sp.h"

/* Evaluation's activations travel with a tag the training schedule never uses (it uses
 * 2j and 2j + 1 for micro-batch j < K). */
#define TRAIN_PP_EVAL_TAG 0x7ffffff0u

static int pp_fail(train_pp *p, const char *what, bt_diag *diag) {
    bt_diag_set(diag, "pipeline %s (stage %d of %d): %s", what, p->stage, p->stages,
                comm_error(p->group));
    return BT_EIO;
}

int train_pp_init(train_pp *p, comm *group, size_t count, int vp, int K, bt_diag *diag) {
    memset(p, 0, sizeof *p);
    p->stages = group ? comm_size(group) : 1;
    p->stage = group ? comm_rank(group) : 0;
    p->group = p->stages > 1 ? group : NULL;
    p->vp = p->group != NULL && vp > 1 ? vp : 1;
    pipeline_init(&p->pipe, p->group, count);
    if (p->vp == 1) return 0;
    return pipe_schedule_make(p->stages, p->stage, K, p->vp, &p->sched, diag);
}

void train_pp_free(train_pp *p) {
    pipeline_free(&p->pipe);
    pipe_schedule_free(&p->sched);
}

int train_pp_sum(train_pp *p, double *x, bt_diag *diag) {
    if (p->group == NULL) return 0;
    if (comm_allreduce(p->group, x, x, 1, COMM_F64, COMM_SUM, NULL) != 0)
        return pp_fail(p, "loss all-reduce", diag);
    return 0;
}

int train_pp_eval_batch(train_pp *p, model *m, const int32_t *tokens, const int32_t *targets, int B,
                        int T, float *loss, bt_diag *diag) {
    size_t count = (size_t)model_sp_rows(m, B * T) * m->cfg.dim; /* the rank's rows */
    int last = p->stage == p->stages - 1, prev = (p->stage + p->stages - 1) % p->stages;
    float l = 0;
    for (int c = 0; c < p->vp; c++) { /* slot 0 holds the head's activations too */
        uint32_t tag = TRAIN_PP_EVAL_TAG - (uint32_t)c;
        if (p->group && (p->stage > 0 || c > 0) &&
            comm_recv(p->group, model_stage_input(m, 0), count, COMM_F32, prev, tag, NULL) != 0)
            return pp_fail(p, "eval receive", diag);
        int rc = model_stage_forward(m, c, 0, tokens, targets, B, T, &l);
        if (rc != 0) return rc;
        if (p->group && !(last && c == p->vp - 1) &&
            comm_send(p->group, model_stage_output(m, 0), count, COMM_F32,
                      (p->stage + 1) % p->stages, last ? tag - 1 : tag, NULL) != 0)
            return pp_fail(p, "eval send", diag);
    }
    double sum = last ? (double)l : 0.0;
    int rc = train_pp_sum(p, &sum, diag);
    *loss = (float)sum;
    return rc;
}
