/* The rendezvous store served by `baton run` over TCP (stages/util/kv_wire.h), for ranks
 * on several hosts that share no filesystem: the Slurm launcher's. One connection per
 * store, which shows the token as soon as it is made (reconnecting, a few times, when the
 * store drops it first), used under a lock (Gloo may ask from more than one thread). A get of a key
 * not set yet is asked again, 1 ms backing off to 20 ms, until the caller's timeout. */
#include "comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/kv_wire.h"
#include "util/tcp.h"

#define TCP_STORE_CONNECT_S  20.0 /* the orchestrator is up before any worker starts */
#define TCP_STORE_AUTH_TRIES 10   /* connections the store drops before answering the token */

typedef struct tcp_store {
    int fd;
    pthread_mutex_t mu;
    char address[300];
    char token[KV_MAX_TOKEN + 1];
} tcp_store;

static void tcp_sleep_ms(double ms) {
    struct timespec ts = {(time_t)(ms / 1e3),
                          (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* "host:port" or "[v6]:port" into its parts. */
static int tcp_split(const char *address, char *host, size_t cap, const char **port) {
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon == address || colon[1] == '\0') return -1;
    const char *h = address;
    size_t n = (size_t)(colon - address);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') h++, n -= 2;
    if (n >= cap) return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = colon + 1;
    return 0;
}

static int tcp_connect(const char *address, bt_diag *diag) {
    char host[256];
    const char *port;
    if (tcp_split(address, host, sizeof host, &port) != 0) {
        bt_diag_set(diag, "rendezvous store address '%s': expected HOST:PORT", address);
        return BT_EINVAL;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        bt_diag_set(diag, "rendezvous store '%s': %s", address, gai_strerror(gai));
        return BT_EINVAL;
    }
    int fd = -1, err = 0;
    double deadline = bt_clock_now() + TCP_STORE_CONNECT_S;
    while (fd < 0 && bt_clock_now() < deadline) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            err = errno;
            close(fd), fd = -1;
            tcp_sleep_ms(100);
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        bt_diag_set(diag, "rendezvous store %s: cannot connect within %.0f s: %s", address,
                    TCP_STORE_CONNECT_S, strerror(err));
        return BT_EIO;
    }
    /* A request goes out in one send (tcp_request), and none of it waits for an ACK: when
     * it went in a few sends (head, token, key, value), Nagle's algorithm held each after
     * the first until the store's delayed ACK, about 40 ms a request. */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int tcp_recv(int fd, void *p, size_t n) {
    char *b = p;
    while (n > 0) {
        ssize_t k = recv(fd, b, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k, n -= (size_t)k;
    }
    return 0;
}

/* One request (in one send: bt_tcp_sendv) and its answer; *val (malloc'd) only for a get answered
 * KV_OK. */
static int tcp_request(tcp_store *ts, uint32_t op, const char *key, const void *val, size_t len,
                       uint32_t *status, void **out, size_t *out_len) {
    size_t tl = strlen(ts->token), kl = strlen(key);
    uint32_t head[4] = {htonl(op), htonl((uint32_t)tl), htonl((uint32_t)kl), htonl((uint32_t)len)};
    uint32_t ans[2];
    struct iovec iov[4] = {
        {head, sizeof head}, {ts->token, tl}, {(void *)key, kl}, {(void *)val, len}};
    if (bt_tcp_sendv(ts->fd, iov, 4, -1) != 0 || tcp_recv(ts->fd, ans, sizeof ans)) return -1;
    *status = ntohl(ans[0]);
    size_t n = ntohl(ans[1]);
    if (n > KV_MAX_VALUE) return -1;
    void *buf = malloc(n ? n : 1);
    if (buf == NULL || (n && tcp_recv(ts->fd, buf, n))) {
        free(buf);
        return -1;
    }
    if (out) {
        *out = buf, *out_len = n;
    } else {
        free(buf);
    }
    return 0;
}

static int tcp_check_key(const tcp_store *ts, const char *key, size_t len, bt_diag *diag) {
    size_t kl = strlen(key);
    if (kl == 0 || kl > KV_MAX_KEY || len > KV_MAX_VALUE) {
        bt_diag_set(diag,
                    "rendezvous key '%.100s' (%zu bytes, value %zu bytes) is out of the "
                    "store's limits (key 1..%u, value at most %u bytes)",
                    key, kl, len, KV_MAX_KEY, KV_MAX_VALUE);
        return BT_EINVAL;
    }
    (void)ts;
    return 0;
}

static int tcp_fail(tcp_store *ts, uint32_t status, const char *key, bt_diag *diag) {
    if (status == KV_EXISTS)
        bt_diag_set(diag,
                    "rendezvous key '%s' already exists in the store at %s: the prefix "
                    "was used before; every job attempt needs a fresh prefix",
                    key, ts->address);
    else if (status == KV_DENIED)
        bt_diag_set(diag,
                    "rendezvous store %s refused the token (BATON_CONTROL_TOKEN is not "
                    "this run's)",
                    ts->address);
    else
        bt_diag_set(diag,
                    "rendezvous store %s: the connection failed or the request for '%s' "
                    "was refused (status %u)",
                    ts->address, key, status);
    return status == KV_EXISTS ? BT_EINVAL : BT_EIO;
}

static int tcp_set(void *ctx, const char *key, const void *val, size_t len, bt_diag *diag) {
    tcp_store *ts = ctx;
    int rc = tcp_check_key(ts, key, len, diag);
    if (rc != 0) return rc;
    uint32_t status = KV_BAD;
    pthread_mutex_lock(&ts->mu);
    int io = tcp_request(ts, KV_OP_SET, key, val, len, &status, NULL, NULL);
    pthread_mutex_unlock(&ts->mu);
    return io == 0 && status == KV_OK ? 0 : tcp_fail(ts, io ? KV_BAD : status, key, diag);
}

static int tcp_get(void *ctx, const char *key, void **val, size_t *len, int timeout_ms,
                   bt_diag *diag) {
    tcp_store *ts = ctx;
    int rc = tcp_check_key(ts, key, 0, diag);
    if (rc != 0) return rc;
    double deadline = bt_clock_now() + timeout_ms / 1e3, pause = 1.0;
    for (;;) {
        uint32_t status = KV_BAD;
        pthread_mutex_lock(&ts->mu);
        int io = tcp_request(ts, KV_OP_GET, key, NULL, 0, &status, val, len);
        pthread_mutex_unlock(&ts->mu);
        if (io == 0 && status == KV_OK) return 0;
        if (io == 0 && status == KV_MISSING) free(*val);
        if (io != 0 || status != KV_MISSING) return tcp_fail(ts, io ? KV_BAD : status, key, diag);
        double left = (deadline - bt_clock_now()) * 1e3;
        if (left <= 0) {
            bt_diag_set(diag, "rendezvous key '%s' did not appear in the store at %s within %d ms",
                        key, ts->address, timeout_ms);
            return BT_ENOENT;
        }
        tcp_sleep_ms(pause < left ? pause : left);
        pause = pause * 2 < 20 ? pause * 2 : 20;
    }
}

static void tcp_close(void *ctx) {
    tcp_store *ts = ctx;
    close(ts->fd);
    pthread_mutex_destroy(&ts->mu);
    free(ts);
}

/* The numeric address of this end of fd: the host's own address on the route to the
 * store, which the Gloo transport then binds. */
static void tcp_local_host(int fd, char *out, size_t cap) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(out, cap, "127.0.0.1");
}

/* Connects and shows the token at once (KV_OP_AUTH), before the caller's slow work (CUDA
 * init), so that the store counts this connection as the run's: one the store closes
 * before answering (it drops the oldest of too many connections without the token, and
 * those silent for BT_TCP_UNAUTH_TIMEOUT_S) is made again, TCP_STORE_AUTH_TRIES times at
 * most, backing off 20 ms to 1 s. The fd, or an error (BT_EIO, with the reason). */
static int tcp_open_authed(tcp_store *ts, bt_diag *diag) {
    for (int tries = 1;; tries++) {
        int fd = tcp_connect(ts->address, diag);
        if (fd < 0) return fd;
        ts->fd = fd;
        uint32_t status = KV_BAD;
        int io = tcp_request(ts, KV_OP_AUTH, "", NULL, 0, &status, NULL, NULL);
        if (io == 0 && status == KV_OK) return fd;
        close(fd);
        ts->fd = -1;
        if (io == 0) return tcp_fail(ts, status, "(the token)", diag);
        if (tries == TCP_STORE_AUTH_TRIES) {
            bt_diag_set(diag,
                        "rendezvous store %s closed the connection %d times before it "
                        "answered the token",
                        ts->address, tries);
            return BT_EIO;
        }
        tcp_sleep_ms(bt_tcp_retry_ms(tries));
    }
}

int comm_store_tcp(comm_store *st, const char *address, const char *token, char *local_host,
                   size_t cap, bt_diag *diag) {
    memset(st, 0, sizeof *st);
    if (address == NULL || token == NULL || token[0] == '\0' || strlen(token) > KV_MAX_TOKEN) {
        bt_diag_set(diag, "rendezvous store: %s is not set", address ? "the token" : "the address");
        return BT_EINVAL;
    }
    tcp_store *ts = calloc(1, sizeof *ts);
    if (ts == NULL) return BT_ENOMEM;
    snprintf(ts->address, sizeof ts->address, "%s", address);
    snprintf(ts->token, sizeof ts->token, "%s", token);
    int fd = tcp_open_authed(ts, diag);
    if (fd < 0) {
        free(ts);
        return fd;
    }
    pthread_mutex_init(&ts->mu, NULL);
    if (local_host) tcp_local_host(fd, local_host, cap);
    st->ctx = ts;
    st->set = tcp_set;
    st->get = tcp_get;
    st->close = tcp_close;
    return 0;
}
