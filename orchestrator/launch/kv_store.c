/* The rendezvous store's server (kv_store.h): one thread polls the listening socket and
 * every connection, reads requests into a per-connection buffer and answers each one as
 * soon as it is whole. Only that thread touches the table, so it needs no lock. */
#define _GNU_SOURCE /* pipe2 */
#include "kv_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/kv_wire.h"
#include "util/tcp.h"

#define KV_HEAD 16u /* op, token length, key length, value length */

typedef struct kv_conn {
    int fd;        /* -1: a free slot */
    int authed;    /* a request with the right token came */
    double opened; /* when accepted (bt_clock_now) */
    uint8_t *buf;  /* the request read so far */
    size_t len, cap;
} kv_conn;

static uint32_t kv_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static int kv_listen(kv_store *s, const char *host, bt_diag *diag) {
    return bt_tcp_listen(host, "rendezvous store", &s->listen_fd, s->address, sizeof s->address,
                         diag);
}

static void kv_conn_close(kv_conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    *c = (kv_conn){.fd = -1};
}

/* Closes s's connection c: its slot is free for kv_put again. */
static void kv_drop(kv_store *s, kv_conn *c) {
    size_t i = (size_t)(c - s->conns);
    s->n_unauth -= !c->authed;
    kv_conn_close(c);
    if (i < s->free_from) s->free_from = i;
    while (s->used_to > 0 && s->conns[s->used_to - 1].fd < 0) /* the highest in use now */
        s->used_to--;
}

/* The answer's head and value in one send; a client that does not read within 1 s is
 * dropped. */
static int kv_answer(int fd, uint32_t status, const void *val, size_t len) {
    uint32_t head[2] = {htonl(status), htonl((uint32_t)len)};
    struct iovec iov[2] = {{head, sizeof head}, {(void *)val, len}};
    return bt_tcp_sendv(fd, iov, 2, 1000);
}

/* Answers the whole request at the front of c's buffer; -1 closes the connection. */
static int kv_handle(kv_store *s, kv_conn *c, size_t total) {
    const uint8_t *p = c->buf;
    uint32_t op = kv_u32(p), tl = kv_u32(p + 4), kl = kv_u32(p + 8), vl = kv_u32(p + 12);
    const uint8_t *tok = p + KV_HEAD, *key = tok + tl, *val = key + kl;
    int rc = 0;
    int good = bt_token_equal(tok, tl, s->token);
    s->n_unauth -= good && !c->authed;
    c->authed |= good;
    if (!good) {
        kv_answer(c->fd, KV_DENIED, NULL, 0);
        rc = -1;
    } else if (op == KV_OP_AUTH) {
        rc = kv_answer(c->fd, KV_OK, NULL, 0);
    } else if (op == KV_OP_SET) {
        rc = kv_answer(c->fd, kv_table_set(&s->keys, key, kl, val, vl), NULL, 0);
    } else {
        const kv_entry *e = kv_table_get(&s->keys, key, kl);
        rc = e ? kv_answer(c->fd, KV_OK, e->val, e->len) : kv_answer(c->fd, KV_MISSING, NULL, 0);
    }
    memmove(c->buf, c->buf + total, c->len - total);
    c->len -= total;
    return rc;
}

/* The length of the request at the front of the buffer once whole, 0 while partial, -1
 * for one that breaks the limits. */
static long kv_request_len(const kv_conn *c) {
    if (c->len < KV_HEAD) return 0;
    uint32_t op = kv_u32(c->buf), tl = kv_u32(c->buf + 4), kl = kv_u32(c->buf + 8),
             vl = kv_u32(c->buf + 12);
    if (op == KV_OP_AUTH) {
        if (tl > KV_MAX_TOKEN || kl != 0 || vl != 0) return -1;
    } else if ((op != KV_OP_SET && op != KV_OP_GET) || tl > KV_MAX_TOKEN || kl == 0 ||
               kl > KV_MAX_KEY || vl > KV_MAX_VALUE || (op == KV_OP_GET && vl != 0)) {
        return -1;
    }
    size_t n = KV_HEAD + (size_t)tl + kl + vl;
    return c->len >= n ? (long)n : 0;
}

