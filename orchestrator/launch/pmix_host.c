/* The embedded PMIx server: init, namespaces with their job/node/proc info, the server
 * module's callbacks, and parked fences.
 *
 * Rules this file keeps:
 * - PMIx calls the module from its progress thread and passes no user pointer, so the
 *   running server is reached through the one static pointer pmixhost_srv. It and
 *   every field the callbacks touch (nspaces, fences, the per-rank state) are guarded
 *   by the static pmixhost_lock, which outlives any caller-owned launch_server.
 * - No PMIx call that waits for PMIx's thread is made while holding pmixhost_lock:
 *   that thread may be blocked on the lock in a callback.
 * - Callbacks record, wake the stepping thread through srv->wake and return; every
 *   decision (killing ranks, answering fences) is made by the stepping thread.
 * - Every PMIx operation with a completion callback is waited for with a bound, and
 *   its wait record is reference-counted so a late callback never touches freed memory. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pmix.h>
#include <pmix_server.h>

#include "util/rmtree.h"
#include "launch_tmpdir.h"
#include "pmix_host.h"
#include "util/clock.h"
#include "util/buf.h"

/* How long a fence request is held before it is answered with success.
 *
 * Every client of this server is local and registered before it starts, so PMIx
 * completes fences by itself. It hands one to the host only when a participant's
 * connection is gone (it then stops counting that client as local), and handing back
 * the data as is would complete the fence with that rank's data missing. The lost
 * rank usually dies before we are called, but it can take a while to become
 * reapable: a PMIx client closes its socket early in exit(), and on a loaded 2-core
 * machine the rest of its exit can take long. So the fence is answered with an error
 * as soon as a participant is reaped or has called PMIx_Finalize, and with success
 * only if neither happened within the grace (which we have never seen). */
#define PMIXHOST_FENCE_GRACE_S 1.0
/* Bound on waiting for a PMIx completion callback (registration). */
#define PMIXHOST_OP_TIMEOUT_S 30.0
/* Bound on waiting for a namespace's deregistration at teardown. Nothing waits on its
 * outcome (the namespace is already unlinked, so a late callback finds nothing), and on a
 * loaded machine after killed ranks the server has been seen not to answer within 30 s:
 * the launcher then sat out the whole bound after the job had ended. */
#define PMIXHOST_DEREGISTER_TIMEOUT_S 3.0

typedef struct pmixhost_rank {
    unsigned char connected, finalized, terminated;
    unsigned char aborted, abort_taken;
    int abort_status;
    char abort_msg[256];
} pmixhost_rank;

typedef struct pmixhost_ns {
    struct pmixhost_ns *next;
    pmix_nspace_t name;
    int nprocs, nnodes;
    pmixhost_rank *ranks; /* nprocs */
} pmixhost_ns;

typedef struct pmixhost_fence {
    struct pmixhost_fence *next;
    pmix_proc_t *procs; /* participants (copied) */
    size_t nprocs;
    char *data; /* the local contribution (copied); handed back on success */
    size_t ndata;
    pmix_modex_cbfunc_t cbfunc;
    void *cbdata;
    double due;            /* when it is answered with success */
    pmix_status_t verdict; /* set when it is taken off the list */
} pmixhost_fence;

static pthread_mutex_t pmixhost_lock = PTHREAD_MUTEX_INITIALIZER;
static launch_server *pmixhost_srv; /* the running server, or NULL */

/* ---- small helpers ------------------------------------------------------------------ */

int pmixhost_node_size(int node, int nprocs, int nnodes) {
    return nprocs / nnodes + (node < nprocs % nnodes ? 1 : 0);
}

int pmixhost_node_first(int node, int nprocs, int nnodes) {
    int base = nprocs / nnodes, extra = nprocs % nnodes;
    return node * base + (node < extra ? node : extra);
}

int pmixhost_node_of(int rank, int nprocs, int nnodes) {
    int base = nprocs / nnodes, extra = nprocs % nnodes;
    int big = extra * (base + 1); /* ranks on the nodes that hold one more */
    return rank < big ? rank / (base + 1) : extra + (rank - big) / base;
}

static void pmixhost_wake(launch_server *srv) {
    char c = 1;
    /* The pipe is nonblocking: when it is full the stepping thread is due anyway. */
    if (write(srv->wake[1], &c, 1) < 0 && errno != EAGAIN) return;
}

