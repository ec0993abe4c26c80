/* The worker's end of the control channel (control_client.h). */
#include "control_client.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "baton_version.h"
#include "util/clock.h"
#include "util/tcp.h"

/* Splits "host:port" or "[host]:port". */
static int control_split(const char *address, char *host, size_t cap, const char **port) {
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon[1] == '\0') return -1;
    const char *h = address;
    size_t n = (size_t)(colon - address);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
    if (n == 0 || n >= cap) return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = colon + 1;
    return 0;
}

/* A non-blocking socket whose connect() to the address is begun: fd (*busy: it goes on,
 * control_connect_done), or -1 (errno). */
static int control_connect_start(int family, int socktype, int protocol, const struct sockaddr *sa,
                                 socklen_t len, int *busy) {
    int fd = socket(family, socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, protocol);
    if (fd < 0) return -1;
    *busy = connect(fd, sa, len) != 0;
    if (!*busy || errno == EINPROGRESS) return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Whether fd's connect has ended, waiting at most ms: 1 connected (fd stays non-blocking:
 * control_flush), 0 not yet, -1 failed (errno). */
static int control_connect_done(int fd, int ms) {
    struct pollfd p = {fd, POLLOUT, 0};
    int r = poll(&p, 1, ms), err = 0;
    if (r == 0 || (r < 0 && errno == EINTR)) return 0;
    socklen_t len = sizeof err;
    if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -1;
    if (err != 0) {
        errno = err;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 1;
}

/* Connects to ai within CONTROL_CLIENT_CONNECT_TIMEOUT_S (at open, before training) and
 * keeps its address for connecting again without a name lookup. */
static int control_connect_one(control_client *c, const struct addrinfo *ai) {
    int busy, fd = control_connect_start(ai->ai_family, ai->ai_socktype, ai->ai_protocol,
                                         ai->ai_addr, ai->ai_addrlen, &busy);
    int done = fd < 0 ? -1 : 0;
    /* until the deadline: a signal (SIGTERM, its handler installed) ends poll early */
    for (double end = bt_clock_now() + CONTROL_CLIENT_CONNECT_TIMEOUT_S, left;
         done == 0 && (left = end - bt_clock_now()) > 0;)
        done = control_connect_done(fd, (int)(left * 1000) + 1);
    if (done != 1) {
        int e = done == 0 ? ETIMEDOUT : errno;
        if (fd >= 0) close(fd);
        errno = e;
        return -1;
    }
    memcpy(&c->peer, ai->ai_addr, ai->ai_addrlen);
    c->peer_len = ai->ai_addrlen;
    c->peer_family = ai->ai_family, c->peer_socktype = ai->ai_socktype;
    c->peer_protocol = ai->ai_protocol;
    c->connected_at = bt_clock_now();
    return fd;
}

/* Connects to c->address, the first try of CONTROL_CLIENT_HELLO_TRIES. 0, or BT_EINVAL /
 * BT_EIO (diag says why). */
static int control_connect(control_client *c, bt_diag *diag) {
    char host[256];
    const char *port;
    if (control_split(c->address, host, sizeof host, &port) != 0) {
        bt_diag_set(diag, "control address '%s' is not host:port", c->address);
        return BT_EINVAL;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL, *p;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        bt_diag_set(diag, "control address '%s': %s", c->address, gai_strerror(gai));
        return BT_EINVAL;
    }
    c->tries++;
    for (p = ai; p != NULL && c->fd < 0; p = p->ai_next)
        if (p->ai_addrlen <= sizeof c->peer) c->fd = control_connect_one(c, p);
    freeaddrinfo(ai);
    if (c->fd < 0) {
        bt_diag_set(diag, "cannot connect to the control channel at %s: %s", c->address,
                    strerror(errno));
        return BT_EIO;
    }
    return 0;
}

/* Closes the channel at once; what waits in the outbox is lost. */
static void control_drop(control_client *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->redial = 0, c->connecting = 0;
    free(c->out);
    c->out = NULL, c->out_head = 0, c->out_len = 0, c->out_cap = 0;
}

/* The channel is given up (why), said once; what waits in the outbox is lost. */
static void control_give_up(control_client *c, const char *why) {
    char tries[64] = "";
    if (!c->acked && c->tries > 1) snprintf(tries, sizeof tries, "; %d connections made", c->tries);
    fprintf(stderr,
            "baton-worker: rank %u: control channel lost (%s%s%s); training goes on without it\n",
            c->rank, why, tries,
            c->acked || c->gone
                ? ""
                : "; no connection's Hello was acknowledged: a token or attempt not the "
                  "run's, a rank already connected (another worker of that rank), or a "
                  "flood of connections to its port");
    control_drop(c);
}

/* The connection failed: before the HelloAck, with a try left, it is made again later (the
 * outbox, the Hello first, sent again from its start; said the first time only); else the
 * channel is closed. */
static void control_lost(control_client *c, const char *why) {
    if (c->acked || c->gone || c->tries >= CONTROL_CLIENT_HELLO_TRIES) {
        control_give_up(c, why);
        return;
    }
    if (c->tries == 1)
        fprintf(stderr,
                "baton-worker: rank %u: the control channel closed before baton run "
                "acknowledged the Hello (%s); connecting again (at most %d connections in "
                "all)\n",
                c->rank, why, CONTROL_CLIENT_HELLO_TRIES);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1, c->out_head = 0, c->in_len = 0, c->connecting = 0;
    c->redial = 1;
    c->retry_at = bt_clock_now() + bt_tcp_retry_ms(c->tries) / 1e3;
}

/* A connect made again failed (err): refused, nothing listens at the address any more
 * (baton run is gone; a flood never closes its port), so no try is left to make. */
static void control_redial_failed(control_client *c, int err, const char *what) {
    char why[200];
    c->gone = err == ECONNREFUSED;
    snprintf(why, sizeof why, "cannot connect again: %s%s", what,
             c->gone ? ": baton run no longer listens" : "");
    control_lost(c, why);
}

/* The backoff passed (control_lost): begins connecting again, without waiting. */
static void control_redial_start(control_client *c) {
    c->redial = 0;
    c->tries++;
    int busy;
    c->fd = control_connect_start(c->peer_family, c->peer_socktype, c->peer_protocol,
                                  (const struct sockaddr *)&c->peer, c->peer_len, &busy);
    if (c->fd < 0) {
        control_redial_failed(c, errno, strerror(errno));
        return;
    }
    c->connecting = 1;
    c->connect_by = bt_clock_now() + CONTROL_CLIENT_CONNECT_TIMEOUT_S;
}

/* Connects again once the backoff has passed, and sees whether a connect begun so has
 * ended; never waits: training goes on meanwhile, and what it sends waits in the outbox. */
static void control_redial(control_client *c) {
    if (c->redial && bt_clock_now() >= c->retry_at) control_redial_start(c);
    if (!c->connecting) return;
    int done = control_connect_done(c->fd, 0);
    if (done == 0 && bt_clock_now() < c->connect_by) return;
    if (done != 1) {
        int err = done == 0 ? ETIMEDOUT : errno;
        control_redial_failed(c, err,
                              done == 0 ? "no answer within the connect timeout" : strerror(err));
        return;
    }
    c->connecting = 0;
    c->connected_at = bt_clock_now();
}

/* A connection, made, carries the channel (not one being connected, nor none). */
static int control_up(const control_client *c) {
    return c->fd >= 0 && !c->connecting;
}

int control_client_live(const control_client *c) {
    return c->fd >= 0 || c->redial;
}

double control_client_due(const control_client *c, double now) {
    if (c->redial) return c->retry_at;
    return c->connecting || (c->fd >= 0 && !c->acked) ? now : HUGE_VAL;
}

/* Bytes of frames waiting in the outbox. */
static size_t control_pending(const control_client *c) {
    return c->out_len - c->out_head;
}

/* Bytes the outbox must keep: before the HelloAck, those sent too. */
static size_t control_kept(const control_client *c) {
    return c->acked ? control_pending(c) : c->out_len;
}

static int control_decode(control_client *c);

/* Reads what arrived without waiting; the channel lost (control_lost) when it closed. */
static void control_read(control_client *c) {
    while (control_up(c)) {
        ssize_t got = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, MSG_DONTWAIT);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (got <= 0)
            control_lost(c, got < 0 ? strerror(errno) : "closed by baton run");
        else if (c->in_len += (size_t)got, control_decode(c) != 0)
            control_lost(c, "baton run sent what is not a message");
    }
}

