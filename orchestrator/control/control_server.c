/* The control channel's server (control_server.h): listening, accepting, per-connection
 * buffers and framing. What a decoded message does is in control_apply.c. */
#include "control_server.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "util/clock.h"
#include "util/tcp.h"
#include "control_internal.h"

/* How often control_server_handle writes the metrics records held back (seconds). */
#define CONTROL_FLUSH_S 1.0

static int control_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0
               ? -1
               : 0;
}

static int control_listen(control_server *cs, const char *host, bt_diag *diag) {
    int rc = bt_tcp_listen(host, "control channel", &cs->listen_fd, cs->address, sizeof cs->address,
                           diag);
    if (rc == 0 && control_nonblock(cs->listen_fd) != 0) {
        bt_diag_set(diag, "control channel: cannot make the socket non-blocking: %s",
                    strerror(errno));
        close(cs->listen_fd);
        cs->listen_fd = -1;
        return BT_EIO;
    }
    return rc;
}

/* The metrics sink's notes (a full disk, writing again): said as they come. */
static void control_note(void *arg, const char *msg) {
    (void)arg;
    fprintf(stderr, "baton run: %s\n", msg);
}

int control_server_open(control_server *cs, const char *token, const char *run_dir,
                        const char *bind_host, bt_diag *diag) {
    memset(cs, 0, sizeof *cs);
    cs->listen_fd = -1;
    cs->other_build = -1;
    cs->diag = diag;
    if (token == NULL || token[0] == '\0') {
        bt_diag_set(diag, "control channel: the run's token is empty");
        return BT_EINVAL;
    }
    if ((cs->token = strdup(token)) == NULL) return BT_ENOMEM;
    cs->max_unauth = bt_tcp_unauth_cap();
    cs->max_conns = cs->max_unauth + CONTROL_CONNS_SLACK; /* until an attempt's world is known */
    int rc = control_listen(cs, bind_host ? bind_host : "127.0.0.1", diag);
    rc = rc ? rc : control_metrics_open(&cs->sink, run_dir, diag);
    if (rc == 0) control_metrics_set_note(&cs->sink, control_note, NULL);
    if (rc != 0) control_server_close(cs);
    return rc;
}

/* conns' index of each descriptor (control_conn_of), -1 for none: a lookup per ready
 * descriptor, not a search of thousands of connections. 0, or -1 out of memory. */
static int control_slot_set(control_server *cs, int fd, long i) {
    if (fd < 0) return 0;
    if ((size_t)fd >= cs->n_slot_of) {
        size_t n = (size_t)fd + 1 > 2 * cs->n_slot_of ? (size_t)fd + 1 : 2 * cs->n_slot_of;
        long *p = realloc(cs->slot_of, n * sizeof *p);
        if (p == NULL) return -1;
        for (size_t k = cs->n_slot_of; k < n; k++)
            p[k] = -1;
        cs->slot_of = p, cs->n_slot_of = n;
    }
    cs->slot_of[fd] = i;
    return 0;
}

void control_conn_close(control_server *cs, size_t i) {
    control_conn *c = &cs->conns[i];
    if (c->rank >= 0 && (uint32_t)c->rank < cs->world) cs->ranks[c->rank].connected = 0;
    control_slot_set(cs, c->fd, -1); /* within the table: never fails */
    close(c->fd);
    free(c->buf);
    cs->conns[i] = cs->conns[--cs->n_conns];
    if (i < cs->n_conns) control_slot_set(cs, cs->conns[i].fd, (long)i);
}

static void control_close_all(control_server *cs) {
    while (cs->n_conns > 0)
        control_conn_close(cs, cs->n_conns - 1);
}

