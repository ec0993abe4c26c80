/* The control channel end to end inside one process: the orchestrator's server
 * (orchestrator/control) and the worker's client (worker/control) over real sockets.
 *
 *   test_control unit RUN_DIR
 *     Hello with the right token is accepted, heartbeats and metrics are tracked, rank
 *     0's metrics reach RUN_DIR/metrics.jsonl with every field, a wrong token, garbage, an
 *     oversized frame and a straggler of another attempt are refused without harm to the
 *     others, silence is measured, Stop reaches the client.
 *   test_control crowd RUN_DIR
 *     256 ranks connecting at once, Hellos late, dropped unread, duplicated, stale, a rank
 *     half-open or closing right after its Fatal: see tests/control/CMakeLists.txt.
 *   test_control many RUN_DIR
 *     3000 ranks at once (test_control_many.c).
 *   test_control ack
 *     The HelloAck: connecting again never holds up a send, a baton run that never
 *     acknowledges (the outbox full; the limit on waiting for it, 1 s here, reached, and
 *     at close), baton run gone (connect refused), a signal during the connect at open.
 *   test_control slowstep
 *     A worker (worker_control) whose connection is dropped before its Hello was read,
 *     its steps 2 s long: the Hello made again goes at once, the HelloAck is read mid-step.
 *   test_control serve SPEC_IN SPEC_OUT RUN_DIR WORLD STOP_AT ACTION
 *     For the worker tests: writes SPEC_IN with this server's control_address to SPEC_OUT,
 *     then serves (token from BATON_CONTROL_TOKEN). When rank 0 reports step STOP_AT it
 *     does ACTION: "stop" sends Stop to every rank, "term1" sends SIGTERM to rank 1 (pid
 *     from its Hello), "mark" creates RUN_DIR/reached for the script. It ends once every
 *     rank has connected and gone (or after 120 s) and prints what it saw.
 *
 * The metrics sink and replay tests (replay, stages, gap, orphans, backlog) are in
 * test_control_metrics.c, a full disk told by a Fatal (fatal) in test_control_fatal.c;
 * what the files share is in test_control.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "baton_version.h"
#include "control_client.h"
#include "control_internal.h"
#include "control_server.h"
#include "stage_spec.pb-c.h"
#include "test_control.h"
#include "util/clock.h"
#include "worker_control.h"
#include "worker_pacer.h"

int failures;

void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One poll-and-handle round of the server, waiting at most ms. */
void pump(control_server *cs, int ms) {
    struct pollfd fds[64];
    size_t n = control_server_pollfds(cs, fds, 64);
    if (poll(fds, n, ms) > 0) control_server_handle(cs, fds, n, bt_clock_now());
}

/* Pumps until cond(cs) holds or 5 s pass. */
int pump_until(control_server *cs, int (*cond)(const control_server *)) {
    double end = bt_clock_now() + 5;
    while (!cond(cs) && bt_clock_now() < end)
        pump(cs, 20);
    return cond(cs);
}

static int two_connected(const control_server *cs) {
    return control_server_connected(cs) == 2;
}
static int one_connected(const control_server *cs) {
    return control_server_connected(cs) == 1;
}
static int step3(const control_server *cs) {
    return cs->have_metrics && cs->last.step == 3;
}
static int rank1_step7(const control_server *cs) {
    return cs->ranks[1].step == 7;
}
static int got_fatal(const control_server *cs) {
    return cs->fatal.key.seen;
}
static unsigned want_rejected;
static int rejected(const control_server *cs) {
    return cs->rejected >= want_rejected;
}

