#include "worker_ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_shm.h"
#include "layout.h"
#include "util/buf.h"
#include "util/kv_wire.h"
#include "worker_cuda.h"
#include "worker_rdzv.h"

/* The NCCL world (comm_nccl.c, in the CUDA engine's module: worker_cuda.h), or the error
 * that says why there is none. */
static int ranks_nccl_init(worker_ranks *w, const comm_bootstrap *bs, bt_diag *diag) {
    int n = 0;
    int rc = worker_nccl_device_count(&n, diag);
    if (rc != 0) {
        if (bs->store.close) bs->store.close(bs->store.ctx);
        return rc;
    }
    w->device = w->info.local_rank % n;
    return worker_nccl_init(&w->world, bs, w->device, diag);
}

/* The rendezvous directory: BATON_JOB_DIR when the launcher gives one (it is private to
 * the job attempt and removed with it), else a directory named after the PMIx namespace
 * (fresh per attempt) under TMPDIR, which rank 0 removes at the end. Either is used only
 * when it is a directory of this user's that only it may write (worker_rdzv.h). */
static int ranks_store_dir(worker_ranks *w, char *dir, size_t cap, bt_diag *diag) {
    const char *job = getenv("BATON_JOB_DIR");
    if (job != NULL && job[0] != '\0') {
        snprintf(dir, cap, "%s/rendezvous", job);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, cap, "%s/baton-rdzv-%s", tmp && tmp[0] ? tmp : "/tmp", w->info.nspace);
    }
    int rc = worker_rdzv_claim(dir, diag); /* a name taken by someone else refused */
    if (rc == 0 && (job == NULL || job[0] == '\0') && w->info.rank == 0)
        snprintf(w->store, sizeof w->store, "%s", dir);
    return rc;
}

int worker_ranks_join(worker_ranks *w, double timeout_s, int use_nccl, bt_diag *diag) {
    memset(w, 0, sizeof *w);
    w->device = -1;
    if (getenv("PMIX_RANK") == NULL && getenv("PMIX_NAMESPACE") == NULL)
        return 0; /* started by hand: one process */
    int rc = boot_init(&w->info, diag);
    if (rc != 0) return rc;
    w->under_pmix = 1;
    if (w->info.size == 1) return 0;
    char dir[512], host[256];
    comm_bootstrap bs = {.rank = w->info.rank,
                         .size = w->info.size,
                         .prefix = w->info.nspace,
                         .timeout_ms = (int)(timeout_s * 1000),
                         .name = "world"};
    const char *kv = getenv(KV_ENV_ADDRESS);
    if (kv != NULL && kv[0] != '\0') { /* ranks on several hosts (Slurm): no shared directory */
        rc = comm_store_tcp(&bs.store, kv, getenv("BATON_CONTROL_TOKEN"), host, sizeof host, diag);
        bs.host = host; /* Gloo binds this host's address on the route to baton run */
    } else {
        rc = ranks_store_dir(w, dir, sizeof dir, diag);
        bs.store_dir = dir;
    }
    if (rc != 0) return rc;
    return use_nccl ? ranks_nccl_init(w, &bs, diag) : comm_cpu_init(&w->world, &bs, diag);
}

/* The group along dim containing this rank: NULL when of size 1, the world when it spans
 * it (unless own: a group of its own, whose byte count is its own), else a new split
 * (*owned set). */
static int ranks_group_own(worker_ranks *w, const layout *l, enum layout_dim dim, int own,
                           comm **out, int *owned, bt_diag *diag) {
    uint32_t ranks[1024], n = l->size[dim];
    *out = NULL, *owned = 0;
    if (n == 1) return 0;
    if (n == l->world && !own) {
        *out = w->world;
        return 0;
    }
    if (n > 1024) {
        bt_diag_set(diag, "a %s group of %u ranks (at most 1024)", layout_dim_name(dim), n);
        return BT_EUNSUPPORTED;
    }
    layout_group(l, dim, (uint32_t)w->info.rank, ranks);
    if (comm_split(w->world, ranks, n, layout_dim_name(dim), out) != 0) {
        bt_diag_set(diag, "%s group: %s", layout_dim_name(dim), comm_error(w->world));
        return BT_EIO;
    }
    *owned = 1;
    return 0;
}

static int ranks_group(worker_ranks *w, const layout *l, enum layout_dim dim, comm **out,
                       int *owned, bt_diag *diag) {
    return ranks_group_own(w, l, dim, 0, out, owned, diag);
}

/* The ranks that share this rank's tp and pp coordinates: dp x cp, cp varying fastest.
 * Split even when it is the whole world, so that its traffic is counted apart from the
 * cp group's (comm_bytes_sent). */
