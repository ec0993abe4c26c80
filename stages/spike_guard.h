/* What the loss-spike guard of the worker (worker/engine/train_spike.h) and the
 * orchestrator's rollbacks (orchestrator/run/run_rollback.c) both rely on. */
#ifndef BATON_SPIKE_GUARD_H
#define BATON_SPIKE_GUARD_H

/* The applied steps the guard's window must hold before it judges a step. Checkpoints
 * keep the window (manifest spike_guard), but one from before they did (or a start
 * without one: a hand-off) leaves the guard blind for that many applied steps: when the
 * checkpoint a resume would start from has no window, the request a stage's rollback
 * limit refuses sets aside the checkpoints from that many steps before the spikes on
 * (orchestrator/run/run_set_aside.h), so that a resume meets them armed. */
#define SPIKE_GUARD_WARMUP 10

#endif
