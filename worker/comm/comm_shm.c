/* The shared-memory group (comm_shm.h): its segment, rounds, failures, and the parts of
 * the comm table that go to the transport (point to point, splits). */
#define _GNU_SOURCE
#include "comm_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "comm_gloo.h"
#include "comm_shm_impl.h"

enum { SHM_NAME = 64, SHM_SPINS = 200, SHM_SLICE_MS = 20 };

void shm_futex_wait(_Atomic uint32_t *w, uint32_t v, int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

void shm_futex_wake(_Atomic uint32_t *w) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* ---- failures ---------------------------------------------------------------------- */

/* Bumps and wakes every member's bell: whoever waits in point to point looks again. */
static void shm_wake_all(shm_head *h) {
    for (uint32_t p = 0; p < h->size; p++) {
        atomic_fetch_add(&h->member[p].bell, 1);
        shm_futex_wake(&h->member[p].bell);
    }
}

void shm_abort_segment(comm *c) {
    shm_head *h = shm_of(c)->head;
    uint32_t none = 0;
    atomic_compare_exchange_strong(&h->aborted, &none, (uint32_t)c->rank + 1);
    shm_futex_wake(&h->arrived);
    shm_wake_all(h);
}

/* Whether member p left or died (comm_shm_impl.h). It cannot be told (NULL) from EDEADLK
 * or a thread id from another pid namespace. */
const char *shm_member_gone(comm *c, int p) {
    static const char left[] = "left the group (destroyed it)";
    shm_member *m = &shm_of(c)->head->member[p];
    if (atomic_load(&m->left)) return left;
    int rc = pthread_mutex_trylock(&m->alive);
    if (rc == EOWNERDEAD) pthread_mutex_unlock(&m->alive); /* unrecoverable now, for all */
    if (rc == EOWNERDEAD || rc == ENOTRECOVERABLE)
        return "died (its process, or the thread that joined the group, ended)";
    if (rc != 0) return NULL;
    pthread_mutex_unlock(&m->alive); /* it unlocks only after setting left */
    return left;
}

/* A lost member that has not entered round k, if any: fails c naming it. */
static int shm_check_members(comm *c, uint32_t k, const char *op) {
    shm_head *h = shm_of(c)->head;
    for (int p = 0; p < c->size; p++) {
        if (p == c->rank || (int32_t)(atomic_load(&h->member[p].round) - k) >= 0) continue;
        const char *why = shm_member_gone(c, p);
        if (why != NULL)
            return comm_fail(c, BT_EIO, COMM_FAULT_PEER_LOST, op, "peer %d (global %d) %s", p,
                             c->members[p], why);
    }
    return 0;
}

static int shm_fail_timeout(comm *c, uint32_t k, const char *op) {
    shm_head *h = shm_of(c)->head;
    char who[512] = "";
    size_t n = 0;
    for (int p = 0; p < c->size && n < sizeof who - 32; p++)
        if ((int32_t)(atomic_load(&h->member[p].round) - k) < 0)
            n += (size_t)snprintf(who + n, sizeof who - n, "%s%d (global %d)", n ? ", " : "", p,
                                  c->members[p]);
    return comm_fail(c, BT_EIO, COMM_FAULT_TIMEOUT, op,
                     "timed out after %d ms waiting for peer(s) %s (hung or stopped)",
                     c->timeout_ms, who);
}

/* The segment was aborted by another member: a lost member it names, else the abort. */
static int shm_fail_aborted(comm *c, uint32_t k, const char *op, uint32_t by) {
    int rc = shm_check_members(c, k, op);
    if (rc != 0) return rc;
    int p = (int)by - 1;
    return comm_fail(c, BT_EIO, COMM_FAULT_PEER_LOST, op,
                     "peer %d (global %d) aborted the group after a failure", p, c->members[p]);
}

/* ---- rounds ------------------------------------------------------------------------ */

static int shm_done(shm_head *h, uint32_t target) {
    return (int32_t)(atomic_load_explicit(&h->arrived, memory_order_acquire) - target) >= 0;
}

static int shm_wait(comm *c, uint32_t k, uint32_t target, const char *op) {
    shm_head *h = shm_of(c)->head;
    for (int i = 0; i < SHM_SPINS; i++)
        if (shm_done(h, target)) return 0;
    const double deadline = shm_now_ms() + c->timeout_ms;
    for (int slices = 0;; slices++) {
        uint32_t v = atomic_load_explicit(&h->arrived, memory_order_acquire);
        if ((int32_t)(v - target) >= 0) return 0;
        uint32_t by = atomic_load(&h->aborted);
        if (by != 0) return shm_fail_aborted(c, k, op, by);
        int rc = slices > 0 ? shm_check_members(c, k, op) : 0;
        double left = deadline - shm_now_ms();
        if (rc == 0 && left <= 0) rc = shm_fail_timeout(c, k, op);
        if (rc != 0) return rc;
        shm_futex_wait(&h->arrived, v, left < SHM_SLICE_MS ? (int)left + 1 : SHM_SLICE_MS);
    }
}

int shm_round(comm *c, const char *op) {
    shm_impl *s = shm_of(c);
    shm_head *h = s->head;
    uint32_t k = ++s->round, target = k * (uint32_t)c->size;
    atomic_store_explicit(&h->member[c->rank].round, k, memory_order_release);
    uint32_t now = atomic_fetch_add_explicit(&h->arrived, 1, memory_order_acq_rel) + 1;
    if (now == target) {
        shm_futex_wake(&h->arrived);
        return 0;
    }
    int rc = shm_wait(c, k, target, op);
    if (rc != 0) {
        shm_abort_segment(c);
        comm_abort(s->inner);
    }
    return rc;
}

/* ---- the transport's part ------------------------------------------------------------ */

/* Takes the transport's error over after one of its operations failed. */
static int shm_inner_failed(comm *c, int rc) {
    comm *in = shm_of(c)->inner;
    if (c->err != 0) return c->err;
    snprintf(c->msg, sizeof c->msg, "%s", in->msg);
    c->fault = in->fault;
    if (in->fault != COMM_FAULT_USAGE) {
        c->err = rc;
        shm_abort_segment(c);
    }
    return rc;
}

static int shm_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream) {
    if (shm_of(c)->ring > 0) return shm_p2p_channels(c, ops, n);
    comm *in = shm_of(c)->inner;
    uint64_t before = in->bytes_sent;
    comm_set_timeout_ms(in, c->timeout_ms);
    int rc = comm_p2p(in, ops, n, stream);
    c->bytes_sent += in->bytes_sent - before;
    return rc == 0 ? 0 : shm_inner_failed(c, rc);
}