/* Moves what waits to the outbox's start once the sent part before it is the larger half:
 * each byte moves O(1) times on average, however long baton run leaves the outbox full
 * (the buffer grows to at most twice what waits). */
static void control_compact(control_client *c, int always) {
    if (!c->acked || c->out_head == 0 || (!always && c->out_head < control_pending(c))) return;
    memmove(c->out, c->out + c->out_head, control_pending(c));
    c->out_len -= c->out_head;
    c->out_head = 0;
}

/* No HelloAck, on a connection open all along (why): a baton run older than this worker,
 * which reads without acknowledging. Kept no longer, what was sent would fill the outbox
 * (and then new messages are dropped, heartbeats too); so the Hello is taken as
 * acknowledged, said once. */
static void control_assume_ack(control_client *c, const char *why) {
    fprintf(stderr,
            "baton-worker: rank %u: baton run has not acknowledged the Hello %s, the connection "
            "open (a baton older than this worker?); no longer keeping what was sent for a "
            "connection made again\n",
            c->rank, why);
    c->acked = 1, c->ack_assumed = 1;
    control_compact(c, 1);
}

/* When the HelloAck awaited on the connection up now stops being waited for. */
static double control_ack_by(const control_client *c) {
    return c->connected_at + c->ack_wait_s;
}

