/* A race detector for the engine's queues, for tests that run without a GPU: vector
 * clocks per queue (0 the ops' queue, 1.. side queues), advanced the way CUDA streams and
 * events order work, checked at every recorded access.
 *  - race_wait(waiter, waitee): the waiter's later work follows everything the waitee
 *    holds now (backend.h stream_wait: an event recorded on the waitee, waited for).
 *  - race_host_wait(q): the host waited until queue q is done (comm_wait): everything any
 *    queue gets from the host afterwards follows q's work.
 *  - race_touch(q, p, n, write): queue q reads or writes floats [p, p + n); an access
 *    that conflicts with an earlier one of another queue (overlapping floats, one of the
 *    two a write) must follow it, else it is a race.
 *  - race_collective(q): a collective of one group issued on queue q must follow the
 *    group's previous one (NCCL runs a communicator's operations in issue order).
 *  - the ops' queue may wait for a side queue by an event only after the host has waited
 *    for that side queue (else a host sync on the ops' queue could hang without a
 *    deadline on a collective that never ends): race_wait counts the others.
 * Only accesses inside the regions registered with race_region are recorded. */
#ifndef BATON_TEST_RACE_H
#define BATON_TEST_RACE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { RACE_NQ = 4, RACE_REGIONS = 16, RACE_RECS = 1 << 12 };

typedef struct race_access {
    int q, write;
    uint32_t at;            /* the access's event on its queue */
    uint32_t seen[RACE_NQ]; /* the events of each queue it follows */
    size_t lo, hi;          /* floats of its region */
} race_access;

typedef struct race {
    uint32_t vc[RACE_NQ][RACE_NQ]; /* vc[q][r]: events of r that q's next event follows */
    uint32_t host[RACE_NQ];        /* events of each queue the host has waited for */
    const float *base[RACE_REGIONS];
    size_t len[RACE_REGIONS];
    int n_regions;
    race_access recs[RACE_REGIONS][RACE_RECS];
    int n_recs[RACE_REGIONS];
    race_access last_collective;
    int races, disorders, unbounded, accesses;
} race;

static inline void race_reset(race *r) {
    memset(r, 0, sizeof *r);
}

/* Returns 0, or -1 when the table is full (a test that needs more must say so). */
static inline int race_region(race *r, const float *base, size_t n) {
    if (r->n_regions == RACE_REGIONS) return -1;
    r->base[r->n_regions] = base, r->len[r->n_regions++] = n;
    return 0;
}

static inline race_access race_event(race *r, int q, int write) {
    race_access a = {.q = q, .write = write, .at = ++r->vc[q][q]};
    memcpy(a.seen, r->vc[q], sizeof a.seen);
    return a;
}

static inline void race_touch(race *r, int q, const float *p, size_t n, int write) {
    for (int b = 0; b < r->n_regions; b++) {
        if (p < r->base[b] || p >= r->base[b] + r->len[b]) continue;
        race_access a = race_event(r, q, write);
        a.lo = (size_t)(p - r->base[b]), a.hi = a.lo + n;
        for (int i = 0; i < r->n_recs[b]; i++) {
            const race_access *e = &r->recs[b][i];
            if (e->q == q || !(write || e->write) || a.seen[e->q] >= e->at || a.hi <= e->lo ||
                e->hi <= a.lo)
                continue;
            if (r->races++ < 5)
                fprintf(stderr, "race in region %d [%zu, %zu): queue %d %s after queue %d %s\n", b,
                        a.lo, a.hi, q, write ? "writes" : "reads", e->q,
                        e->write ? "wrote" : "read");
        }
        if (r->n_recs[b] < RACE_RECS)
            r->recs[b][r->n_recs[b]++] = a;
        else if (r->races++ < 5) /* unchecked from here: fail rather than pass blind */
            fprintf(stderr, "region %d: more than %d accesses recorded\n", b, RACE_RECS);
        r->accesses++;
        return;
    }
}

static inline void race_collective(race *r, int q) {
    race_access a = race_event(r, q, 1);
    const race_access *e = &r->last_collective;
    if (e->at > 0 && e->q != q && a.seen[e->q] < e->at && r->disorders++ < 5)
        fprintf(stderr, "collective on queue %d not ordered after the one on queue %d\n", q, e->q);
    r->last_collective = a;
}

static inline void race_merge(race *r, int w, int e) {
    for (int k = 0; k < RACE_NQ; k++)
        r->vc[w][k] = r->vc[w][k] > r->vc[e][k] ? r->vc[w][k] : r->vc[e][k];
}

static inline void race_wait(race *r, int waiter, int waitee) {
    if (waiter == 0 && waitee != 0 && r->host[waitee] < r->vc[waitee][waitee] && r->unbounded++ < 5)
        fprintf(stderr, "the ops' queue waits for side queue %d before the host did\n", waitee);
    race_merge(r, waiter, waitee);
}

static inline void race_host_wait(race *r, int q) {
    r->host[q] = r->vc[q][q];
    for (int w = 0; w < RACE_NQ; w++)
        if (w != q) race_merge(r, w, q);
}

/* A backend with one recording side queue (queue 1): stream_new hands out
 * race_side_queue, stream_wait records on race_current. For tests that need one. */
#ifdef BATON_BACKEND_H
static race *race_current;
static char race_side_queue;

static inline int race_qid(const void *s) {
    return s == &race_side_queue ? 1 : 0;
}

static inline void *race_stream_new(backend *be) {
    (void)be;
    return &race_side_queue;
}

static inline void race_stream_free(backend *be, void *s) {
    (void)be, (void)s;
}

static inline void race_stream_wait(backend *be, void *waiter, void *waitee) {
    (void)be;
    race_wait(race_current, race_qid(waiter), race_qid(waitee));
}

static inline void race_side_queue_on(backend *be, race *r) {
    race_current = r;
    be->stream_new = race_stream_new, be->stream_free = race_stream_free;
    be->stream_wait = race_stream_wait;
}

/* A recording group's (comm.h backend side) comm_wait: the host waited for that queue;
 * and its abort and destroy, which have nothing to do. */
#ifdef BATON_COMM_H
static inline int race_comm_wait(comm *c, void *stream) {
    (void)c;
    race_host_wait(race_current, race_qid(stream));
    return 0;
}

static inline void race_comm_nothing(comm *c) {
    (void)c;
}
#endif
#endif

#endif