static void pmixhost_trace(const launch_server *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void pmixhost_trace(const launch_server *srv, const char *fmt, ...) {
    if (srv == NULL || !srv->debug) return;
    /* One write per line: this runs on PMIx's thread while ranks' output is copied. */
    char line[512];
    int n = snprintf(line, sizeof line, "baton launch [pmix %.6f]: ", bt_clock_now());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(2, line, (size_t)n) < 0) return;
}

/* Lock held. */
static pmixhost_ns *pmixhost_find(launch_server *srv, const char *nspace) {
    if (srv == NULL) return NULL;
    for (pmixhost_ns *ns = srv->nspaces; ns != NULL; ns = ns->next)
        if (PMIX_CHECK_NSPACE(ns->name, nspace)) return ns;
    return NULL;
}

/* Lock held. The rank record of proc, or NULL when it is not one of ours. */
static pmixhost_rank *pmixhost_find_rank(const pmix_proc_t *proc) {
    pmixhost_ns *ns = pmixhost_find(pmixhost_srv, proc->nspace);
    if (ns == NULL || proc->rank >= (pmix_rank_t)ns->nprocs) return NULL;
    return &ns->ranks[proc->rank];
}

/* ---- waiting for PMIx completion callbacks ------------------------------------------ */

typedef struct pmixhost_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, refs;
    pmix_status_t status;
} pmixhost_wait;

static pmixhost_wait *pmixhost_wait_new(void) {
    pmixhost_wait *w = calloc(1, sizeof *w);
    if (w == NULL) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    bt_cond_init(&w->cv); /* bounded on the monotonic clock, whatever the wall clock does */
    w->refs = 2;          /* the waiter and the callback */
    return w;
}

