/* bench_rdzv: what baton run's control plane costs at start-up with many ranks
 * (bench/README.md, "Rendezvous and control"). Prints one JSON line of seconds:
 *  - store_set, store_get, store_miss: through one connection to the rendezvous store
 *    (kv_store.h) expecting --expected ranks (default --conns), --keys keys set (one per
 *    rank, as a start-up's per-rank keys), each got once, then as many gets of keys never
 *    set (a rank polling before its peer has set): the server's table and its poll round,
 *    over one connection's round trips;
 *  - store_accept: --conns raw connections to a store expecting --expected ranks (a store
 *    sized for a frontier run's 131072 ranks has 262k slots), each showing the token
 *    (KV_OP_AUTH) at once, until every one is answered;
 *  - control_hello, control_msgs: --conns ranks of a control server (control_server.h)
 *    saying Hello (sent a batch of 100 at a time, as test control.many does), then one
 *    Heartbeat and one Metrics each, until the server has applied them all; control_rounds
 *    counts the server's rounds of the second part.
 * Both ends of every connection are in this process: --conns is bounded by RLIMIT_NOFILE. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "control_server.h"
#include "kv_store.h"
#include "util/clock.h"
#include "util/kv_wire.h"

#define BENCH_TOKEN "s3cret"

static int bench_connect(const char *address) {
    const char *colon = strrchr(address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) close(fd), fd = -1;
    return fd;
}

/* One request (a whole one in one send, so that no Nagle delay is measured), its answer's
 * status, the value read and dropped: the status, or -1. */
static long bench_request(int fd, uint32_t op, const char *key, const char *val) {
    size_t tl = sizeof BENCH_TOKEN - 1, kl = strlen(key), vl = val ? strlen(val) : 0;
    uint32_t head[4] = {htonl(op), htonl((uint32_t)tl), htonl((uint32_t)kl), htonl((uint32_t)vl)};
    uint8_t req[sizeof head + sizeof BENCH_TOKEN + 256], ans[8 + 256];
    if (kl + vl > 256) return -1;
    memcpy(req, head, sizeof head);
    memcpy(req + sizeof head, BENCH_TOKEN, tl);
    memcpy(req + sizeof head + tl, key, kl);
    if (vl) memcpy(req + sizeof head + tl + kl, val, vl);
    size_t n = sizeof head + tl + kl + vl;
    if (send(fd, req, n, MSG_NOSIGNAL) != (ssize_t)n || recv(fd, ans, 8, MSG_WAITALL) != 8)
        return -1;
    uint32_t st, len;
    memcpy(&st, ans, 4), memcpy(&len, ans + 4, 4);
    len = ntohl(len);
    if (len > 256 || (len && recv(fd, ans + 8, len, MSG_WAITALL) != (ssize_t)len)) return -1;
    return (long)ntohl(st);
}

/* Through one connection to a store expecting `expected` ranks: sets keys "rank/R/addr",
 * gets each, then gets "miss/R" (never set): the three times in t[0..3). */
static int bench_store(size_t keys, size_t expected, double *t) {
    kv_store srv;
    bt_diag d;
    bt_diag_init(&d);
    if (kv_store_open(&srv, "127.0.0.1", BENCH_TOKEN, expected, &d) != 0) {
        fprintf(stderr, "bench_rdzv: store: %s\n", d.msg);
        return 1;
    }
    int fd = bench_connect(srv.address), one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char key[64];
    long bad = fd < 0;
    for (int phase = 0; phase < 3 && !bad; phase++) {
        double t0 = bt_clock_now();
        for (size_t r = 0; r < keys; r++) {
            snprintf(key, sizeof key, phase < 2 ? "rank/%zu/addr" : "miss/%zu", r);
            if (phase == 0) bad += bench_request(fd, KV_OP_SET, key, "10.0.0.1:29500") != KV_OK;
            if (phase == 1) bad += bench_request(fd, KV_OP_GET, key, NULL) != KV_OK;
            if (phase == 2) bad += bench_request(fd, KV_OP_GET, key, NULL) != KV_MISSING;
        }
        t[phase] = bt_clock_now() - t0;
    }
    if (fd >= 0) close(fd);
    kv_store_close(&srv);
    if (bad) fprintf(stderr, "bench_rdzv: store: %ld request(s) went wrong\n", bad);
    return bad != 0;
}

