/* The rendezvous store of a Slurm run: a small key-value server inside `baton run`, so
 * that workers on different hosts meet without a shared filesystem (the local launcher
 * gives its ranks a private directory instead). Wire format: stages/util/kv_wire.h.
 *
 * It runs on a thread of its own (started by kv_store_open, joined by kv_store_close),
 * so the supervisor's event loop does not change; keys live until close (every attempt
 * uses a fresh prefix: Slurm's PMIx namespace names the job step), found through a hash
 * index (kv_table.h): a request costs the same with a frontier run's keys as with a few.
 * Each poll round looks at the slots up to the highest in use, so that its cost grows
 * with the connections open (as poll's own does), not with the slots a store for 131072
 * ranks holds (262k: 0.5 ms a round when every one was looked at twice).
 *
 * It listens on an address other hosts reach, so anyone there can connect: a connection
 * that has not sent a request with the run's token (compared in constant time) is closed
 * after BT_TCP_UNAUTH_TIMEOUT_S, and at most bt_tcp_unauth_limit(expected) such are kept
 * (the oldest goes for a new one; util/tcp.h). The workers show the token right after
 * connecting (KV_OP_AUTH) and connect again if dropped before that, so that idle
 * connections never shut them out. */
#ifndef BATON_KV_STORE_H
#define BATON_KV_STORE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kv_table.h"
#include "util/err.h"

/* Connections held at once: at least this many, and for `expected` workers (kv_store_open)
 * each one's, as many more connecting, and a few besides; a connection beyond is closed
 * (the worker retries). */
#define KV_STORE_MIN_SLOTS 1024

typedef struct kv_store {
    /* Read-only for the caller. */
    char address[300]; /* "host:port" the workers connect to */
    /* Private. */
    char token[256];
    int listen_fd, wake[2];
    size_t max_unauth;    /* connections without a good request kept (bt_tcp_unauth_limit) */
    double accept_resume; /* accepting paused until then (out of descriptors) */
    pthread_t thread;
    int running;
    struct kv_conn *conns; /* n_slots of them */
    size_t n_slots;
    size_t free_from;        /* every slot below is taken (kv_put's search starts there) */
    size_t used_to;          /* every slot from here on is free (a round's walks stop there) */
    size_t n_unauth;         /* connections without a good request yet */
    uint64_t rounds, walked; /* poll rounds, slots their walks looked at (the unit test's) */
    kv_table keys;
} kv_store;

/* Listens on bind_host at a port the kernel picks and starts serving. token (non-empty)
 * must come with every request. expected: how many workers will connect (the attempt's
 * ranks): that many connections without the token yet are never too many. */
int kv_store_open(kv_store *s, const char *bind_host, const char *token, size_t expected,
                  bt_diag *diag);

/* Stops the thread, closes every connection and frees the keys (rounds and walked stay,
 * for the unit test to read). */
void kv_store_close(kv_store *s);

#endif