static void pmixhost_wait_unref(pmixhost_wait *w) {
    pthread_mutex_lock(&w->mu);
    int left = --w->refs;
    pthread_mutex_unlock(&w->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}

static void pmixhost_wait_cb(pmix_status_t status, void *cbdata) {
    pmixhost_wait *w = cbdata;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pmixhost_wait_unref(w);
}

/* rc is what the PMIx call returned: anything but PMIX_SUCCESS means the callback will
 * not run (PMIX_OPERATION_SUCCEEDED: done already). */
static pmix_status_t pmixhost_wait_bounded(pmixhost_wait *w, pmix_status_t rc, double secs) {
    if (rc != PMIX_SUCCESS) {
        pmixhost_wait_unref(w); /* the callback's reference */
        pmixhost_wait_unref(w);
        return rc == PMIX_OPERATION_SUCCEEDED ? PMIX_SUCCESS : rc;
    }
    struct timespec until = bt_clock_deadline(secs);
    pthread_mutex_lock(&w->mu);
    int err = 0;
    while (!w->done && err != ETIMEDOUT)
        err = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    pmix_status_t st = w->done ? w->status : PMIX_ERR_TIMEOUT;
    pthread_mutex_unlock(&w->mu);
    pmixhost_wait_unref(w);
    return st;
}

static pmix_status_t pmixhost_wait_for(pmixhost_wait *w, pmix_status_t rc) {
    return pmixhost_wait_bounded(w, rc, PMIXHOST_OP_TIMEOUT_S);
}

/* ---- the server module --------------------------------------------------------------- */

static pmix_status_t pmixhost_on_connected(const pmix_proc_t *proc, void *server_object,
                                           pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object;
    pthread_mutex_lock(&pmixhost_lock);
    pmixhost_rank *r = pmixhost_find_rank(proc);
    if (r != NULL) r->connected = 1;
    pmixhost_trace(pmixhost_srv, "rank %u connected", proc->rank);
    pthread_mutex_unlock(&pmixhost_lock);
    if (cbfunc != NULL) cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
}

/* The client's PMIx_Finalize waits until cbfunc is called. */
static pmix_status_t pmixhost_on_finalized(const pmix_proc_t *proc, void *server_object,
                                           pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object;
    pthread_mutex_lock(&pmixhost_lock);
    pmixhost_rank *r = pmixhost_find_rank(proc);
    if (r != NULL) r->finalized = 1;
    pmixhost_trace(pmixhost_srv, "rank %u finalized", proc->rank);
    pthread_mutex_unlock(&pmixhost_lock);
    if (cbfunc != NULL) cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
}

/* Records the abort before releasing the client, so the record is visible before the
 * client can exit; the stepping thread then stops the whole job, whatever subset of
 * procs the client named. */
static pmix_status_t pmixhost_on_abort(const pmix_proc_t *proc, void *server_object, int status,
                                       const char msg[], pmix_proc_t procs[], size_t nprocs,
                                       pmix_op_cbfunc_t cbfunc, void *cbdata) {
    (void)server_object, (void)procs, (void)nprocs;
    pthread_mutex_lock(&pmixhost_lock);
    pmixhost_rank *r = pmixhost_find_rank(proc);
    if (r != NULL && !r->aborted) {
        r->aborted = 1;
        r->abort_status = status;
        snprintf(r->abort_msg, sizeof r->abort_msg, "%s", msg != NULL ? msg : "");
    }
    pmixhost_trace(pmixhost_srv, "rank %u aborted with status %d", proc->rank, status);
    if (pmixhost_srv != NULL) pmixhost_wake(pmixhost_srv);
    pthread_mutex_unlock(&pmixhost_lock);
    if (cbfunc != NULL) cbfunc(PMIX_SUCCESS, cbdata);
    return PMIX_SUCCESS;
}

static void pmixhost_fence_free(pmixhost_fence *f) {
    free(f->procs);
    free(f->data);
    free(f);
}

/* PMIx calls this when it is done with the data handed back. */
static void pmixhost_fence_release(void *cbdata) {
    pmixhost_fence_free(cbdata);
}

/* Parks the request; pmixhost_progress answers it (see PMIXHOST_FENCE_GRACE_S). */
static pmix_status_t pmixhost_on_fence(const pmix_proc_t procs[], size_t nprocs,
                                       const pmix_info_t info[], size_t ninfo, char *data,
                                       size_t ndata, pmix_modex_cbfunc_t cbfunc, void *cbdata) {
    (void)info, (void)ninfo;
    pmixhost_fence *f = calloc(1, sizeof *f);
    if (f == NULL) return PMIX_ERR_NOMEM;
    f->procs = malloc((nprocs ? nprocs : 1) * sizeof *procs);
    f->data = malloc(ndata ? ndata : 1);
    if (f->procs == NULL || f->data == NULL) {
        pmixhost_fence_free(f);
        return PMIX_ERR_NOMEM;
    }
    if (nprocs) memcpy(f->procs, procs, nprocs * sizeof *procs);
    if (ndata) memcpy(f->data, data, ndata);
    f->nprocs = nprocs;
    f->ndata = ndata;
    f->cbfunc = cbfunc;
    f->cbdata = cbdata;
    pthread_mutex_lock(&pmixhost_lock);
    launch_server *srv = pmixhost_srv;
    if (srv == NULL) {
        pthread_mutex_unlock(&pmixhost_lock);
        pmixhost_fence_free(f);
        return PMIX_ERR_NOT_AVAILABLE;
    }
    f->due = bt_clock_now() + srv->fence_grace_s;
    f->next = srv->fences;
    srv->fences = f;
    pmixhost_trace(srv, "fence over %zu proc(s), %zu bytes parked", nprocs, ndata);
    pmixhost_wake(srv);
    pthread_mutex_unlock(&pmixhost_lock);
    return PMIX_SUCCESS;
}

/* Every client is a client of this one server, so PMIx finds any committed data itself;
 * a request that reaches the host is for data no rank has. */
static pmix_status_t pmixhost_on_dmodex(const pmix_proc_t *proc, const pmix_info_t info[],
                                        size_t ninfo, pmix_modex_cbfunc_t cbfunc, void *cbdata) {
    (void)info, (void)ninfo, (void)cbfunc, (void)cbdata;
    pthread_mutex_lock(&pmixhost_lock);
    pmixhost_trace(pmixhost_srv, "direct modex for %s:%u: not found", proc->nspace, proc->rank);
    pthread_mutex_unlock(&pmixhost_lock);
    return PMIX_ERR_NOT_FOUND;
}

/* ---- fences ---------------------------------------------------------------------------- */

/* Lock held. LOST_CONNECTION when a participant is gone or finalized (it cannot be in
 * a fence) or a rank of a participating namespace died without finalizing (the job is
 * failing); SUCCESS when due; else 1 (keep waiting). */
static pmix_status_t pmixhost_fence_verdict(launch_server *srv, const pmixhost_fence *f,
                                            double now) {
    for (size_t i = 0; i < f->nprocs; i++) {
        const pmixhost_ns *ns = pmixhost_find(srv, f->procs[i].nspace);
        if (ns == NULL) return PMIX_ERR_LOST_CONNECTION; /* deregistered under it */
        pmix_rank_t want = f->procs[i].rank;
        for (int r = 0; r < ns->nprocs; r++) {
            const pmixhost_rank *pr = &ns->ranks[r];
            int participant = want == PMIX_RANK_WILDCARD || want == (pmix_rank_t)r;
            if ((participant && (pr->terminated || pr->finalized)) ||
                (pr->terminated && !pr->finalized))
                return PMIX_ERR_LOST_CONNECTION;
        }
    }
    return now >= f->due ? PMIX_SUCCESS : 1;
}

/* Lock held. Moves every fence that has a verdict onto *ready; returns the earliest
 * due time of those left, or 0. */
static double pmixhost_fences_take(launch_server *srv, double now, pmixhost_fence **ready) {
    double next = 0;
    pmixhost_fence **link = &srv->fences;
    while (*link != NULL) {
        pmixhost_fence *f = *link;
        pmix_status_t v = pmixhost_fence_verdict(srv, f, now);
        if (v == 1) {
            if (next == 0 || f->due < next) next = f->due;
            link = &f->next;
            continue;
        }
        *link = f->next;
        f->verdict = v;
        f->next = *ready;
        *ready = f;
    }
    return next;
}

static void pmixhost_fences_answer(launch_server *srv, pmixhost_fence *ready) {
    while (ready != NULL) {
        pmixhost_fence *f = ready;
        ready = f->next;
        pmixhost_trace(srv, "fence answered: %s", PMIx_Error_string(f->verdict));
        if (f->verdict == PMIX_SUCCESS)
            f->cbfunc(PMIX_SUCCESS, f->data, f->ndata, f->cbdata, pmixhost_fence_release, f);
        else
            f->cbfunc(f->verdict, NULL, 0, f->cbdata, pmixhost_fence_release, f);
    }
}

int pmixhost_progress(launch_server *srv, double now) {
    char sink[256];
    while (read(srv->wake[0], sink, sizeof sink) > 0) {
    }
    pmixhost_fence *ready = NULL;
    pthread_mutex_lock(&pmixhost_lock);
    double next = pmixhost_fences_take(srv, now, &ready);
    pthread_mutex_unlock(&pmixhost_lock);
    /* Answered outside the lock: the callback hands over to PMIx's thread. */
    pmixhost_fences_answer(srv, ready);
    if (next == 0) return -1;
    double ms = (next - now) * 1e3 + 1;
    return ms < 0 ? 0 : (int)ms;
}

/* ---- server init / close ------------------------------------------------------------- */

/* The server's hwloc topology needs the CPUs, not OpenCL devices or displays. Its OpenCL
 * plugin would load every OpenCL driver into baton (on a GPU node, initializing the GPU
 * driver), and a driver's dynamic TLS, left behind when the plugin is unloaded, made
 * LeakSanitizer's exit scan crash; its GL plugin opens X displays :0 to :9 at every
 * attempt (connects to /tmp/.X11-unix/X0-9 and 127.0.0.1:6000-6009: a surprise on a
 * login node, or in a firewall's log). HWLOC_COMPONENTS leaves both out of the discovery
 * (hwloc's syntax: names separated by commas, each excluded by a leading '-'), and
 * HWLOC_PLUGINS_BLACKLIST keeps their libraries (libOpenCL, libX11, libxcb) from loading
 * at all (plugin file names without .so). A user's own HWLOC_COMPONENTS is kept, and then
 * no plugin blacklisted, in case it asks for one of these. */
static void pmixhost_hwloc_env(void) {
    if (getenv("HWLOC_COMPONENTS") != NULL) return;
    setenv("HWLOC_COMPONENTS", "-opencl,-gl", 1);
    setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_opencl,hwloc_gl", 0);
}

static pmix_status_t pmixhost_server_start(launch_server *srv) {
    pmix_server_module_t module = {0};
    module.client_connected = pmixhost_on_connected;
    module.client_finalized = pmixhost_on_finalized;
    module.abort = pmixhost_on_abort;
    module.fence_nb = pmixhost_on_fence;
    module.direct_modex = pmixhost_on_dmodex;
    bool no = false;
    pmix_info_t info[5];
    PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, srv->tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, srv->tmpdir, PMIX_STRING);
    PMIX_INFO_LOAD(&info[2], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[3], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
    /* The server "is" node0: a single-node job then looks exactly like one on a host. */
    PMIX_INFO_LOAD(&info[4], PMIX_HOSTNAME, "node0", PMIX_STRING);
    pmixhost_hwloc_env();
    pmix_status_t rc = PMIx_server_init(&module, info, 5);
    for (int i = 0; i < 5; i++)
        PMIX_INFO_DESTRUCT(&info[i]);
    return rc;
}

int pmixhost_init(launch_server *srv, bt_diag *diag) {
    memset(srv, 0, sizeof *srv);
    srv->wake[0] = srv->wake[1] = -1;
    srv->lock_fd = -1;
    srv->fence_grace_s = PMIXHOST_FENCE_GRACE_S;
    srv->debug = getenv("BATON_LAUNCH_DEBUG") != NULL;
    /* PMIx cannot be initialized twice in a process, and is never finalized here. */
    if (PMIx_Initialized()) {
        bt_diag_set(diag, "a PMIx server or client is already running in this process; "
                          "one launch_server per process");
        return BT_EINVAL;
    }
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);
    setenv("PMIX_MCA_gds", "hash", 1);
    launch_tmpdir_sweep(); /* those of servers killed before they could */
    int rc = launch_tmpdir_make(srv->tmpdir, sizeof srv->tmpdir, &srv->lock_fd, diag);
    if (rc != 0) return rc;
    if (pipe2(srv->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        bt_diag_set(diag, "cannot create a pipe: %s", strerror(errno));
        rc = BT_EIO;
        goto error;
    }
    pthread_mutex_lock(&pmixhost_lock);
    pmixhost_srv = srv;
    pthread_mutex_unlock(&pmixhost_lock);
    pmix_status_t prc = pmixhost_server_start(srv);
    if (prc != PMIX_SUCCESS) {
        bt_diag_set(diag, "PMIx_server_init failed: %s", PMIx_Error_string(prc));
        rc = BT_EIO;
        goto error;
    }
    srv->started = 1;
    return 0;
error:
    pmixhost_close(srv);
    return rc;
}

void pmixhost_close(launch_server *srv) {
    pthread_mutex_lock(&pmixhost_lock);
    if (pmixhost_srv == srv) pmixhost_srv = NULL;
    pmixhost_fence *ready = srv->fences;
    srv->fences = NULL;
    pthread_mutex_unlock(&pmixhost_lock);
    for (pmixhost_fence *f = ready; f != NULL; f = f->next)
        f->verdict = PMIX_ERR_LOST_CONNECTION;
    pmixhost_fences_answer(srv, ready);
    for (int i = 0; i < 2; i++)
        if (srv->wake[i] >= 0) close(srv->wake[i]);
    srv->wake[0] = srv->wake[1] = -1;
    /* by the dir held, its name only while it still is that dir: never a squatter's */
    if (srv->tmpdir[0] != '\0' && srv->lock_fd >= 0)
        bt_rmtree_held(srv->tmpdir, srv->lock_fd, BT_RMTREE_DEPTH);
    srv->tmpdir[0] = '\0';
    if (srv->lock_fd >= 0) close(srv->lock_fd); /* after: no sweeper races the removal */
    srv->lock_fd = -1;
}

/* ---- namespaces -------------------------------------------------------------------- */

/* A comma-separated list of the ranks from..from+n-1, or node names. */
static void pmixhost_list(bt_buf *b, const char *prefix, int from, int n, char sep) {
    for (int i = 0; i < n; i++) {
        if (i) bt_buf_append(b, &sep, 1);
        bt_buf_printf(b, "%s%d", prefix, from + i);
    }
}

static pmix_status_t pmixhost_add_maps(void *list, const pmixhost_ns *ns) {
    bt_buf hosts, ppn;
    bt_buf_init(&hosts);
    bt_buf_init(&ppn);
    pmixhost_list(&hosts, "node", 0, ns->nnodes, ',');
    for (int k = 0; k < ns->nnodes; k++) {
        if (k) bt_buf_append(&ppn, ";", 1);
        pmixhost_list(&ppn, "", pmixhost_node_first(k, ns->nprocs, ns->nnodes),
                      pmixhost_node_size(k, ns->nprocs, ns->nnodes), ',');
    }
    char *node_regex = NULL, *proc_regex = NULL;
    pmix_status_t rc = hosts.oom || ppn.oom ? PMIX_ERR_NOMEM : PMIX_SUCCESS;
    if (rc == PMIX_SUCCESS) rc = PMIx_generate_regex(bt_buf_str(&hosts), &node_regex);
    if (rc == PMIX_SUCCESS) rc = PMIx_generate_ppn(bt_buf_str(&ppn), &proc_regex);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NODE_MAP, node_regex, PMIX_REGEX);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_PROC_MAP, proc_regex, PMIX_REGEX);
    free(node_regex);
    free(proc_regex);
    bt_buf_free(&hosts);
    bt_buf_free(&ppn);
    return rc;
}