/* Sends what the outbox holds, as far as the socket takes it without waiting (before the
 * HelloAck, reading first whether it came or the connection closed). Returns 0, or -1
 * when the channel failed (then closed, or to be made again). */
static int control_flush(control_client *c) {
    if (c->connecting) return 0; /* its outbox goes once connected (control_redial) */
    if (!c->acked) control_read(c);
    if (!c->acked && control_up(c) && bt_clock_now() >= control_ack_by(c)) {
        char why[64];
        snprintf(why, sizeof why, "within %g s", c->ack_wait_s);
        control_assume_ack(c, why);
    }
    while (c->fd >= 0 && c->out_head < c->out_len) {
        ssize_t w =
            send(c->fd, c->out + c->out_head, control_pending(c), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (w <= 0) {
            control_lost(c, w < 0 ? strerror(errno) : "the socket took nothing");
            return -1;
        }
        c->out_head += (size_t)w;
    }
    if (c->fd < 0) return -1;
    if (c->acked && c->out_head == c->out_len) c->out_head = c->out_len = 0;
    control_compact(c, 0);
    return 0;
}

/* What must arrive if anything does: a Fatal (why the rank failed), a Stop (why the ranks
 * stopped), a Checkpoint (what the journal records) and the DONE heartbeat (the stage's
 * end), for which CONTROL_CLIENT_RESERVE of the outbox is kept. */
static int control_vital(const Baton__Envelope *env) {
    return env->body_case == BATON__ENVELOPE__BODY_FATAL ||
           env->body_case == BATON__ENVELOPE__BODY_STOP ||
           env->body_case == BATON__ENVELOPE__BODY_CHECKPOINT ||
           (env->body_case == BATON__ENVELOPE__BODY_HEARTBEAT && env->heartbeat->has_phase &&
            env->heartbeat->phase == BATON__HEARTBEAT__PHASE__DONE);
}

/* Appends env's frame to the outbox. Returns -1 when it does not fit (dropped). */
static int control_queue(control_client *c, const Baton__Envelope *env) {
    size_t n = baton__envelope__get_packed_size(env), need = control_kept(c) + n + 4;
    size_t most = CONTROL_CLIENT_MAX_QUEUE - (control_vital(env) ? 0 : CONTROL_CLIENT_RESERVE);
    if (need > most && !c->acked && control_up(c) && c->out_head > 0) {
        control_assume_ack(c, "before what it kept filled the outbox");
        need = control_kept(c) + n + 4;
    }
    if (need > most) {
        if (c->dropped++ == 0)
            fprintf(stderr,
                    "baton-worker: rank %u: %zu bytes of control messages wait for baton run "
                    "to read them (stopped?); dropping new ones until it does\n",
                    c->rank, control_pending(c));
        return -1;
    }
    need = c->out_len + n + 4;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? 2 * c->out_cap : 4096;
        cap = cap < need ? need : cap;
        uint8_t *p = realloc(c->out, cap);
        if (p == NULL) return -1;
        c->out = p, c->out_cap = cap;
    }
    uint8_t *f = c->out + c->out_len;
    for (int i = 0; i < 4; i++)
        f[i] = (uint8_t)(n >> (8 * i));
    baton__envelope__pack(env, f + 4);
    c->out_len = need;
    return 0;
}