int control_server_begin_attempt(control_server *cs, uint32_t stage_index, const char *stage_name,
                                 uint32_t attempt, uint32_t world, uint64_t step_offset) {
    control_close_all(cs);
    control_rank *r = calloc(world ? world : 1, sizeof *r);
    if (r == NULL) return BT_ENOMEM;
    free(cs->ranks);
    cs->ranks = r;
    for (uint32_t i = 0; i < world; i++)
        r[i].phase = -1;
    cs->stage_index = stage_index, cs->attempt = attempt, cs->world = world;
    /* each rank's connection, one more each while it connects again, those without a
     * Hello (control_accept's cap), and a few besides */
    cs->max_conns = 2 * (size_t)world + cs->max_unauth + CONTROL_CONNS_SLACK;
    cs->full_said = 0;
    cs->step_offset = step_offset;
    snprintf(cs->stage_name, sizeof cs->stage_name, "%s", stage_name ? stage_name : "");
    cs->have_metrics = 0;
    cs->other_build = -1;
    cs->metrics_failed_said = 0;
    memset(&cs->last, 0, sizeof cs->last);
    memset(&cs->fatal, 0, sizeof cs->fatal);
    memset(&cs->stop_signal, 0, sizeof cs->stop_signal);
    return 0;
}

size_t control_server_pollfds(const control_server *cs, struct pollfd *out, size_t cap) {
    size_t n = 0;
    /* not while accepting pauses (out of descriptors) */
    if (cs->listen_fd >= 0 && n < cap && bt_clock_now() >= cs->accept_resume)
        out[n++] = (struct pollfd){cs->listen_fd, POLLIN, 0};
    for (size_t i = 0; i < cs->n_conns && n < cap; i++)
        out[n++] = (struct pollfd){cs->conns[i].fd, POLLIN, 0};
    return n;
}

/* bt_tcp_conns: the connection without a Hello opened longest ago, before `before` (one
 * accepted in this round is read before it may be dropped): its index, or -1. *n: how
 * many connections are without a Hello. */
static long control_oldest_unauth(void *ctx, double before, size_t *n) {
    const control_server *cs = ctx;
    long at = -1;
    *n = 0;
    for (size_t i = 0; i < cs->n_conns; i++) {
        if (cs->conns[i].rank >= 0) continue;
        ++*n;
        if (cs->conns[i].opened < before && (at < 0 || cs->conns[i].opened < cs->conns[at].opened))
            at = (long)i;
    }
    return at;
}

static void control_evict(void *ctx, long i) {
    control_server *cs = ctx;
    cs->rejected++;
    control_conn_close(cs, (size_t)i);
}

static int control_add(control_server *cs, int fd, double now) {
    if (cs->n_conns == cs->cap_conns) {
        size_t cap = cs->cap_conns ? 2 * cs->cap_conns : 16;
        control_conn *p = realloc(cs->conns, cap * sizeof *p);
        if (p == NULL) return -1;
        cs->conns = p, cs->cap_conns = cap;
    }
    if (control_slot_set(cs, fd, (long)cs->n_conns) != 0) return -1;
    cs->conns[cs->n_conns++] = (control_conn){.fd = fd, .rank = -1, .opened = now};
    return 0;
}

/* A connection refused for want of room (max_conns held, or memory): said once an attempt.
 * The worker connects again (CONTROL_CLIENT_HELLO_TRIES connections for its Hello); only
 * once those are spent does its rank go unsupervised and unheard. */
static void control_refuse(control_server *cs, int fd, int full) {
    cs->rejected++;
    close(fd);
    if (cs->full_said++ == 0)
        fprintf(stderr,
                "baton run: control channel: a connection refused: %s (%zu held for a world of "
                "%u ranks); the worker connects again, and goes unsupervised only if every "
                "try is refused (said once an attempt)\n",
                full ? "no room for more" : "out of memory", cs->n_conns, cs->world);
}

static int control_adopt(void *ctx, int fd, double now) {
    control_server *cs = ctx;
    int full = cs->n_conns >= cs->max_conns;
    if (!full && control_add(cs, fd, now) == 0) return 0;
    control_refuse(cs, fd, full);
    return -1;
}

/* Accepts what is queued, keeping at most cs->max_unauth + the world's ranks connections
 * without a Hello (bt_tcp_unauth_limit(world); bt_tcp_accept_capped), so that peers without
 * the secret never hold more than a small share of the descriptors. */