/* Adds key -> (an info array built by fill) to list. */
static pmix_status_t pmixhost_add_array(void *list, const char *key, const pmixhost_ns *ns,
                                        int index,
                                        pmix_status_t (*fill)(void *, const pmixhost_ns *, int)) {
    void *sub = PMIx_Info_list_start();
    if (sub == NULL) return PMIX_ERR_NOMEM;
    pmix_data_array_t darray = {.type = PMIX_INFO}; /* filled by the convert */
    pmix_status_t rc = fill(sub, ns, index);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_convert(sub, &darray);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, key, &darray, PMIX_DATA_ARRAY);
    if (darray.array != NULL) PMIX_DATA_ARRAY_DESTRUCT(&darray);
    PMIx_Info_list_release(sub);
    return rc;
}

/* Node-level info of virtual node k: what a client asking about "its node" gets. */
static pmix_status_t pmixhost_fill_node(void *list, const pmixhost_ns *ns, int k) {
    uint32_t id = (uint32_t)k;
    uint32_t size = (uint32_t)pmixhost_node_size(k, ns->nprocs, ns->nnodes);
    pmix_rank_t first = (pmix_rank_t)pmixhost_node_first(k, ns->nprocs, ns->nnodes);
    char host[32];
    snprintf(host, sizeof host, "node%d", k);
    bt_buf peers;
    bt_buf_init(&peers);
    pmixhost_list(&peers, "", (int)first, (int)size, ',');
    pmix_status_t rc = peers.oom ? PMIX_ERR_NOMEM : PMIX_SUCCESS;
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NODEID, &id, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_HOSTNAME, host, PMIX_STRING);
    if (rc == PMIX_SUCCESS)
        rc = PMIx_Info_list_add(list, PMIX_LOCAL_PEERS, bt_buf_str(&peers), PMIX_STRING);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_LOCAL_SIZE, &size, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NODE_SIZE, &size, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_LOCALLDR, &first, PMIX_PROC_RANK);
    bt_buf_free(&peers);
    return rc;
}