static void kv_read(kv_store *s, kv_conn *c) {
    if (c->cap - c->len < 4096) {
        size_t cap = c->cap ? 2 * c->cap : 8192;
        uint8_t *b = cap <= 2 * (KV_HEAD + KV_MAX_TOKEN + KV_MAX_KEY + KV_MAX_VALUE)
                         ? realloc(c->buf, cap)
                         : NULL;
        if (b == NULL) return kv_drop(s, c);
        c->buf = b, c->cap = cap;
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) return kv_drop(s, c);
    c->len += (size_t)n;
    long total;
    while ((total = kv_request_len(c)) > 0)
        if (kv_handle(s, c, (size_t)total) != 0) return kv_drop(s, c);
    if (total < 0) {
        kv_answer(c->fd, KV_BAD, NULL, 0);
        kv_drop(s, c);
    }
}

/* bt_tcp_conns: the connection without a good request accepted longest ago, before
 * `before` (one accepted in this round is read before it may be dropped): its slot, or
 * -1. *n: how many connections are without one. */
static long kv_oldest_unauth(void *ctx, double before, size_t *n) {
    const kv_store *s = ctx;
    long at = -1;
    *n = s->n_unauth;
    if (*n == 0) return -1;
    for (size_t i = 0; i < s->used_to; i++) {
        const kv_conn *c = &s->conns[i];
        if (c->fd < 0 || c->authed) continue;
        if (c->opened < before && (at < 0 || c->opened < s->conns[at].opened)) at = (long)i;
    }
    return at;
}

static void kv_evict(void *ctx, long i) {
    kv_store *s = ctx;
    kv_drop(s, &s->conns[i]);
}

/* The new connection in the first free slot: found from s->free_from, below which every
 * slot is taken, so that a start-up's thousands of accepts each look at a few slots rather
 * than at every one taken before. 0, or -1 when full (closed: the client retries). */
static int kv_put(void *ctx, int fd, double now) {
    kv_store *s = ctx;
    for (size_t i = s->free_from; i < s->n_slots; i++)
        if (s->conns[i].fd < 0) {
            s->conns[i] = (kv_conn){.fd = fd, .opened = now};
            s->free_from = i + 1;
            s->used_to = i + 1 > s->used_to ? i + 1 : s->used_to;
            s->n_unauth++;
            return 0;
        }
    s->free_from = s->n_slots;
    close(fd);
    return -1;
}

/* Accepts what is queued, keeping at most s->max_unauth connections without a good
 * request (bt_tcp_accept_capped). */
static void kv_accept(kv_store *s, double now) {
    bt_tcp_conns t = {s, kv_oldest_unauth, kv_evict, kv_put};
    bt_tcp_accept_capped(s->listen_fd, s->max_unauth, &t, now, &s->accept_resume);
}

/* Closes the connections that sent no good request within BT_TCP_UNAUTH_TIMEOUT_S
 * (none to look for once every one has: a start-up's rounds then skip this). Returns how
 * many without one stay open. */
static size_t kv_expire(kv_store *s, double now) {
    for (size_t i = 0; i < s->used_to && s->n_unauth > 0; i++) {
        kv_conn *c = &s->conns[i];
        s->walked++;
        if (c->fd >= 0 && !c->authed && now - c->opened > BT_TCP_UNAUTH_TIMEOUT_S) kv_drop(s, c);
    }
    return s->n_unauth;
}

/* Fills pfd (the wake pipe, the listening socket unless accepting pauses, then every
 * connection, slot[k] naming pfd[k]'s): how many. The slots looked at are those up to the
 * highest in use, not all a store for 131072 ranks has (262k, most of them free). */
