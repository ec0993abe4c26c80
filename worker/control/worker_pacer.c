/* Heartbeats during long blocking work (worker_pacer.h). */
#include "worker_pacer.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"

void worker_pacer_init(worker_pacer *p, control_client *client) {
    memset(p, 0, sizeof *p);
    p->client = client;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
}

static struct timespec pacer_deadline(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(s * 1e9);
    ts.tv_sec += ns / 1000000000L, ts.tv_nsec = ns % 1000000000L;
    return ts;
}

/* Repeats the heartbeat while busy, for at most WORKER_PACER_MAX_S per busy spell. */
static void *pacer_main(void *arg) {
    worker_pacer *p = arg;
    pthread_mutex_lock(&p->mu);
    double since = bt_clock_now();
    int was_busy = 0;
    while (p->running) {
        if (p->busy && !was_busy) since = bt_clock_now();
        was_busy = p->busy;
        if (p->busy && bt_clock_now() - since < WORKER_PACER_MAX_S)
            control_client_heartbeat(p->client, p->phase, p->step);
        struct timespec ts = pacer_deadline(WORKER_PACER_S);
        while (p->running && pthread_cond_timedwait(&p->cv, &p->mu, &ts) != ETIMEDOUT) {
            if (!p->busy) was_busy = 0;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void worker_pacer_begin(worker_pacer *p, Baton__Heartbeat__Phase phase, uint64_t step) {
    pthread_mutex_lock(&p->mu);
    control_client_heartbeat(p->client, phase, step);
    p->phase = phase, p->step = step, p->busy = 1;
    if (!p->running && control_client_live(p->client)) { /* a redial pending too */
        p->running = 1;
        if (pthread_create(&p->thread, NULL, pacer_main, p) != 0) p->running = 0;
    }
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
