/* Heartbeats during long blocking work. The worker's heartbeats come with its steps and
 * phase changes, so a synchronous checkpoint save or load longer than the stage's
 * heartbeat_timeout would look like a hang to `baton run`. Between worker_pacer_begin
 * and worker_pacer_end a thread repeats the phase's heartbeat every WORKER_PACER_S
 * seconds, for at most WORKER_PACER_MAX_S (a save stuck longer than that is a hang after
 * all). The thread also drives the client, busy or not, while it connects again or awaits
 * the HelloAck (control_client_due: every CONTROL_CLIENT_CHECK_S then): a Hello made again
 * goes out as soon as its connect ends, not at the next training step (a long one), by when
 * baton run would have dropped the connection as one without a Hello. It starts at
 * worker_pacer_start or worker_pacer_begin, with a channel or with one being made again, and
 * runs until worker_pacer_free; it never waits on the channel. Every use
 * of the control client goes through worker_pacer_lock/unlock, so the
 * thread and the training loop never write to the channel at once. */
#ifndef BATON_WORKER_PACER_H
#define BATON_WORKER_PACER_H

#include <pthread.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "control_client.h"

#define WORKER_PACER_S     1.0
#define WORKER_PACER_MAX_S 1800.0

typedef struct worker_pacer {
    control_client *client; /* borrowed */
    pthread_mutex_t mu;     /* guards the client and the fields below */
    pthread_cond_t cv;
    pthread_t thread;
    int running; /* the thread exists */
    int busy;    /* between begin and end */
    /* Busy spells begun, the one the thread saw begin; its start and next heartbeat. */
    unsigned spell, spell_seen;
    double since, beat_at;
    Baton__Heartbeat__Phase phase;
    uint64_t step;
} worker_pacer;

void worker_pacer_init(worker_pacer *p, control_client *client);
/* Starts the thread (if the client has a channel, or one being made, and it is not yet). */
void worker_pacer_start(worker_pacer *p);
/* Sends the phase's heartbeat now and keeps repeating it until worker_pacer_end. */
void worker_pacer_begin(worker_pacer *p, Baton__Heartbeat__Phase phase, uint64_t step);
void worker_pacer_end(worker_pacer *p);
void worker_pacer_lock(worker_pacer *p);
void worker_pacer_unlock(worker_pacer *p);
/* Stops the thread (if any). */
void worker_pacer_free(worker_pacer *p);

#endif