static int kv_pollfds(kv_store *s, struct pollfd *pfd, int *slot, double now) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    pfd[n++] = (struct pollfd){.fd = now >= s->accept_resume ? s->listen_fd : -1, .events = POLLIN};
    for (size_t i = 0; i < s->used_to; i++)
        if (s->conns[i].fd >= 0) {
            slot[n] = (int)i;
            pfd[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        }
    s->walked += s->used_to, s->rounds++;
    return n;
}

static void *kv_thread(void *arg) {
    kv_store *s = arg;
    size_t cap = s->n_slots + 2;
    struct pollfd *pfd = calloc((size_t)cap, sizeof *pfd);
    int *slot = calloc((size_t)cap, sizeof *slot);
    size_t waiting = 0; /* connections without a good request: a deadline to keep */
    for (int stop = pfd == NULL || slot == NULL; !stop;) {
        int n = kv_pollfds(s, pfd, slot, bt_clock_now());
        int ms = waiting > 0 || pfd[1].fd < 0 ? 250 : -1;
        if (poll(pfd, (nfds_t)n, ms) < 0 && errno != EINTR) break;
        stop = pfd[0].revents != 0;
        double now = bt_clock_now();
        for (int k = 2; k < n && !stop; k++) /* reads first: a request that came is served */
            if (pfd[k].revents) kv_read(s, &s->conns[slot[k]]);
        if (!stop && (pfd[1].revents & POLLIN)) kv_accept(s, now);
        waiting = kv_expire(s, now);
    }
    free(pfd);
    free(slot);
    return NULL;
}

int kv_store_open(kv_store *s, const char *bind_host, const char *token, size_t expected,
                  bt_diag *diag) {
    memset(s, 0, sizeof *s);
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    if (token == NULL || token[0] == '\0' || strlen(token) >= sizeof s->token) {
        bt_diag_set(diag, "rendezvous store: the token must be 1..%zu characters",
                    sizeof s->token - 1);
        return BT_EINVAL;
    }
    snprintf(s->token, sizeof s->token, "%s", token);
    s->max_unauth = bt_tcp_unauth_limit(expected);
    if (s->max_unauth < expected) s->max_unauth = expected;
    /* every worker's connection, as many more without a good request yet, and a few */
    s->n_slots = expected + s->max_unauth + 64;
    if (s->n_slots < KV_STORE_MIN_SLOTS) s->n_slots = KV_STORE_MIN_SLOTS;
    s->conns = calloc(s->n_slots, sizeof *s->conns);
    if (s->conns == NULL) return BT_ENOMEM;
    for (size_t i = 0; i < s->n_slots; i++)
        s->conns[i].fd = -1;
    int rc = kv_listen(s, bind_host, diag);
    if (rc == 0 && pipe2(s->wake, O_CLOEXEC) != 0) rc = BT_EIO;
    if (rc == 0 && pthread_create(&s->thread, NULL, kv_thread, s) != 0) rc = BT_EIO;
    if (rc != 0) {
        if (!bt_diag_isset(diag))
            bt_diag_set(diag, "rendezvous store: cannot start: %s", strerror(errno));
        kv_store_close(s);
        return rc;
    }
    s->running = 1;
    return 0;
}

void kv_store_close(kv_store *s) {
    if (s->running) {
        ssize_t w = write(s->wake[1], "x", 1);
        (void)w;
        pthread_join(s->thread, NULL);
        s->running = 0;
    }
    for (size_t i = 0; s->conns && i < s->n_slots; i++)
        kv_conn_close(&s->conns[i]);
    free(s->conns);
    kv_table_free(&s->keys);
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake[0] >= 0) close(s->wake[0]), close(s->wake[1]);
    uint64_t rounds = s->rounds, walked = s->walked;
    memset(s, 0, sizeof *s);
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    s->rounds = rounds, s->walked = walked;
}
