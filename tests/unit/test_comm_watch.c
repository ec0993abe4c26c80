/* The NCCL watchdog's timing rule (worker/comm/comm_watch.h) on the CPU: a collective's
 * clock starts when the work queued ahead of it has finished, not at its enqueue, and a
 * hung earlier collective is still reported while a later one waits behind it. The
 * markers' states, which comm_nccl.c reads from CUDA events, are given here per poll. */
#include <stdlib.h>

#include "check.h"
#include "comm_watch.h"
#include "util/err.h"

/* The states the probe reports, by slot index; err: a code to fail with instead. */
typedef struct marks {
    comm_watch_state state[8];
    int err;
    int probes;
    const comm_watch *w;
} marks;

static int probe(void *ctx, const comm_watch_op *op, comm_watch_state *seen) {
    marks *m = ctx;
    m->probes++;
    if (m->err) return m->err;
    *seen = m->state[op - m->w->ops];
    return 0;
}

/* Adds a collective that must land in slot k, and arms it; returns its generation. */
static uint64_t add(comm_watch *w, const void *owner, int k, int t_ms, const char *what) {
    uint64_t gen = 0;
    CHECK(comm_watch_add(w, owner, t_ms, what, &gen) == k);
    comm_watch_arm(w, k, gen);
    return gen;
}

static int poll_at(comm_watch *w, marks *m, int64_t now) {
    int expired = -2;
    m->w = w;
    CHECK(comm_watch_poll(w, now, probe, m, &expired) == 0);
    return expired;
}

/* Compute queued ahead of a collective for far longer than its timeout: never expired
 * while queued; expired only once it has run its timeout after the work ahead ended.
 * (Counted from the enqueue, as before, it expired at 101 ms.) */
static void test_compute_ahead(void) {
    comm_watch w = {0};
    marks m = {{COMM_WATCH_QUEUED}, 0, 0, NULL};
    int g = 0;
    add(&w, &g, 0, 100, "allreduce");
    for (int64_t t = 0; t <= 5000; t += 50)
        CHECK(poll_at(&w, &m, t) == -1);
    CHECK(w.ops[0].started_ms == -1);
    m.state[0] = COMM_WATCH_RUNNING; /* the compute ahead ended; it runs from 5020 */
    CHECK(poll_at(&w, &m, 5020) == -1);
    CHECK(w.ops[0].started_ms == 5020);
    CHECK(poll_at(&w, &m, 5120) == -1); /* exactly its timeout: not yet */
    CHECK(poll_at(&w, &m, 5121) == 0);
    m.state[0] = COMM_WATCH_DONE; /* it finished after all: freed, not expired */
    CHECK(poll_at(&w, &m, 5200) == -1);
    CHECK(w.ops[0].owner == NULL);
    comm_watch_free(&w, free);
}

/* A hung collective A, and B queued behind it (on the same stream, or another made to
 * wait for it): B never starts its clock, but the poll made while waiting for B reports
 * A once A's time is up, whichever group A belongs to. */
static void test_hung_earlier(void) {
    comm_watch w = {0};
    marks m = {{COMM_WATCH_RUNNING, COMM_WATCH_QUEUED}, 0, 0, NULL};
    int ga = 0, gb = 0;
    add(&w, &ga, 0, 200, "allreduce (group 'dp')");
    CHECK(poll_at(&w, &m, 0) == -1); /* A seen running at 0 */
    add(&w, &gb, 1, 50, "allgather (group 'tp')");
    for (int64_t t = 10; t <= 200; t += 10)
        CHECK(poll_at(&w, &m, t) == -1);
    CHECK(poll_at(&w, &m, 201) == 0);
    CHECK(w.ops[1].started_ms == -1);
    CHECK_STR_CONTAINS(w.ops[0].what, "'dp'");
    comm_watch_free(&w, free);
}

/* Of two expired collectives, the one running longer is named; a clock once started is
 * not restarted; a started one that is seen done is freed. */
static void test_longest_first(void) {
    comm_watch w = {0};
    marks m = {{COMM_WATCH_QUEUED, COMM_WATCH_RUNNING}, 0, 0, NULL};
    int g = 0;
    add(&w, &g, 0, 10, "first");
    add(&w, &g, 1, 10, "second");
    CHECK(poll_at(&w, &m, 100) == -1); /* second runs from 100 */
    m.state[0] = COMM_WATCH_RUNNING;
    CHECK(poll_at(&w, &m, 105) == -1); /* first from 105 */
    CHECK(poll_at(&w, &m, 111) == 1);  /* only second is past 10 ms */
    CHECK(poll_at(&w, &m, 200) == 1);  /* both: second started first */
    CHECK(w.ops[0].started_ms == 105 && w.ops[1].started_ms == 100);
    comm_watch_free(&w, free);
}

/* Freed slots are reused with their markers; a group's slots are dropped with it; a
 * probe's failure is the poll's. */
