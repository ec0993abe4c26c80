/* What each control message does to the server's state (control_server.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ckpt/ckpt.h"
#include "plan.h"
#include "control_build.h"
#include "control_internal.h"
#include "util/tcp.h"
#include "util/utf8.h"

_Static_assert(sizeof((control_metrics *)0)->moe_expert_load / sizeof(float) == PLAN_MAX_EXPERTS,
               "a record holds every expert's load recipe validation lets through");

/* A Hello with the run's token for rank, connected. A worker connects again only when it
 * saw its connection close before the HelloAck: from the same worker (pid and host), that
 * connection is broken on its side only (half-open: a reset on the way, the HelloAck lost
 * with it), so the new one takes its place (1). From another, two workers say they are the
 * rank: refused (0), said once per rank and attempt. */
static int control_hello_again(control_server *cs, const Baton__Hello *h) {
    control_rank *r = &cs->ranks[h->rank];
    const char *host = h->host ? h->host : "";
    if (h->has_pid && h->pid == r->pid && strcmp(host, r->host) == 0) {
        fprintf(stderr,
                "baton run: rank %u (host %s, pid %d) connected again while its connection "
                "still looked open (broken on its side); taking the new one\n",
                h->rank, host, (int)h->pid);
        return 1;
    }
    if (r->dup_said++ == 0)
        fprintf(stderr,
                "baton run: a second worker says Hello as rank %u (host %s, pid %d), which is "
                "connected from host %s, pid %d: refused (two workers of one rank?)\n",
                h->rank, host, h->has_pid ? (int)h->pid : 0, r->host, (int)r->pid);
    return 0;
}

/* Connection i now speaks for rank: any other of its connections is shut down (closed at
 * its next read), no longer the rank's. */
static void control_hello_take_over(control_server *cs, size_t i, uint32_t rank) {
    for (size_t j = 0; j < cs->n_conns; j++)
        if (j != i && cs->conns[j].rank == (int)rank) {
            cs->conns[j].rank = -1;
            shutdown(cs->conns[j].fd, SHUT_RDWR);
        }
}

/* Whether connection i was accepted no earlier than the one speaking for rank now: a
 * stale Hello (an older connection's, read late) never takes the rank from a newer one. */
static int control_hello_newer(const control_server *cs, size_t i, uint32_t rank) {
    for (size_t j = 0; j < cs->n_conns; j++)
        if (j != i && cs->conns[j].rank == (int)rank && cs->conns[j].opened > cs->conns[i].opened)
            return 0;
    return 1;
}

static int control_hello(control_server *cs, size_t i, const Baton__Hello *h, double now) {
    if (h->token == NULL || !bt_token_equal(h->token, strlen(h->token), cs->token)) return -1;
    if (!h->has_rank || h->rank >= cs->world) return -1;
    if (h->has_world && h->world != cs->world) return -1;
    if (h->has_attempt && h->attempt != cs->attempt) return -1;
    /* One connection per rank and attempt (control_hello_again). The token makes a take-over
     * safe: only a worker of this run can. */
    int again = cs->ranks[h->rank].connected;
    if (again && (!control_hello_again(cs, h) || !control_hello_newer(cs, i, h->rank))) return -1;
    Baton__HelloAck ack = BATON__HELLO_ACK__INIT;
    ack.has_rank = 1, ack.rank = h->rank;
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO_ACK, env.hello_ack = &ack;
    if (control_conn_send(cs, i, &env) != 0) return -1; /* a fresh socket takes a few bytes */
    if (again) control_hello_take_over(cs, i, h->rank);
    cs->conns[i].rank = (int)h->rank;
    control_rank *r = &cs->ranks[h->rank];
    r->connected = r->ever_connected = 1;
    r->last_heard = now;
    snprintf(r->host, sizeof r->host, "%s", h->host ? h->host : "");
    r->pid = h->has_pid ? h->pid : 0;
    r->hello_attempt = h->attempt;
    const char *build = h->build ? h->build : "";
    snprintf(r->build, sizeof r->build, "%s", build); /* for messages: a long one cut short */
    if (cs->build && cs->other_build < 0 && !control_build_same(build, cs->build)) /* by H */
        cs->other_build = (int)h->rank;
    return 0;
}