/* A raw TCP connection to the server, for bytes no client would send. */
static int raw_connect(const control_server *cs) {
    const char *colon = strrchr(cs->address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -1;
    return fd;
}

void send_metrics(control_client *c, uint64_t step, double loss) {
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = 1, m.step = step;
    m.has_loss = 1, m.loss = loss;
    m.has_lr = 1, m.lr = 1e-3 * (double)step;
    m.has_grad_norm = 1, m.grad_norm = 0.5;
    m.has_tokens_per_s = 1, m.tokens_per_s = 1234.5;
    m.has_step_time_s = 1, m.step_time_s = 0.25;
    control_client_metrics(c, &m);
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, ch;
    if (f == NULL) return -1;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

static int closed_n;
static void *closer(void *arg) {
    control_client_close(arg);
    __atomic_add_fetch(&closed_n, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Closes a and b (each in a thread) while the server cs goes on: both are refused at every
 * try, closing waits no longer than the tries take. */
static void close_served(control_server *cs, control_client *a, control_client *b) {
    pthread_t ta, tb;
    double end = bt_clock_now() + CONTROL_CLIENT_CLOSE_WAIT_S;
    closed_n = 0;
    CHECK(pthread_create(&ta, NULL, closer, a) == 0 && pthread_create(&tb, NULL, closer, b) == 0,
          "thread");
    while (__atomic_load_n(&closed_n, __ATOMIC_ACQUIRE) < 2 && bt_clock_now() < end + 1)
        pump(cs, 20);
    CHECK(bt_clock_now() < end, "closing refused clients waited the whole close limit");
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
}

/* Wrong token, garbage, an oversized frame, another attempt: refused, harmless. */
static void unit_refusals(control_server *cs) {
    bt_diag d;
    bt_diag_init(&d);
    control_client bad;
    CHECK(control_client_open(&bad, cs->address, "wrong-token", 1, 2, 3, NULL, &d) == 0, "%s",
          d.msg);
    send_metrics(&bad, 99, 99.0);
    want_rejected = 1;
    CHECK(pump_until(cs, rejected), "a wrong token was not refused");
    CHECK(cs->last.step != 99, "metrics of a refused connection were taken");
    control_client stale;
    CHECK(control_client_open(&stale, cs->address, "s3cret", 1, 2, 2, NULL, &d) == 0, "%s", d.msg);
    want_rejected = 2;
    CHECK(pump_until(cs, rejected), "a Hello of another attempt was not refused");
    int g = raw_connect(cs), o = raw_connect(cs);
    CHECK(g >= 0 && o >= 0, "raw connect failed");
    const uint8_t garbage[] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
    const uint8_t huge[] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3};
    CHECK(write(g, garbage, sizeof garbage) == sizeof garbage, "write");
    CHECK(write(o, huge, sizeof huge) == sizeof huge, "write");
    want_rejected = 4;
    CHECK(pump_until(cs, rejected), "garbage or an oversized frame was not refused (%u)",
          cs->rejected);
    char b;
    CHECK(read(g, &b, 1) == 0 && read(o, &b, 1) == 0, "refused connections left open");
    close(g), close(o);
    close_served(cs, &bad, &stale);
}

static void unit_metrics_file(const char *run_dir) {
    char path[4096], line[4096] = "";
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    CHECK(count_lines(path) == 2, "metrics.jsonl has %d lines, expected 2", count_lines(path));
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        continue; /* the last line */
    if (f != NULL) fclose(f);
    static const char *const keys[] = {
        "\"time\": ",         "\"stage\": \"pretrain\"",  "\"stage_index\": 1",   "\"attempt\": 3",
        "\"step\": 3",        "\"global_step\": 103",     "\"loss\": 2.5",        "\"lr\": ",
        "\"grad_norm\": 0.5", "\"tokens_per_s\": 1234.5", "\"step_time_s\": 0.25"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(strstr(line, keys[i]) != NULL, "metrics line lacks %s: %s", keys[i], line);
}

int unit(const char *run_dir) {
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    CHECK(control_server_begin_attempt(&cs, 1, "pretrain", 3, 2, 100) == 0, "begin");
    CHECK(control_server_silence(&cs, bt_clock_now(), NULL) < 0, "silence without ranks");
    cs.build = "0.1.0 (git another)"; /* each Hello names the client's build: another */
    control_client r0, r1;
    CHECK(control_client_open(&r0, cs.address, "s3cret", 0, 2, 3, NULL, &d) == 0, "r0: %s", d.msg);
    CHECK(control_client_open(&r1, cs.address, "s3cret", 1, 2, 3, NULL, &d) == 0, "r1: %s", d.msg);
    CHECK(pump_until(&cs, two_connected), "two good ranks did not connect");
    CHECK(cs.ranks[1].pid == getpid(), "rank 1's pid %d", (int)cs.ranks[1].pid);
    CHECK(strcmp(cs.ranks[1].build, BATON_VERSION) == 0, "rank 1's build '%s'", cs.ranks[1].build);
    CHECK(cs.other_build == 0 || cs.other_build == 1, "other build: rank %d", cs.other_build);
    cs.build = NULL;
    unit_refusals(&cs);
    CHECK(control_server_connected(&cs) == 2, "refusals disturbed the good ranks");
    send_metrics(&r1, 3, 9.0); /* rank 1's metrics are tracked, not written */
    control_client_heartbeat(&r1, BATON__HEARTBEAT__PHASE__TRAIN, 7);
    send_metrics(&r0, 2, 3.0);
    send_metrics(&r0, 3, 2.5);
    CHECK(pump_until(&cs, step3) && pump_until(&cs, rank1_step7), "metrics/heartbeat lost");
    CHECK(cs.ranks[1].phase == BATON__HEARTBEAT__PHASE__TRAIN, "phase %d", cs.ranks[1].phase);
    CHECK(cs.last.loss == 2.5, "rank 0's loss %g", cs.last.loss);
    unit_metrics_file(run_dir);
    sleep_s(0.3);
    control_client_heartbeat(&r1, BATON__HEARTBEAT__PHASE__TRAIN, 8);
    pump(&cs, 200);
    int who = -1;
    double s = control_server_silence(&cs, bt_clock_now(), &who);
    CHECK(who == 0 && s >= 0.3 && s < 3, "silence %.3f s of rank %d", s, who);
    /* baton run was not running for 0.25 s, then for longer than any silence: forgiven */
    double now = bt_clock_now();
    control_server_forgive(&cs, 0.25, now);
    double f = control_server_silence(&cs, now, &who);
    CHECK(who == 0 && f > s - 0.3 && f < s - 0.2, "silence %.3f s after 0.25 s forgiven", f);
    control_server_forgive(&cs, 100, now);
    CHECK(control_server_silence(&cs, now, NULL) == 0, "silence %.3f s after all forgiven",
          control_server_silence(&cs, now, NULL));
    CHECK(control_server_stop_all(&cs, 1, "preempted") == 2, "Stop not sent to both");
    double end = bt_clock_now() + 5;
    while (!control_client_poll(&r0) && bt_clock_now() < end)
        sleep_s(0.01);
    CHECK(r0.stop && r0.stop_checkpoint && strcmp(r0.stop_reason, "preempted") == 0,
          "Stop not received");
    control_client_fatal(&r1, 1, 0, 0, "disk full");
    CHECK(pump_until(&cs, got_fatal) && cs.fatal.rank == 1 && cs.fatal.key.code == 1 &&
              strcmp(cs.fatal.message, "disk full") == 0,
          "Fatal not recorded");
    control_client_close(&r1);
    CHECK(pump_until(&cs, one_connected), "a closed rank still counts as connected");
    control_client_close(&r0);
    control_server_close(&cs);
    printf("control unit: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- crowd: many ranks whose Hello comes a little after their connect ------------------ */

enum { CROWD_WORLD = 256 };
static control_server crowd_cs;
static int crowd_delay_us;

/* A rank that connects, waits crowd_delay_us (a network round trip, a descheduled
 * worker), then sends its Hello and keeps the connection open for 3 s. */
static void *crowd_rank(void *arg) {
    uint32_t rank = (uint32_t)(uintptr_t)arg;
    int fd = raw_connect(&crowd_cs);
    if (fd < 0) return NULL;
    sleep_s(crowd_delay_us / 1e6);
    Baton__Hello h = BATON__HELLO__INIT;
    h.token = "s3cret", h.host = "crowd";
    h.has_rank = h.has_world = h.has_attempt = h.has_pid = 1;
    h.rank = rank, h.world = CROWD_WORLD, h.attempt = 0, h.pid = (uint32_t)getpid();
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO, env.hello = &h;
    uint8_t buf[512];
    uint32_t n = (uint32_t)baton__envelope__pack(&env, buf + 4);
    memcpy(buf, &n, 4); /* little-endian hosts only, as the test's wire elsewhere */
    if (send(fd, buf, n + 4, MSG_NOSIGNAL) != (ssize_t)(n + 4)) return NULL;
    sleep_s(3);
    close(fd);
    return NULL;
}

/* CROWD_WORLD ranks connect together, each Hello delay_us after its connect: every one is
 * taken (the tokenless-connection cap grows with the world), none refused. */
static void crowd_once(int delay_us) {
    bt_diag d;
    bt_diag_init(&d);
    crowd_delay_us = delay_us;
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 0, CROWD_WORLD, 0) == 0, "begin");
    unsigned rejected0 = crowd_cs.rejected;
    pthread_t t[CROWD_WORLD];
    for (uintptr_t i = 0; i < CROWD_WORLD; i++)
        CHECK(pthread_create(&t[i], NULL, crowd_rank, (void *)i) == 0, "thread");
    static struct pollfd fds[CROWD_WORLD + 64];
    double end = bt_clock_now() + 2.5;
    while (bt_clock_now() < end && control_server_connected(&crowd_cs) < CROWD_WORLD) {
        size_t k = control_server_pollfds(&crowd_cs, fds, CROWD_WORLD + 64);
        if (poll(fds, k, 20) > 0) control_server_handle(&crowd_cs, fds, k, bt_clock_now());
    }
    CHECK(control_server_connected(&crowd_cs) == CROWD_WORLD && crowd_cs.rejected == rejected0,
          "Hello %d us after connect: %u of %d connected, %u refused", delay_us,
          control_server_connected(&crowd_cs), CROWD_WORLD, crowd_cs.rejected - rejected0);
    for (int i = 0; i < CROWD_WORLD; i++)
        pthread_join(t[i], NULL);
}

/* The server accepts the connections waiting (a rank's, not read), then one more than its
 * cap of connections without a Hello: the oldest, the rank's, is dropped unread. */
static void crowd_evict(void) {
    struct pollfd l = {crowd_cs.listen_fd, POLLIN, POLLIN}; /* accepting only, no reads */
    sleep_s(0.05);
    control_server_handle(&crowd_cs, &l, 1, bt_clock_now()); /* the rank's, unread */
    size_t n_flood = crowd_cs.max_unauth + 1, n = 0;
    int flood[128];
    while (n < n_flood && n < 128 && (flood[n] = raw_connect(&crowd_cs)) >= 0)
        n++;
    sleep_s(0.05);
    control_server_handle(&crowd_cs, &l, 1, bt_clock_now()); /* one more than the cap: evicted */
    CHECK(control_server_connected(&crowd_cs) == 0, "the rank's Hello was read before the drop");
    for (size_t k = 0; k < n; k++)
        close(flood[k]);
}

/* The duplicate rank dup, never acknowledged, gives up after its tries, naming a rank
 * already connected among the causes (its message on stderr, caught in a file). */
static void crowd_dup_gives_up(control_client *twin, control_client *c) {
    char path[] = "/tmp/baton-crowd-XXXXXX", said[2048] = "";
    int fd = mkstemp(path), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0, "a file for stderr: %s", strerror(errno));
    if (fd < 0 || saved < 0) return;
    fflush(stderr);
    dup2(fd, 2);
    for (double end = bt_clock_now() + 8;
         bt_clock_now() < end && (twin->fd >= 0 || twin->redial);) {
        control_client_poll(twin), control_client_poll(c);
        pump(&crowd_cs, 20);
    }
    fflush(stderr);
    dup2(saved, 2), close(saved);
    ssize_t n = pread(fd, said, sizeof said - 1, 0);
    said[n > 0 ? n : 0] = '\0';
    close(fd), unlink(path);
    CHECK(twin->fd < 0 && !twin->redial, "the duplicate rank did not give up");
    CHECK(strstr(said, "no connection's Hello was acknowledged") &&
              strstr(said, "a rank already connected"),
          "the give-up message does not name a rank already connected: %s", said);
}

/* A rank whose connection the server drops before reading its Hello, as a flood makes it
 * (connections without a Hello over the cap, the oldest evicted): it connects again and
 * says Hello again, and what it sent before the drop arrives all the same. */
static void crowd_dropped(void) {
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 0, 1, 0) == 0, "begin");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, crowd_cs.address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    control_client_heartbeat(&c, BATON__HEARTBEAT__PHASE__LOAD, 5);
    crowd_evict();
    double end = bt_clock_now() + 5;
    while (bt_clock_now() < end && !(control_server_connected(&crowd_cs) == 1 &&
                                     crowd_cs.ranks[0].phase == BATON__HEARTBEAT__PHASE__LOAD)) {
        control_client_poll(&c);
        pump(&crowd_cs, 20);
    }
    CHECK(control_server_connected(&crowd_cs) == 1 && c.fd >= 0,
          "a rank dropped before its Hello was read did not connect again (fd %d)", c.fd);
    CHECK(crowd_cs.ranks[0].phase == BATON__HEARTBEAT__PHASE__LOAD && crowd_cs.ranks[0].step == 5,
          "what the rank sent before the drop was lost (phase %d, step %llu)",
          crowd_cs.ranks[0].phase, (unsigned long long)crowd_cs.ranks[0].step);
    /* the same rank from another run (its token) or a second worker of it (another node):
     * refused, never acknowledged, however often they connect again; the rank's own
     * connection kept */
    control_client other, dup;
    CHECK(control_client_open(&other, crowd_cs.address, "another-run", 0, 1, 0, NULL, &d) == 0 &&
              control_client_open(&dup, crowd_cs.address, "s3cret", 0, 1, 0, "twin-node", &d) == 0,
          "%s", d.msg);
    unsigned rejected0 = crowd_cs.rejected;
    for (end = bt_clock_now() + 1.5; bt_clock_now() < end;) {
        control_client_poll(&other), control_client_poll(&dup), control_client_poll(&c);
        pump(&crowd_cs, 20);
    }
    CHECK(!other.acked && !dup.acked && crowd_cs.rejected >= rejected0 + 4,
          "a Hello of another token or a connected rank was taken (acked %d %d, %u refused)",
          other.acked, dup.acked, crowd_cs.rejected - rejected0);
    CHECK(control_server_connected(&crowd_cs) == 1 && c.fd >= 0 && c.acked,
          "the rank lost its connection to a duplicate");
    crowd_dup_gives_up(&dup, &c);
    close_served(&crowd_cs, &other, &dup);
    control_client_close(&c);
}

static int crowd_fatal_done(const control_server *cs) {
    return cs->fatal.key.seen && cs->ranks[0].phase == BATON__HEARTBEAT__PHASE__DONE;
}

/* A short-lived rank: its Fatal and DONE sent whole, it closes, and only then is its
 * connection dropped unread (a flood). Closing waits for the HelloAck, connects again and
 * sends them again: they arrive. */
static void crowd_close_dropped(void) {
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 1, 1, 0) == 0, "begin");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, crowd_cs.address, "s3cret", 0, 1, 1, NULL, &d) == 0, "%s", d.msg);
    control_client_fatal(&c, 3, 0, 0, "disk full at the end");
    control_client_heartbeat(&c, BATON__HEARTBEAT__PHASE__DONE, 9);
    CHECK(c.fd >= 0 && c.out_head == c.out_len, "the socket did not take all (%zu of %zu)",
          c.out_head, c.out_len);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, closer, &c) == 0, "thread");
    sleep_s(0.1); /* closing, all sent */
    crowd_evict();
    pump_until(&crowd_cs, crowd_fatal_done);
    pthread_join(th, NULL);
    CHECK(crowd_cs.fatal.key.seen && strstr(crowd_cs.fatal.message, "disk full") != NULL,
          "a rank dropped unread while closing lost its Fatal");
    CHECK(crowd_cs.ranks[0].phase == BATON__HEARTBEAT__PHASE__DONE && crowd_cs.ranks[0].step == 9,
          "a rank dropped unread while closing lost its DONE (phase %d)", crowd_cs.ranks[0].phase);
}