static void control_accept(control_server *cs, double now) {
    bt_tcp_conns t = {cs, control_oldest_unauth, control_evict, control_adopt};
    bt_tcp_accept_capped(cs->listen_fd, cs->max_unauth + cs->world, &t, now, &cs->accept_resume);
}

/* Takes every whole frame out of c's buffer. Returns 0, or -1 when the connection must
 * be closed (oversize, garbage, a bad Hello). */
static int control_frames(control_server *cs, size_t i, double now) {
    control_conn *c = &cs->conns[i];
    size_t at = 0;
    int rc = 0;
    while (rc == 0 && c->len - at >= 4) {
        const uint8_t *p = c->buf + at;
        uint32_t n =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        if (n > CONTROL_MAX_FRAME) return -1;
        if (c->len - at - 4 < n) break;
        Baton__Envelope *env = baton__envelope__unpack(NULL, n, p + 4);
        if (env == NULL) return -1;
        rc = control_apply(cs, i, env, now);
        baton__envelope__free_unpacked(env, NULL);
        at += 4 + (size_t)n;
    }
    memmove(c->buf, c->buf + at, c->len - at);
    c->len -= at;
    return rc;
}

/* Reads what is there. Returns 0; 1 when the peer closed the connection (or it failed);
 * -1 when it broke the protocol. Either way the connection must then be closed. */
static int control_read(control_server *cs, size_t i, double now) {
    for (;;) {
        control_conn *c = &cs->conns[i];
        if (c->cap - c->len < 4096) {
            size_t cap = c->cap ? 2 * c->cap : 8192;
            if (cap > CONTROL_MAX_FRAME + 8192) cap = CONTROL_MAX_FRAME + 8192;
            if (cap <= c->cap) return -1; /* cannot happen: frames are capped */
            uint8_t *p = realloc(c->buf, cap);
            if (p == NULL) return -1;
            c->buf = p, c->cap = cap;
        }
        ssize_t got = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (got == 0) return 1;
        if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : 1;
        c->len += (size_t)got;
        if (control_frames(cs, i, now) != 0) return -1;
    }
}

static long control_conn_of(const control_server *cs, int fd) {
    return fd >= 0 && (size_t)fd < cs->n_slot_of ? cs->slot_of[fd] : -1;
}

void control_server_handle(control_server *cs, const struct pollfd *fds, size_t n, double now) {
    int accept = 0;
    for (size_t k = 0; k < n; k++) {
        if (fds[k].revents == 0 || fds[k].fd < 0) continue;
        if (fds[k].fd == cs->listen_fd) {
            accept = 1; /* after the reads: a Hello that arrived is read before any drop */
            continue;
        }
        long i = control_conn_of(cs, fds[k].fd);
        if (i < 0) continue;
        int rc = control_read(cs, (size_t)i, now);
        if (rc < 0) cs->rejected++;
        if (rc != 0) control_conn_close(cs, (size_t)i);
    }
    if (accept) control_accept(cs, now);
    for (size_t i = cs->n_conns; i-- > 0;)
        if (cs->conns[i].rank < 0 && now - cs->conns[i].opened > BT_TCP_UNAUTH_TIMEOUT_S) {
            cs->rejected++;
            control_conn_close(cs, i);
        }
    if (now - cs->flushed >= CONTROL_FLUSH_S) {
        cs->flushed = now;
        control_metrics_flush(&cs->sink);
    }
}