void control_metrics_from(const Baton__Metrics *m, uint32_t rank, double time, control_metrics *c) {
    *c = (control_metrics){.rank = rank,
                           .step = m->step,
                           .loss = m->loss,
                           .grad_norm = m->grad_norm,
                           .lr = m->lr,
                           .tokens_per_s = m->tokens_per_s,
                           .mfu = m->mfu,
                           .step_time_s = m->step_time_s,
                           .memory_bytes = m->memory_bytes,
                           .skipped_steps = m->skipped_steps,
                           .loss_scale = m->has_loss_scale ? m->loss_scale : 0,
                           .overflow = m->overflow,
                           .moe_load_max_mean = m->moe_load_max_mean,
                           .moe_dropped = m->moe_dropped,
                           .moe_aux_loss = m->moe_aux_loss,
                           .time = time};
    /* recipe validation bounds n_experts by the record's room (PLAN_MAX_EXPERTS); a
     * worker of another build sending more is cut to it */
    size_t ne = m->n_moe_expert_load, cap = sizeof c->moe_expert_load / sizeof(float);
    c->moe_experts = (int)(ne < cap ? ne : cap);
    if (c->moe_experts > 0)
        memcpy(c->moe_expert_load, m->moe_expert_load, (size_t)c->moe_experts * sizeof(float));
}

/* A write of the metrics sink that failed (rc), said once per attempt: a full disk is
 * said by the sink itself (its records held back), this is what else fails (memory). */
static void control_metrics_failed(control_server *cs, int rc, const bt_diag *d) {
    if (rc == 0 || cs->metrics_failed_said++) return;
    fprintf(stderr, "baton run: %s (said once per attempt)\n",
            d->msg[0] ? d->msg : bt_strerror(rc));
}

