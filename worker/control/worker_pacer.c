/* Heartbeats during long blocking work (worker_pacer.h). */
#include "worker_pacer.h"

#include <string.h>

#include "util/clock.h"

void worker_pacer_init(worker_pacer *p, control_client *client) {
    memset(p, 0, sizeof *p);
    p->client = client;
    pthread_mutex_init(&p->mu, NULL);
    /* its waits on the monotonic clock: the wall clock set back during a save would hold
     * the heartbeats back by as much, and baton (monotonic) would take the rank for hung */
    bt_cond_init(&p->cv);
}

/* What the thread does now, under the mutex: the busy spell's heartbeat when due (at most
 * WORKER_PACER_MAX_S into it), else the client's check when due (a connect made again, the
 * HelloAck: control_client_due). Returns when it next has something to do. */
static double pacer_tick(worker_pacer *p, double now) {
    if (p->busy && p->spell != p->spell_seen) /* begun: worker_pacer_begin sent one */
        p->spell_seen = p->spell, p->since = now, p->beat_at = now + WORKER_PACER_S;
    if (p->busy && now >= p->beat_at) {
        if (now - p->since < WORKER_PACER_MAX_S)
            control_client_heartbeat(p->client, p->phase, p->step);
        p->beat_at = now + WORKER_PACER_S;
    } else if (control_client_due(p->client, now) <= now) {
        control_client_poll(p->client);
    }
    double next = now + WORKER_PACER_S, due = control_client_due(p->client, now);
    due = due > now ? due : now + CONTROL_CLIENT_CHECK_S;
    next = p->busy && p->beat_at < next ? p->beat_at : next;
    return due < next ? due : next;
}

/* Repeats the heartbeat while busy and drives the client while it connects or awaits the
 * HelloAck, busy or not; wakes at least every WORKER_PACER_S. */
static void *pacer_main(void *arg) {
    worker_pacer *p = arg;
    pthread_mutex_lock(&p->mu);
    while (p->running) {
        double now = bt_clock_now(), next = pacer_tick(p, now);
        struct timespec ts = bt_clock_deadline(next - now);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Starts the thread, under the mutex, when the client has a channel or one being made. */
static void pacer_start_locked(worker_pacer *p) {
    if (p->running || !control_client_live(p->client)) return;
    p->running = 1;
    if (pthread_create(&p->thread, NULL, pacer_main, p) != 0) p->running = 0;
}

void worker_pacer_start(worker_pacer *p) {
    pthread_mutex_lock(&p->mu);
    pacer_start_locked(p);
    pthread_mutex_unlock(&p->mu);
}

void worker_pacer_begin(worker_pacer *p, Baton__Heartbeat__Phase phase, uint64_t step) {
    pthread_mutex_lock(&p->mu);
    control_client_heartbeat(p->client, phase, step);
    p->phase = phase, p->step = step, p->busy = 1, p->spell++;
    pacer_start_locked(p); /* a redial pending too */
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void worker_pacer_end(worker_pacer *p) {
    pthread_mutex_lock(&p->mu);
    p->busy = 0;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void worker_pacer_lock(worker_pacer *p) {
    pthread_mutex_lock(&p->mu);
}

void worker_pacer_unlock(worker_pacer *p) {
    pthread_mutex_unlock(&p->mu);
}

void worker_pacer_free(worker_pacer *p) {
    pthread_mutex_lock(&p->mu);
    int running = p->running;
    p->running = 0;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (running) pthread_join(p->thread, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}