/* Queues env behind what waits and sends what the socket takes now; never waits (but
 * for a connect made again, control_lost). */
static int control_send(control_client *c, const Baton__Envelope *env) {
    control_redial(c);
    if (c->fd < 0 && !c->redial) return -1;
    int queued = control_queue(c, env);
    int flushed = c->fd >= 0 ? control_flush(c) : -1;
    return (flushed == 0 || c->redial) && queued == 0 ? 0 : -1;
}

static int control_hello(control_client *c, const char *token, uint32_t world, uint32_t attempt,
                         const char *node) {
    /* The node the launcher placed this rank on (a virtual node of `baton launch`), else
     * the machine's name. */
    char host[256] = "";
    if (node && node[0])
        snprintf(host, sizeof host, "%s", node);
    else
        gethostname(host, sizeof host - 1);
    Baton__Hello h = BATON__HELLO__INIT;
    h.token = (char *)token;
    h.has_rank = 1, h.rank = c->rank;
    h.has_world = 1, h.world = world;
    h.host = host;
    h.has_pid = 1, h.pid = (int32_t)getpid();
    h.has_attempt = 1, h.attempt = attempt;
    h.build = (char *)BATON_VERSION; /* baton run refuses another build's worker */
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO, env.hello = &h;
    return control_send(c, &env);
}

/* Test hook: BATON_FAULT_HELLO_DELAY=SECONDS holds the first Hello back that long after
 * its connect (a worker descheduled there), so that a flood of connections without one
 * gets it dropped first (run.control-flood). */
static void control_fault_hello_delay(void) {
    const char *f = getenv("BATON_FAULT_HELLO_DELAY");
    double s = f ? atof(f) : 0;
    if (s > 0) poll(NULL, 0, (int)(s * 1000));
}

int control_client_open(control_client *c, const char *address, const char *token, uint32_t rank,
                        uint32_t world, uint32_t attempt, const char *node, bt_diag *diag) {
    c->fd = -1, c->rank = rank, c->stop = 0, c->in_len = 0, c->stop_reason[0] = '\0';
    c->out = NULL, c->out_head = 0, c->out_len = 0, c->out_cap = 0, c->dropped = 0;
    c->acked = 0, c->ack_assumed = 0, c->tries = 0, c->redial = 0, c->retry_at = 0;
    c->gone = 0, c->beat_phase = -1, c->beat_step = 0;
    c->connecting = 0, c->connect_by = 0, c->connected_at = 0, c->peer_len = 0;
    c->nonfinite_step = c->start_step = 0, c->reason = BATON__FATAL__REASON__REASON_UNSPECIFIED;
    const char *w = getenv("BATON_TEST_ACK_WAIT_S"); /* tests only (control_client.h) */
    c->ack_wait_s = w && atof(w) > 0 ? atof(w) : CONTROL_CLIENT_ACK_WAIT_S;
    if (strlen(address) >= sizeof c->address) {
        bt_diag_set(diag, "control address '%.100s...' is too long", address);
        return BT_EINVAL;
    }
    snprintf(c->address, sizeof c->address, "%s", address);
    int rc = control_connect(c, diag);
    if (rc != 0) return rc;
    control_fault_hello_delay();
    if (control_hello(c, token, world, attempt, node) != 0) {
        bt_diag_set(diag, "control channel at %s: cannot send Hello", address);
        control_drop(c); /* no channel without its Hello (c->fd -1, as documented) */
        return BT_EIO;
    }
    return 0;
}