static int ranks_dpcp_group(worker_ranks *w, const layout *l, bt_diag *diag) {
    uint32_t ranks[1024], cp = l->size[LAYOUT_CP], dp = l->size[LAYOUT_DP], n = cp * dp;
    if (cp == 1) return 0; /* always a group of its own: its byte count is its own */
    if (n > 1024) {
        bt_diag_set(diag, "a dp x cp block of %u ranks (at most 1024)", n);
        return BT_EUNSUPPORTED;
    }
    layout_coord c = layout_coord_of(l, (uint32_t)w->info.rank);
    for (uint32_t d = 0; d < dp; d++)
        for (uint32_t k = 0; k < cp; k++) {
            c.c[LAYOUT_DP] = d, c.c[LAYOUT_CP] = k;
            ranks[d * cp + k] = layout_rank_of(l, &c);
        }
    if (comm_split(w->world, ranks, n, "dp-cp", &w->dpcp) != 0) {
        bt_diag_set(diag, "dp x cp group: %s", comm_error(w->world));
        return BT_EIO;
    }
    w->own_dpcp = 1;
    return 0;
}

int worker_ranks_groups(worker_ranks *w, const Baton__Parallel *p, int fold_experts,
                        bt_diag *diag) {
    uint32_t world = w->world ? (uint32_t)comm_size(w->world) : 1;
    uint64_t need = (uint64_t)p->tp * p->cp * p->dp * p->pp;
    if (world == 1) return 0;
    if (need != world) { /* train_init names the mismatch */
        w->dp = w->world;
        return 0;
    }
    layout l;
    const char *order = p->order && p->order[0] ? p->order : "tp-cp-ep-dp-pp";
    int rc = layout_init(&l, p->tp, p->cp, p->dp, p->pp, p->ep ? p->ep : 1, fold_experts, order,
                         world, diag);
    rc = rc ? rc : ranks_group(w, &l, LAYOUT_TP, &w->tp, &w->own_tp, diag);
    rc = rc ? rc : ranks_group(w, &l, LAYOUT_DP, &w->dp, &w->own_dp, diag);
    rc = rc ? rc : ranks_group(w, &l, LAYOUT_PP, &w->pp, &w->own_pp, diag);
    rc = rc ? rc : ranks_group(w, &l, LAYOUT_CP, &w->cp, &w->own_cp, diag);
    rc = rc ? rc : ranks_dpcp_group(w, &l, diag);
    /* experts: always groups of their own (byte counts) */
    if (l.size[LAYOUT_EP] > 1)
        rc = rc ? rc : ranks_group_own(w, &l, LAYOUT_EP, 1, &w->ep, &w->own_ep, diag);
    if (fold_experts) { /* the edp group, drawn from tp x cp x dp, holds every copy */
        rc = rc ? rc : ranks_group_own(w, &l, LAYOUT_EDP, 1, &w->xdp, &w->own_xdp, diag);
        if (l.size[LAYOUT_EP] > 1) w->edp = w->xdp;
    } else if (l.size[LAYOUT_EP] > 1) {
        rc = rc ? rc : ranks_group_own(w, &l, LAYOUT_EDP, 1, &w->edp, &w->own_edp, diag);
    }
    return rc;
}

void worker_ranks_leave(worker_ranks *w) {
    if (w->own_tp) comm_destroy(w->tp);
    if (w->own_dp) comm_destroy(w->dp);
    if (w->own_pp) comm_destroy(w->pp);
    if (w->own_cp) comm_destroy(w->cp);
    if (w->own_dpcp) comm_destroy(w->dpcp);
    if (w->own_ep) comm_destroy(w->ep);
    if (w->own_edp) comm_destroy(w->edp);
    if (w->own_xdp) comm_destroy(w->xdp);
    if (w->world != NULL) comm_destroy(w->world);
    if (w->under_pmix) boot_finalize(NULL);
    if (w->store[0] != '\0') worker_rdzv_remove(w->store);
    memset(w, 0, sizeof *w);
    w->device = -1;
}

int worker_ranks_check_topology(const worker_ranks *w, bt_diag *diag) {
    if (!w->under_pmix || w->tp == NULL) return 0;
    char first[256] = "", host[256];
    bt_buf hosts;
    bt_buf_init(&hosts);
    int spread = 0;
    for (int i = 0; i < comm_size(w->tp); i++) {
        int r = comm_global_rank(w->tp, i);
        if (boot_hostname_of(&w->info, r, host, sizeof host) != 0) snprintf(host, sizeof host, "?");
        if (i == 0) snprintf(first, sizeof first, "%s", host);
        spread |= strcmp(first, host) != 0;
        bt_buf_printf(&hosts, "%srank %d on %s", i ? ", " : "", r, host);
    }
    if (spread)
        bt_diag_set(diag,
                    "cluster.strict_topology: this rank's tensor-parallel group spans hosts (%s); "
                    "put TP inside a node (parallel.order, gpus_per_node)",
                    bt_buf_str(&hosts));
    bt_buf_free(&hosts);
    return spread ? BT_EINVAL : 0;
}