static int crowd_loading(const control_server *cs) {
    return control_server_connected(cs) == 1 &&
           cs->ranks[0].phase == BATON__HEARTBEAT__PHASE__LOAD && cs->ranks[0].step == 11;
}

/* A rank dropped before its Hello was read, then busy loading a checkpoint (nothing else
 * touches the client): the pacer's heartbeats connect it again. */
static void crowd_pacer_redial(void) {
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 2, 1, 0) == 0, "begin");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, crowd_cs.address, "s3cret", 0, 1, 2, NULL, &d) == 0, "%s", d.msg);
    crowd_evict();
    sleep_s(0.05);
    control_client_poll(&c); /* sees the drop: a redial pending */
    CHECK(c.fd < 0 && c.redial, "the drop was not seen (fd %d, redial %d)", c.fd, c.redial);
    worker_pacer p;
    worker_pacer_init(&p, &c);
    worker_pacer_begin(&p, BATON__HEARTBEAT__PHASE__LOAD, 11);
    CHECK(pump_until(&crowd_cs, crowd_loading),
          "a rank loading with a redial pending did not connect again (connected %d)",
          control_server_connected(&crowd_cs));
    worker_pacer_end(&p);
    worker_pacer_free(&p);
    control_client_close(&c);
}

/* Reads fd until it ends or s seconds pass: whether it ended (baton run closed it). */
static int crowd_ends(int fd, double s) {
    char buf[256];
    for (double end = bt_clock_now() + s; bt_clock_now() < end;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 20) > 0 && recv(fd, buf, sizeof buf, MSG_DONTWAIT) == 0) return 1;
    }
    return 0;
}

