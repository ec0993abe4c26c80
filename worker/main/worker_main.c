/* baton-worker: runs one stage of training: in one process (the reference every parallel
 * layout must reproduce), or as one rank of a PMIx job (`baton launch -n N`, srun
 * --mpi=pmix) with the ranks connected over Gloo. Rank 0 prints the metrics.
 *
 * Exit status: 0 the stage finished, 1 failed while training (retryable: I/O, numeric
 * blow-up), 2 bad usage, a StageSpec this worker cannot run, or a failure every restart
 * would meet again (a resource limit, a checkpoint path too long: not worth retrying),
 * 75 (WORKER_EXIT_STOPPED) stopped on request (a Stop on the control channel, SIGTERM or SIGINT)
 * after saving a checkpoint at the current step: resumable with --init RUN_DIR,
 * 76 (WORKER_EXIT_ROLLBACK) the loss-spike guard saw TRAIN_SPIKE_ROLLBACK_AFTER spikes in a
 * row (engine/train_spike.h): stopped without saving; the error message (also the Fatal
 * on the control channel) ends with "skip [FROM, TO)", the logical global samples of
 * those steps, which the orchestrator skips after rolling back to an earlier checkpoint.
 *
 * Control channel (worker/control/): when the spec has a control_address and
 * BATON_CONTROL_TOKEN is set, every rank reports its phase and steps to the orchestrator,
 * rank 0 its metrics, and a failing rank its error; the worker trains the same without. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "baton_version.h" /* BATON_VERSION (cmake/baton_version.cmake) */
#include "comm_shm.h"
#include "cpu_blas_core.h"
#include "cpu_blas_defer.h"
#include "cpu_blas_mem.h"
#include "cpu_threads.h"
#include "model_zero.h"
#include "model_moe.h"
#include "train.h"
#include "util/argv_eq.h"
#include "util/clock.h"
#include "util/file.h"
#include "util/out_file.h"
#include "util/proc_start.h"
#include "train_ckpt.h"
#include "units.h"
#include "worker_control.h"
#include "worker_cuda.h"
#include "worker_dump.h"
#include "worker_paths.h"
#include "worker_ranks.h"

#define WORKER_EXIT_ROLLBACK 76 /* orchestrator/run/supervise.h knows it too */

typedef struct worker_args {
    const char *spec_path;
    const char *valid; /* override for the validation prefix */
    int single_process;
    uint64_t max_steps; /* --steps (at least 1); 0 when not given: the stage's steps */
    uint32_t log_every;
    uint32_t eval_windows;
    double comm_timeout_s;   /* rendezvous and every collective */
    const char *dump_params; /* write the final parameters here (rank 0) */
    int quiet;               /* ranks other than 0 print only errors */
    const char *run_dir;     /* overrides the spec's run_dir (checkpoints go below it) */
    const char *init;        /* overrides the spec's init_checkpoint */
    int64_t save_every;      /* overrides the stage's checkpoint.every_steps; -1: keep */
    int async_save;          /* overrides checkpoint.async when set */
} worker_args;

static void worker_usage(FILE *f) {
    fprintf(f, "usage: baton-worker --spec FILE [--single-process] [--steps N] [--log-every N]\n"
               "                    [--eval-windows N] [--valid PREFIX] [--comm-timeout T]\n"
               "                    [--dump-params FILE] [--run-dir DIR] [--init CKPT]\n"
               "                    [--save-every N] [--async-save]\n"
               "       baton-worker --version\n\n"
               "Trains one stage described by a binary StageSpec (see 'baton spec --out').\n\n"
               "  --spec FILE          the StageSpec to run\n"
               "  --single-process     run the stage's layout as one process: tp, pp, cp, dp\n"
               "                       and ep become 1, the global batch is kept through\n"
               "                       gradient accumulation (the reference run)\n"
               "  --steps N            train N more steps from where it starts (the step of\n"
               "                       the checkpoint it resumes), at most to the stage's\n"
               "                       last, N >= 1 (default: to the stage's last step)\n"
               "  --log-every N        print metrics every N steps, N >= 1 (default 1)\n"
               "  --eval-windows N     validation windows evaluated at the end (default 64;\n"
               "                       0 = none)\n"
               "  --valid PREFIX       validation data (default: the stage's data.valid)\n"
               "  --comm-timeout T     how long any collective may wait for a peer: a duration\n"
               "                       such as 500ms, 2.5s or 1m, a plain number is seconds\n"
               "                       (default 60s)\n"
               "  --dump-params FILE   write the final parameters as raw little-endian float32\n"
               "                       in the model's tensor order, the one-process tensors\n"
               "                       whatever the layout (rank 0 writes)\n"
               "  --run-dir DIR        save checkpoints in DIR/checkpoints (default: the spec's\n"
               "                       run_dir; none: no checkpoints)\n"
               "  --init CKPT          start from a checkpoint or a run directory's newest one\n"
               "                       (default: the spec's init_checkpoint): the same stage\n"
               "                       of the same run resumes (by the spec's run_id; one\n"
               "                       that baton spec wrote has none: by recipe name and\n"
               "                       stage index), another stage or run takes its weights\n"
               "  --save-every N       checkpoint every N steps (default: the stage's\n"
               "                       checkpoint.every_steps; 0 = only at the end)\n"
               "  --async-save         write checkpoints on a thread while training goes on\n\n"
               "Under a PMIx launcher (baton launch, srun --mpi=pmix) each process is one rank\n"
               "and the stage's layout must match their number. A CPU stage's ranks connect in\n"
               "shared memory on one host and over Gloo (TCP) across hosts, a cuda stage's\n"
               "over NCCL.\n\n"
               "A Stop from the orchestrator's control channel (the spec's control_address,\n"
               "token in BATON_CONTROL_TOKEN), or SIGTERM or SIGINT on any rank, stops every\n"
               "rank after the current step, with a checkpoint at that step when there is a\n"
               "run dir.\n\n"
               "Exit status: 0 done, 1 training failed, 2 bad usage or unrunnable spec,\n"
               "75 stopped on request after saving (resume with --init RUN_DIR), 76 loss\n"
               "spikes in a row (recipe restart.spike_zscore): stopped without saving, the\n"
               "message names the sample window to skip after a rollback.\n");
    char status[PATH_MAX + 160];
    worker_cuda_status(status, sizeof status);
    fprintf(f, "\nCUDA engine (loaded for stages with cluster.device: cuda only):\n  %s\n", status);
}

/* 0 with the count in *out; -1 not a count, -2 a count past UINT64_MAX. */
static int parse_count(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0') return -1;
    if (errno == ERANGE) return -2;
    if (errno != 0) return -1;
    *out = v;
    return 0;
}