void control_client_heartbeat(control_client *c, Baton__Heartbeat__Phase phase, uint64_t step) {
    Baton__Heartbeat h = BATON__HEARTBEAT__INIT;
    h.has_rank = 1, h.rank = c->rank;
    h.has_step = 1, h.step = step;
    h.has_phase = 1, h.phase = phase;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HEARTBEAT, env.heartbeat = &h;
    c->beat_phase = (int)phase, c->beat_step = step;
    control_send(c, &env);
}

void control_client_metrics(control_client *c, const Baton__Metrics *m) {
    Baton__Metrics mine = *m;
    mine.has_rank = 1, mine.rank = c->rank;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_METRICS, env.metrics = &mine;
    control_send(c, &env);
}

void control_client_checkpoint(control_client *c, const char *name, uint64_t step) {
    Baton__Checkpoint k = BATON__CHECKPOINT__INIT;
    k.has_rank = 1, k.rank = c->rank;
    k.name = (char *)name;
    k.has_step = 1, k.step = step;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_CHECKPOINT, env.checkpoint = &k;
    control_send(c, &env);
}

void control_client_stop_signal(control_client *c, int signal, int sender, uint64_t step,
                                const char *reason) {
    Baton__Stop s = BATON__STOP__INIT;
    s.has_signal = 1, s.signal = signal;
    s.has_sender_pid = 1, s.sender_pid = sender;
    s.has_step = 1, s.step = step;
    s.reason = (char *)reason;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_STOP, env.stop = &s;
    control_send(c, &env);
}

void control_client_fatal(control_client *c, int32_t code, int err, int peer_lost,
                          const char *message) {
    Baton__Fatal f = BATON__FATAL__INIT;
    f.has_rank = 1, f.rank = c->rank;
    f.has_code = 1, f.code = code;
    f.has_disk_full = err != 0, f.disk_full = err == ENOSPC || err == EDQUOT;
    f.has_peer_lost = 1, f.peer_lost = peer_lost != 0;
    f.has_nonfinite_step = f.has_start_step = c->nonfinite_step > 0;
    f.nonfinite_step = c->nonfinite_step, f.start_step = c->start_step;
    f.has_reason = c->reason != BATON__FATAL__REASON__REASON_UNSPECIFIED, f.reason = c->reason;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    f.has_time = 1, f.time = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    f.message = (char *)(message ? message : "");
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_FATAL, env.fatal = &f;
    control_send(c, &env);
}

/* Decodes the whole frames in c->in. Returns -1 on garbage. */
static int control_decode(control_client *c) {
    size_t at = 0;
    while (c->in_len - at >= 4) {
        const uint8_t *p = c->in + at;
        uint32_t n =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (n > CONTROL_CLIENT_MAX_FRAME) return -1;
        if (c->in_len - at - 4 < n) break;
        Baton__Envelope *env = baton__envelope__unpack(NULL, n, p + 4);
        if (env == NULL) return -1;
        if (env->body_case == BATON__ENVELOPE__BODY_HELLO_ACK) c->acked = 1;
        if (env->body_case == BATON__ENVELOPE__BODY_STOP) {
            c->stop = 1;
            c->stop_checkpoint = env->stop->checkpoint; /* default true */
            snprintf(c->stop_reason, sizeof c->stop_reason, "%s",
                     env->stop->reason ? env->stop->reason : "");
        }
        baton__envelope__free_unpacked(env, NULL);
        at += 4 + (size_t)n;
    }
    memmove(c->in, c->in + at, c->in_len - at);
    c->in_len -= at;
    return 0;
}