/* Per-process info of rank r; PMIX_RANK must come first. */
static pmix_status_t pmixhost_fill_proc(void *list, const pmixhost_ns *ns, int r) {
    pmix_rank_t rank = (pmix_rank_t)r;
    int k = pmixhost_node_of(r, ns->nprocs, ns->nnodes);
    uint16_t local = (uint16_t)(r - pmixhost_node_first(k, ns->nprocs, ns->nnodes));
    uint32_t id = (uint32_t)k, app = 0;
    char host[32];
    snprintf(host, sizeof host, "node%d", k);
    pmix_status_t rc = PMIx_Info_list_add(list, PMIX_RANK, &rank, PMIX_PROC_RANK);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_LOCAL_RANK, &local, PMIX_UINT16);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NODE_RANK, &local, PMIX_UINT16);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_HOSTNAME, host, PMIX_STRING);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NODEID, &id, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_APPNUM, &app, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_APP_RANK, &rank, PMIX_PROC_RANK);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_GLOBAL_RANK, &rank, PMIX_PROC_RANK);
    return rc;
}

static pmix_status_t pmixhost_fill_job(void *list, const pmixhost_ns *ns) {
    uint32_t n = (uint32_t)ns->nprocs, k = (uint32_t)ns->nnodes;
    pmix_status_t rc = PMIx_Info_list_add(list, PMIX_UNIV_SIZE, &n, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_JOB_SIZE, &n, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_MAX_PROCS, &n, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_NUM_NODES, &k, PMIX_UINT32);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_add(list, PMIX_JOBID, ns->name, PMIX_STRING);
    if (rc == PMIX_SUCCESS) rc = pmixhost_add_maps(list, ns);
    for (int i = 0; rc == PMIX_SUCCESS && i < ns->nnodes; i++)
        rc = pmixhost_add_array(list, PMIX_NODE_INFO_ARRAY, ns, i, pmixhost_fill_node);
    for (int r = 0; rc == PMIX_SUCCESS && r < ns->nprocs; r++)
        rc = pmixhost_add_array(list, PMIX_PROC_INFO_ARRAY, ns, r, pmixhost_fill_proc);
    return rc;
}