/* conns connections to a store expecting `expected` each send KV_OP_AUTH at once; seconds
 * until every one is answered. */
static int bench_store_accept(size_t conns, size_t expected, double *t) {
    kv_store srv;
    bt_diag d;
    bt_diag_init(&d);
    if (kv_store_open(&srv, "127.0.0.1", BENCH_TOKEN, expected, &d) != 0) {
        fprintf(stderr, "bench_rdzv: accept: %s\n", d.msg);
        return 1;
    }
    int *fd = calloc(conns, sizeof *fd);
    uint32_t req[4] = {htonl(KV_OP_AUTH), htonl(sizeof BENCH_TOKEN - 1), 0, 0};
    uint8_t msg[sizeof req + sizeof BENCH_TOKEN - 1];
    memcpy(msg, req, sizeof req);
    memcpy(msg + sizeof req, BENCH_TOKEN, sizeof BENCH_TOKEN - 1);
    double t0 = bt_clock_now();
    size_t answered = 0;
    for (size_t i = 0; i < conns; i++)
        if ((fd[i] = bench_connect(srv.address)) >= 0) send(fd[i], msg, sizeof msg, MSG_NOSIGNAL);
    for (size_t i = 0; i < conns; i++) {
        uint32_t ans[2];
        struct pollfd p = {.fd = fd[i], .events = POLLIN};
        answered += fd[i] >= 0 && poll(&p, 1, 20000) == 1 &&
                    recv(fd[i], ans, sizeof ans, MSG_WAITALL) == sizeof ans &&
                    ntohl(ans[0]) == KV_OK;
    }
    *t = bt_clock_now() - t0;
    for (size_t i = 0; i < conns; i++)
        if (fd[i] >= 0) close(fd[i]);
    free(fd);
    kv_store_close(&srv);
    if (answered != conns)
        fprintf(stderr, "bench_rdzv: accept: %zu of %zu answered\n", answered, conns);
    return answered != conns;
}

static int bench_send(int fd, const Baton__Envelope *env) {
    uint8_t buf[512];
    uint32_t n = (uint32_t)baton__envelope__pack(env, buf + 4);
    memcpy(buf, &n, 4); /* little-endian hosts only */
    return send(fd, buf, n + 4, MSG_NOSIGNAL) == (ssize_t)(n + 4) ? 0 : -1;
}

static int bench_hello(const control_server *cs, uint32_t rank, uint32_t world) {
    int fd = bench_connect(cs->address);
    Baton__Hello h = BATON__HELLO__INIT;
    h.token = BENCH_TOKEN, h.host = "bench";
    h.has_rank = h.has_world = h.has_attempt = h.has_pid = 1;
    h.rank = rank, h.world = world, h.attempt = 0, h.pid = 1000 + (int32_t)rank;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO, env.hello = &h;
    if (fd >= 0 && bench_send(fd, &env) != 0) close(fd), fd = -1;
    return fd;
}

/* One Heartbeat and one Metrics at step 1. */
static int bench_step(int fd, uint32_t rank) {
    Baton__Heartbeat hb = BATON__HEARTBEAT__INIT;
    hb.has_rank = hb.has_step = hb.has_phase = 1;
    hb.rank = rank, hb.step = 1, hb.phase = BATON__HEARTBEAT__PHASE__TRAIN;
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = 1, m.step = 1, m.loss = 2.5f;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &hb;
    Baton__Envelope env2 = BATON__ENVELOPE__INIT;
    env2.body_case = BATON__ENVELOPE__BODY_METRICS, env2.metrics = &m;
    return bench_send(fd, &env) != 0 || bench_send(fd, &env2) != 0 ? -1 : 0;
}