void control_server_drain(control_server *cs, double timeout_s) {
    struct pollfd *fds = NULL;
    size_t cap = 0;
    double end = bt_clock_now() + timeout_s;
    for (int last = 0; !last;) {
        double now = bt_clock_now();
        int open = 0;
        for (size_t i = 0; i < cs->n_conns; i++)
            open += cs->conns[i].rank >= 0;
        last = now >= end;
        int ms = open && !last ? (int)((end - now) * 1000.0) + 1 : 0;
        if (cap < 1 + cs->n_conns) {
            struct pollfd *p = realloc(fds, (1 + cs->n_conns) * sizeof *p);
            if (p == NULL) break; /* out of memory: what was read is kept */
            fds = p, cap = 1 + cs->n_conns;
        }
        size_t n = control_server_pollfds(cs, fds, cap);
        int got = poll(fds, n, ms);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break; /* nothing more to read, or the rest stays silent past timeout_s */
        control_server_handle(cs, fds, n, bt_clock_now());
    }
    free(fds);
    control_metrics_flush(&cs->sink); /* the attempt's last records, if held back */
}

double control_server_silence(const control_server *cs, double now, int *rank) {
    double worst = -1;
    for (uint32_t r = 0; r < cs->world; r++)
        if (cs->ranks[r].connected && now - cs->ranks[r].last_heard > worst) {
            worst = now - cs->ranks[r].last_heard;
            if (rank != NULL) *rank = (int)r;
        }
    return worst;
}

static double control_later(double t, double gap_s, double now) {
    return t + gap_s < now ? t + gap_s : now;
}

void control_server_forgive(control_server *cs, double gap_s, double now) {
    if (gap_s <= 0) return;
    for (uint32_t r = 0; r < cs->world; r++)
        if (cs->ranks[r].last_heard > 0)
            cs->ranks[r].last_heard = control_later(cs->ranks[r].last_heard, gap_s, now);
    for (size_t i = 0; i < cs->n_conns; i++)
        if (cs->conns[i].rank < 0)
            cs->conns[i].opened = control_later(cs->conns[i].opened, gap_s, now);
}

double control_server_last_heard(const control_server *cs) {
    double last = 0;
    for (uint32_t r = 0; r < cs->world; r++)
        last = cs->ranks[r].last_heard > last ? cs->ranks[r].last_heard : last;
    return last;
}

uint32_t control_server_connected(const control_server *cs) {
    uint32_t n = 0;
    for (uint32_t r = 0; r < cs->world; r++)
        n += cs->ranks[r].connected != 0;
    return n;
}

int control_conn_send(control_server *cs, size_t i, const Baton__Envelope *env) {
    uint8_t frame[4 + 4096];
    size_t n = baton__envelope__get_packed_size(env);
    if (n > sizeof frame - 4) return -1;
    for (int k = 0; k < 4; k++)
        frame[k] = (uint8_t)(n >> (8 * k));
    baton__envelope__pack(env, frame + 4);
    ssize_t w = send(cs->conns[i].fd, frame, n + 4, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w == (ssize_t)(n + 4)) return 0;
    cs->send_failed++;
    return w > 0 ? -2 : -1;
}

int control_server_stop_all(control_server *cs, int checkpoint, const char *reason) {
    Baton__Stop stop = BATON__STOP__INIT;
    stop.has_checkpoint = 1, stop.checkpoint = checkpoint != 0;
    stop.reason = (char *)(reason ? reason : "");
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_STOP, env.stop = &stop;
    if (baton__envelope__get_packed_size(&env) > 4096) return BT_EINVAL;
    int sent = 0;
    for (size_t i = cs->n_conns; i-- > 0;) {
        if (cs->conns[i].rank < 0) continue;
        int rc = control_conn_send(cs, i, &env);
        sent += rc == 0;
        /* A partial frame would corrupt the stream: give up on this peer. */
        if (rc == -2) control_conn_close(cs, i);
    }
    return sent;
}

void control_server_close(control_server *cs) {
    control_close_all(cs);
    free(cs->conns);
    cs->conns = NULL, cs->cap_conns = 0;
    free(cs->slot_of);
    cs->slot_of = NULL, cs->n_slot_of = 0;
    if (cs->listen_fd >= 0) close(cs->listen_fd);
    cs->listen_fd = -1;
    control_metrics_close(&cs->sink);
    free(cs->ranks);
    cs->ranks = NULL, cs->world = 0;
    free(cs->token);
    cs->token = NULL;
}