static void control_metrics_in(control_server *cs, uint32_t rank, const Baton__Metrics *m) {
    control_rank *r = &cs->ranks[rank];
    if (m->has_step) r->step = m->step;
    if (rank != 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    control_metrics_where w = {.stage_name = cs->stage_name,
                               .stage_index = cs->stage_index,
                               .attempt = cs->attempt,
                               .step_offset = cs->step_offset};
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    bt_diag d;
    bt_diag_init(&d);
    if (m->has_valid_loss) { /* the closing validation, not a step */
        int rc = control_metrics_write_valid(&cs->sink, &w, m->step, m->valid_loss,
                                             m->valid_windows, now, &d);
        control_metrics_failed(cs, rc, &d);
        control_valid v = {.step = m->step, .loss = m->valid_loss, .windows = m->valid_windows};
        if (cs->on_metrics) cs->on_metrics(cs->metrics_arg, NULL, &v);
        return;
    }
    control_metrics_from(m, rank, now, &cs->last);
    cs->have_metrics = 1;
    control_metrics_failed(cs, control_metrics_write(&cs->sink, &w, &cs->last, &d), &d);
    if (cs->on_metrics) cs->on_metrics(cs->metrics_arg, &cs->last, NULL);
}

/* Rank 0's commit of the attempt stage's checkpoint name at step (nothing else). */
static void control_ckpt_in(control_server *cs, uint32_t rank, const Baton__Checkpoint *k) {
    char want[64];
    if (rank != 0 || k->name == NULL || !k->has_step || cs->on_checkpoint == NULL) return;
    ckpt_name(cs->stage_index, k->step, want, sizeof want);
    if (strcmp(k->name, want) != 0) return;
    cs->on_checkpoint(cs->ckpt_arg, k->name, k->step);
}

/* Whether the Fatal says the disk is full: by its disk_full field, or, from a worker of
 * an older build that has none, by strerror's words for ENOSPC or EDQUOT in its message. */
static int control_fatal_disk_full(const Baton__Fatal *f) {
    if (f->has_disk_full) return f->disk_full;
    const char *msg = f->message ? f->message : "";
    return strstr(msg, strerror(ENOSPC)) != NULL || strstr(msg, strerror(EDQUOT)) != NULL;
}

/* Whether f names the attempt's failure rather than cur (control_server.h): a configuration
 * error (code 2) first, as the ranks a bad input stopped fail too, often first, but the
 * attempt failed on the input and is not to be retried; then a rank's own failure before a
 * peer's reaction to it, whichever was read first (a busy baton run reads a round of them
 * in connection order); then the one sent first. */
static int control_fatal_before(const control_fatal_key *cur, const Baton__Fatal *f) {
    if (!cur->seen) return 1;
    int config = f->has_code && f->code == 2;
    if ((cur->code == 2) != config) return config;
    int lost = f->has_peer_lost && f->peer_lost;
    if (cur->peer_lost != lost) return !lost;
    return cur->has_time && f->has_time && f->time < cur->time;
}

static void control_fatal_keep(control_fatal_key *k, const Baton__Fatal *f) {
    k->seen = 1;
    k->code = f->has_code ? f->code : 0;
    k->peer_lost = f->has_peer_lost && f->peer_lost;
    k->has_time = f->has_time, k->time = f->time;
}

/* A message kept whole where it fits, else with its middle cut: its end (an errno's words)
 * stays. */
static void control_fatal_text(char *out, size_t cap, const Baton__Fatal *f) {
    bt_utf8_cut_middle(f->message ? f->message : "", cap - 1, out, cap);
}

static void control_fatal_in(control_server *cs, uint32_t rank, const Baton__Fatal *f) {
    control_fatal *cf = &cs->fatal;
    /* the full disk by the same order, so that it names the failure's rank where it is its */
    if (control_fatal_disk_full(f) && control_fatal_before(&cf->full_key, f)) {
        control_fatal_keep(&cf->full_key, f);
        cf->disk_full = 1, cf->full_rank = rank;
        control_fatal_text(cf->full_message, sizeof cf->full_message, f);
    }
    if (!control_fatal_before(&cf->key, f)) return;
    control_fatal_keep(&cf->key, f);
    cf->rank = rank;
    control_fatal_text(cf->message, sizeof cf->message, f);
    cf->nonfinite = f->has_nonfinite_step && f->nonfinite_step > 0;
    cf->nonfinite_step = f->nonfinite_step, cf->start_step = f->start_step;
    cf->reason = f->has_reason ? (int)f->reason : BATON__FATAL__REASON__REASON_UNSPECIFIED;
}

/* A rank's Stop: the stop it asked for on a signal of its own (schema/control.proto). */
static void control_stop_in(control_server *cs, uint32_t rank, const Baton__Stop *s) {
    control_stop_signal *k = &cs->stop_signal;
    if (!s->has_signal || s->signal <= 0 || cs->ranks[rank].stop_signal) return;
    cs->ranks[rank].stop_signal = 1; /* once: a rank connecting again sends it again */
    k->ranks++;
    if (k->seen) return;
    *k = (control_stop_signal){.seen = 1,
                               .rank = rank,
                               .signal = s->signal,
                               .sender = s->has_sender_pid ? s->sender_pid : 0,
                               .step = s->step,
                               .ranks = k->ranks};
}

int control_apply(control_server *cs, size_t i, const Baton__Envelope *env, double now) {
    int rank = cs->conns[i].rank;
    if (rank < 0)
        return env->body_case == BATON__ENVELOPE__BODY_HELLO ? control_hello(cs, i, env->hello, now)
                                                             : -1;
    /* Messages speak for the rank the connection said Hello as, whatever they carry. */
    control_rank *r = &cs->ranks[rank];
    r->last_heard = now;
    switch (env->body_case) {
    case BATON__ENVELOPE__BODY_HEARTBEAT:
        if (env->heartbeat->has_step) r->step = env->heartbeat->step;
        r->phase = env->heartbeat->has_phase ? (int)env->heartbeat->phase : 0;
        break;
    case BATON__ENVELOPE__BODY_METRICS:
        control_metrics_in(cs, (uint32_t)rank, env->metrics);
        break;
    case BATON__ENVELOPE__BODY_FATAL:
        control_fatal_in(cs, (uint32_t)rank, env->fatal);
        break;
    case BATON__ENVELOPE__BODY_CHECKPOINT:
        control_ckpt_in(cs, (uint32_t)rank, env->checkpoint);
        break;
    case BATON__ENVELOPE__BODY_STOP:
        control_stop_in(cs, (uint32_t)rank, env->stop);
        break;
    default: /* a second Hello or an empty envelope (a kind unknown here): nothing to do */
        break;
    }
    return 0;
}