static void test_slots(void) {
    comm_watch w = {0};
    marks m = {{COMM_WATCH_DONE, COMM_WATCH_RUNNING, COMM_WATCH_RUNNING}, 0, 0, NULL};
    int g1 = 0, g2 = 0;
    add(&w, &g1, 0, 10, "a");
    w.ops[0].ready = malloc(1), w.ops[0].done = malloc(1); /* as comm_nccl.c makes them */
    void *ready = w.ops[0].ready, *done = w.ops[0].done;
    add(&w, &g2, 1, 10, "b");
    add(&w, &g1, 2, 10, "c");
    CHECK(!comm_watch_has_free(&w));
    CHECK(poll_at(&w, &m, 0) == -1);
    CHECK(w.ops[0].owner == NULL && w.n == 3 && comm_watch_has_free(&w));
    uint64_t gen = 0;
    CHECK(comm_watch_add(&w, &g2, 5, "d", &gen) == 0); /* the freed slot, markers kept */
    CHECK(w.ops[0].ready == ready && w.ops[0].done == done && w.ops[0].started_ms == -1);
    m.probes = 0; /* not armed: its markers may still say "done" from their last use */
    CHECK(poll_at(&w, &m, 1) == -1 && w.ops[0].owner == &g2 && m.probes == 2);
    comm_watch_drop(&w, 0, gen);
    comm_watch_drop_owner(&w, &g1);
    CHECK(w.ops[2].owner == NULL && w.ops[1].owner == &g2);
    m.err = BT_EIO, m.w = &w;
    int expired = 7;
    CHECK(comm_watch_poll(&w, 50, probe, &m, &expired) == BT_EIO && expired == -1);
    m.err = 0, m.probes = 0;
    CHECK(poll_at(&w, &m, 50) == 1 && m.probes == 1); /* free slots are not probed */
    comm_watch_free(&w, free);                        /* frees the markers: ASan checks */
    CHECK(w.n == 0 && w.ops == NULL);
}

/* A slot freed under its caller (its group aborted between the enqueue and the arming)
 * and reused by another group's collective: the first caller's arm and drop, which
 * name its generation, leave the new collective alone; arming twice is arming once. */
static void test_generations(void) {
    comm_watch w = {0};
    marks m = {{COMM_WATCH_RUNNING}, 0, 0, NULL};
    int g = 0, h = 0;
    uint64_t gg = 0, gh = 0;
    CHECK(comm_watch_add(&w, &g, 10, "g's", &gg) == 0);
    comm_watch_drop_owner(&w, &g); /* g aborted before arming */
    CHECK(comm_watch_add(&w, &h, 10, "h's", &gh) == 0 && gh != gg);
    comm_watch_arm(&w, 0, gg); /* g's late arm */
    CHECK(!w.ops[0].armed && w.ops[0].owner == &h);
    comm_watch_drop(&w, 0, gg); /* g's late drop (its enqueue failed) */
    CHECK(w.ops[0].owner == &h);
    comm_watch_arm(&w, 0, gh);
    comm_watch_arm(&w, 0, gh);
    CHECK(w.ops[0].armed && w.ops[0].owner == &h);
    CHECK(poll_at(&w, &m, 0) == -1 && poll_at(&w, &m, 11) == 0);
    comm_watch_drop(&w, 0, gh);
    CHECK(w.ops[0].owner == NULL);
    comm_watch_arm(&w, 0, gh); /* a freed slot is not armed again */
    CHECK(poll_at(&w, &m, 100) == -1);
    comm_watch_arm(&w, 5, gh); /* out of range: nothing */
    comm_watch_drop(&w, -1, gh);
    comm_watch_free(&w, free);
}

/* Waits poll the other collectives at most once per COMM_WATCH_POLL_MS: the first poll
 * of a list is due, then none until that much time has passed since the last one let
 * through. */
static void test_due(void) {
    comm_watch w = {0};
    CHECK(comm_watch_due(&w, 0));
    CHECK(!comm_watch_due(&w, 0));
    CHECK(!comm_watch_due(&w, COMM_WATCH_POLL_MS - 1));
    CHECK(comm_watch_due(&w, COMM_WATCH_POLL_MS));
    CHECK(!comm_watch_due(&w, COMM_WATCH_POLL_MS));
    CHECK(comm_watch_due(&w, 1000));
    CHECK(!comm_watch_due(&w, 1000));
    CHECK(comm_watch_due(&w, 1000 + COMM_WATCH_POLL_MS));
    comm_watch fresh = {0}; /* a clock far from 0, as CLOCK_MONOTONIC is */
    CHECK(comm_watch_due(&fresh, (int64_t)1 << 40) && !comm_watch_due(&fresh, (int64_t)1 << 40));
}

int main(void) {
    test_compute_ahead();
    test_hung_earlier();
    test_longest_first();
    test_slots();
    test_generations();
    test_due();
    return check_status();
}