static pmix_status_t pmixhost_register(pmixhost_ns *ns) {
    void *list = PMIx_Info_list_start();
    if (list == NULL) return PMIX_ERR_NOMEM;
    pmix_data_array_t info = {.type = PMIX_INFO}; /* filled by the convert */
    pmix_status_t rc = pmixhost_fill_job(list, ns);
    if (rc == PMIX_SUCCESS) rc = PMIx_Info_list_convert(list, &info);
    pmixhost_wait *w = rc == PMIX_SUCCESS ? pmixhost_wait_new() : NULL;
    if (rc == PMIX_SUCCESS && w == NULL) rc = PMIX_ERR_NOMEM;
    if (rc == PMIX_SUCCESS)
        rc = pmixhost_wait_for(w, PMIx_server_register_nspace(ns->name, ns->nprocs, info.array,
                                                              info.size, pmixhost_wait_cb, w));
    w = rc == PMIX_SUCCESS ? pmixhost_wait_new() : NULL;
    if (rc == PMIX_SUCCESS && w == NULL) rc = PMIX_ERR_NOMEM;
    if (rc == PMIX_SUCCESS)
        rc = pmixhost_wait_for(
            w, PMIx_server_setup_local_support(ns->name, NULL, 0, pmixhost_wait_cb, w));
    /* timed out: PMIx's thread may still read the array one day; left to it (a leak) */
    if (rc == PMIX_ERR_TIMEOUT) return rc;
    if (info.array != NULL) PMIX_DATA_ARRAY_DESTRUCT(&info);
    PMIx_Info_list_release(list);
    return rc;
}