/* A rank's connection broken on the worker's side only (reset there, the HelloAck lost with
 * it; baton run still sees it open): the same worker's next connection takes the rank over,
 * the old one closed; a second worker of that rank (another node) still does not. */
static void crowd_half_open(void) {
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 3, 1, 0) == 0, "begin");
    bt_diag d;
    bt_diag_init(&d);
    control_client c, twin;
    CHECK(control_client_open(&c, crowd_cs.address, "s3cret", 0, 1, 3, "node-a", &d) == 0, "%s",
          d.msg);
    CHECK(pump_until(&crowd_cs, one_connected) && !c.acked, "connected (acked %d)", c.acked);
    int sv[2], old = c.fd; /* the worker's end now one that reads as closed; baton run's open */
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0, "socketpair");
    close(sv[1]);
    c.fd = sv[0];
    for (double end = bt_clock_now() + 3; bt_clock_now() < end && !(c.acked && c.fd >= 0);) {
        control_client_poll(&c);
        pump(&crowd_cs, 20);
    }
    CHECK(c.acked && c.fd >= 0 && control_server_connected(&crowd_cs) == 1,
          "a rank half-open on baton run's side was not taken again (acked %d, fd %d, %u refused)",
          c.acked, c.fd, crowd_cs.rejected);
    CHECK(crowd_ends(old, 1), "baton run did not close the rank's old connection");
    close(old);
    CHECK(control_client_open(&twin, crowd_cs.address, "s3cret", 0, 1, 3, "node-b", &d) == 0, "%s",
          d.msg);
    for (double end = bt_clock_now() + 0.5; bt_clock_now() < end;) {
        control_client_poll(&twin), control_client_poll(&c);
        pump(&crowd_cs, 20);
    }
    CHECK(!twin.acked && c.acked && c.fd >= 0 && control_server_connected(&crowd_cs) == 1,
          "a second worker of the rank took it over (acked %d, the rank's fd %d)", twin.acked,
          c.fd);
    control_client other = {.fd = -1};
    close_served(&crowd_cs, &twin, &other);
    control_client_close(&c);
}

/* Two connections of one worker whose Hellos are both unread, the newer's read first: the
 * older's, read after, is stale and must not take the rank from the newer (a take-over
 * goes only to a connection accepted no earlier than the rank's). */
static void crowd_stale_hello(void) {
    CHECK(control_server_begin_attempt(&crowd_cs, 0, "s", 4, 1, 0) == 0, "begin");
    bt_diag d;
    bt_diag_init(&d);
    control_client stale, c;
    struct pollfd l = {crowd_cs.listen_fd, POLLIN, POLLIN}; /* accepting only, no reads */
    CHECK(control_client_open(&stale, crowd_cs.address, "s3cret", 0, 1, 4, "node-a", &d) == 0, "%s",
          d.msg);
    sleep_s(0.05);
    control_server_handle(&crowd_cs, &l, 1, bt_clock_now());
    sleep_s(0.01);
    CHECK(control_client_open(&c, crowd_cs.address, "s3cret", 0, 1, 4, "node-a", &d) == 0, "%s",
          d.msg);
    sleep_s(0.05);
    control_server_handle(&crowd_cs, &l, 1, bt_clock_now());
    CHECK(crowd_cs.n_conns == 2, "%zu connections accepted, not 2", crowd_cs.n_conns);
    struct pollfd newer = {crowd_cs.conns[crowd_cs.n_conns - 1].fd, POLLIN, POLLIN};
    control_server_handle(&crowd_cs, &newer, 1, bt_clock_now()); /* the newer's Hello first */
    for (double end = bt_clock_now() + 0.5; bt_clock_now() < end;) {
        control_client_poll(&c);
        pump(&crowd_cs, 20); /* then the older's */
    }
    CHECK(c.acked && c.fd >= 0 && !stale.acked && control_server_connected(&crowd_cs) == 1,
          "a stale Hello took the rank from the newer connection (newer acked %d fd %d, stale "
          "acked %d)",
          c.acked, c.fd, stale.acked);
    control_client other = {.fd = -1};
    close_served(&crowd_cs, &stale, &other);
    control_client_close(&c);
}

int crowd(const char *run_dir) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&crowd_cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s",
          d.msg);
    crowd_once(200);
    crowd_once(1000);
    crowd_dropped();
    crowd_close_dropped();
    crowd_pacer_redial();
    crowd_half_open();
    crowd_stale_hello();
    control_server_close(&crowd_cs);
    printf("control crowd: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- ack: baton runs that do not acknowledge, or cannot be reached again ----------------- */

/* A listening socket on 127.0.0.1 (non-blocking) with a backlog of one, nobody accepting
 * unless the test does: "127.0.0.1:port" in address. */
static int ack_listen(char *address, size_t cap) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    snprintf(address, cap, "127.0.0.1:%u", ntohs(sa.sin_port));
    return fd;
}

/* Waits at most s seconds for a connection on l, polling c meanwhile (NULL: none). */
static int ack_accept(int l, control_client *c, double s) {
    double end = bt_clock_now() + s;
    int fd = -1;
    while (fd < 0 && bt_clock_now() < end) {
        if (c != NULL) control_client_poll(c);
        fd = accept(l, NULL, NULL);
        if (fd < 0) sleep_s(0.01);
    }
    return fd;
}

