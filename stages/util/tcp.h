/* A listening TCP socket on an ephemeral port, shared by the control channel and the
 * rendezvous store, and what both do alike with peers that have not shown the run's
 * secret yet: anyone who can reach the port can connect, so such connections are few
 * (bt_tcp_unauth_cap), short-lived (BT_TCP_UNAUTH_TIMEOUT_S) and never allowed to take
 * the descriptors the run itself needs (bt_tcp_accept). */
#ifndef BATON_TCP_H
#define BATON_TCP_H

#include <stddef.h>
#include <sys/uio.h>

#include "util/err.h"

/* Listens on host (a numeric address or name) at a port the kernel picks; *fd is the
 * socket (close-on-exec, nonblocking: bt_tcp_accept), address gets "host:port" ("[host]:port" for
 * IPv6). what names the listener in errors ("control channel"). 0, BT_EINVAL (host not resolved) or
 * BT_EIO. */
int bt_tcp_listen(const char *host, const char *what, int *fd, char *address, size_t cap,
                  bt_diag *diag);

/* A connection that has not shown the run's token (a Hello, a request) is closed after
 * this long. */
#define BT_TCP_UNAUTH_TIMEOUT_S 10.0
/* How long a server stops accepting when the process is out of descriptors and it has no
 * unauthenticated connection to close instead. */
#define BT_TCP_ACCEPT_PAUSE_S 0.5

/* How many unauthenticated connections a server keeps at once: a sixteenth of the soft
 * open-files limit (RLIMIT_NOFILE, read now), 4 to 64; when that many are open, the
 * oldest is closed for a new one. */
size_t bt_tcp_unauth_cap(void);

/* The cap a server expecting `expected` peers of its own (the ranks of an attempt)
 * applies: expected + bt_tcp_unauth_cap(), so that its own peers, which show the token
 * right after connecting, are never crowded out by up to bt_tcp_unauth_cap() others, and
 * a flood larger than that makes them reconnect (they retry) rather than fail. */
size_t bt_tcp_unauth_limit(size_t expected);

/* accept4 on listen_fd, nonblocking and close-on-exec, with TCP_NODELAY: the fd, or -1
 * (errno set) when nothing is waiting or the connection went away. *out_of_fds is set
 * when it failed for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the
 * connection stays queued and the socket readable, so the caller must free a descriptor
 * or stop polling the socket for a while (BT_TCP_ACCEPT_PAUSE_S), not try again at once. */
int bt_tcp_accept(int listen_fd, int *out_of_fds);

/* What bt_tcp_accept_capped needs of a server's table of connections (ctx is the
 * server's own). */
typedef struct bt_tcp_conns {
    void *ctx;
    /* The connection that has not shown the token opened longest ago, before `before`:
     * its id (>= 0), or -1; *n: how many such connections are open. */
    long (*oldest_unauth)(void *ctx, double before, size_t *n);
    /* Closes connection id (as oldest_unauth named it): evicted for a newer one. */
    void (*evict)(void *ctx, long id);
    /* Takes the new connection fd (opened at now): 0; or closes it when there is no room:
     * -1. */
    int (*adopt)(void *ctx, int fd, double now);
} bt_tcp_conns;

/* Accepts what is queued on listen_fd, keeping at most max_unauth connections that have not
 * shown the token: only once a new one is in hand does the oldest make room for it (so
 * nothing is dropped when the queue is empty), and never one accepted in this round (now:
 * it is read before it may be dropped); at most max_unauth accepts a round. It asks
 * oldest_unauth once a round and again after each eviction (twice out of descriptors),
 * not once an accept: a search of the table per connection made a start-up of N ranks cost
 * N^2. Out of descriptors, the oldest of those connections is closed, whatever its age
 * (one accepted in this round too: there is nothing else to free), or else *resume is set
 * to now + BT_TCP_ACCEPT_PAUSE_S: the caller stops polling listen_fd until then. */
void bt_tcp_accept_capped(int listen_fd, size_t max_unauth, const bt_tcp_conns *t, double now,
                          double *resume);

/* Writes all of iov[0..n) to fd in as few sends as the socket takes (a request or an
 * answer in one segment, where separate sends of its parts each go as one with
 * TCP_NODELAY, or wait for an ACK without it), advancing iov past what went; on a
 * nonblocking socket it waits up to wait_ms for room each time the socket is full. 0, or
 * -1 (the peer went away or did not read). */
int bt_tcp_sendv(int fd, struct iovec *iov, int n, int wait_ms);

/* How long a client whose connection a server dropped before it showed the token waits
 * before its next try (tries: those made so far, from 1): 20 ms doubling to 1 s, plus up
 * to as much again at random (from getrandom, else the clock: not the pid, which ranks in
 * containers often share), so that ranks dropped together do not all come back together.
 * Milliseconds. */
double bt_tcp_retry_ms(int tries);

/* Whether the n bytes at given equal secret (NUL-terminated), in time that depends only
 * on secret's length, so that a peer cannot learn it a byte at a time from how fast it is
 * refused. */
int bt_token_equal(const void *given, size_t n, const char *secret);

#endif