static int shm_wait_op(comm *c, void *stream) {
    (void)stream;
    return c->err;
}

static void shm_abort(comm *c);

static int shm_split(comm *c, const int *parent_ranks, int n, const char *name, comm **out) {
    int *global = malloc((size_t)n * sizeof *global);
    uint32_t *ranks = malloc((size_t)n * sizeof *ranks);
    int rc = global && ranks ? 0 : BT_ENOMEM;
    if (rc == 0) {
        comm_split_members(c, parent_ranks, n, global);
        for (int i = 0; i < n; i++)
            ranks[i] = (uint32_t)global[i];
        comm *in = shm_of(c)->inner, *sub = NULL;
        comm_set_timeout_ms(in, c->timeout_ms);
        rc = comm_split(in, ranks, (uint32_t)n, name, &sub);
        if (rc != 0) { /* the transport's split, or the parent failed meanwhile: its error */
            comm_destroy(sub), sub = NULL;
            rc = shm_inner_failed(c, rc);
        } else if ((rc = comm_shm_wrap(&sub)) != 0) { /* the new group's first collectives */
            rc = comm_fail(c, rc, comm_fault_of(sub), "split", "group '%s': %s", name ? name : "?",
                           sub->msg[0] ? sub->msg : bt_strerror(rc));
            shm_abort(c);
            comm_destroy(sub), sub = NULL;
        }
        *out = sub;
    }
    free(global);
    free(ranks);
    return rc;
}

