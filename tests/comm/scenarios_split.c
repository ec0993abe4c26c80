/* A rank lost while the others form a sub-group (tester1 #4): the split fails on every
 * member of the new group with the cause (a survivor naming the lost rank), never with an
 * empty message ("split: "), and hands back no sub-group.
 *
 * Deterministic: the members' rendezvous for the new group (its store keys) waits
 * SPLIT_HOLD_MS once each member published its own key, inside which the supervisor kills
 * the victim, a rank of the parent outside the new group. The parent's watchdog sees the
 * death while the new group's own connections, among living ranks, still form: the
 * split's connect succeeds, and its failure comes from the parent alone. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm_shm.h"
#include "scenarios.h"

enum { SPLIT_VICTIM = 2, SPLIT_HOLD_MS = 1000 };

typedef struct hold_store {
    comm_store inner;
    const child_env *env;
    int held;
} hold_store;

static int hs_set(void *ctx, const char *key, const void *val, size_t len, bt_diag *diag) {
    hold_store *hs = ctx;
    return hs->inner.set(hs->inner.ctx, key, val, len, diag);
}

/* The sub-group's keys lie under the parent's prefix plus "/g<hash>" (comm_gloo.cc). */
static int hs_get(void *ctx, const char *key, void **val, size_t *len, int timeout_ms,
                  bt_diag *diag) {
    hold_store *hs = ctx;
    if (!hs->held && strstr(key, "/g") != NULL) {
        hs->held = 1;
        child_event(hs->env, "holding", 1);
        sleep_ms(SPLIT_HOLD_MS);
    }
    return hs->inner.get(hs->inner.ctx, key, val, len, timeout_ms, diag);
}

static void hs_close(void *ctx) {
    hold_store *hs = ctx;
    hs->inner.close(hs->inner.ctx);
}

int child_fail_split(const child_env *env) {
    hold_store hs = {.env = env};
    bt_diag d;
    bt_diag_init(&d);
    if (comm_store_file(&hs.inner, env->dir, &d) != 0) return 2;
    comm_bootstrap bs = {0};
    bs.rank = env->rank, bs.size = env->world;
    bs.store = (comm_store){&hs, hs_set, hs_get, hs_close};
    bs.prefix = "split", bs.timeout_ms = 10000;
    comm *w;
    if (comm_cpu_init(&w, &bs, &d) != 0) {
        fprintf(stderr, "%s\n", d.msg);
        return 2;
    }
    float x = 1;
    CHECK(comm_allreduce(w, &x, &x, 1, COMM_F32, COMM_SUM, NULL) == 0);
    if (env->rank == SPLIT_VICTIM) { /* killed while the others split */
        child_event(env, "ready", 1);
        for (;;)
            sleep_ms(1000);
    }
    const uint32_t pair[2] = {0, 1};
    comm *sub = NULL;
    int rc = comm_split(w, pair, 2, "pair", &sub);
    const char *msg = comm_error(w), *after = strstr(msg, "split: ");
    printf("rank %d: rc %d: %s [%s]\n", env->rank, rc, msg, comm_fault_name(comm_fault_of(w)));
    CHECK(rc == BT_EIO);
    CHECK(sub == NULL);
    CHECK(after != NULL && strlen(after + 7) > 0);
    CHECK(comm_fault_of(w) == COMM_FAULT_PEER_LOST);
    CHECK(comm_first_fault() == COMM_FAULT_PEER_LOST);
    /* one survivor may see the other's abort first (Gloo names no peer then): check_split
     * wants some survivor to name the victim */
    child_event(env, "names_victim", strstr(msg, "2 (global 2)") != NULL);
    comm_destroy(sub);
    comm_destroy(w);
    return check_status();
}

/* Kills the victim once it is ready and the others hold in the split's rendezvous. */
int on_event_split(supervisor *s, int rank, const char *key, double val) {
    (void)rank;
    (void)val;
    if ((strcmp(key, "ready") == 0 || strcmp(key, "holding") == 0) && sup_count(s, "ready") == 1 &&
        sup_count(s, "holding") == s->world - 1)
        sup_signal(s, SPLIT_VICTIM, SIGKILL);
    return 0;
}

int check_split(supervisor *s) {
    int fail = sup_expect_exit(s, SPLIT_VICTIM, 0, SIGKILL);
    int named = 0;
    for (int r = 0; r < s->world; r++) {
        double v = 0;
        if (r == SPLIT_VICTIM) continue;
        fail += sup_expect_exit(s, r, 0, 0);
        named += sup_value(s, r, "names_victim", &v) && v == 1;
    }
    if (named == 0) {
        fprintf(stderr, "no survivor's message names the killed rank %d\n", SPLIT_VICTIM);
        fail++;
    }
    return fail;
}