/* Frames read from a connection, by kind. */
typedef struct ack_count {
    unsigned hello, heartbeat, metrics, other;
    double beat_last, beat_gap; /* when the last heartbeat came; the longest gap before one */
} ack_count;

/* Counts the whole frames at buf[0..*len), keeping the rest at its start. */
static void ack_decode(uint8_t *buf, size_t *len, ack_count *k) {
    size_t at = 0;
    uint32_t n;
    while (*len - at >= 4 && (memcpy(&n, buf + at, 4), *len - at - 4 >= n)) {
        Baton__Envelope *env = baton__envelope__unpack(NULL, n, buf + at + 4);
        int body = env ? (int)env->body_case : 0;
        k->hello += body == BATON__ENVELOPE__BODY_HELLO;
        k->heartbeat += body == BATON__ENVELOPE__BODY_HEARTBEAT;
        k->metrics += body == BATON__ENVELOPE__BODY_METRICS;
        k->other += body != BATON__ENVELOPE__BODY_HELLO &&
                    body != BATON__ENVELOPE__BODY_HEARTBEAT &&
                    body != BATON__ENVELOPE__BODY_METRICS;
        baton__envelope__free_unpacked(env, NULL);
        at += 4 + n;
    }
    memmove(buf, buf + at, *len - at);
    *len -= at;
}

/* Reads fd (blocking) to its end or for at most s seconds, counting its frames. */
static void ack_read(int fd, double s, ack_count *k) {
    static __thread uint8_t buf[1 << 17];
    size_t len = 0;
    double end = bt_clock_now() + s;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = end - bt_clock_now();
        if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        ssize_t got = recv(fd, buf + len, sizeof buf - len, 0);
        if (got <= 0) break;
        len += (size_t)got;
        unsigned beats = k->heartbeat;
        ack_decode(buf, &len, k);
        double now = bt_clock_now();
        if (k->heartbeat > beats && k->beat_last > 0 && now - k->beat_last > k->beat_gap)
            k->beat_gap = now - k->beat_last;
        if (k->heartbeat > beats) k->beat_last = now;
    }
}

/* Sends fd a HelloAck, as baton run does when it takes a Hello. */
static void ack_hello(int fd) {
    Baton__HelloAck ack = BATON__HELLO_ACK__INIT;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO_ACK, env.hello_ack = &ack;
    uint8_t buf[64];
    uint32_t n = (uint32_t)baton__envelope__pack(&env, buf + 4);
    memcpy(buf, &n, 4); /* little-endian hosts only, as crowd_rank */
    if (fd >= 0 && send(fd, buf, n + 4, MSG_NOSIGNAL) != (ssize_t)(n + 4))
        CHECK(0, "cannot send the HelloAck");
}

/* N heartbeats and polls while the client connects again to an address that does not answer
 * (its listen backlog full): returns the longest one took, in seconds. */
static double ack_sends_while_connecting(control_client *c, int n) {
    double most = 0;
    for (int i = 0; i < n; i++) {
        double t0 = bt_clock_now();
        control_client_heartbeat(c, BATON__HEARTBEAT__PHASE__TRAIN, (uint64_t)i + 1);
        control_client_poll(c);
        double took = bt_clock_now() - t0;
        most = took > most ? took : most;
        sleep_s(0.01);
    }
    return most;
}

/* The connection is dropped before the HelloAck and the address then does not answer (a
 * full listen backlog drops the SYN): connecting again does not hold up the sends (training),
 * and once the address answers, what was sent meanwhile arrives. */
static void ack_redial_unanswered(void) {
    char address[64];
    int l = ack_listen(address, sizeof address);
    CHECK(l >= 0, "listen");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    int first = ack_accept(l, NULL, 2), fill[4];
    close(first);                 /* the Hello unread: a reset */
    for (int k = 0; k < 4; k++) { /* the backlog full; the later ones wait, unanswered */
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof sa;
        getsockname(l, (struct sockaddr *)&sa, &len);
        fill[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[k], (struct sockaddr *)&sa, sizeof sa);
    }
    sleep_s(0.1);
    double most = ack_sends_while_connecting(&c, 100);
    CHECK(c.tries >= 2 && c.fd >= 0 && c.connecting,
          "the client is not connecting again (tries %d, fd %d, connecting %d)", c.tries, c.fd,
          c.connecting);
    CHECK(most < 0.3, "a send or poll while connecting again took %.2f s", most);
    for (int k = 0; k < 4; k++)
        close(fill[k]);
    int a;
    while ((a = accept(l, NULL, NULL)) >= 0) /* the backlog's, closed */
        close(a);
    int conn = ack_accept(l, &c, 8); /* the SYN sent again, or a connect made again */
    ack_count k = {0};
    for (double end = bt_clock_now() + 2; conn >= 0 && k.heartbeat < 100 && bt_clock_now() < end;) {
        control_client_poll(&c);
        ack_read(conn, 0.05, &k);
    }
    CHECK(k.hello == 1 && k.heartbeat == 100,
          "connected again: %u Hello, %u of 100 heartbeats arrived", k.hello, k.heartbeat);
    ack_hello(conn);
    double t0 = bt_clock_now();
    control_client_close(&c); /* acknowledged, all sent: at once */
    CHECK(bt_clock_now() - t0 < 1, "closing an acknowledged client took %.1f s",
          bt_clock_now() - t0);
    if (conn >= 0) close(conn);
    close(l);
}

/* A baton run older than its worker: reads everything, never acknowledges. */
static void *ack_old_server(void *arg) {
    int *fds = arg; /* listening socket in, then the count's 0/1: done */
    int fd = ack_accept(fds[0], NULL, 5);
    static ack_count k;
    if (fd >= 0) {
        ack_read(fd, 30, &k);
        close(fd);
    }
    return &k;
}

/* More than the outbox holds, sent to a baton run that never acknowledges: the client stops
 * keeping what was sent (taking the Hello as acknowledged), drops nothing, all arrives. */
static void ack_never(void) {
    enum { N = 100000 }; /* ~6 MB of metrics: over CONTROL_CLIENT_MAX_QUEUE */
    char address[64];
    int l = ack_listen(address, sizeof address);
    pthread_t th;
    CHECK(l >= 0 && pthread_create(&th, NULL, ack_old_server, &l) == 0, "listen, thread");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    for (uint64_t step = 1; step <= N; step++) {
        send_metrics(&c, step, 1.0);
        if (step % 1000 == 0) sleep_s(0.001); /* the reader keeps up: nothing waits long */
    }
    CHECK(c.ack_assumed && c.dropped == 0,
          "a baton run that never acknowledges: %u of %d messages dropped (kept %zu bytes)",
          c.dropped, N, c.out_len);
    control_client_close(&c);
    void *res;
    pthread_join(th, &res);
    const ack_count *k = res;
    CHECK(k->hello == 1 && k->metrics == N, "%u Hello, %u of %d metrics arrived", k->hello,
          k->metrics, N);
    close(l);
}

