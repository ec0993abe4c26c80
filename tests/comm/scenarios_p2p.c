/* Point to point beyond scenarios.c's child_p2p: empty messages and messages larger than
 * a shared-memory channel's ring (comm_shm_p2p.c), tags received in the other order with
 * messages large enough that the first must be set aside, and a peer that leaves while
 * others wait on it. Over shared memory alone, where a send completes once its message
 * is in the channel: messages that arrive before their receive is posted, and a message
 * whose size differs from its receive's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "scenarios.h"

enum { LEAVER = 1 /* KILL_VICTIM of check_leave */, LEAVE_MSG = 1000, LEAVE_BIG = 4 << 20 };

/* Element i of message k from rank `from`: exact in a float, different per message. */
static float val(int from, int k, size_t i) {
    return (float)((from * 7 + k) * 1009 % 65521) + (float)(i % 8191) * 0.5f;
}

static float *filled(int from, int k, size_t n) {
    float *x = malloc(n * sizeof *x + 4);
    if (x == NULL) abort();
    for (size_t i = 0; i < n; i++)
        x[i] = val(from, k, i);
    return x;
}

/* Counts the elements of got that differ from message k of rank from. */
static void check_msg(const char *what, const float *got, int from, int k, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != val(from, k, i) && bad++ == 0) first = i;
    if (bad) {
        fprintf(stderr, "%s: %zu of %zu wrong, first [%zu] = %g, want %g\n", what, bad, n, first,
                (double)got[first], (double)val(from, k, first));
        check_failures++;
    }
}

static int call(comm *c, int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "%s: %s (%s)\n", what, comm_error(c), bt_strerror(rc));
        check_failures++;
    }
    return rc == 0;
}

/* Ring rotations of every size, and two tags sent in one order, received in the other. */
static void ring_sizes(comm *c, int r, int right, int left) {
    static const size_t sizes[] = {0, 1, 1000, 70000, 300000};
    uint64_t before = comm_bytes_sent(c), want = 0;
    for (int k = 0; k < 5; k++) {
        size_t n = sizes[k];
        float *out = filled(r, k, n), *in = malloc(n * sizeof *in + 4);
        char what[64];
        snprintf(what, sizeof what, "ring of %zu floats", n);
        if (call(c, comm_sendrecv(c, out, right, in, left, n, COMM_F32, 40 + (uint32_t)k, NULL),
                 what))
            check_msg(what, in, left, k, n);
        want += n * 4;
        free(out);
        free(in);
    }
    CHECK_EQ_U64(comm_bytes_sent(c) - before, want);

    const size_t na = 200000, nb = 30000;
    float *a = filled(r, 10, na), *b = filled(r, 11, nb);
    float *ga = malloc(na * sizeof *ga), *gb = malloc(nb * sizeof *gb);
    comm_p2p_op ops[4] = {{COMM_RECV, left, gb, nb, COMM_F32, 51},
                          {COMM_RECV, left, ga, na, COMM_F32, 50},
                          {COMM_SEND, right, a, na, COMM_F32, 50},
                          {COMM_SEND, right, b, nb, COMM_F32, 51}};
    if (call(c, comm_p2p(c, ops, 4, NULL), "crossed tags")) {
        check_msg("crossed tags, first sent", ga, left, 10, na);
        check_msg("crossed tags, second sent", gb, left, 11, nb);
    }
    free(a), free(b), free(ga), free(gb);
}

/* Rank 0 sends two messages to rank 1 in two calls, the first larger than the ring; rank 1
 * receives them in the other order, in two calls: the first message is set aside while
 * rank 1 waits for the second. */
static void early_messages(comm *c, int r) {
    const size_t big = 300000, small = 100;
    if (r == 0) {
        float *x = filled(0, 20, big), *y = filled(0, 21, small);
        call(c, comm_send(c, x, big, COMM_F32, 1, 60, NULL), "send ahead (big)");
        call(c, comm_send(c, y, small, COMM_F32, 1, 61, NULL), "send ahead (small)");
        free(x), free(y);
    } else if (r == 1) {
        float *x = malloc(big * sizeof *x), *y = malloc(small * sizeof *y);
        if (call(c, comm_recv(c, y, small, COMM_F32, 0, 61, NULL), "recv second"))
            check_msg("second message", y, 0, 21, small);
        if (call(c, comm_recv(c, x, big, COMM_F32, 0, 60, NULL), "recv first"))
            check_msg("first message, set aside", x, 0, 20, big);
        free(x), free(y);
    }
}

/* One batch of 20 sends to the right and 20 receives from the left (more ops than the
 * batch keeps on the stack), tags 80-82 each used several times, sizes 0 to 28500 floats:
 * the receives are posted grouped by tag (in send order within a tag), so messages of the
 * other tags arrive first and are set aside, empty ones included. */
static void many_ops(comm *c, int r, int right, int left) {
    enum { M = 20 };
    float *out[M], *in[M];
    size_t n[M];
    comm_p2p_op ops[2 * M];
    int k_of[M], j = 0;
    for (int k = 0; k < M; k++) {
        n[k] = k % 4 == 0 ? 0 : (size_t)k * 1500;
        out[k] = filled(r, 30 + k, n[k]);
        in[k] = malloc(n[k] * sizeof *in[k] + 4);
        ops[M + k] = (comm_p2p_op){COMM_SEND, right, out[k], n[k], COMM_F32, 80 + (uint32_t)k % 3};
    }
    for (int t = 0; t < 3; t++)
        for (int k = t; k < M; k += 3, j++) {
            ops[j] = (comm_p2p_op){COMM_RECV, left, in[k], n[k], COMM_F32, 80 + (uint32_t)t};
            k_of[j] = k;
        }
    if (call(c, comm_p2p(c, ops, 2 * M, NULL), "many ops"))
        for (j = 0; j < M; j++) {
            char what[48];
            snprintf(what, sizeof what, "many ops, message %d", k_of[j]);
            check_msg(what, in[k_of[j]], left, 30 + k_of[j], n[k_of[j]]);
        }
    for (int k = 0; k < M; k++)
        free(out[k]), free(in[k]);
}