/* Test hook: BATON_FAULT_PMIX_STUCK=N makes this process's Nth namespace registration
 * (1-based: its Nth job) time out at once, as a stuck PMIx thread's would after a wait. */
static int pmixhost_fault_stuck(const launch_server *srv) {
    const char *f = getenv("BATON_FAULT_PMIX_STUCK");
    return f != NULL && f[0] != '\0' && atoi(f) == srv->next_attempt;
}

int pmixhost_ns_register(launch_server *srv, const char *name, int nprocs, int nnodes,
                         pmixhost_ns **out, bt_diag *diag) {
    *out = NULL;
    pmixhost_ns *ns = calloc(1, sizeof *ns);
    if (ns != NULL) ns->ranks = calloc((size_t)nprocs, sizeof *ns->ranks);
    if (ns == NULL || ns->ranks == NULL) {
        if (ns != NULL) free(ns);
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    PMIX_LOAD_NSPACE(ns->name, name);
    ns->nprocs = nprocs;
    ns->nnodes = nnodes;
    /* stuck once, stuck for good: no second wait (the test hook stands in for one) */
    pmix_status_t rc =
        srv->wedged || pmixhost_fault_stuck(srv) ? PMIX_ERR_TIMEOUT : pmixhost_register(ns);
    if (rc != PMIX_SUCCESS) {
        if (rc == PMIX_ERR_TIMEOUT) { /* its progress thread is stuck: so is every later call */
            srv->wedged = 1;
            bt_diag_set(diag,
                        "cannot register PMIx namespace %s: the embedded PMIx server did not "
                        "answer in %d s (PMIx 4.2 can wedge after a rank is killed while it "
                        "connects, openpmix#3584); no job can start in this process: start it "
                        "afresh ('baton resume' for a run)",
                        name, (int)PMIXHOST_OP_TIMEOUT_S);
        } else {
            bt_diag_set(diag, "cannot register PMIx namespace %s: %s", name, PMIx_Error_string(rc));
            PMIx_server_deregister_nspace(ns->name, NULL, NULL);
        }
        free(ns->ranks);
        free(ns);
        return BT_EIO;
    }
    pthread_mutex_lock(&pmixhost_lock);
    ns->next = srv->nspaces;
    srv->nspaces = ns;
    pthread_mutex_unlock(&pmixhost_lock);
    *out = ns;
    return 0;
}

void pmixhost_ns_deregister(launch_server *srv, pmixhost_ns *ns) {
    if (ns == NULL) return;
    pthread_mutex_lock(&pmixhost_lock);
    for (pmixhost_ns **link = &srv->nspaces; *link != NULL; link = &(*link)->next)
        if (*link == ns) {
            *link = ns->next;
            break;
        }
    /* Its fences now see an unknown namespace and are answered with an error. */
    pmixhost_fence *ready = NULL;
    pmixhost_fences_take(srv, bt_clock_now(), &ready);
    pthread_mutex_unlock(&pmixhost_lock);
    pmixhost_fences_answer(srv, ready);
    pmixhost_wait *w = pmixhost_wait_new();
    if (w != NULL) {
        PMIx_server_deregister_nspace(ns->name, pmixhost_wait_cb, w);
        pmixhost_wait_bounded(w, PMIX_SUCCESS, PMIXHOST_DEREGISTER_TIMEOUT_S);
    }
    free(ns->ranks);
    free(ns);
}

/* ---- clients ---------------------------------------------------------------------------- */

void pmixhost_env_free(char **env) {
    if (env == NULL) return;
    for (char **e = env; *e != NULL; e++)
        free(*e);
    free(env);
}

/* A copy of base without inherited PMIx wiring (e.g. when we run under srun or another
 * launcher): those variables would point our clients at the wrong server. */
static char **pmixhost_env_copy(char *const *base) {
    size_t n = 0;
    while (base != NULL && base[n] != NULL)
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (env == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(base[i], "PMIX_", 5) == 0 && strncmp(base[i], "PMIX_MCA_", 9) != 0) continue;
        if ((env[k] = strdup(base[i])) == NULL) {
            pmixhost_env_free(env);
            return NULL;
        }
        k++;
    }
    return env;
}

