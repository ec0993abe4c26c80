/* The rendezvous store of Slurm runs: baton run's server (orchestrator/launch/kv_store.c)
 * and the workers' client (worker/comm/comm_store_tcp.c) against each other over TCP. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "check.h"
#include "comm.h"
#include "kv_store.h"
#include "util/clock.h"

typedef struct late_set {
    comm_store *st;
    int rc;
} late_set;

/* Sets "late" 100 ms after it starts, while the main thread waits for it. */
static void *set_late(void *arg) {
    late_set *l = arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    bt_diag d;
    bt_diag_init(&d);
    l->rc = l->st->set(l->st->ctx, "late", "x", 1, &d);
    return NULL;
}

static void check_basic(comm_store *st) {
    bt_diag d;
    bt_diag_init(&d);
    void *v = NULL;
    size_t n = 0;
    CHECK(st->set(st->ctx, "job/a", "hello", 5, &d) == 0);
    CHECK(st->get(st->ctx, "job/a", &v, &n, 1000, &d) == 0);
    CHECK(n == 5 && v && memcmp(v, "hello", 5) == 0);
    free(v);
    CHECK(st->set(st->ctx, "job/a", "again", 5, &d) == BT_EINVAL);
    CHECK(strstr(d.msg, "already exists") != NULL);
    bt_diag_init(&d);
    double t0 = bt_clock_now();
    CHECK(st->get(st->ctx, "job/none", &v, &n, 80, &d) == BT_ENOENT);
    double waited = bt_clock_now() - t0;
    CHECK(waited >= 0.079 && waited < 1.0);
    CHECK(strstr(d.msg, "job/none") != NULL);
}

static void check_large_and_empty(comm_store *st) {
    bt_diag d;
    bt_diag_init(&d);
    size_t big = 512 * 1024, n = 0;
    char *buf = malloc(big);
    for (size_t i = 0; i < big; i++)
        buf[i] = (char)(i * 7);
    void *v = NULL;
    CHECK(st->set(st->ctx, "big", buf, big, &d) == 0);
    CHECK(st->get(st->ctx, "big", &v, &n, 1000, &d) == 0);
    CHECK(n == big && v && memcmp(v, buf, big) == 0);
    free(v);
    CHECK(st->set(st->ctx, "empty", "", 0, &d) == 0);
    CHECK(st->get(st->ctx, "empty", &v, &n, 1000, &d) == 0 && n == 0);
    free(v);
    free(buf);
}

static void check_waiting_get(comm_store *waiter, comm_store *setter) {
    late_set l = {.st = setter, .rc = -99};
    pthread_t t;
    pthread_create(&t, NULL, set_late, &l);
    bt_diag d;
    bt_diag_init(&d);
    void *v = NULL;
    size_t n = 0;
    CHECK(waiter->get(waiter->ctx, "late", &v, &n, 5000, &d) == 0);
    CHECK(n == 1 && v && ((char *)v)[0] == 'x');
    free(v);
    pthread_join(t, NULL);
    CHECK(l.rc == 0);
}

/* A plain TCP connection to the store's "127.0.0.1:PORT" that sends nothing: -1 if refused. */
static int idle_connect(const char *address) {
    const char *colon = strrchr(address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) close(fd), fd = -1;
    return fd;
}

/* Whether the store closed fd within timeout_ms (poll sees its end). */
static int closed_by_store(int fd, int timeout_ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char b;
    return poll(&p, 1, timeout_ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

/* More idle connections than the store has slots (KV_STORE_MAX_CONNS), as anyone who can
 * reach its port could open: a worker connecting after them is still served, since those
 * without a request are capped (the oldest dropped); and one that stays idle is closed
 * after BT_TCP_UNAUTH_TIMEOUT_S. */
static void check_idle_flood(const char *address) {
    enum { N = KV_STORE_MAX_CONNS + 100 };
    static int fds[N];
    int opened = 0;
    for (int i = 0; i < N; i++)
        if ((fds[i] = idle_connect(address)) >= 0) opened++;
    CHECK(opened == N);
    comm_store w;
    bt_diag d;
    bt_diag_init(&d);
    void *v = NULL;
    size_t n = 0;
    CHECK(comm_store_tcp(&w, address, "secret", NULL, 0, &d) == 0);
    int set = w.set(w.ctx, "after-flood", "ok", 2, &d);
    if (set != 0) fprintf(stderr, "after the flood: %s\n", d.msg);
    CHECK(set == 0);
    CHECK(w.get(w.ctx, "after-flood", &v, &n, 1000, &d) == 0 && n == 2);
    free(v);
    int dropped = 0;
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0) dropped += closed_by_store(fds[i], 0), close(fds[i]);
    CHECK(dropped >= N - 64); /* bt_tcp_unauth_cap() is 64 at most */
    int idle = idle_connect(address);
    double t0 = bt_clock_now();
    CHECK(idle >= 0 && closed_by_store(idle, 20000));
    double took = bt_clock_now() - t0;
    CHECK(took > 9.0 && took < 13.0);
    close(idle);
    /* the worker's connection, older than that and idle as long, stays open */
    CHECK(w.get(w.ctx, "after-flood", &v, &n, 1000, &d) == 0 && n == 2);
    free(v);
    w.close(w.ctx);
}

int main(void) {
    /* room for the flood's both ends in this one process */
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    if (rl.rlim_cur < 4096) rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    kv_store srv;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(kv_store_open(&srv, "127.0.0.1", "", &d) == BT_EINVAL);
    bt_diag_init(&d);
    if (kv_store_open(&srv, "127.0.0.1", "secret", &d) != 0) {
        fprintf(stderr, "kv_store_open: %s\n", d.msg);
        return 1;
    }
    comm_store a, b, bad;
    char host[64] = "";
    CHECK(comm_store_tcp(&a, srv.address, "secret", host, sizeof host, &d) == 0);
    CHECK(strcmp(host, "127.0.0.1") == 0); /* this end's address on the route to the store */
    CHECK(comm_store_tcp(&b, srv.address, "secret", NULL, 0, &d) == 0);
    check_basic(&a);
    check_large_and_empty(&b);
    check_waiting_get(&a, &b);
    CHECK(comm_store_tcp(&bad, srv.address, "wrong", NULL, 0, &d) == 0);
    bt_diag_init(&d);
    CHECK(bad.set(bad.ctx, "x", "1", 1, &d) == BT_EIO);
    CHECK(strstr(d.msg, "refused the token") != NULL);
    bad.close(bad.ctx);
    bt_diag_init(&d);
    CHECK(comm_store_tcp(&bad, "no-port", "secret", NULL, 0, &d) == BT_EINVAL);
    CHECK(strstr(d.msg, "no-port") != NULL);
    a.close(a.ctx);
    b.close(b.ctx);
    if (rl.rlim_cur >= 2 * KV_STORE_MAX_CONNS + 300)
        check_idle_flood(srv.address);
    else
        fprintf(stderr, "the idle-connection flood skipped: RLIMIT_NOFILE allows %llu\n",
                (unsigned long long)rl.rlim_cur);
    kv_store_close(&srv);
    return check_status();
}