static uint32_t bench_stepped(const control_server *cs) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < cs->world; r++)
        n += cs->ranks[r].step == 1;
    return n;
}

/* Server rounds until done(cs) == want or 30 s pass; *rounds counted. */
static void bench_pump(control_server *cs, struct pollfd *fds, size_t cap,
                       uint32_t (*done)(const control_server *), uint32_t want, size_t *rounds) {
    double end = bt_clock_now() + 30;
    while (done(cs) != want && bt_clock_now() < end) {
        size_t n = control_server_pollfds(cs, fds, cap);
        if (poll(fds, n, 20) <= 0) continue;
        control_server_handle(cs, fds, n, bt_clock_now());
        ++*rounds;
    }
}

static int bench_control(uint32_t world, double *t, size_t *rounds) {
    static control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    if (control_server_open(&cs, BENCH_TOKEN, NULL, "127.0.0.1", &d) != 0 ||
        control_server_begin_attempt(&cs, 0, "s", 0, world, 0) != 0) {
        fprintf(stderr, "bench_rdzv: control: %s\n", d.msg);
        return 1;
    }
    size_t cap = 2 * (size_t)world + 1024, hello_rounds = 0;
    struct pollfd *fds = calloc(cap, sizeof *fds);
    int *fd = calloc(world, sizeof *fd);
    double t0 = bt_clock_now();
    for (uint32_t r = 0; r < world; r++) {
        fd[r] = bench_hello(&cs, r, world);
        if ((r + 1) % 100 == 0 || r + 1 == world)
            bench_pump(&cs, fds, cap, control_server_connected, r + 1, &hello_rounds);
    }
    t[0] = bt_clock_now() - t0;
    int ok = control_server_connected(&cs) == world;
    for (uint32_t r = 0; r < world; r++) {
        char b[64];
        while (recv(fd[r], b, sizeof b, MSG_DONTWAIT) > 0) { /* the HelloAck */
        }
        ok &= bench_step(fd[r], r) == 0;
    }
    t0 = bt_clock_now();
    bench_pump(&cs, fds, cap, bench_stepped, world, rounds);
    t[1] = bt_clock_now() - t0;
    ok &= bench_stepped(&cs) == world;
    for (uint32_t r = 0; r < world; r++)
        if (fd[r] >= 0) close(fd[r]);
    free(fd);
    free(fds);
    control_server_close(&cs);
    if (!ok) fprintf(stderr, "bench_rdzv: control: not every rank connected and stepped\n");
    return !ok;
}

int main(int argc, char **argv) {
    size_t keys = 131072, conns = 8000, expected = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--keys") == 0) keys = strtoul(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--conns") == 0) conns = strtoul(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--expected") == 0) expected = strtoul(argv[i + 1], NULL, 10);
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * conns + 300) {
        fprintf(stderr, "bench_rdzv: RLIMIT_NOFILE (%llu) cannot hold 2 x %zu connections\n",
                (unsigned long long)rl.rlim_cur, conns);
        return 2;
    }
    double s[3] = {0}, a = 0, c[2] = {0};
    size_t rounds = 0;
    expected = expected > conns ? expected : conns;
    int rc = bench_store(keys, expected, s);
    rc |= bench_store_accept(conns, expected, &a);
    rc |= bench_control((uint32_t)conns, c, &rounds);
    printf("{\"keys\": %zu, \"conns\": %zu, \"store_set\": %.3f, \"store_get\": %.3f, "
           "\"store_miss\": %.3f, \"store_accept\": %.3f, \"control_hello\": %.3f, "
           "\"control_msgs\": %.3f, \"control_rounds\": %zu}\n",
           keys, conns, s[0], s[1], s[2], a, c[0], c[1], rounds);
    return rc;
}
