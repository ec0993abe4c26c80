/* The NCCL backend's watchdog bookkeeping (comm_nccl.c), apart from CUDA so that its
 * timing rule is tested on the CPU (tests/unit/test_comm_watch.c).
 *
 * Why a collective's clock does not start at its enqueue. A collective enqueued on a
 * CUDA stream runs only once the work queued ahead of it there (compute, copies, other
 * collectives) has finished. A deadline counted from the enqueue counts that work too:
 * with a short --comm-timeout, or a step whose queued compute outlasts the 60 s default,
 * a healthy run would be aborted. So each collective carries two markers (CUDA events in
 * comm_nccl.c), `ready`, recorded on its stream just before it, and `done`, just after;
 * the watchdog polls them, and the collective's clock starts when its ready marker is
 * first seen reached: the work ahead of it has finished and it runs, waiting for its
 * peers. It has expired when its timeout has passed on that clock without `done` being
 * reached. A clock can only start late (at the first poll after the work ahead
 * finished), which lengthens a limit, never shortens it.
 *
 * When the clock runs. Not from the enqueue, nor from when a wait for the collective
 * begins: from the first poll, by any wait of the process, after its ready marker is
 * reached. So a collective that nobody waits for yet still runs its clock while the host
 * does other work: a pipeline send posted early and waited for only when its buffer is
 * written again, or a data-parallel reduction overlapped with the backward and waited
 * for at the step's end, expires when its peers do not take part within the timeout,
 * even though the wait that reports it comes later. And only the work queued ahead of
 * it on this rank is discounted: a collective also waits for its peers to reach it, and
 * a peer's own queued compute counts. A pipeline stage's receive whose sender is still
 * computing (stage 1 waiting on stage 0's long forward) expires when that compute
 * outlasts the timeout; the timeout must cover the longest stretch a peer may be busy
 * before it reaches the collective.
 *
 * Why a hung collective cannot hide behind that wait. Say collective A hangs (a peer is
 * dead) and a later collective B is queued behind it, on A's stream or on one made to
 * wait for it: B's ready marker is never reached, so B's clock never starts. But A's own
 * ready marker was reached (A runs), so A's clock has been running since, and every wait
 * of the process's groups polls every collective the process has in flight (the list is
 * shared by the groups of one NCCL root), whatever its stream or group: the wait for B
 * ends when A's time is up, naming A. What is not a collective has no deadline here:
 * compute does not wait for peers, and a kernel that never ends is the supervisor's to
 * catch (restart.heartbeat_timeout).
 *
 * Slots. A finished collective's slot is freed and reused with its markers: markers are
 * made once per slot (by the caller, at its first use), not once per collective. Each
 * use of a slot has its own generation: arm and drop name the slot and the generation
 * add gave, so that a caller whose slot was freed meanwhile (its group aborted) and
 * reused by another collective leaves that one alone.
 *
 * Polling cost. A wait spins on its own stream; polling every other collective on each
 * spin would add a lock and event queries per slot to every synchronous collective, so
 * comm_watch_due lets a poll through at most once per COMM_WATCH_POLL_MS (deadlines
 * are seconds). Not thread-safe: the caller locks around every call. */
#ifndef BATON_COMM_WATCH_H
#define BATON_COMM_WATCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a collective's markers say when polled. */
typedef enum comm_watch_state {
    COMM_WATCH_QUEUED = 0,  /* ready not reached: work ahead of it still runs */
    COMM_WATCH_RUNNING = 1, /* ready reached, done not */
    COMM_WATCH_DONE = 2,    /* done reached */
} comm_watch_state;

typedef struct comm_watch_op {
    void *ready, *done; /* the caller's markers; NULL until it makes them, then kept */
    const void *owner;  /* the group that enqueued it (NULL: a free slot) */
    uint64_t gen;       /* this use of the slot (comm_watch_add's count) */
    int64_t started_ms; /* when first seen running; -1 before */
    int armed;          /* 0 until both markers are recorded: polls skip it */
    int timeout_ms;
    char what[128]; /* the operation and its group, for messages */
} comm_watch_op;

typedef struct comm_watch {
    comm_watch_op *ops; /* (n) live and free slots */
    int n;
    uint64_t gen;         /* the last generation given */
    int64_t next_poll_ms; /* comm_watch_due: the earliest time of the next poll */
} comm_watch;

/* The least time between two polls let through by comm_watch_due. */
enum { COMM_WATCH_POLL_MS = 1 };

/* The rule for one collective whose markers say `seen` at now_ms: its clock starts the
 * first time it is seen running (or done); returns 1 when it is running and timeout_ms
 * have passed on its clock, else 0. */
int comm_watch_expired(comm_watch_op *op, comm_watch_state seen, int64_t now_ms);

/* A slot for a collective of owner (not NULL), not armed, its clock not started: a free
 * slot with its markers if there is one, else a new one with none. Returns its index or
 * BT_ENOMEM, and sets *gen to this use's generation. Indices stay valid until the slot
 * is dropped; pointers into w->ops only until the next add. The caller records `ready`,
 * enqueues the collective, records `done`, then arms the slot (until then a marker may
 * still say what its last use recorded, so polls leave the slot alone). */
int comm_watch_add(comm_watch *w, const void *owner, int timeout_ms, const char *what,
                   uint64_t *gen);

/* 1 when w has a free slot (an add then makes no new one), else 0. */
int comm_watch_has_free(const comm_watch *w);

/* Slot i's markers are recorded: polls follow it from now on. Nothing when slot i is
 * not live in generation gen, or already armed. */
void comm_watch_arm(comm_watch *w, int i, uint64_t gen);

/* Frees slot i (its markers kept for the next add); nothing when it is not live in
 * generation gen. */
void comm_watch_drop(comm_watch *w, int i, uint64_t gen);

/* Frees every slot of owner (a group being destroyed). */
void comm_watch_drop_owner(comm_watch *w, const void *owner);

/* Sets *seen to what op's markers say now; returns 0, or a negative code to fail the
 * poll with. */
typedef int (*comm_watch_probe)(void *ctx, const comm_watch_op *op, comm_watch_state *seen);

/* One poll of every live slot at now_ms: the done ones freed, clocks started. *expired:
 * the index of the expired collective whose clock started first (the longest running),
 * or -1. Returns 0 or the probe's code (then *expired is -1). */
int comm_watch_poll(comm_watch *w, int64_t now_ms, comm_watch_probe probe, void *ctx, int *expired);

/* 1 when a wait's poll of every collective is due at now_ms (COMM_WATCH_POLL_MS since
 * the last one let through; a fresh list's first always is), and then counts it as the last;
 * else 0. */
int comm_watch_due(comm_watch *w, int64_t now_ms);

/* Releases every slot's markers (release(marker) for each non-NULL one) and the list. */
void comm_watch_free(comm_watch *w, void (*release)(void *marker));

#ifdef __cplusplus
}
#endif

#endif