/* The longest --comm-timeout: its milliseconds fit the int the comm layer counts in
 * (comm_timeout_ms), with room to spare. */
#define WORKER_MAX_COMM_TIMEOUT_S 1e6

/* --comm-timeout's value: a duration as recipes write one (units.h: 500ms, 2.5s, 1m; a
 * plain number is seconds), from 1 ms to WORKER_MAX_COMM_TIMEOUT_S; -1 after saying what
 * is wrong. */
static int worker_parse_comm_timeout(worker_args *a, const char *o, const char *v) {
    double s;
    int rc = units_parse_duration(v, &s);
    if (rc == 0 && s >= 1e-3 && s <= WORKER_MAX_COMM_TIMEOUT_S) {
        a->comm_timeout_s = s;
        return 0;
    }
    if (rc == 0 || rc == BT_ERANGE)
        fprintf(stderr, "baton-worker: %s '%s': out of range, from 1ms to %.0fs\n", o, v,
                WORKER_MAX_COMM_TIMEOUT_S);
    else
        fprintf(stderr, "baton-worker: %s '%s': expected %s\n", o, v, UNITS_DURATION_FORMS);
    return -1;
}

/* Options that take a count: --steps and --log-every (at least 1), --eval-windows and
 * --save-every (0 has a meaning). */
static int worker_parse_count_opt(worker_args *a, const char *o, const char *v) {
    uint64_t n = 0;
    int positive = strcmp(o, "--steps") == 0 || strcmp(o, "--log-every") == 0;
    int prc = parse_count(v, &n);
    if (prc == -1) {
        fprintf(stderr, "baton-worker: %s expects a count, got '%s'\n", o, v);
        return -1;
    }
    if (prc == -2 || n > UINT32_MAX) {
        fprintf(stderr, "baton-worker: %s '%s' is out of range (%d to %u)\n", o, v, positive,
                UINT32_MAX);
        return -1;
    }
    if (positive && n == 0) {
        fprintf(stderr,
                "baton-worker: %s must be at least 1, got '%s' (leave it out for the "
                "default)\n",
                o, v);
        return -1;
    }
    if (strcmp(o, "--steps") == 0)
        a->max_steps = n;
    else if (strcmp(o, "--log-every") == 0)
        a->log_every = (uint32_t)n;
    else if (strcmp(o, "--eval-windows") == 0)
        a->eval_windows = (uint32_t)n;
    else if (strcmp(o, "--save-every") == 0)
        a->save_every = (int64_t)n;
    else {
        fprintf(stderr, "baton-worker: unknown option or bad value: '%s %s'\n", o, v);
        return -1;
    }
    return 0;
}

/* Option o (value v, unused for a flag) refused when given before: given[k] holds option
 * k's earlier value. -1 after saying so; 0 otherwise, o recorded. */
static int worker_once(const char **given, const char *o, const char *v) {
    static const char *const names[] = {
        "--single-process", "--async-save", /* the flags */
        "--spec",           "--valid",      "--dump-params",  "--run-dir",    "--init",
        "--steps",          "--log-every",  "--eval-windows", "--save-every", "--comm-timeout"};
    for (int k = 0; k < (int)(sizeof names / sizeof names[0]); k++) {
        if (strcmp(o, names[k]) != 0) continue;
        if (given[k] != NULL && k < 2)
            fprintf(stderr, "baton-worker: %s given twice; give it once\n", o);
        else if (given[k] != NULL)
            fprintf(stderr, "baton-worker: %s given twice ('%s' and '%s'); give it once\n", o,
                    given[k], v ? v : "");
        if (given[k] != NULL) return -1;
        given[k] = v ? v : "";
    }
    return 0;
}

/* The options as worker_parse takes them, for "--opt=value" (util/argv_eq.h). */
static const bt_argv_opts worker_options = {
    (const char *const[]){"--spec", "--steps", "--log-every", "--eval-windows", "--valid",
                          "--comm-timeout", "--dump-params", "--run-dir", "--init", "--save-every",
                          NULL},
    (const char *const[]){"--help", "--version", "--single-process", "--async-save", NULL}, 0, 0};

/* Whether o is an option that takes a value. */
static int worker_takes_value(const char *o) {
    for (size_t k = 0; worker_options.values[k] != NULL; k++)
        if (strcmp(o, worker_options.values[k]) == 0) return 1;
    return 0;
}

static int worker_parse(int argc, char **argv, worker_args *a) {
    a->log_every = 1, a->eval_windows = 64, a->comm_timeout_s = 60, a->save_every = -1;
    const char *given[12] = {0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            worker_usage(stdout);
            return 1;
        } else if (strcmp(o, "--version") == 0) {
            printf("baton-worker %s\n", BATON_VERSION);
            return 1;
        } else if (worker_once(given, o, v) != 0) {
            return -1;
        } else if (strcmp(o, "--single-process") == 0) {
            a->single_process = 1;
            continue;
        } else if (strcmp(o, "--async-save") == 0) {
            a->async_save = 1;
            continue;
        } else if (v == NULL && worker_takes_value(o)) {
            fprintf(stderr, "baton-worker: %s needs a value\n", o);
            return -1;
        } else if (!worker_takes_value(o)) {
            fprintf(stderr, "baton-worker: unknown %s '%s' (see baton-worker --help)\n",
                    o[0] == '-' ? "option" : "argument", o);
            return -1;
        } else if (strcmp(o, "--spec") == 0) {
            a->spec_path = v;
        } else if (strcmp(o, "--valid") == 0) {
            a->valid = v;
        } else if (strcmp(o, "--dump-params") == 0) {
            a->dump_params = v;
        } else if (strcmp(o, "--run-dir") == 0) {
            a->run_dir = v;
        } else if (strcmp(o, "--init") == 0) {
            a->init = v;
        } else if (strcmp(o, "--comm-timeout") == 0) {
            if (worker_parse_comm_timeout(a, o, v) != 0) return -1;
        } else if (worker_parse_count_opt(a, o, v) != 0) {
            return -1;
        }
        i++;
    }
    if (a->spec_path == NULL) {
        worker_usage(stderr);
        return -1;
    }
    return 0;
}

/* A StageSpec normally comes from `baton spec` or `baton run`, which validate the recipe;
 * a file can still be stale, truncated or hand-made, so the worker re-checks what its
 * arithmetic relies on. Returns NULL when the spec is usable, else what is wrong. */
