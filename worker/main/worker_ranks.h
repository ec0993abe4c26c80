/* How a worker joins its job: under a PMIx launcher (baton launch, srun --mpi=pmix,
 * mpirun) it learns its rank from PMIx and connects the world group, over NCCL when the
 * stage runs on CUDA devices and over Gloo otherwise; started by hand it is rank 0 of
 * 1. */
#ifndef BATON_WORKER_RANKS_H
#define BATON_WORKER_RANKS_H

#include "boot.h"
#include "comm.h"
#include "stage_spec.pb-c.h"

typedef struct worker_ranks {
    int under_pmix; /* boot_init succeeded: finalize at the end */
    boot_info info;
    comm *world;                /* NULL for one process */
    comm *tp, *dp, *pp;         /* this rank's tensor-, data- and pipeline-parallel groups; NULL:
                                 * degree 1 */
    int own_tp, own_dp, own_pp; /* made by comm_split (else the world itself): destroy */
    comm *cp;                   /* context-parallel group; NULL: degree 1 */
    comm *dpcp;                 /* the dp x cp block (gradient reduction under cp); NULL: cp is 1 */
    comm *ep, *edp;             /* expert-parallel and expert-data-parallel groups; NULL: ep is 1 */
    int own_cp, own_dpcp, own_ep, own_edp, own_xdp;
    comm *xdp;       /* when the tp ranks fold into the experts' parallelism
                      * (layout_fold_tp_experts): the holders of copies of this rank's routed
                      * experts, the edp group drawn from tp x cp x dp (edp is then this
                      * group too, not owned); NULL when it is one rank or there is no fold */
    char store[512]; /* rendezvous directory this worker created, to remove; "" if none */
    int device;      /* CUDA device of the NCCL world; -1 when there is none */
} worker_ranks;

/* Joins the job. timeout_s bounds the rendezvous and every collective. use_nccl (the
 * stage's cluster.device is cuda): the world is an NCCL group on CUDA device
 * local_rank % (devices on this node), else a Gloo group. BT_EUNSUPPORTED when NCCL is
 * wanted and the CUDA engine's module has no NCCL, or was not loaded (worker_cuda.h). One
 * process (started by hand, or a world of 1) has no world group whatever use_nccl. */
int worker_ranks_join(worker_ranks *w, double timeout_s, int use_nccl, bt_diag *diag);
/* This rank's tp, dp and pp groups for the layout p (stages/layout.h, p->order), split
 * from the world: every rank calls it, and splits the same lists in the same order (tp,
 * dp, pp, then cp and, when cp > 1, the dp x cp block, cp fastest; a pp group's rank is
 * the stage). A group spanning the world is the world. When the
 * world's size is not tp*cp*dp*pp the world becomes the dp group, for train_init to report the
 * mismatch. With fold_experts (train_folds_experts) the expert view spans tp x cp x dp
 * and its edp group, the holders of the rank's routed experts, becomes xdp. */
int worker_ranks_groups(worker_ranks *w, const Baton__Parallel *p, int fold_experts, bt_diag *diag);
/* cluster.strict_topology: BT_EINVAL (with the group and its hosts in diag) when this
 * rank's tensor-parallel group spans several hosts. Call after worker_ranks_groups. */
int worker_ranks_check_topology(const worker_ranks *w, bt_diag *diag);
/* Leaves: destroys the groups, finalizes PMIx, removes the rendezvous directory. */
void worker_ranks_leave(worker_ranks *w);

#endif
