/* The training loop's control hooks (worker_control.h). */
#define _GNU_SOURCE /* sigabbrev_np */
#include "worker_control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "worker_signal.h"

/* Rank 0 of an attempt baton run supervises: its metrics log (metrics_log.h). */
static void worker_control_log_open(worker_control *wc, const Baton__StageSpec *spec) {
    char path[4200];
    bt_diag diag;
    bt_diag_init(&diag);
    metrics_log_path(spec->run_dir, spec->stage_index, spec->attempt, path, sizeof path);
    if (metrics_log_open(&wc->mlog, path, &diag) != 0)
        fprintf(stderr,
                "baton-worker: rank 0: %s; going on without it (metrics baton run does not "
                "receive are lost)\n",
                diag.msg);
}

void worker_control_init(worker_control *wc) {
    memset(wc, 0, sizeof *wc);
    wc->client.fd = -1;
    wc->mlog.fd = -1;
    worker_pacer_init(&wc->pacer, &wc->client);
}

void worker_control_start(worker_control *wc, const Baton__StageSpec *spec, comm *world,
                          uint32_t rank, uint32_t world_size, const char *host) {
    wc->world = world;
    wc->rank = rank;
    if (worker_signal_install() != 0)
        fprintf(stderr, "baton-worker: rank %u: cannot install the SIGTERM handler\n", rank);
    const char *addr = spec->control_address, *token = getenv("BATON_CONTROL_TOKEN");
    if (addr == NULL || addr[0] == '\0') return;
    if (rank == 0 && spec->run_dir && spec->run_dir[0]) worker_control_log_open(wc, spec);
    if (token == NULL || token[0] == '\0') {
        fprintf(stderr,
                "baton-worker: rank %u: the spec names a control channel (%s) but "
                "BATON_CONTROL_TOKEN is not set; going on without it\n",
                rank, addr);
        return;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    if (control_client_open(&wc->client, addr, token, rank, world_size, spec->attempt, host,
                            &diag) != 0) {
        fprintf(stderr, "baton-worker: rank %u: %s; going on without the control channel\n", rank,
                diag.msg);
        return;
    }
    control_client_heartbeat(&wc->client, BATON__HEARTBEAT__PHASE__INIT, 0);
    worker_pacer_start(&wc->pacer); /* the HelloAck awaited, a redial (worker_pacer.h) */
}

void worker_control_phase(worker_control *wc, Baton__Heartbeat__Phase phase, uint64_t step) {
    worker_pacer_lock(&wc->pacer);
    control_client_heartbeat(&wc->client, phase, step);
    worker_pacer_unlock(&wc->pacer);
}

void worker_control_busy(worker_control *wc, Baton__Heartbeat__Phase phase, uint64_t step) {
    worker_pacer_begin(&wc->pacer, phase, step);
}

void worker_control_idle(worker_control *wc) {
    worker_pacer_end(&wc->pacer);
}

/* This rank's stop request, and every rank's when there are several. */
static int worker_control_agree(worker_control *wc, int mine, bt_diag *diag) {
    if (wc->world == NULL) return mine;
    float f = mine ? 1.0f : 0.0f;
    if (comm_allreduce(wc->world, &f, &f, 1, COMM_F32, COMM_MAX, NULL) != 0) {
        bt_diag_set(diag, "cannot agree on stopping: %s", comm_error(wc->world));
        return BT_EIO;
    }
    return f > 0.0f;
}

/* m to the metrics log (stamped with the time), then over the channel. */
static void worker_control_send_metrics(worker_control *wc, Baton__Metrics *m) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    m->has_time = 1, m->time = (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
    m->has_rank = 1, m->rank = wc->rank;
    bt_diag diag;
    bt_diag_init(&diag);
    if (metrics_log_append(&wc->mlog, m, &diag) != 0 && wc->mlog_failed++ == 0)
        fprintf(stderr,
                "baton-worker: rank 0: %s (said once; metrics baton run does not receive are "
                "lost)\n",
                diag.msg);
    control_client_metrics(&wc->client, m);
}

void worker_control_sync_metrics(worker_control *wc) {
    bt_diag diag;
    bt_diag_init(&diag);
    if (metrics_log_sync(&wc->mlog, &diag) != 0)
        fprintf(stderr, "baton-worker: rank 0: %s; saving the checkpoint all the same\n", diag.msg);
}

static void worker_control_metrics(worker_control *wc, const train_metrics *tm) {
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = 1, m.step = tm->step;
    m.has_loss = 1, m.loss = tm->loss;
    m.has_grad_norm = 1, m.grad_norm = tm->grad_norm;
    m.has_lr = 1, m.lr = tm->lr;
    m.has_tokens_per_s = 1, m.tokens_per_s = tm->tokens_per_s;
    m.has_step_time_s = 1, m.step_time_s = tm->step_s;
    m.has_skipped_steps = 1, m.skipped_steps = tm->n_skipped;
    if (tm->scaled) /* fp16 */
        m.has_loss_scale = 1, m.loss_scale = tm->loss_scale, m.has_overflow = 1,
        m.overflow = tm->overflow != 0;
    m.has_mfu = tm->mfu > 0, m.mfu = tm->mfu;
    m.has_memory_bytes = 1, m.memory_bytes = tm->memory_bytes;
    float load[MOE_MAX_EXPERTS];
    if (tm->moe.n_experts > 0) {
        m.has_moe_load_max_mean = 1, m.moe_load_max_mean = tm->moe.load_max_mean;
        m.has_moe_dropped = 1, m.moe_dropped = tm->moe.dropped;
        m.has_moe_aux_loss = 1, m.moe_aux_loss = tm->moe.aux;
        memcpy(load, tm->moe.expert_load, (size_t)tm->moe.n_experts * sizeof *load);
        m.n_moe_expert_load = (size_t)tm->moe.n_experts, m.moe_expert_load = load;
    }
    worker_control_send_metrics(wc, &m);
}

int worker_control_after_step(worker_control *wc, const train_metrics *m, bt_diag *diag) {
    worker_pacer_lock(&wc->pacer);
    control_client_heartbeat(&wc->client, BATON__HEARTBEAT__PHASE__TRAIN, m->step);
    if (wc->rank == 0) worker_control_metrics(wc, m);
    int mine = control_client_poll(&wc->client);
    worker_pacer_unlock(&wc->pacer);
    mine = mine || worker_signal_stop_requested();
    return worker_control_agree(wc, mine, diag);
}

void worker_control_valid(worker_control *wc, uint64_t step, double loss, uint32_t windows) {
    if (wc->rank != 0) return;
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = 1, m.step = step;
    m.has_valid_loss = 1, m.valid_loss = loss;
    m.has_valid_windows = 1, m.valid_windows = windows;
    worker_pacer_lock(&wc->pacer);
    worker_control_send_metrics(wc, &m);
    worker_pacer_unlock(&wc->pacer);
}

void worker_control_checkpoint(void *arg, const char *name, uint64_t step) {
    worker_control *wc = arg;
    if (wc->rank != 0) return;
    worker_pacer_lock(&wc->pacer);
    control_client_checkpoint(&wc->client, name, step);
    worker_pacer_unlock(&wc->pacer);
}

const char *worker_control_stop_reason(worker_control *wc) {
    /* Another rank's request may have come first while ours was on its way. */
    worker_pacer_lock(&wc->pacer);
    int stop = wc->client.stop || control_client_poll(&wc->client);
    snprintf(wc->stop_reason, sizeof wc->stop_reason, "%s", /* the pacer reads too */
             wc->client.stop_reason[0] ? wc->client.stop_reason : "Stop");
    worker_pacer_unlock(&wc->pacer);
    if (stop) return wc->stop_reason;
    int sender, sig = worker_signal_first(&sender);
    if (sig == 0) return "another rank's request";
    size_t l = (size_t)snprintf(wc->stop_reason, sizeof wc->stop_reason, "SIG%s",
                                sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    if (sender > 0)
        snprintf(wc->stop_reason + l, sizeof wc->stop_reason - l, " from pid %d", sender);
    return wc->stop_reason;
}

int worker_control_stop_signal(worker_control *wc, uint64_t step) {
    worker_pacer_lock(&wc->pacer);
    int asked = wc->client.stop || control_client_poll(&wc->client);
    worker_pacer_unlock(&wc->pacer);
    int sender, sig = worker_signal_first(&sender);
    if (asked || sig == 0) return 0;
    const char *reason = worker_control_stop_reason(wc);
    worker_pacer_lock(&wc->pacer);
    control_client_stop_signal(&wc->client, sig, sender, step, reason);
    worker_pacer_unlock(&wc->pacer);
    return 1;
}

void worker_control_fatal(worker_control *wc, int32_t code, int err, const char *message) {
    int peer_lost = comm_first_fault() == COMM_FAULT_PEER_LOST;
    worker_pacer_lock(&wc->pacer);
    control_client_fatal(&wc->client, code, err, peer_lost, message);
    worker_pacer_unlock(&wc->pacer);
}

void worker_control_nonfinite(worker_control *wc, uint64_t step, uint64_t start_step,
                              int at_floor) {
    worker_pacer_lock(&wc->pacer);
    wc->client.nonfinite_step = step, wc->client.start_step = start_step;
    wc->client.reason =
        at_floor ? BATON__FATAL__REASON__LOSS_SCALE_FLOOR : BATON__FATAL__REASON__NONFINITE_LOSS;
    worker_pacer_unlock(&wc->pacer);
}

void worker_control_close(worker_control *wc) {
    metrics_log_close(&wc->mlog);
    worker_pacer_free(&wc->pacer);
    control_client_close(&wc->client);
}
