/* test_control many RUN_DIR: a world of thousands of ranks (past the 1024 connections the
 * server once held at most): every rank's Hello is taken and acknowledged, none refused,
 * a Stop reaches each one, and ranks that go are seen gone. One thread drives both ends
 * (Hellos sent raw, a batch at a time between server rounds), so the server's turns over
 * thousands of descriptors are timed too. Exit 77 where RLIMIT_NOFILE cannot hold both
 * ends. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control_server.h"
#include "test_control.h"
#include "util/clock.h"

enum { MANY_WORLD = 3000, MANY_BATCH = 100 }; /* a batch within any listen backlog */

/* A connection to cs that has sent rank's Hello; its fd, or -1. */
static int many_hello(const control_server *cs, uint32_t rank) {
    const char *colon = strrchr(cs->address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    Baton__Hello h = BATON__HELLO__INIT;
    h.token = "s3cret", h.host = "many";
    h.has_rank = h.has_world = h.has_attempt = h.has_pid = 1;
    h.rank = rank, h.world = MANY_WORLD, h.attempt = 0, h.pid = 1000 + rank;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO, env.hello = &h;
    uint8_t buf[256];
    uint32_t n = (uint32_t)baton__envelope__pack(&env, buf + 4);
    memcpy(buf, &n, 4); /* little-endian hosts only, as the test's wire elsewhere */
    if (send(fd, buf, n + 4, MSG_NOSIGNAL) != (ssize_t)(n + 4)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Server rounds (poll over every connection) until `connected` ranks are or limit_s pass;
 * the slowest round's seconds in *worst. */
static void many_pump(control_server *cs, uint32_t connected, double limit_s, double *worst) {
    static struct pollfd fds[2 * MANY_WORLD + 1024];
    double end = bt_clock_now() + limit_s;
    while (bt_clock_now() < end && control_server_connected(cs) != connected) {
        size_t n = control_server_pollfds(cs, fds, sizeof fds / sizeof *fds);
        if (poll(fds, n, 20) <= 0) continue;
        double t0 = bt_clock_now();
        control_server_handle(cs, fds, n, t0);
        double took = bt_clock_now() - t0;
        if (took > *worst) *worst = took;
    }
}

/* How many of fds[0..n) have bytes waiting (a HelloAck, a Stop). */
static int many_answered(const int *fds, int n) {
    int got = 0;
    for (int r = 0; r < n; r++) {
        char b[512];
        got += fds[r] >= 0 && recv(fds[r], b, sizeof b, MSG_DONTWAIT) > 0;
    }
    return got;
}

static int many_room(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 2 * MANY_WORLD + 200;
}

int many(const char *run_dir) {
    if (!many_room()) {
        printf("control many: skipped, RLIMIT_NOFILE cannot hold %d descriptors\n",
               2 * MANY_WORLD + 200);
        return 77;
    }
    static control_server cs;
    static int fds[MANY_WORLD];
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    CHECK(control_server_begin_attempt(&cs, 0, "s", 0, MANY_WORLD, 0) == 0, "begin");
    double start = bt_clock_now(), worst = 0;
    int opened = 0;
    for (int r = 0; r < MANY_WORLD; r++) {
        opened += (fds[r] = many_hello(&cs, (uint32_t)r)) >= 0;
        if ((r + 1) % MANY_BATCH != 0) continue;
        many_pump(&cs, (uint32_t)r + 1, 5, &worst);
        if (control_server_connected(&cs) != (uint32_t)r + 1) break; /* said below */
    }
    many_pump(&cs, MANY_WORLD, 10, &worst);
    double took = bt_clock_now() - start;
    CHECK(opened == MANY_WORLD, "%d of %d connections opened", opened, MANY_WORLD);
    CHECK(control_server_connected(&cs) == MANY_WORLD && cs.rejected == 0,
          "%u of %d ranks connected, %u refused", control_server_connected(&cs), MANY_WORLD,
          cs.rejected);
    CHECK(many_answered(fds, MANY_WORLD) == MANY_WORLD, "not every rank got its HelloAck");
    CHECK(control_server_stop_all(&cs, 1, "many") == MANY_WORLD, "Stop not sent to every rank");
    sleep_s(0.2);
    CHECK(many_answered(fds, MANY_WORLD) == MANY_WORLD, "not every rank got the Stop");
    for (int r = 0; r < MANY_WORLD; r += 2)
        close(fds[r]), fds[r] = -1;
    many_pump(&cs, MANY_WORLD / 2, 10, &worst);
    CHECK(control_server_connected(&cs) == MANY_WORLD / 2 && !cs.ranks[0].connected &&
              cs.ranks[1].connected,
          "after half the ranks went: %u connected", control_server_connected(&cs));
    CHECK(worst < 1.0, "a server round took %.3f s", worst);
    for (int r = 0; r < MANY_WORLD; r++)
        if (fds[r] >= 0) close(fds[r]);
    control_server_close(&cs);
    printf("control many: %s (%d ranks in %.2f s, slowest round %.3f s; %d failure(s))\n",
           failures ? "FAILED" : "ok", MANY_WORLD, took, worst, failures);
    return failures ? 1 : 0;
}
