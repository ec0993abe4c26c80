/* The training loop's view of the control channel and of stop requests.
 *
 * A stop is requested by a Stop message from the orchestrator or by SIGTERM or SIGINT
 * (Slurm preemption, `baton launch` stopping the job, a user's kill). After every step each rank
 * takes its own request and, when the job has more than one rank, all-reduces it (MAX) over the
 * world, so that every rank makes the same decision at the same step: saving is collective. The
 * worker then saves a checkpoint at that step and exits with WORKER_EXIT_STOPPED. */
#ifndef BATON_WORKER_CONTROL_H
#define BATON_WORKER_CONTROL_H

#include <stdint.h>

#include "comm.h"
#include "control_client.h"
#include "metrics_log.h"
#include "worker_pacer.h"
#include "stage_spec.pb-c.h"
#include "train.h"
#include "util/err.h"

/* Exit status of a worker that stopped on request after saving: resumable. */
#define WORKER_EXIT_STOPPED 75

typedef struct worker_control {
    control_client client; /* client.fd < 0: no channel */
    worker_pacer pacer;    /* heartbeats during long saves and loads; guards client */
    metrics_log mlog;      /* rank 0 under baton run: what it sends, kept (metrics_log.h) */
    unsigned mlog_failed;  /* appends that failed (the first is said) */
    comm *world;           /* NULL for one process */
    uint32_t rank;
    int stopping; /* the training loop stopped early on the ranks' agreed request (it sets
                   * this; a request after the stage's last step changes nothing) */
    /* worker_control_stop_reason's, copied under the pacer's mutex (the thread reads too) */
    char stop_reason[256];
} worker_control;

/* An inert worker_control (no channel, no log): what worker_control_fatal and
 * worker_control_close take before, or without, worker_control_start. */
void worker_control_init(worker_control *wc);

/* On wc from worker_control_init: installs the SIGTERM and SIGINT handler (sigaction; it only sets
 * a flag) and, when the spec has a control_address and BATON_CONTROL_TOKEN is set, connects and
 * says Hello (a failure is printed as a warning and the worker goes on without the channel). Rank 0
 * of a run (the spec has a run_dir and a control_address) also creates its attempt's metrics log,
 * which every Metrics it sends goes to first. Never fails. The pacer's thread starts with
 * the channel, to see its HelloAck in (worker_pacer.h). */
void worker_control_start(worker_control *wc, const Baton__StageSpec *spec, comm *world,
                          uint32_t rank, uint32_t world_size, const char *host);

/* A phase change (INIT, LOAD, SAVE, DONE) at the trainer's step. */
void worker_control_phase(worker_control *wc, Baton__Heartbeat__Phase phase, uint64_t step);
/* A long blocking phase (LOAD, SAVE, EVAL, fp8 calibration) begins: its heartbeat repeats until
 * worker_control_idle (worker_pacer.h), so that `baton run` does not take it for a hang. */
void worker_control_busy(worker_control *wc, Baton__Heartbeat__Phase phase, uint64_t step);
void worker_control_idle(worker_control *wc);

/* Rank 0: syncs the metrics log before a checkpoint is saved, so that the metrics of every
 * step up to a committed checkpoint are on disk (a failure is said, and saving goes on). */
void worker_control_sync_metrics(worker_control *wc);

/* After a step: TRAIN heartbeat and, from rank 0, the step's metrics; then whether to
 * stop, agreed over the world. Every rank calls it after every step. Returns 1 to stop,
 * 0 to go on, a BT_ code when the agreement (a collective) failed. */
int worker_control_after_step(worker_control *wc, const train_metrics *m, bt_diag *diag);
/* From rank 0: the stage's closing validation (loss over windows windows at step). */
void worker_control_valid(worker_control *wc, uint64_t step, double loss, uint32_t windows);
/* Why the stop was requested, for the log: the Stop's reason, this rank's own signal
 * ("SIGTERM", "SIGINT from pid 1234") or "another rank's request" (this rank's own Stop
 * may still arrive: it reads the channel again). */
const char *worker_control_stop_reason(worker_control *wc);
/* Where the ranks agreed to stop at step: when this rank asked for it on a signal of its
 * own (worker_signal.h) and no Stop came from baton run, tells baton run (a Stop with the
 * signal, its sender and step: control_client_stop_signal) and returns 1; else 0. */
int worker_control_stop_signal(worker_control *wc, uint64_t step);

/* train_ckpt's on_commit (arg: the worker_control): rank 0 tells baton run that checkpoint
 * name (step) is committed; safe from the async writer's thread. */
void worker_control_checkpoint(void *arg, const char *name, uint64_t step);

/* Reports a failure (exit status class code, the errno behind it or 0, message) before
 * the worker exits. */
void worker_control_fatal(worker_control *wc, int32_t code, int err, const char *message);
/* The failure about to be sent is a non-finite loss at step (at_floor: fp16 gradients not
 * finite at the loss scale's floor), in an attempt that started from start_step (train.h:
 * nonfinite_step, nonfinite_floor): the Fatal says so, its reason naming which. */
void worker_control_nonfinite(worker_control *wc, uint64_t step, uint64_t start_step, int at_floor);

void worker_control_close(worker_control *wc);

#endif
