/* The PMIx client side of the worker bootstrap (boot.h). PMIx keeps the connection in
 * process-global state; this file keeps none of its own: the caller's boot_info
 * carries the namespace, rank and size. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h> /* pmix_common.h uses strncasecmp without including it */

#include <pmix.h>

#include "boot.h"

/* Every PMIx key baton puts is "baton.<key>", apart from PMIx's reserved space. */
static int boot_key(const char *key, char out[PMIX_MAX_KEYLEN + 1], bt_diag *diag) {
    int n = snprintf(out, PMIX_MAX_KEYLEN + 1, "baton.%s", key != NULL ? key : "");
    if (key == NULL || key[0] == '\0' || n < 0 || n > PMIX_MAX_KEYLEN) {
        bt_diag_set(diag, "blob key '%s': must be 1..%d characters", key != NULL ? key : "",
                    PMIX_MAX_KEYLEN - 6);
        return BT_EINVAL;
    }
    return 0;
}

/* PMIx's timeout is whole seconds; 0 would mean "forever", so round up to at least 1. */
static int boot_seconds(double timeout_s) {
    if (!(timeout_s > 0)) return 1;
    if (timeout_s >= INT_MAX) return INT_MAX;
    return (int)ceil(timeout_s);
}

/* An integer value of any of the integer types launchers use for these keys. */
static int boot_value_int(const pmix_value_t *v, long long *out) {
    switch (v->type) {
    case PMIX_UINT8:
        *out = v->data.uint8;
        return 0;
    case PMIX_UINT16:
        *out = v->data.uint16;
        return 0;
    case PMIX_UINT32:
        *out = v->data.uint32;
        return 0;
    case PMIX_UINT64:
        *out = (long long)v->data.uint64;
        return 0;
    case PMIX_INT8:
        *out = v->data.int8;
        return 0;
    case PMIX_INT16:
        *out = v->data.int16;
        return 0;
    case PMIX_INT32:
        *out = v->data.int32;
        return 0;
    case PMIX_INT64:
        *out = v->data.int64;
        return 0;
    case PMIX_INT:
        *out = v->data.integer;
        return 0;
    case PMIX_UINT:
        *out = v->data.uint;
        return 0;
    case PMIX_SIZE:
        *out = (long long)v->data.size;
        return 0;
    case PMIX_PROC_RANK:
        *out = v->data.rank;
        return 0;
    default:
        return -1;
    }
}

/* key of proc (or of the job, rank PMIX_RANK_WILDCARD) as an int. A missing optional
 * key leaves *out at fallback. */
static int boot_get_int(const char *nspace, pmix_rank_t rank, const char *key, int required,
                        int fallback, int *out, bt_diag *diag) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, rank);
    pmix_value_t *v = NULL;
    *out = fallback;
    pmix_status_t rc = PMIx_Get(&proc, key, NULL, 0, &v);
    long long x = 0;
    int ok =
        rc == PMIX_SUCCESS && v != NULL && boot_value_int(v, &x) == 0 && x >= 0 && x <= INT_MAX;
    if (ok) *out = (int)x;
    if (v != NULL) PMIX_VALUE_RELEASE(v);
    if (ok || !required) return 0;
    bt_diag_set(diag, "PMIx_Get(%s) for %s: %s", key, nspace,
                rc == PMIX_SUCCESS ? "not an integer in 0..INT_MAX" : PMIx_Error_string(rc));
    return BT_EIO;
}

static void boot_get_hostname(const pmix_proc_t *me, boot_info *info) {
    pmix_value_t *v = NULL;
    if (PMIx_Get(me, PMIX_HOSTNAME, NULL, 0, &v) == PMIX_SUCCESS && v != NULL &&
        v->type == PMIX_STRING && v->data.string != NULL)
        snprintf(info->hostname, sizeof info->hostname, "%s", v->data.string);
    if (v != NULL) PMIX_VALUE_RELEASE(v);
}

int boot_hostname_of(const boot_info *info, int rank, char *out, size_t cap) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, info->nspace, (pmix_rank_t)rank);
    pmix_value_t *v = NULL;
    int rc = -1;
    if (PMIx_Get(&p, PMIX_HOSTNAME, NULL, 0, &v) == PMIX_SUCCESS && v != NULL &&
        v->type == PMIX_STRING && v->data.string != NULL) {
        snprintf(out, cap, "%s", v->data.string);
        rc = 0;
    }
    if (v != NULL) PMIX_VALUE_RELEASE(v);
    return rc;
}

/* PMIx_Init with the stop signals held: a client that dies between its connection request
 * and the server's reply leaves PMIx 4.2's server with a rank record released twice
 * (openpmix#3584), and the server's next namespace deregistration or registration then
 * deadlocks or crashes on the freed memory: no later attempt could start. A stop signal
 * that comes meanwhile ends (or reaches) the process just after, as a connected client,
 * whose loss the server handles. The threads PMIx starts keep them held: they are for
 * this, the main thread. */