static void shm_abort(comm *c) {
    shm_abort_segment(c);
    comm_abort(shm_of(c)->inner);
}

static void shm_unmap(shm_impl *s, int rank) {
    if (s->head == NULL) return;
    if (s->holds_alive) {
        atomic_store(&s->head->member[rank].left, 1);
        pthread_mutex_unlock(&s->head->member[rank].alive);
        shm_wake_all(s->head); /* peers waiting on it look now */
    }
    munmap(s->head, s->map_len);
    s->head = NULL;
}

/* The transport first: its goodbyes reach peers that have not noticed this member leave
 * yet (one that noticed, destroyed its own group and closed could hold a goodbye up to a
 * second); then the segment says it left. */
static void shm_destroy(comm *c) {
    shm_impl *s = shm_of(c);
    comm_destroy(s->inner);
    shm_unmap(s, c->rank);
    shm_p2p_free(c);
    free(s);
    c->impl = NULL;
}

static const comm_ops shm_ops = {
    .name = "shm",
    .streams = 0,
    .allreduce = shm_allreduce,
    .reduce = shm_reduce,
    .reduce_scatter = shm_reduce_scatter,
    .allgather = shm_allgather,
    .alltoall = shm_alltoall,
    .alltoallv = shm_alltoallv,
    .broadcast = shm_broadcast,
    .barrier = shm_barrier,
    .p2p = shm_p2p,
    .wait = shm_wait_op,
    .set_stream = NULL,
    .split = shm_split,
    .abort = shm_abort,
    .destroy = shm_destroy,
};

/* ---- the segment --------------------------------------------------------------------- */

size_t shm_slot_bytes(int size) {
    const char *t = getenv("BATON_COMM_SHM_SLOT");
    size_t b =
        t ? (size_t)strtoull(t, NULL, 10) & ~(size_t)7 : ((size_t)4 << 20) / (2 * (size_t)size);
    if (t) return b < 8 * (size_t)size ? 8 * (size_t)size : b;
    /* a multiple of 64: every slot starts aligned for any element type (4 MB over 12
     * members is 174762 bytes, which left odd members' floats at 2-byte offsets) */
    b &= ~(size_t)63;
    return b > ((size_t)256 << 10) ? (size_t)256 << 10 : b < (16 << 10) ? 16 << 10 : b;
}

size_t shm_ring_bytes(int size) {
    if (size < 2 || size > 16) return 0;
    const char *t = getenv("BATON_COMM_SHM_RING");
    size_t want =
        t ? (size_t)strtoull(t, NULL, 10) : ((size_t)1 << 20) / ((size_t)size * (size_t)(size - 1));
    if (want == 0) return 0;
    size_t b = 64;
    while (b * 2 <= want && b < ((size_t)512 << 10))
        b *= 2;
    return t || b >= (4 << 10) ? b : 4 << 10;
}

/* The header and members, the slots at data_off, the channels at chans_off. */
static size_t shm_layout(int size, size_t *data_off, size_t *chans_off) {
    size_t head = sizeof(shm_head) + (size_t)size * sizeof(shm_member);
    *data_off = (head + 4095) & ~(size_t)4095;
    *chans_off = (*data_off + 2 * (size_t)size * shm_slot_bytes(size) + 63) & ~(size_t)63;
    size_t ring = shm_ring_bytes(size);
    size_t chans = ring ? (size_t)size * (size_t)(size - 1) * (sizeof(shm_chan) + ring) : 0;
    return *chans_off + chans;
}