static const char *worker_spec_problem(const Baton__StageSpec *s) {
    const Baton__Stage *st = s->stage;
    if (st == NULL || s->model == NULL || s->data == NULL || st->parallel == NULL ||
        st->precision == NULL || st->optimizer == NULL)
        return "a required section (stage, model, data, parallel, precision, optimizer) is missing";
    const Baton__Parallel *p = st->parallel;
    const uint32_t deg[] = {p->tp, p->pp, p->cp, p->dp, p->ep};
    for (size_t i = 0; i < sizeof deg / sizeof deg[0]; i++)
        if (deg[i] < 1 || deg[i] > (1u << 22)) return "a parallel degree is 0 or too large";
    if (st->micro_batch < 1 || st->seq_len < 1 || st->global_batch < 1 ||
        st->global_batch > UINT32_MAX)
        return "micro_batch, seq_len and global_batch must be positive (global_batch < 2^32)";
    if (st->seq_len > INT32_MAX / st->micro_batch) return "micro_batch x seq_len exceeds 2^31";
    return NULL;
}

static Baton__StageSpec *worker_read_spec(const char *path, bt_diag *diag) {
    char *buf = NULL;
    size_t len = 0;
    if (path[0] == '\0') {
        bt_diag_set(diag, "--spec '': name the StageSpec file (baton spec --out FILE writes one)");
        return NULL;
    }
    if (bt_read_file(path, 64u << 20, &buf, &len) != 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    Baton__StageSpec *s = baton__stage_spec__unpack(NULL, len, (const uint8_t *)buf);
    free(buf);
    const char *why = s == NULL ? "cannot be decoded" : worker_spec_problem(s);
    if (why != NULL) {
        bt_diag_set(diag,
                    "%s: not a StageSpec this worker can run: %s (make one with 'baton spec "
                    "RECIPE --out FILE')",
                    path, why);
        if (s != NULL) baton__stage_spec__free_unpacked(s, NULL);
        s = NULL;
    }
    return s;
}

/* The one-process reference layout: every degree 1, the same global batch. */
static void worker_single_process(Baton__StageSpec *s) {
    Baton__Parallel *p = s->stage->parallel;
    p->tp = p->pp = p->cp = p->dp = p->ep = 1;
}

static void worker_print_setup(const trainer *t) {
    static const char *const recompute[] = {"none", "selective", "full"};
    double params, grads, optim;
    train_state_bytes(t, &params, &grads, &optim);
    printf("stage \"%s\": %zu parameters, %u micro-batch(es) of %ux%u per step, %s backend\n",
           t->spec->stage->name, t->m.sizes.param_floats, t->accum, t->B, t->T, t->be.name);
    printf("memory: params %.2f MB, grads %.2f MB, optimizer %.2f MB, activations %.2f MB "
           "(recompute %s) + %.2f MB backward buffers and scratch\n",
           1e-6 * params, 1e-6 * grads, 1e-6 * optim, 1e-6 * (double)t->m.act_bytes,
           recompute[t->m.cfg.recompute], 1e-6 * (double)t->m.work_bytes);
    int fp8 = 0, xfp8 = 0;
    for (int g = 0; g < t->m.n_gemm + t->m.n_xgemm; g++)
        *(g < t->m.n_gemm ? &fp8 : &xfp8) += t->m.gemm[g].prec == BACKEND_PREC_FP8;
    if (t->m.cfg.prec == BACKEND_PREC_FP8)
        printf("fp8: %d of %d GEMMs in fp8 (the LM head%s in bf16)\n", fp8, t->m.n_gemm,
               t->m.cfg.fp8_first_last_bf16 ? ", the first and the last layer's" : "");
    if (t->m.cfg.prec == BACKEND_PREC_FP8 && t->m.n_xgemm > 0)
        printf("fp8: %d of %d expert weight products in fp8, each with its own scales\n", xfp8,
               t->m.n_xgemm);
    if (t->m.wcache_floats > 0)
        printf("memory: %.2f MB of converted weights kept from one micro-batch to the next "
               "(BATON_WEIGHT_CACHE=0: none)\n",
               4e-6 * (double)t->m.wcache_floats);
}

/* Every rank: the bytes it allocated for parameters, gradients and optimizer state
 * (train_state_bytes), to set beside `baton plan`'s memory figures. */
static void worker_print_state(const trainer *t) {
    double params, grads, optim;
    train_state_bytes(t, &params, &grads, &optim);
    printf("model state allocated by this rank (zero %u): params %.0f grads %.0f optimizer %.0f "
           "bytes\n",
           t->spec->stage->parallel->zero, params, grads, optim);
    /* what `baton plan` counts as the rank's activations (less the MoE caches) and its
     * backward buffers */
    printf("activations allocated by this rank: %zu bytes in %d slot(s), backward buffers and "
           "scratch %zu bytes (pipeline stage %d)\n",
           t->m.act_bytes, t->m.n_slots, t->m.work_bytes, t->m.cfg.pp_rank);
    size_t moe = model_moe_cache_bytes(&t->m);
    if (moe > 0) /* the MoE layers' activations kept from a forward to its backward */
        printf("MoE caches allocated by this rank: %zu bytes (pipeline stage %d)\n", moe,
               t->m.cfg.pp_rank);
    const char *dp = train_dp_overlap_describe(&t->dpo);
    if (dp[0]) printf("%s\n", dp);
    const char *pp = pipeline_describe(&t->pp.pipe);
    if (t->pp.vp > 1) {
        const pipe_schedule *v = &t->pp.sched;
        printf("interleaved pipeline: stage %d of %d holds %d chunks of %s%d layers (model layers",
               v->stage, v->stages, v->v, model_uneven_stages(&t->m.cfg) ? "at most " : "",
               t->m.chunk_layers);
        for (int l = 0; l < t->m.n_layers; l++)
            printf(" %d", model_stage_layer(&t->m.cfg, l));
        printf("), %d activation slots, %d received-gradient buffers\n", v->slots, v->grad_bufs);
    } else if (t->pp.stages > 1) {
        printf("pipeline stage %d of %d: model layers %d-%d%s\n", t->pp.stage, t->pp.stages,
               model_stage_layer(&t->m.cfg, 0), model_stage_layer(&t->m.cfg, t->m.n_layers - 1),
               model_uneven_stages(&t->m.cfg) ? " (parallel.stage_layers)" : "");
    }
    if (pp[0]) printf("%s\n", pp);
    if (t->m.cfg.sp)
        printf("sequence parallelism: the residual stream's rows split over the %d tp ranks\n",
               t->m.cfg.tp);
}

static void worker_print_step(const trainer *t, const train_metrics *m) {
    printf("step %6llu/%llu  loss %.6f  lr %.3e  grad_norm %.4f  %.0f tok/s  %.2f GFLOP/s/rank",
           (unsigned long long)m->step, (unsigned long long)t->total_steps, m->loss, m->lr,
           m->grad_norm, m->tokens_per_s, m->gflops_per_s);
    if (t->scaler.on) printf("  loss_scale %g", m->loss_scale);
    if (t->m.moew) printf("  moe_load %.3f  dropped %.0f", m->moe.load_max_mean, m->moe.dropped);
    printf("\n");
    if (m->spike)
        printf("step %6llu: loss spike (z=%.1f > %.1f): update skipped (%llu skipped so far)\n",
               (unsigned long long)m->step, m->spike_z, t->spike.z,
               (unsigned long long)t->skipped_steps);
    else if (m->skipped && !m->overflow)
        printf("step %6llu: update skipped: the gradient norm is not finite (%llu skipped so "
               "far)\n",
               (unsigned long long)m->step, (unsigned long long)t->skipped_steps);
}

/* fp16: Inf/NaN gradients on some rank (train_scaler.h). Printed by every rank, so a
 * rank that decided otherwise would show in the log. */
static void worker_print_overflow(const trainer *t, const train_metrics *m) {
    printf("step %6llu: update skipped: Inf/NaN in the fp16 gradients, loss scale backed off "
           "to %g (%llu overflow steps, %llu skipped so far)\n",
           (unsigned long long)m->step, m->loss_scale, (unsigned long long)t->scaler.overflow_steps,
           (unsigned long long)t->skipped_steps);
}

/* Waits for the background checkpoint writer, heartbeats going on meanwhile. */
static int worker_save_wait(train_ckpt *c, uint64_t step, worker_control *wc, bt_diag *diag) {
    if (c->root) worker_control_busy(wc, BATON__HEARTBEAT__PHASE__SAVE, step);
    int rc = train_ckpt_wait(c, diag);
    if (c->root) worker_control_idle(wc);
    return rc;
}

static int worker_save(train_ckpt *c, trainer *t, const worker_args *a, worker_control *wc,
                       bt_diag *diag) {
    int final = t->step == t->total_steps;
    worker_control_sync_metrics(wc); /* the steps up to this checkpoint: on disk before it */
    if (c->root) worker_control_busy(wc, BATON__HEARTBEAT__PHASE__SAVE, t->step);
    int rc = train_ckpt_save(c, t, final, diag);
    if (c->root) worker_control_idle(wc);
    if (rc == 0 && c->root && !a->quiet)
        printf("checkpoint %s: %s in %.3f s (%.3f s CPU)\n", c->name,
               c->async ? "snapshot taken, writing in the background" : "saved", c->stall_s,
               c->stall_cpu_s);
    return rc;
}

/* Every rank agreed to stop after this step: save it and end the stage early. */
static int worker_stop(trainer *t, train_ckpt *c, const worker_args *a, worker_control *wc,
                       bt_diag *diag) {
    wc->stopping = 1;
    /* the rank a signal came to says so (to baton run too), whatever its --quiet */
    int own = worker_control_stop_signal(wc, t->step);
    if (!a->quiet)
        printf("stopping at step %llu (%s)%s\n", (unsigned long long)t->step,
               worker_control_stop_reason(wc), c->root ? ": saving a checkpoint" : "");
    else if (own)
        printf("rank %u: stopping at step %llu (%s): every rank saves a checkpoint\n", wc->rank,
               (unsigned long long)t->step, worker_control_stop_reason(wc));
    int rc = worker_save(c, t, a, wc, diag);
    rc = rc ? rc : worker_save_wait(c, t->step, wc, diag);
    fflush(stdout);
    return rc;
}

/* The spike guard asks for a rollback: no checkpoint (the weights may already be hurt);
 * every rank returns BT_ERANGE with the window in diag and sets *rollback. */
static int worker_rollback(const trainer *t, int *rollback, bt_diag *diag) {
    const train_spike *sp = &t->spike;
    *rollback = 1;
    bt_diag_set(diag,
                "%u loss spikes in a row at steps %llu..%llu: rollback requested, stopping "
                "without a checkpoint; global samples %llu..%llu: skip [%llu, %llu)",
                sp->run, (unsigned long long)sp->run_first_step,
                (unsigned long long)sp->run_last_step, (unsigned long long)sp->run_first_sample,
                (unsigned long long)sp->run_end_sample - 1,
                (unsigned long long)sp->run_first_sample, (unsigned long long)sp->run_end_sample);
    return BT_ERANGE;
}

/* Trains to the stage's last step (or --steps more), checkpointing every save_every
 * steps and at the end; or until a stop request (wc->stopping) or a rollback request
 * (*rollback). */
/* The bytes this rank sent per step on each group, to set beside `baton plan`'s
 * comm_bytes_per_step (tests/engine/check-comm-bytes.sh). */
static void worker_print_comm(const trainer *t) {
    static const char *const names[TRAIN_COMM_GROUPS] = {"tp", "pp", "dp", "cp", "ep"};
    if (t->comm_steps == 0) return;
    printf("communication per step, sent by this rank:");
    for (int i = 0; i < TRAIN_COMM_GROUPS; i++)
        printf(" %s %.0f", names[i], (double)t->comm_bytes[i] / (double)t->comm_steps);
    printf(" bytes\n");
    size_t room, most;
    model_moe_rows(&t->m, &room, &most);
    if (room > 0)
        printf("MoE: room for %zu rows at this rank's experts (the most a forward received: "
               "%zu)\n",
               room, most);
}

/* Test hook: BATON_FAULT_STEP_SLEEP=SECONDS makes every step that much longer (a slower
 * machine), so that tests/run/check-run.sh strikes its workers within a step or two of
 * the step it aims at, however fast the steps are. */
static void worker_fault_step_sleep(void) {
    const char *f = getenv("BATON_FAULT_STEP_SLEEP");
    double s = f ? atof(f) : 0;
    if (s > 0 && s < 60)
        nanosleep(&(struct timespec){(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, NULL);
}

/* Test hook: BATON_FAULT_STEP_HOLD=PATH holds the stage of index N after each step for as
 * long as the file PATH.N exists (at most 10 minutes), so that a test does what it must
 * while that stage trains, however slowly it is scheduled (tests/run/check-limits.sh
 * launch-removed). */
static void worker_fault_step_hold(const trainer *t) {
    const char *f = getenv("BATON_FAULT_STEP_HOLD");
    if (f == NULL || f[0] == '\0') return;
    char path[4200];
    snprintf(path, sizeof path, "%s.%u", f, (unsigned)t->spec->stage_index);
    for (int i = 0; i < 12000 && access(path, F_OK) == 0; i++)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
}

/* An attempt that trained no step (it started from the stage's final checkpoint: the
 * previous attempt died after saving it) finds that checkpoint in place: it is not
 * written again, as an existing complete checkpoint is never replaced by a save of the
 * same state. Every rank decides alike, from the same manifest. */
static int worker_saved_already(const train_ckpt *c, const trainer *t, const worker_args *a) {
    if (c->root == NULL || t->step != t->step0 || t->step == 0) return 0;
    char name[64], dir[CKPT_PATH_MAX];
    ckpt_name(t->spec->stage_index, t->step, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", c->root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int same =
        ckpt_manifest_read(dir, &m, &d) == 0 && m->has_step && m->step == t->step &&
        ckpt_stage_relation(m, t->spec->recipe_name, t->spec->stage_index) == CKPT_SAME_STAGE &&
        m->stage_final == (t->step == t->total_steps);
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (same && !a->quiet)
        printf("checkpoint %s: already there (this attempt started from it and trained no "
               "step): not written again\n",
               name);
    return same;
}

static int worker_train(trainer *t, train_ckpt *c, uint64_t save_every, const worker_args *a,
                        worker_control *wc, int *rollback, bt_diag *diag) {
    train_metrics m;
    for (uint64_t i = 0; t->step < t->total_steps && (!a->max_steps || i < a->max_steps); i++) {
        int rc = train_step(t, &m, diag);
        if (rc != 0) return rc;
        int last = t->step == t->total_steps || i + 1 == a->max_steps;
        if (!a->quiet && (m.step % a->log_every == 0 || last || m.skipped))
            worker_print_step(t, &m);
        if (m.overflow) worker_print_overflow(t, &m);
        if (m.rollback) {
            fflush(stdout);
            return worker_rollback(t, rollback, diag);
        }
        int stop = worker_control_after_step(wc, &m, diag);
        if (stop < 0) return stop;
        if (stop && !last) return worker_stop(t, c, a, wc, diag);
        if (!last && save_every && t->step % save_every == 0 && worker_save(c, t, a, wc, diag) != 0)
            return BT_EIO;
        fflush(stdout);
        worker_fault_step_sleep();
        worker_fault_step_hold(t);
    }
    worker_print_comm(t); /* every rank: pipeline stages send different amounts */
    if (worker_saved_already(c, t, a)) return 0;
    int rc = worker_save(c, t, a, wc, diag);
    rc = rc ? rc : worker_save_wait(c, t->step, wc, diag);
    fflush(stdout);
    return rc;
}

/* Evaluation is collective over the tp and pp groups: those of world rank 0 (dp rank 0)
 * evaluate, rank 0 prints. */
static int worker_eval(trainer *t, const worker_args *a, worker_control *wc, bt_diag *diag) {
    const char *valid = a->valid ? a->valid : t->spec->data->valid;
    if (a->eval_windows == 0 || valid == NULL || valid[0] == '\0' ||
        (t->dp_rank != 0 && t->m.ep_group == NULL && !t->m.cfg.zero3))
        return 0; /* under ep every rank takes part: the experts are spread over them; under
                   * ZeRO-3 too: the forward gathers the parameters over the dp group */
    double loss = 0;
    uint32_t n = a->eval_windows;
    int rc = train_eval(t, valid, &n, &loss, diag);
    if (rc == 0 && n == 0 && !a->quiet)
        printf("valid loss not evaluated: %s holds no window of seq_len + 1 = %u tokens\n", valid,
               t->T + 1);
    else if (rc == 0 && !a->quiet)
        printf("valid loss %.6f (%.4f bits per token) over %u windows of %s%s\n", loss,
               loss / 0.6931471805599453, n, valid, n < a->eval_windows ? " (all it holds)" : "");
    if (rc == 0 && n > 0) worker_control_valid(wc, t->step, loss, n);
    return rc;
}

/* Checkpointing for this rank from the spec and the options. */
static void worker_ckpt_setup(train_ckpt *c, char *root, size_t cap, const Baton__StageSpec *spec,
                              const worker_args *a, worker_ranks *w) {
    const char *run_dir = a->run_dir ? a->run_dir : spec->run_dir;
    const Baton__CheckpointPolicy *p = spec->stage->checkpoint;
    memset(c, 0, sizeof *c);
    if (run_dir && run_dir[0]) {
        snprintf(root, cap, "%s/checkpoints", run_dir);
        c->root = root;
    }
    c->world = w->world;
    c->world_rank = w->world ? w->info.rank : 0;
    c->world_size = w->world ? w->info.size : 1;
    c->keep = p ? p->keep : 3;
    c->async = a->async_save || (p && p->async);
    c->commit_timeout_s = a->comm_timeout_s;
}

static uint64_t worker_save_every(const Baton__StageSpec *spec, const worker_args *a) {
    if (a->save_every >= 0) return (uint64_t)a->save_every;
    const Baton__CheckpointPolicy *p = spec->stage->checkpoint;
    return p ? p->every_steps : 1000;
}

/* Rank 0's word on the fp8 calibration from n micro-batches: its GEMMs' scales lo..hi
 * (both 0: none of its GEMMs runs in fp8), or that no GEMM of the stage runs in fp8 at all
 * (the LM head is bf16, and first_last_bf16 keeps a model of at most two layers in bf16). */
static void worker_print_calibrated(const trainer *t, uint32_t n, float lo, float hi) {
    int L = t->m.cfg.n_layers;
    if (hi > 0)
        printf("fp8 scales calibrated from %u micro-batch(es): scales in [%g, %g]\n", n, lo, hi);
    else if (t->m.cfg.fp8_first_last_bf16 && L <= 2)
        printf("fp8: no GEMM runs in fp8 (the LM head is bf16, and first_last_bf16 keeps the "
               "first and the last layer, all %d of the model's, in bf16): no scale to "
               "calibrate\n",
               L);
    else
        printf("fp8 scales calibrated from %u micro-batch(es) (rank 0's GEMMs all run in bf16: "
               "its layers are the model's first or last, under first_last_bf16)\n",
               n);
}

/* *load_rc: the checkpoint load's own code (0 when none or it worked). */
/* A saved fp16 loss scale below precision.loss_scale.min, lifted to it on load: the first
 * overflow then fails the stage, where the run that saved it backed off further. */
static void worker_warn_lifted(const trainer *t, const char *init) {
    fprintf(stderr,
            "baton-worker: warning: loss scale %g from %s is below precision.loss_scale.min "
            "(%g): starting at %g, where an overflow fails the stage; give a lower "
            "precision.loss_scale.min to keep backing off\n",
            (double)t->scaler.lifted_from, init, (double)t->scaler.min_scale,
            (double)t->scaler.min_scale);
}

/* A resume that took the loss-spike guard's window back from its checkpoint. */
static void worker_print_guard(const trainer *t) {
    const train_spike *sp = &t->spike;
    if (sp->n == 0) return;
    printf("loss-spike guard: %u applied step%s of its window taken from the checkpoint: ", sp->n,
           sp->n == 1 ? "" : "s");
    if (train_spike_armed(sp))
        printf("armed\n");
    else
        printf("it judges a step once it holds %d\n", TRAIN_SPIKE_WARMUP);
}

static int worker_init_from(trainer *t, const worker_args *a, worker_ranks *w, worker_control *wc,
                            int *load_rc, bt_diag *diag) {
    const char *init = a->init ? a->init : t->spec->init_checkpoint;
    int rc = 0;
    if (init != NULL && init[0] != '\0') {
        worker_control_busy(wc, BATON__HEARTBEAT__PHASE__LOAD, 0);
        double t0 = bt_clock_now(), cpu0 = bt_clock_cpu();
        const char *run_dir = a->run_dir ? a->run_dir : t->spec->run_dir;
        rc = train_ckpt_load(t, init, run_dir, w->world, diag);
        *load_rc = rc;
        worker_control_idle(wc);
        if (rc == 0 && w->info.rank == 0 && !a->quiet)
            printf("started from %s at step %llu (global sample %llu), loaded in %.3f s, %.3f s "
                   "CPU (%u shard file%s opened)\n",
                   init, (unsigned long long)t->step, (unsigned long long)t->first_sample,
                   bt_clock_now() - t0, bt_clock_cpu() - cpu0, t->load_files,
                   t->load_files == 1 ? "" : "s");
        if (rc == 0 && w->info.rank == 0 && !a->quiet) worker_print_guard(t);
        /* out now (stdout is a pipe under baton run, buffered): before the metrics the
         * channel carries, the closing validation's of an attempt with no step left too */
        if (rc == 0 && w->info.rank == 0 && !a->quiet) fflush(stdout);
        if (rc == 0 && t->scaler.lifted && w->info.rank == 0) worker_warn_lifted(t, init);
        if (rc == 0 && t->fp8_fresh > 0 && !a->quiet)
            printf("fp8: %s holds no scaling state for %u expert operand(s) here (saved before "
                   "the experts ran fp8): they are calibrated before the next step\n",
                   init, t->fp8_fresh);
    }
    uint32_t n = 0;
    float lo, hi;
    worker_control_busy(wc, BATON__HEARTBEAT__PHASE__TRAIN, t->step); /* a step's work */
    rc = rc ? rc : train_fp8_calibrate(t, &n, &lo, &hi, diag);
    worker_control_idle(wc);
    if (rc == 0 && n > 0 && w->info.rank == 0 && !a->quiet) worker_print_calibrated(t, n, lo, hi);
    return rc;
}

/* A run that failed on a device: every group aborted before the trainer's streams and
 * memory are released. A collective still queued on a group other than the one whose
 * watchdog fired (its peer dead or hung) would otherwise keep cudaFree and the streams'
 * release waiting with no deadline; the process exits next anyway (not after a rollback,
 * where every rank leaves in order). */
static void worker_abort_groups(worker_ranks *w, trainer *t) {
    comm *g[] = {w->tp, w->dp, w->pp, w->cp, w->dpcp, w->ep, w->edp, w->xdp};
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        if (g[i] != NULL) comm_abort(g[i]);
    train_abort_comms(t);
}

/* The stage runs on GPUs (cluster.device: cuda). */
static int worker_spec_cuda(const Baton__StageSpec *spec) {
    return spec->cluster && spec->cluster->device == BATON__CLUSTER__DEVICE__CUDA;
}

/* OpenBLAS's threads: this rank's share of its host's CPUs (cpu_threads.h). The ranks on
 * the host: BATON_HOST_RANKS, which baton launch sets (its virtual nodes share one host),
 * else PMIx's local size (srun). Rank 0 of a CPU stage prints what is in effect. */
static int worker_blas_threads(const Baton__StageSpec *spec, const worker_ranks *w, bt_diag *diag) {
    uint64_t n = 0;
    const char *v = getenv("BATON_HOST_RANKS");
    int ranks = w->under_pmix ? w->info.local_size : 1;
    if (w->under_pmix && v != NULL && parse_count(v, &n) == 0 && n > 0 && n <= 1u << 20)
        ranks = (int)n;
    cpu_threads t;
    int rc = cpu_threads_apply(&t, ranks, diag); /* before the model's memory */
    if (rc != 0 || w->info.rank != 0 || worker_spec_cuda(spec)) return rc;
    if (t.env != NULL)
        printf("cpu backend: %d BLAS thread(s) per rank (set by %s)\n", t.threads, t.env);
    else
        printf("cpu backend: %d BLAS thread(s) per rank (%d CPUs / %d rank(s) on this host; "
               "OPENBLAS_NUM_THREADS overrides)\n",
               t.threads, t.cpus, t.host_ranks);
    const char *was = cpu_blas_core_replaced();
    if (was != NULL)
        printf("cpu backend: OpenBLAS kernels for %s (OpenBLAS took this CPU for a %s; "
               "OPENBLAS_CORETYPE overrides)\n",
               cpu_blas_core_name(), was);
    else
        printf("cpu backend: OpenBLAS kernels for %s\n", cpu_blas_core_name());
    return 0;
}

/* A group of this process's that could not get its shared-memory segment works over Gloo:
 * slower, and its sums are in another order than shared memory's (the losses differ in
 * the last digits), so it is said, with the cause (comm_shm_fallback_take). */
static void worker_shm_fallback_warn(void) {
    char why[400];
    if (comm_shm_fallback_take(why, sizeof why))
        fprintf(stderr,
                "baton-worker: warning: a group of ranks on one host works over Gloo (TCP), "
                "not shared memory: %s\n",
                why);
}

/* Rank 0 of a CPU stage says what its world group's collectives run on (comm_shm.h). */
static void worker_comm_backend(const Baton__StageSpec *spec, const worker_ranks *w) {
    worker_shm_fallback_warn();
    if (w->world == NULL || w->info.rank != 0 || worker_spec_cuda(spec)) return;
    const char *v = getenv("BATON_COMM_SHM");
    int off = v != NULL && strcmp(v, "0") == 0;
    if (strcmp(comm_backend(w->world), "shm") == 0)
        printf("cpu backend: collectives %sin shared memory (all %d ranks on one host; "
               "BATON_COMM_SHM=0 for Gloo over TCP)\n",
               comm_shm_p2p(w->world) ? "and point to point " : "", w->info.size);
    else
        printf("cpu backend: collectives over Gloo (TCP)%s\n",
               off ? ", as BATON_COMM_SHM=0 asks" : "; groups within one host in shared memory");
}

/* Trains with the ranks joined (or alone); returns a BT_ code, *setup_rc the code of
 * the setup part (which decides the exit status class). */
static int worker_run(Baton__StageSpec *spec, const worker_args *a, worker_ranks *w,
                      worker_control *wc, int *setup_rc, int *rollback, bt_diag *diag) {
    trainer t;
    int rc = worker_ranks_groups(w, spec->stage->parallel, train_folds_experts(spec), diag);
    worker_shm_fallback_warn();
    if (rc == 0 && spec->cluster && spec->cluster->strict_topology)
        rc = worker_ranks_check_topology(w, diag);
    train_groups groups = {.tp = w->tp,
                           .dp = w->dp,
                           .pp = w->pp,
                           .cp = w->cp,
                           .dpcp = w->dpcp,
                           .ep = w->ep,
                           .edp = w->edp,
                           .xdp = w->xdp,
                           .local_rank = w->info.local_rank};
    if (a->init != NULL) { /* --init: the trainer knows it starts from a checkpoint */
        if (spec->init_checkpoint != protobuf_c_empty_string) free(spec->init_checkpoint);
        spec->init_checkpoint = strdup(a->init);
        if (spec->init_checkpoint == NULL) rc = rc ? rc : BT_ENOMEM;
    }
    rc = rc ? rc : train_init(&t, spec, &groups, diag);
    *setup_rc = rc;
    if (rc != 0) return rc;
    worker_args mine = *a;
    if (w->info.rank != 0) mine.quiet = 1;
    if (w->info.rank == 0) worker_print_setup(&t);
    if (!a->quiet) worker_print_state(&t);
    train_ckpt c;
    char root[4096];
    worker_ckpt_setup(&c, root, sizeof root, spec, a, w);
    c.on_commit = worker_control_checkpoint, c.commit_arg = wc;
    int load_rc = 0;
    rc = worker_init_from(&t, &mine, w, wc, &load_rc, diag);
    /* every checkpoint refused as not this model's, or inconsistent (BT_EINVAL): another
     * attempt would read the same bytes, so it is a configuration error, not retried */
    if (load_rc == BT_EINVAL) *setup_rc = load_rc;
    /* a newer baton's checkpoint: this worker never reads it (exit 2, not retried) */
    if (load_rc == BT_EUNSUPPORTED) *setup_rc = load_rc;
    rc = rc ? rc : worker_train(&t, &c, worker_save_every(spec, a), &mine, wc, rollback, diag);
    train_ckpt_free(&c); /* the host copy the saves kept: not held through the eval */
    if (rc == BT_ERANGE && t.nonfinite_step > 0)
        worker_control_nonfinite(wc, t.nonfinite_step, t.step0, t.nonfinite_floor);
    /* data the model cannot read (a token outside its vocabulary): a configuration error */
    if (rc == BT_ERECIPE) *setup_rc = rc;
    if (!wc->stopping) {
        worker_control_busy(wc, BATON__HEARTBEAT__PHASE__EVAL, t.step);
        rc = rc ? rc : worker_eval(&t, &mine, wc, diag);
        worker_control_idle(wc);
        rc = rc ? rc
                : worker_dump_params(&t, w->world, w->world ? w->info.rank : 0, mine.dump_params,
                                     diag);
    }
    if (rc == 0 && !wc->stopping) worker_control_phase(wc, BATON__HEARTBEAT__PHASE__DONE, t.step);
    if (rc != 0 && !*rollback && !t.be.host_memory) worker_abort_groups(w, &t);
    train_free(&t);
    return rc;
}

/* See the top of this file. limited: the failure is one a resource limit makes (and a
 * restart, under the same limit, would meet again). */
static int worker_exit_status(int rc, int setup_rc, int stopped, int rollback, int limited) {
    if (rc == 0) return stopped ? WORKER_EXIT_STOPPED : 0;
    if (rollback) return WORKER_EXIT_ROLLBACK;
    if (limited) return 2;
    return setup_rc != 0 && setup_rc != BT_ENOMEM && setup_rc != BT_EIO ? 2 : 1;
}

/* A failure a resource limit makes: memory the setup could not allocate under an
 * address-space limit (ulimit -v), a file past the file-size limit (ulimit -f: EFBIG,
 * SIGXFSZ being ignored). The message then names the limit (where it does not already).
 * Returns whether it is such a failure. */
static int worker_note_limit(int rc, int setup_rc, bt_diag *diag) {
    char note[96] = "";
    struct rlimit rl;
    if (rc == BT_ENOMEM && setup_rc == BT_ENOMEM) {
        if (!cpu_mem_as_limit_note(note, sizeof note)) return 0;
    } else if (strstr(diag->msg, strerror(EFBIG)) != NULL && getrlimit(RLIMIT_FSIZE, &rl) == 0 &&
               rl.rlim_cur != RLIM_INFINITY) {
        snprintf(note, sizeof note, " (the file-size limit, ulimit -f, is %llu KB)",
                 (unsigned long long)(rl.rlim_cur / 1024));
    } else {
        return 0;
    }
    size_t l = strlen(diag->msg);
    if (l > 0 && strstr(diag->msg, "ulimit -") == NULL)
        snprintf(diag->msg + l, sizeof diag->msg - l, "%s", note);
    return 1;
}

/* A failure on a path that cannot be (a name too long, a file or a link where a directory
 * belongs: a checkpoint's save into the run directory, by the errno its message keeps):
 * every restart would meet it again, so exit 2, not retried, as baton run takes a final
 * checkpoint it cannot read for those (run_ckpts.c). */
static int worker_path_broken(const bt_diag *diag) {
    return diag->err == ENAMETOOLONG || diag->err == ENOTDIR || diag->err == ELOOP;
}

/* EAGAIN where a thread or process could not be made under a process limit (ulimit -u;
 * root is not held to it): the message names the limit. Other processes of the user's
 * may end, so it stays retryable. */
static void worker_note_nproc(bt_diag *diag) {
    struct rlimit rl;
    if (strstr(diag->msg, strerror(EAGAIN)) == NULL || geteuid() == 0 ||
        getrlimit(RLIMIT_NPROC, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    size_t l = strlen(diag->msg);
    snprintf(diag->msg + l, sizeof diag->msg - l,
             " (making a thread or process failed? the process limit, ulimit -u, is %llu for "
             "all of this user's)",
             (unsigned long long)rl.rlim_cur);
}

/* A rank dies with whatever started it. baton's launcher gives its children
 * PR_SET_PDEATHSIG, but a --worker wrapper that does not exec (a container runtime, a
 * script running `baton-worker "$@"`) is that child, not this process: killed with a
 * killed baton run, it would leave this rank training and writing checkpoints on its own
 * into a run directory the next baton run uses. So the rank also dies with its own
 * parent (the wrapper, the launcher, slurmstepd): a thread sees it reparented within
 * WORKER_PARENT_POLL_NS. Not PR_SET_PDEATHSIG here: it fires when the parent's forking
 * *thread* ends, which a multithreaded parent (a Go container runtime) may do while it
 * lives on. */
#define WORKER_PARENT_POLL_NS 200000000L
static pid_t worker_parent;

static void *worker_parent_watch(void *arg) {
    (void)arg;
    for (;;) {
        if (getppid() != worker_parent) _exit(137); /* as if killed by SIGKILL */
        nanosleep(&(struct timespec){0, WORKER_PARENT_POLL_NS}, NULL);
    }
    return NULL;
}

static void worker_die_with_parent(void) {
    worker_parent = getppid();
    sigset_t all, old;
    sigfillset(&all); /* the signals stay the main thread's (SIGTERM: a stop) */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_t th;
    if (pthread_create(&th, NULL, worker_parent_watch, NULL) == 0) pthread_detach(th);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* An option's value that looks like an option (util/argv_eq.h), refused as `baton` does
 * (cli.h: cli_option_like). */
static void worker_option_like(const char *o, const char *v) {
    static const char *const paths[] = {"--spec", "--valid", "--dump-params", "--run-dir",
                                        "--init"};
    int path = 0;
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++)
        path |= strcmp(o, paths[k]) == 0;
    fprintf(stderr, "baton-worker: %s needs a value; '%s' looks like an option ", o, v);
    if (path)
        fprintf(stderr, "(write ./%s for a file of that name)\n", v);
    else
        fprintf(stderr, "(write %s=%s if you mean it)\n", o, v);
}

/* The command line with "--opt=value" split, parsed into *a; 0 to run, else the exit
 * status (0 after --help or --version). */
static int worker_args_read(int argc, char **argv, bt_argv *split, worker_args *a) {
    int bad = 0;
    int rc = bt_argv_split_eq(&worker_options, argc, argv, 1, split, &bad);
    if (rc == BT_ARGV_FLAG_VALUE)
        fprintf(stderr, "baton-worker: %.*s takes no value (got '%s')\n",
                (int)strcspn(argv[bad], "="), argv[bad], argv[bad]);
    else if (rc == BT_ARGV_OPTION_LIKE)
        worker_option_like(argv[bad], argv[bad + 1]);
    if (rc != 0) return rc == BT_ARGV_NOMEM ? 1 : 2;
    int prc = worker_parse(split->argc, split->argv, a);
    if (prc == 0 && worker_check_paths(a->valid, a->eval_windows, a->init, a->dump_params) != 0)
        return 2; /* before the ranks join and train: a typo said at once */
    return prc == 0 ? -1 : prc > 0 ? 0 : 2;
}

/* OpenBLAS starts no thread pool as it loads (cpu_blas_defer.h): .preinit_array runs
 * before any library's initializer, which could open a file on a closed fd 0-2. */
#ifdef __GLIBC__
static void worker_preinit(int argc, char **argv, char **envp) {
    (void)argc, (void)argv, (void)envp;
    bt_proc_start();
    cpu_blas_threads_defer();
}
__attribute__((section(".preinit_array"),
               used)) static void (*const worker_preinit_fn)(int, char **,
                                                             char **) = worker_preinit;
#endif

int main(int argc, char **argv) {
    bt_proc_start();                          /* done already under glibc (worker_preinit) */
    cpu_blas_threads_restore("baton-worker"); /* before any thread starts (cpu_blas_defer.h) */
    /* a file past the file-size limit (a checkpoint's, the shared-memory segment's) is an
     * error that names it (EFBIG), not a death by signal */
    signal(SIGXFSZ, SIG_IGN);
    worker_die_with_parent();
    cpu_blas_core_ensure(argv); /* may execute the worker again (cpu_blas_core.h) */
    worker_args a = {0};
    bt_argv split;
    int prc = worker_args_read(argc, argv, &split, &a);
    if (prc >= 0) { /* --help (0), or a usage error */
        bt_argv_free(&split);
        if (prc == 0 && bt_stdout_check("baton-worker") != 0) prc = BT_EXIT_FAILURE;
        return prc;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    worker_ranks w = {0};
    Baton__StageSpec *spec = worker_read_spec(a.spec_path, &diag);
    int rc = spec ? 0 : BT_EINVAL, setup_rc = rc, rollback = 0;
    /* the CUDA engine is loaded for a stage on GPUs only (worker_cuda.h) */
    if (spec != NULL && worker_spec_cuda(spec)) setup_rc = rc = worker_cuda_load(&diag);
    if (rc == 0 && a.single_process)
        worker_single_process(spec);
    else if (rc == 0) {
#ifdef BATON_CUDA_EMULATED /* tests/gpu: the emulation's device memory is host memory */
        int use_nccl = 0;
#else
        int use_nccl = worker_spec_cuda(spec);
#endif
        setup_rc = rc = worker_ranks_join(&w, a.comm_timeout_s, use_nccl, &diag);
    }
    worker_control ctl;
    worker_control_init(&ctl);
    if (rc == 0) {
        uint32_t size = w.world ? (uint32_t)w.info.size : 1;
        worker_control_start(&ctl, spec, w.world, (uint32_t)w.info.rank, size, w.info.hostname);
        setup_rc = rc = worker_blas_threads(spec, &w, &diag);
        if (rc == 0) worker_comm_backend(spec, &w);
        rc = rc ? rc : worker_run(spec, &a, &w, &ctl, &setup_rc, &rollback, &diag);
    }
    int limited = rc != 0 && (worker_note_limit(rc, setup_rc, &diag) || worker_path_broken(&diag));
    if (rc != 0) worker_note_nproc(&diag);
    int status = worker_exit_status(rc, setup_rc, ctl.stopping, rollback, limited);
    if (rc != 0) {
        const char *msg = diag.msg[0] ? diag.msg : bt_strerror(rc);
        fprintf(stderr, "baton-worker: %s\n", msg);
        worker_control_fatal(&ctl, status, diag.err, msg);
    }
    worker_control_close(&ctl);
    worker_ranks_leave(&w);
    if (spec != NULL) baton__stage_spec__free_unpacked(spec, NULL);
    bt_argv_free(&split);
    return status;
}