static pmix_status_t boot_pmix_init(pmix_proc_t *me) {
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    sigaddset(&stop, SIGQUIT);
    int held = pthread_sigmask(SIG_BLOCK, &stop, &old) == 0;
    pmix_status_t rc = PMIx_Init(me, NULL, 0);
    if (held) pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int boot_init(boot_info *info, bt_diag *diag) {
    memset(info, 0, sizeof *info);
    pmix_proc_t me;
    pmix_status_t rc = boot_pmix_init(&me);
    if (rc != PMIX_SUCCESS) {
        bt_diag_set(diag,
                    "PMIx_Init failed: %s (was this process started by a PMIx launcher "
                    "such as baton launch, srun --mpi=pmix or mpirun?)",
                    PMIx_Error_string(rc));
        return BT_EIO;
    }
    snprintf(info->nspace, sizeof info->nspace, "%s", me.nspace);
    info->rank = (int)me.rank;
    const char *ns = me.nspace;
    int err = boot_get_int(ns, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, 1, 0, &info->size, diag);
    if (err == 0) err = boot_get_int(ns, me.rank, PMIX_LOCAL_RANK, 1, 0, &info->local_rank, diag);
    if (err == 0)
        err = boot_get_int(ns, PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE, 0, 1, &info->local_size, diag);
    if (err == 0)
        err =
            boot_get_int(ns, me.rank, PMIX_NODE_RANK, 0, info->local_rank, &info->node_rank, diag);
    if (err == 0) err = boot_get_int(ns, me.rank, PMIX_NODEID, 0, 0, &info->node_id, diag);
    if (err == 0)
        err = boot_get_int(ns, PMIX_RANK_WILDCARD, PMIX_NUM_NODES, 0, 1, &info->num_nodes, diag);
    if (err != 0) {
        PMIx_Finalize(NULL, 0);
        return err;
    }
    boot_get_hostname(&me, info);
    return 0;
}

int boot_put_blob(const boot_info *info, const char *key, const void *data, size_t len,
                  bt_diag *diag) {
    (void)info;
    char k[PMIX_MAX_KEYLEN + 1];
    int err = boot_key(key, k, diag);
    if (err != 0) return err;
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = (char *)data; /* PMIx_Put copies it */
    v.data.bo.size = len;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, k, &v);
    if (rc == PMIX_SUCCESS) return 0;
    bt_diag_set(diag, "PMIx_Put(%s, %zu bytes): %s", k, len, PMIx_Error_string(rc));
    return BT_EIO;
}

int boot_commit(bt_diag *diag) {
    pmix_status_t rc = PMIx_Commit();
    if (rc == PMIX_SUCCESS) return 0;
    bt_diag_set(diag, "PMIx_Commit: %s", PMIx_Error_string(rc));
    return BT_EIO;
}

int boot_fence(const boot_info *info, double timeout_s, bt_diag *diag) {
    pmix_proc_t all;
    PMIX_LOAD_PROCID(&all, info->nspace, PMIX_RANK_WILDCARD);
    bool collect = true;
    int secs = boot_seconds(timeout_s);
    pmix_info_t opts[2];
    PMIX_INFO_LOAD(&opts[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&opts[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(&all, 1, opts, 2);
    PMIX_INFO_DESTRUCT(&opts[0]);
    PMIX_INFO_DESTRUCT(&opts[1]);
    if (rc == PMIX_SUCCESS) return 0;
    if (rc == PMIX_ERR_TIMEOUT)
        bt_diag_set(diag,
                    "rank %d: fence over %d ranks timed out after %d s (a peer is stuck "
                    "or gone)",
                    info->rank, info->size, secs);
    else
        bt_diag_set(diag, "rank %d: fence over %d ranks failed: %s (a peer is gone)", info->rank,
                    info->size, PMIx_Error_string(rc));
    return BT_EIO;
}

static int boot_copy_blob(const pmix_value_t *v, const char *k, int rank, void *buf, size_t cap,
                          size_t *len, bt_diag *diag) {
    if (v->type != PMIX_BYTE_OBJECT) {
        bt_diag_set(diag, "blob %s of rank %d has PMIx type %s, not a byte object", k, rank,
                    PMIx_Data_type_string(v->type));
        return BT_EINVAL;
    }
    *len = v->data.bo.size;
    if (*len > cap) {
        bt_diag_set(diag, "blob %s of rank %d is %zu bytes; the buffer holds %zu", k, rank, *len,
                    cap);
        return BT_ERANGE;
    }
    if (*len > 0) memcpy(buf, v->data.bo.bytes, *len);
    return 0;
}

int boot_get_blob(const boot_info *info, int rank, const char *key, void *buf, size_t cap,
                  size_t *len, double timeout_s, bt_diag *diag) {
    *len = 0;
    char k[PMIX_MAX_KEYLEN + 1];
    int err = boot_key(key, k, diag);
    if (err != 0) return err;
    if (rank < 0 || rank >= info->size) {
        bt_diag_set(diag, "blob %s: rank %d; valid: 0..%d", k, rank, info->size - 1);
        return BT_ERANGE;
    }
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, info->nspace, (pmix_rank_t)rank);
    int secs = boot_seconds(timeout_s);
    pmix_info_t opt;
    PMIX_INFO_LOAD(&opt, PMIX_TIMEOUT, &secs, PMIX_INT);
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(&proc, k, &opt, 1, &v);
    PMIX_INFO_DESTRUCT(&opt);
    if (rc == PMIX_SUCCESS && v != NULL) err = boot_copy_blob(v, k, rank, buf, cap, len, diag);
    if (v != NULL) PMIX_VALUE_RELEASE(v);
    if (rc == PMIX_SUCCESS) return err;
    bt_diag_set(diag, "blob %s of rank %d: %s", k, rank, PMIx_Error_string(rc));
    return rc == PMIX_ERR_NOT_FOUND ? BT_ENOENT : BT_EIO;
}

int boot_abort(int status, const char *msg, bt_diag *diag) {
    pmix_status_t rc = PMIx_Abort(status, msg != NULL ? msg : "", NULL, 0);
    if (rc == PMIX_SUCCESS) return 0;
    bt_diag_set(diag, "PMIx_Abort(%d): %s", status, PMIx_Error_string(rc));
    return BT_EIO;
}

int boot_finalize(bt_diag *diag) {
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    if (rc == PMIX_SUCCESS) return 0;
    bt_diag_set(diag, "PMIx_Finalize: %s", PMIx_Error_string(rc));
    return BT_EIO;
}