int control_client_poll(control_client *c) {
    control_redial(c);
    if (c->fd >= 0) control_flush(c); /* what waited for a stopped baton run */
    control_read(c);
    return c->stop;
}

/* When close stops waiting for the HelloAck on the connection up now, everything sent. */
static double control_close_ack_by(const control_client *c) {
    double s =
        c->ack_wait_s < CONTROL_CLIENT_CLOSE_ACK_S ? c->ack_wait_s : CONTROL_CLIENT_CLOSE_ACK_S;
    return c->connected_at + s;
}

/* Waits at most left seconds for what close waits on: a backoff's end, a connect, the
 * socket taking more, the HelloAck (or the connection closing before it). */
static void control_close_wait(control_client *c, double left) {
    double wait = c->redial ? c->retry_at - bt_clock_now() : left;
    wait = c->connecting && c->connect_by - bt_clock_now() < wait ? c->connect_by - bt_clock_now()
                                                                  : wait;
    wait = wait < left ? wait : left;
    int ms = wait > 0 ? (int)(wait * 1000) + 1 : 0;
    if (c->redial) {
        poll(NULL, 0, ms);
        return;
    }
    short events = c->connecting || control_pending(c) > 0 ? POLLOUT : 0;
    struct pollfd p = {c->fd, (short)(events | (c->acked ? 0 : POLLIN)), 0};
    poll(&p, 1, ms);
}

/* Whether close has more to wait for: the outbox not all sent, or (a connection dropped
 * unread loses all it was sent) no HelloAck yet: on a connection up, until
 * control_close_ack_by; one being made again, all it will be sent. */
static int control_close_owed(const control_client *c, double now) {
    if (!control_client_live(c)) return 0;
    if (control_pending(c) > 0) return 1;
    return !c->acked && (!control_up(c) || now < control_close_ack_by(c));
}

/* Whether close waits for the HelloAck alone: on a connection up, everything sent. */
static int control_close_acking(const control_client *c) {
    return control_up(c) && !c->acked && control_pending(c) == 0;
}

/* How long close waits now, at most left: while it waits for the HelloAck alone, no later
 * than control_close_ack_by, and the last heartbeat sent again every
 * CONTROL_CLIENT_CLOSE_BEAT_S (*beat_at) meanwhile, that a baton run older than this worker,
 * which never acknowledges, hears the rank alive. */
static double control_close_beat(control_client *c, double now, double left, double *beat_at) {
    if (!control_close_acking(c)) return left;
    if (now >= *beat_at) {
        if (c->beat_phase >= 0)
            control_client_heartbeat(c, (Baton__Heartbeat__Phase)c->beat_phase, c->beat_step);
        *beat_at = now + CONTROL_CLIENT_CLOSE_BEAT_S;
    }
    double by = control_close_ack_by(c) - now;
    left = by < left ? by : left;
    return *beat_at - now < left ? *beat_at - now : left;
}

void control_client_close(control_client *c) {
    double now = bt_clock_now(), end = now + CONTROL_CLIENT_CLOSE_WAIT_S;
    double beat_at = now + CONTROL_CLIENT_CLOSE_BEAT_S;
    for (;;) {
        control_redial(c);
        if (c->fd >= 0) control_flush(c); /* before the HelloAck, reads too */
        now = bt_clock_now();
        if (now >= end || !control_close_owed(c, now)) break;
        control_close_wait(c, control_close_beat(c, now, end - now, &beat_at));
    }
    /* what waits in the outbox (all of it when the connection is being made again) */
    if (control_client_live(c) && control_pending(c) > 0)
        fprintf(stderr,
                "baton-worker: rank %u: control messages may not have been delivered: %zu bytes "
                "not sent%s within %d s\n",
                c->rank, control_pending(c),
                control_up(c) ? "" : ", the connection lost and not made again",
                CONTROL_CLIENT_CLOSE_WAIT_S);
    if (c->dropped > 0)
        fprintf(stderr, "baton-worker: rank %u: %u control messages were dropped (outbox full)\n",
                c->rank, c->dropped);
    control_drop(c);
}