/* Sets NAME=value in *env (NAME the text before '=' of `set`), replacing every entry of
 * that name; 0, or -1 out of memory. */
static int pmixhost_env_put(char ***env, const char *set) {
    size_t name = strcspn(set, "=") + 1, n = 0, put = 0;
    char **e = *env;
    for (; e[n] != NULL; n++)
        if (strncmp(e[n], set, name) == 0) {
            char *v = strdup(set);
            if (v == NULL) return -1;
            free(e[n]);
            e[n] = v, put = 1;
        }
    if (put) return 0;
    char **grown = realloc(e, (n + 2) * sizeof *e);
    if (grown == NULL) return -1;
    *env = grown;
    if ((grown[n] = strdup(set)) == NULL) return -1;
    grown[n + 1] = NULL;
    return 0;
}

int pmixhost_client_setup(launch_server *srv, pmixhost_ns *ns, int rank, char *const *base,
                          char ***env, bt_diag *diag) {
    (void)srv;
    *env = NULL;
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, ns->name, (pmix_rank_t)rank);
    char host[48];
    snprintf(host, sizeof host, "PMIX_HOSTNAME=node%d",
             pmixhost_node_of(rank, ns->nprocs, ns->nnodes));
    char **e = pmixhost_env_copy(base);
    pmixhost_wait *w = e != NULL ? pmixhost_wait_new() : NULL;
    if (w == NULL) {
        pmixhost_env_free(e);
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    pmix_status_t rc = pmixhost_wait_for(
        w, PMIx_server_register_client(&proc, getuid(), getgid(), NULL, pmixhost_wait_cb, w));
    if (rc == PMIX_SUCCESS) rc = PMIx_server_setup_fork(&proc, &e);
    /* PMIx clients take their host name from here, which places them on their node;
     * PMIx_server_setup_fork writes the server's own (node0) over it, so it comes after */
    if (rc == PMIX_SUCCESS && pmixhost_env_put(&e, host) != 0) rc = PMIX_ERR_NOMEM;
    if (rc != PMIX_SUCCESS) {
        pmixhost_env_free(e);
        bt_diag_set(diag, "cannot set up PMIx client %s:%d: %s", ns->name, rank,
                    PMIx_Error_string(rc));
        return BT_EIO;
    }
    *env = e;
    return 0;
}

/* ---- per-rank state for the stepping thread -------------------------------------------- */

void pmixhost_ns_mark_terminated(launch_server *srv, pmixhost_ns *ns, int rank) {
    pthread_mutex_lock(&pmixhost_lock);
    ns->ranks[rank].terminated = 1;
    pthread_mutex_unlock(&pmixhost_lock);
    (void)srv; /* the stepping thread runs pmixhost_progress after reaping */
}

void pmixhost_ns_rank_state(launch_server *srv, pmixhost_ns *ns, launch_rank *r) {
    (void)srv;
    pthread_mutex_lock(&pmixhost_lock);
    const pmixhost_rank *pr = &ns->ranks[r->rank];
    r->connected = pr->connected;
    r->finalized = pr->finalized;
    r->aborted = pr->aborted;
    if (pr->aborted) {
        r->abort_status = pr->abort_status;
        snprintf(r->abort_msg, sizeof r->abort_msg, "%s", pr->abort_msg);
    }
    pthread_mutex_unlock(&pmixhost_lock);
}

int pmixhost_ns_take_abort(launch_server *srv, pmixhost_ns *ns) {
    (void)srv;
    int found = -1;
    pthread_mutex_lock(&pmixhost_lock);
    for (int r = 0; r < ns->nprocs && found < 0; r++)
        if (ns->ranks[r].aborted && !ns->ranks[r].abort_taken) {
            ns->ranks[r].abort_taken = 1;
            found = r;
        }
    pthread_mutex_unlock(&pmixhost_lock);
    return found;
}