/* Rank 0 sends 10 floats, rank 1 expects 11: rank 1 fails naming the sizes; the sends
 * completed (they fit in the channel). With early (odd worlds) the message is set aside
 * first, while rank 1 receives another tag, and the size is checked when a receive claims
 * it; otherwise when it arrives. */
static void size_mismatch(comm *c, int r, int early) {
    float x[11] = {0};
    if (r == 0 && early) call(c, comm_send(c, x, 10, COMM_F32, 1, 71, NULL), "send 10, set aside");
    if (r == 0) call(c, comm_send(c, x, 10, COMM_F32, 1, 70, NULL), "send 10");
    if (r != 1) return;
    int rc = 0;
    if (early) rc = comm_recv(c, x, 10, COMM_F32, 0, 70, NULL);
    CHECK(rc == 0);
    rc = comm_recv(c, x, 11, COMM_F32, 0, early ? 71 : 70, NULL);
    printf("rank 1: %s\n", comm_error(c));
    CHECK(rc == BT_EIO);
    CHECK_STR_CONTAINS(comm_error(c), "message of 40 bytes");
    CHECK_STR_CONTAINS(comm_error(c), "receive of 44 bytes");
}

int child_p2p_large(const child_env *env) {
    comm *c;
    bt_diag d;
    bt_diag_init(&d);
    if (child_init(env, "p2p-large", 20000, &c, &d) != 0) {
        fprintf(stderr, "%s\n", d.msg);
        return 2;
    }
    const int r = env->rank, w = env->world;
    ring_sizes(c, r, (r + 1) % w, (r + w - 1) % w);
    many_ops(c, r, (r + 1) % w, (r + w - 1) % w);
    const int shm = strcmp(comm_backend(c), "shm") == 0;
    if (shm) early_messages(c, r);
    CHECK(call(c, comm_barrier(c, NULL), "barrier"));
    if (shm) size_mismatch(c, r, w % 2);
    comm_destroy(c);
    return check_status();
}

/* Rank 2, once a receive on pair group a failed (rank 1 destroyed b, then a): a send of
 * one float on b, which fits in any channel, fails at once all the same. */
static void send_to_departed(comm *a, comm *b) {
    float y = 0;
    CHECK(comm_recv(a, &y, 1, COMM_F32, 0, 9, NULL) == BT_EIO);
    double t0 = now_s();
    int rc = comm_send(b, &y, 1, COMM_F32, 0, 9, NULL);
    printf("rank 2: send to the departed: %.3f s: %s\n", now_s() - t0, comm_error(b));
    CHECK(rc == BT_EIO && comm_fault_of(b) == COMM_FAULT_PEER_LOST);
    CHECK(now_s() - t0 < 1.0);
}

/* Rank 1 sends rank 0 a message and leaves. Rank 0 receives it (it was sent before the
 * peer left), then waits for a second one; rank 2 sends rank 1 more than any channel
 * holds. Both fail within a second (the timeout is 10 s), peer lost. Before that, rank 2
 * sends rank 1 a small message over a pair group rank 1 left (send_to_departed). */
int child_fail_leave_p2p(const child_env *env) {
    comm *c, *a = NULL, *b = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (child_init(env, "leave-p2p", 10000, &c, &d) != 0) {
        fprintf(stderr, "%s\n", d.msg);
        return 2;
    }
    float *x = filled(env->rank, 0, LEAVE_BIG);
    const uint32_t pair[2] = {LEAVER, 2};
    if (env->rank != 0) {
        CHECK(call(c, comm_split(c, pair, 2, "pair-a", &a), "split a"));
        CHECK(call(c, comm_split(c, pair, 2, "pair-b", &b), "split b"));
    }
    CHECK(call(c, comm_barrier(c, NULL), "barrier"));
    if (env->rank == LEAVER) {
        CHECK(call(c, comm_send(c, x, LEAVE_MSG, COMM_F32, 0, 5, NULL), "send before leaving"));
        comm_destroy(b);
        comm_destroy(a);
        comm_destroy(c);
        free(x);
        return check_status();
    }
    if (env->rank == 2 && a != NULL && b != NULL) send_to_departed(a, b);
    comm_destroy(b);
    comm_destroy(a);
    double t0 = now_s();
    int rc = 0;
    if (env->rank == 0) {
        float *got = malloc(LEAVE_MSG * sizeof *got);
        if (call(c, comm_recv(c, got, LEAVE_MSG, COMM_F32, LEAVER, 5, NULL), "recv"))
            check_msg("message sent before leaving", got, LEAVER, 0, LEAVE_MSG);
        t0 = now_s();
        rc = comm_recv(c, got, LEAVE_MSG, COMM_F32, LEAVER, 6, NULL);
        free(got);
    } else {
        rc = comm_send(c, x, LEAVE_BIG, COMM_F32, LEAVER, 7, NULL);
    }
    printf("rank %d: %.3f s: %s [%s]\n", env->rank, now_s() - t0, comm_error(c),
           comm_fault_name(comm_fault_of(c)));
    CHECK(rc == BT_EIO);
    CHECK(now_s() - t0 < 1.0);
    CHECK(comm_fault_of(c) == COMM_FAULT_PEER_LOST);
    CHECK(leave_names_victim(env, c, LEAVER));
    comm_destroy(c);
    free(x);
    return check_status();
}