static int shm_map(shm_impl *s, int fd, int size) {
    size_t off, chans, len = shm_layout(size, &off, &chans);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return -1;
    s->head = p;
    s->data = (unsigned char *)p + off;
    s->slot = shm_slot_bytes(size);
    s->chans = (unsigned char *)p + chans;
    s->ring = shm_ring_bytes(size);
    s->map_len = len;
    return 0;
}

static int shm_init_head(shm_head *h, int size) {
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    rc = rc ? rc : pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    rc = rc ? rc : pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    for (int p = 0; rc == 0 && p < size; p++)
        rc = pthread_mutex_init(&h->member[p].alive, &a);
    pthread_mutexattr_destroy(&a);
    h->size = (uint32_t)size;
    h->slot_bytes = (uint32_t)shm_slot_bytes(size);
    h->ring_bytes = (uint32_t)shm_ring_bytes(size);
    return rc;
}

/* Why the last segment could not be made (rank 0 of its group), until
 * comm_shm_fallback_take hands it on: process state, as the groups fall back silently. */
static pthread_mutex_t shm_why_lock = PTHREAD_MUTEX_INITIALIZER;
static char shm_why[384];

static void shm_why_set(const char *name, size_t len, const char *what, int err) {
    char extra[96] = "";
    struct rlimit rl;
    struct statvfs v;
    if (err == EFBIG && getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(extra, sizeof extra, " (the file-size limit, ulimit -f, is %llu KB)",
                 (unsigned long long)(rl.rlim_cur / 1024));
    else if (err == ENOSPC && statvfs("/dev/shm", &v) == 0)
        snprintf(extra, sizeof extra, " (%.1f MB free)",
                 (double)v.f_bavail * (double)v.f_frsize / 1048576.0);
    pthread_mutex_lock(&shm_why_lock);
    snprintf(shm_why, sizeof shm_why, "/dev/shm%s: cannot %s %.1f MB: %s%s", name, what,
             (double)len / 1048576.0, strerror(err), extra);
    pthread_mutex_unlock(&shm_why_lock);
}

int comm_shm_fallback_take(char *out, size_t cap) {
    pthread_mutex_lock(&shm_why_lock);
    int any = shm_why[0] != '\0';
    if (any) snprintf(out, cap, "%s", shm_why);
    shm_why[0] = '\0';
    pthread_mutex_unlock(&shm_why_lock);
    return any;
}

/* Rank 0: a fresh object under a random name, its space reserved (so that a full
 * /dev/shm is an error here, not a SIGBUS later). name is "" on failure, the cause kept
 * for comm_shm_fallback_take. The process's first one sweeps the dead processes' stale
 * ones first: those older than COMM_SHM_SWEEP_AGE_S, or twice the group's timeout where
 * that is longer (a group forms within its timeout). A reservation past the file-size
 * limit fails with EFBIG where SIGXFSZ is ignored (baton-worker ignores it); one that
 * kills the process instead leaves the object to the sweep. */
static void shm_create(shm_impl *s, int size, int timeout_ms, char name[SHM_NAME]) {
    static int swept;
    double age = 2.0 * timeout_ms / 1000;
    if (!__atomic_exchange_n(&swept, 1, __ATOMIC_ACQ_REL))
        comm_shm_sweep(age > COMM_SHM_SWEEP_AGE_S ? age : COMM_SHM_SWEEP_AGE_S);
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r ^= (uint64_t)shm_now_ms();
    snprintf(name, SHM_NAME, "/baton-comm-%d-%016llx", (int)getpid(), (unsigned long long)r);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    size_t off, chans, len = shm_layout(size, &off, &chans);
    int err = fd >= 0 ? 0 : errno;
    const char *what = "create a segment of";
    if (err == 0 && (err = posix_fallocate(fd, 0, (off_t)len)) != 0) what = "reserve";
    if (err == 0 && shm_map(s, fd, size) != 0) err = errno, what = "map";
    int ok = err == 0 && shm_init_head(s->head, size) == 0;
    if (fd >= 0) close(fd);
    if (!ok) {
        if (err != 0) shm_why_set(name, len, what, err);
        if (s->head != NULL) munmap(s->head, s->map_len), s->head = NULL;
        if (fd >= 0) shm_unlink(name);
        name[0] = '\0';
    }
}

static int shm_open_existing(shm_impl *s, const char *name, int size) {
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int rc = shm_map(s, fd, size);
    close(fd);
    if (rc == 0 && (s->head->size != (uint32_t)size || s->head->slot_bytes != s->slot ||
                    s->head->ring_bytes != s->ring)) {
        munmap(s->head, s->map_len);
        s->head = NULL;
        rc = -1;
    }
    return rc;
}

static int shm_disabled(void) {
    const char *v = getenv("BATON_COMM_SHM");
    return v != NULL && strcmp(v, "0") == 0;
}

/* Every member maps the segment rank 0 created and holds its alive mutex; then rank 0
 * removes the name. 0 with s mapped, 1 when some member could not (s unmapped), or the
 * transport's error. */
static int shm_join(comm *in, shm_impl *s) {
    char name[SHM_NAME] = "";
    if (in->rank == 0) shm_create(s, in->size, in->timeout_ms, name);
    int rc = comm_broadcast(in, name, sizeof name, COMM_BYTE, 0, NULL);
    if (rc != 0 || name[0] == '\0') {
        if (s->head != NULL) munmap(s->head, s->map_len), s->head = NULL;
        return rc != 0 ? rc : 1;
    }
    int bad = in->rank != 0 && shm_open_existing(s, name, in->size) != 0;
    if (!bad) bad = pthread_mutex_lock(&s->head->member[in->rank].alive) != 0;
    s->holds_alive = !bad;
    float any = (float)bad;
    rc = comm_allreduce(in, &any, &any, 1, COMM_F32, COMM_MAX, NULL);
    if (in->rank == 0) shm_unlink(name);
    if (rc == 0 && any == 0) return 0;
    s->holds_alive = 0; /* no member ran a round: nobody needs to tell it left */
    if (!bad) pthread_mutex_unlock(&s->head->member[in->rank].alive);
    if (s->head != NULL) munmap(s->head, s->map_len), s->head = NULL;
    return rc != 0 ? rc : 1;
}

int comm_shm_wrap(comm **c) {
    comm *in = *c;
    if (in->size == 1 || in->size > SHM_MAX_MEMBERS || shm_disabled() || in->ops == &shm_ops)
        return 0;
    shm_impl *s = calloc(1, sizeof *s);
    if (s == NULL)
        return comm_fail(in, BT_ENOMEM, COMM_FAULT_INTERNAL, "shm setup", "out of memory");
    int rc = shm_join(in, s);
    if (rc != 0) {
        free(s);
        return rc < 0 ? rc : 0;
    }
    s->inner = in;
    comm *out = NULL;
    rc = comm_create(&shm_ops, s, in->rank, in->size, in->members, in->name, in->timeout_ms, &out);
    if (rc != 0) {
        shm_unmap(s, in->rank);
        free(s);
        return comm_fail(in, rc, COMM_FAULT_INTERNAL, "shm setup", "out of memory");
    }
    *c = out;
    return 0;
}

int comm_shm_p2p(const comm *c) {
    return c != NULL && c->ops == &shm_ops && shm_of(c)->ring > 0;
}

int comm_cpu_init(comm **out, const comm_bootstrap *bs, bt_diag *diag) {
    int rc = comm_gloo_init(out, bs, diag);
    if (rc != 0) return rc;
    rc = comm_shm_wrap(out);
    if (rc != 0) {
        bt_diag_set(diag, "%s", comm_error(*out));
        comm_destroy(*out);
        *out = NULL;
    }
    return rc;
}