/* stderr into a file until stderr_back, which reads it into said (the messages a test checks). */
static int stderr_to_file(int *saved) {
    char path[] = "/tmp/baton-ack-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) unlink(path);
    fflush(stderr);
    *saved = fd >= 0 ? dup(2) : -1;
    if (*saved >= 0) dup2(fd, 2);
    return fd;
}

static void stderr_back(int fd, int saved, char *said, size_t cap) {
    said[0] = '\0';
    if (fd < 0 || saved < 0) return;
    fflush(stderr);
    dup2(saved, 2), close(saved);
    ssize_t n = pread(fd, said, cap - 1, 0);
    said[n > 0 ? n : 0] = '\0';
    close(fd);
}

static unsigned count_of(const char *s, const char *what) {
    unsigned n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

/* baton run gone before its HelloAck (the connection dropped, then nothing listens): the
 * refused connect ends the tries at once, closing does not wait out the backoffs, and the
 * worker says why once, not blaming a token or a flood. */
static void ack_gone(void) {
    char address[64], said[8192];
    int l = ack_listen(address, sizeof address), saved;
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    int first = ack_accept(l, NULL, 2);
    close(first), close(l);
    int fd = stderr_to_file(&saved);
    double t0 = bt_clock_now();
    control_client_close(&c);
    double took = bt_clock_now() - t0;
    stderr_back(fd, saved, said, sizeof said);
    CHECK(took < 1, "closing after baton run went away took %.2f s", took);
    CHECK(count_of(said, "connecting again") == 1,
          "\"connecting again\" said %u times, not once: %s", count_of(said, "connecting again"),
          said);
    CHECK(strstr(said, "Connection refused: baton run no longer listens") &&
              !strstr(said, "a token or attempt"),
          "the message does not say baton run is gone: %s", said);
}

/* A baton run older than its worker, for ack_expiry: reads everything, never acknowledges. */
typedef struct ack_silent {
    int l;
    ack_count k;
} ack_silent;

static void *ack_silent_serve(void *arg) {
    ack_silent *s = arg;
    int fd = ack_accept(s->l, NULL, 5);
    if (fd >= 0) ack_read(fd, 15, &s->k), close(fd);
    return NULL;
}

/* A client of address whose HelloAck is waited for at most 1 s (BATON_TEST_ACK_WAIT_S). */
static int ack_open_1s(control_client *c, const char *address) {
    bt_diag d;
    bt_diag_init(&d);
    setenv("BATON_TEST_ACK_WAIT_S", "1", 1);
    int rc = control_client_open(c, address, "s3cret", 0, 1, 0, NULL, &d);
    unsetenv("BATON_TEST_ACK_WAIT_S");
    CHECK(rc == 0, "%s", d.msg);
    return rc;
}

/* Heartbeats 1..n, then a poll. */
static void ack_beats(control_client *c, int n) {
    for (int i = 1; i <= n; i++)
        control_client_heartbeat(c, BATON__HEARTBEAT__PHASE__TRAIN, (uint64_t)i);
    control_client_poll(c);
}

/* A baton run that never acknowledges, the HelloAck's limit 1 s: what was sent is kept for a
 * connection made again until then, and no longer after it (said once); all of it arrives. */
static void ack_expiry_kept(void) {
    char address[64], said[8192];
    ack_silent s = {.l = ack_listen(address, sizeof address)};
    pthread_t th;
    CHECK(s.l >= 0 && pthread_create(&th, NULL, ack_silent_serve, &s) == 0, "listen, thread");
    control_client c;
    if (ack_open_1s(&c, address) != 0) return;
    int saved, fd = stderr_to_file(&saved);
    ack_beats(&c, 20);
    CHECK(!c.acked && c.out_head == c.out_len && c.out_len > 0,
          "before the limit, what was sent is not kept (acked %d, %zu of %zu bytes sent)", c.acked,
          c.out_head, c.out_len);
    while (!c.acked && bt_clock_now() - c.connected_at < 3) {
        control_client_poll(&c);
        sleep_s(0.01);
    }
    double at = bt_clock_now() - c.connected_at;
    CHECK(c.ack_assumed && at >= 1 && at < 2 && c.out_len == 0,
          "1 s on: the Hello taken as acknowledged %d after %.2f s, %zu bytes still kept",
          c.ack_assumed, at, c.out_len);
    ack_beats(&c, 20);
    CHECK(c.out_len == 0, "after the limit, %zu bytes sent are still kept", c.out_len);
    control_client_close(&c);
    stderr_back(fd, saved, said, sizeof said);
    CHECK(count_of(said, "has not acknowledged the Hello within 1 s") == 1,
          "the limit not said once: %s", said);
    pthread_join(th, NULL);
    CHECK(s.k.hello == 1 && s.k.heartbeat == 40, "%u Hello, %u of 40 heartbeats arrived", s.k.hello,
          s.k.heartbeat);
    close(s.l);
}

/* A worker closing 0.1 s after it connected to a baton run that never acknowledges: close
 * waits for the HelloAck until its limit (1 s), not CONTROL_CLIENT_CLOSE_WAIT_S, and says
 * nothing was lost. */
static void ack_expiry_close(void) {
    char address[64], said[8192];
    ack_silent s = {.l = ack_listen(address, sizeof address)};
    pthread_t th;
    CHECK(s.l >= 0 && pthread_create(&th, NULL, ack_silent_serve, &s) == 0, "listen, thread");
    control_client c;
    if (ack_open_1s(&c, address) != 0) return;
    ack_beats(&c, 5);
    sleep_s(0.1);
    double connected = c.connected_at, t0 = bt_clock_now();
    int saved, fd = stderr_to_file(&saved);
    control_client_close(&c);
    double took = bt_clock_now() - t0, since = bt_clock_now() - connected;
    stderr_back(fd, saved, said, sizeof said);
    CHECK(since >= 1 && since < 3, /* not 10 s; a loaded machine's delays let pass */
          "closing took %.2f s, ending %.2f s after the connect (want the 1 s limit)", took, since);
    CHECK(!strstr(said, "may not have been delivered"), "close said: %s", said);
    pthread_join(th, NULL);
    CHECK(s.k.hello == 1 && s.k.heartbeat >= 5, /* and the last repeated while close waited */
          "%u Hello, %u of 5 heartbeats arrived", s.k.hello, s.k.heartbeat);
    close(s.l);
}

/* A worker closing 0.1 s after it connected to a baton run that never acknowledges (the
 * HelloAck's 60 s limit): close waits for it CONTROL_CLIENT_CLOSE_ACK_S after the connect, not
 * CONTROL_CLIENT_CLOSE_WAIT_S, its last heartbeat repeated meanwhile (an older baton run kills
 * a rank silent for heartbeat_timeout), and says nothing: everything was sent. A connection
 * older than that closes at once. */
static void ack_close_beats(void) {
    char address[64], said[8192];
    ack_silent s = {.l = ack_listen(address, sizeof address)};
    pthread_t th;
    CHECK(s.l >= 0 && pthread_create(&th, NULL, ack_silent_serve, &s) == 0, "listen, thread");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    CHECK(control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    control_client_heartbeat(&c, BATON__HEARTBEAT__PHASE__DONE, 7);
    sleep_s(0.1);
    double connected = c.connected_at;
    int saved, fd = stderr_to_file(&saved);
    control_client_close(&c);
    double closed = bt_clock_now(), since = closed - connected;
    stderr_back(fd, saved, said, sizeof said);
    pthread_join(th, NULL);
    /* bounds a scheduling stall of a loaded machine (2 shared cores, sanitizers) passes:
     * the ack's limit, not CONTROL_CLIENT_CLOSE_WAIT_S; beats repeated, none missed for
     * 4 periods (what an older baton run's heartbeat_timeout, minutes, would need is far
     * more) */
    double slack = 4 * CONTROL_CLIENT_CLOSE_BEAT_S;
    CHECK(since >= CONTROL_CLIENT_CLOSE_ACK_S && since < CONTROL_CLIENT_CLOSE_ACK_S + 3.0,
          "closing ended %.2f s after the connect (want %g s)", since, CONTROL_CLIENT_CLOSE_ACK_S);
    CHECK(s.k.heartbeat >= 3 && s.k.beat_gap < slack && closed - s.k.beat_last < slack,
          "while close waited, %u heartbeat(s), the longest gap %.2f s, the last %.2f s before "
          "the end",
          s.k.heartbeat, s.k.beat_gap, closed - s.k.beat_last);
    CHECK(said[0] == '\0', "close said: %s", said);
    close(s.l);
    /* a connection open longer than the HelloAck is waited for at close */
    s = (ack_silent){.l = ack_listen(address, sizeof address)};
    CHECK(s.l >= 0 && pthread_create(&th, NULL, ack_silent_serve, &s) == 0, "listen, thread");
    CHECK(control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    control_client_heartbeat(&c, BATON__HEARTBEAT__PHASE__TRAIN, 1);
    sleep_s(CONTROL_CLIENT_CLOSE_ACK_S + 0.1);
    control_client_heartbeat(&c, BATON__HEARTBEAT__PHASE__DONE, 2);
    double t0 = bt_clock_now();
    fd = stderr_to_file(&saved);
    control_client_close(&c);
    double took = bt_clock_now() - t0;
    stderr_back(fd, saved, said, sizeof said);
    pthread_join(th, NULL);
    CHECK(took < 0.5, "closing a connection open %g s took %.2f s",
          CONTROL_CLIENT_CLOSE_ACK_S + 0.1, took);
    CHECK(said[0] == '\0', "close said: %s", said);
    CHECK(s.k.hello == 1 && s.k.heartbeat == 2, "%u Hello, %u of 2 heartbeats arrived", s.k.hello,
          s.k.heartbeat);
    close(s.l);
}

static void ack_no_op(int sig) {
    (void)sig;
}

/* The helper of ack_open_interrupted: a signal to the opening thread (*arg) 0.2 s into its
 * connect, then the listen backlog emptied: the connect can end (the SYN sent again). */
static int ack_fill[4], ack_fill_l;
static void *ack_interrupt(void *arg) {
    sleep_s(0.2);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    sleep_s(0.2);
    for (int k = 0; k < 4; k++)
        close(ack_fill[k]);
    int a;
    while ((a = accept(ack_fill_l, NULL, NULL)) >= 0)
        close(a);
    return NULL;
}

/* Fills l's backlog: a connect to it then goes unanswered (its SYN dropped). */
static void ack_fill_backlog(int l, int *fill) {
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof sa;
    getsockname(l, (struct sockaddr *)&sa, &len);
    for (int k = 0; k < 4; k++) {
        fill[k] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[k], (struct sockaddr *)&sa, sizeof sa);
    }
    sleep_s(0.1);
}

/* A signal (SIGTERM, its handler installed as the worker's) during the connect at open is
 * not a timeout: the connect goes on and the channel opens. */
static void ack_open_interrupted(void) {
    char address[64];
    ack_fill_l = ack_listen(address, sizeof address);
    ack_fill_backlog(ack_fill_l, ack_fill);
    struct sigaction sa = {.sa_handler = ack_no_op}, was; /* no SA_RESTART, as poll ignores it */
    sigaction(SIGUSR1, &sa, &was);
    pthread_t self = pthread_self(), th;
    CHECK(pthread_create(&th, NULL, ack_interrupt, &self) == 0, "thread");
    bt_diag d;
    bt_diag_init(&d);
    control_client c;
    int rc = control_client_open(&c, address, "s3cret", 0, 1, 0, NULL, &d);
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &was, NULL);
    CHECK(rc == 0 && c.fd >= 0, "a signal during the connect at open gave the channel up: %s",
          d.msg);
    int conn = ack_accept(ack_fill_l, NULL, 3);
    ack_hello(conn);
    if (rc == 0) control_client_close(&c);
    if (conn >= 0) close(conn);
    close(ack_fill_l);
}

int ack(void) {
    ack_redial_unanswered();
    ack_never();
    ack_gone();
    ack_expiry_kept();
    ack_expiry_close();
    ack_close_beats();
    ack_open_interrupted();
    printf("control ack: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- slowstep: a worker whose training steps are long ---------------------------------- */

typedef struct slow_server {
    int l;
    double dropped, hello_after; /* when the first connection was dropped; the next one's
                                  * first bytes (its Hello) came that long after (-1: none) */
    ack_count k;
} slow_server;

/* baton run's part, touching no client: drops the worker's first connection unread (a
 * flood's eviction, a reset), takes the next one, acknowledges its Hello when it comes, and
 * reads it to its end. */
static void *slow_serve(void *arg) {
    slow_server *s = arg;
    int first = ack_accept(s->l, NULL, 2);
    if (first >= 0) close(first);
    s->dropped = bt_clock_now();
    int fd = ack_accept(s->l, NULL, 2.5);
    struct pollfd p = {fd, POLLIN, 0};
    if (fd >= 0 && poll(&p, 1, (int)(1000 * (s->dropped + 2.5 - bt_clock_now()))) > 0) {
        s->hello_after = bt_clock_now() - s->dropped;
        ack_hello(fd);
        ack_read(fd, 10, &s->k);
    }
    if (fd >= 0) close(fd);
    return NULL;
}

/* Whether the worker's client has the HelloAck, read as the training loop may (locked). */
static int slow_acked(worker_control *wc) {
    worker_pacer_lock(&wc->pacer);
    int acked = wc->client.acked;
    worker_pacer_unlock(&wc->pacer);
    return acked;
}

/* A worker whose first connection is dropped before its Hello was read, its steps 2 s long
 * (nothing but the pacer's thread touches the client meanwhile, and it is not busy): the
 * Hello made again reaches baton run at once, not a step later (baton run drops a
 * connection without a Hello after BT_TCP_UNAUTH_TIMEOUT_S, or sooner under a flood), and
 * the HelloAck is read before the step ends. */
int slowstep(void) {
    char address[64];
    slow_server s = {.l = ack_listen(address, sizeof address), .hello_after = -1};
    CHECK(s.l >= 0, "listen");
    setenv("BATON_CONTROL_TOKEN", "s3cret", 1);
    Baton__StageSpec spec = BATON__STAGE_SPEC__INIT;
    spec.control_address = address;
    worker_control wc;
    worker_control_init(&wc);
    worker_control_start(&wc, &spec, NULL, 1, 2, NULL);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, slow_serve, &s) == 0, "thread");
    bt_diag d;
    bt_diag_init(&d);
    train_metrics m = {0};
    for (m.step = 1; m.step <= 2; m.step++) {
        sleep_s(2); /* a training step */
        CHECK(m.step < 2 || slow_acked(&wc), "no HelloAck after a step, the Hello made again");
        worker_control_after_step(&wc, &m, &d);
    }
    CHECK(s.hello_after >= 0 && s.hello_after < 1,
          "the Hello made again came %.2f s after the drop (-1: not within 2.5 s)", s.hello_after);
    close(s.l); /* a connect made again now refused: closing does not wait out the tries */
    worker_control_close(&wc);
    pthread_join(th, NULL);
    CHECK(s.k.heartbeat >= 2, "%u heartbeats arrived on the connection made again", s.k.heartbeat);
    printf("control slowstep: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- serve ----------------------------------------------------------------------------- */

static int serve_write_spec(const char *in, const char *out, const char *address) {
    FILE *f = fopen(in, "rb");
    static uint8_t buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f != NULL) fclose(f);
    Baton__StageSpec *s = n ? baton__stage_spec__unpack(NULL, n, buf) : NULL;
    if (s == NULL) return -1;
    s->control_address = (char *)address;
    size_t m = baton__stage_spec__get_packed_size(s);
    uint8_t *o = malloc(m);
    baton__stage_spec__pack(s, o);
    s->control_address = NULL; /* not ours to free */
    baton__stage_spec__free_unpacked(s, NULL);
    f = fopen(out, "wb");
    int ok = f != NULL && fwrite(o, 1, m, f) == m;
    ok = (f == NULL || fclose(f) == 0) && ok;
    free(o);
    return ok ? 0 : -1;
}

static void serve_act(control_server *cs, const char *action, const char *run_dir) {
    if (strcmp(action, "stop") == 0) {
        printf("serve: sent Stop to %d rank(s)\n", control_server_stop_all(cs, 1, "test stop"));
    } else if (strcmp(action, "term1") == 0 && cs->world > 1 && cs->ranks[1].pid > 0) {
        printf("serve: SIGTERM to rank 1 (pid %d)\n", (int)cs->ranks[1].pid);
        kill(cs->ranks[1].pid, SIGTERM);
    } else if (strcmp(action, "mark") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/reached", run_dir);
        FILE *f = fopen(path, "w");
        if (f != NULL) fclose(f);
    }
    fflush(stdout);
}

int serve(char **argv) {
    const char *token = getenv("BATON_CONTROL_TOKEN"), *run_dir = argv[4], *action = argv[7];
    uint32_t world = (uint32_t)atoi(argv[5]);
    uint64_t stop_at = (uint64_t)atoll(argv[6]);
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    if (token == NULL || control_server_open(&cs, token, run_dir, NULL, &d) != 0 ||
        control_server_begin_attempt(&cs, 0, "train", 0, world, 0) != 0 ||
        serve_write_spec(argv[2], argv[3], cs.address) != 0) {
        fprintf(stderr, "serve: cannot start: %s\n", d.msg);
        return 1;
    }
    printf("serve: listening on %s\n", cs.address);
    fflush(stdout);
    int acted = 0;
    uint32_t seen = 0;
    double end = bt_clock_now() + 120, max_silence = 0;
    while (bt_clock_now() < end) {
        pump(&cs, 50);
        seen = 0;
        for (uint32_t r = 0; r < world; r++)
            seen += cs.ranks[r].ever_connected != 0;
        double s = control_server_silence(&cs, bt_clock_now(), NULL);
        max_silence = s > max_silence ? s : max_silence;
        if (!acted && cs.have_metrics && cs.last.step >= stop_at) {
            serve_act(&cs, action, run_dir);
            acted = 1;
        }
        if (seen == world && control_server_connected(&cs) == 0) break;
    }
    printf("serve: ranks seen %u/%u, last step %llu, rejected %u, fatal %s, longest silence "
           "%.1f s\n",
           seen, world, (unsigned long long)cs.last.step, cs.rejected,
           cs.fatal.key.seen ? cs.fatal.message : "none", max_silence);
    control_server_close(&cs);
    return seen == world ? 0 : 1;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "unit") == 0) return unit(argv[2]);
    if (argc == 3 && strcmp(argv[1], "replay") == 0) return replay(argv[2]);
    if (argc == 3 && strcmp(argv[1], "stages") == 0) return stages(argv[2]);
    if (argc == 3 && strcmp(argv[1], "crowd") == 0) return crowd(argv[2]);
    if (argc == 3 && strcmp(argv[1], "many") == 0) return many(argv[2]);
    if (argc == 3 && strcmp(argv[1], "backlog") == 0) return backlog(argv[2]);
    if (argc == 3 && strcmp(argv[1], "gap") == 0) return gap(argv[2]);
    if (argc == 2 && strcmp(argv[1], "ack") == 0) return ack();
    if (argc == 2 && strcmp(argv[1], "slowstep") == 0) return slowstep();
    if (argc == 3 && strcmp(argv[1], "orphans") == 0) return orphans(argv[2]);
    if (argc == 4 && strcmp(argv[1], "enospc") == 0) return enospc(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "fatal") == 0) return fatal(argv[2]);
    if (argc == 3 && strcmp(argv[1], "reason") == 0) return fatal_reason(argv[2]);
    if (argc == 3 && strcmp(argv[1], "build") == 0) return build(argv[2]);
    if (argc == 8 && strcmp(argv[1], "serve") == 0) return serve(argv);
    fprintf(stderr,
            "usage: test_control unit RUN_DIR | crowd RUN_DIR | ack | replay RUN_DIR | backlog "
            "RUN_DIR | gap RUN_DIR | "
            "orphans RUN_DIR | enospc RUN_DIR moment|rewind|edited|reopen|torn|bound | fatal "
            "RUN_DIR | reason RUN_DIR | serve "
            "SPEC_IN SPEC_OUT RUN_DIR WORLD "
            "STOP_AT stop|term1|mark\n");
    return 2;
}
