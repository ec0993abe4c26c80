/* The Slurm launcher: inside an allocation (salloc, sbatch), each job attempt is one
 * `srun --mpi=pmix` step, started and supervised as a plain child of launch.h (the step's
 * PMIx servers are Slurm's slurmstepd; baton's own server stays out of it). This module
 * knows the allocation's hosts, builds the step's argv (execve, never a shell string),
 * turns srun's labelled output back into per-rank lines, reads srun's own reports of
 * failed tasks and nodes, and judges the hosts after a failure (launch_slurm_probe.c).
 *
 * Ranks on several hosts meet through the rendezvous store this module serves
 * (kv_store.h) at BATON_STORE_ADDRESS; the supervisor's control channel and the store
 * listen on a routable address of this host (not loopback).
 *
 * Logical node k of a run (run_nodes.h: node0, node1, ...) is host k of the allocation,
 * in SLURM_JOB_NODELIST order. A step's hosts, and the excluded nodes' hosts, go to srun
 * in files (--nodelist=PATH, --exclude=PATH: srun reads a file when the value holds a
 * '/'), one host a line, so that no command line limits how many there are. */
#ifndef BATON_LAUNCH_SLURM_H
#define BATON_LAUNCH_SLURM_H

#include <stddef.h>
#include <stdint.h>

#include "kv_store.h"
#include "launch.h"

#define SLURM_MAX_HOSTS 65536 /* hosts of an allocation read (more: refused, said) */
#define SLURM_HOST_MAX  256   /* a host name's bytes with its NUL (a DNS name's 253 fit) */
#define SLURM_MAX_ARGS  40

typedef struct launch_slurm {
    /* Read-only for the caller. */
    char job_id[32];
    char **hosts;   /* the allocation, in SLURM_JOB_NODELIST order (n_hosts of them) */
    char *nodelist; /* SLURM_JOB_NODELIST as given (a host-list expression) */
    int n_hosts;
    char *host_names; /* what hosts point into */
    char listen[256]; /* the address the control channel and the store listen on */
    kv_store kv;
    int kv_open;
    /* This attempt's step (launch_slurm_step_argv .. the next call). */
    char *argv[SLURM_MAX_ARGS];
    char args[SLURM_MAX_ARGS][4200];
    char step_name[64];
    int files_err;    /* a host file it could not write: errno (0: none, or no write's fault) */
    int files_at_tmp; /* ... and whether what failed was the open of FILE.tmp (something there) */
    /* What srun reported about the step's end (launch_slurm_output). */
    int failed_task;                  /* the first task srun named as failed, or -1 */
    char failed_host[SLURM_HOST_MAX]; /* its host */
    char failure[768];                /* srun's words about it */
    char lost_hosts[8192];            /* hosts srun reported as failed nodes, comma separated (those
                                         beyond are found by launch_slurm_judge, the probe step) */
    int step_refused;                 /* Slurm refused to create the step (e.g. more tasks than the
                                         allocation's CPUs): a configuration error, not retried */
    int exit_other;                   /* srun reported a task exit status other than 75 */
    /* Signals sent to the step's tasks (launch_slurm_signal, launch_slurm_cancel_step). */
    char step_id[64];     /* "JOB.STEP" as squeue listed it, or "" */
    char cancel_why[512]; /* why the last one failed */
    int killed;           /* its tasks were sent SIGKILL (scancel --signal=KILL) */
    /* The supervisor's own output callback, which relabelled lines go to. */
    launch_output_cb inner;
    void *inner_arg;
} launch_slurm;

/* Reads the allocation (SLURM_JOB_ID, SLURM_JOB_NODELIST through `scontrol show
 * hostnames`), chooses the listen address (listen, or this host's first non-loopback
 * IPv4 address) and starts the rendezvous store with the run's token, for up to `ranks`
 * workers (kv_store_open's expected). BT_EINVAL with a message when not inside an
 * allocation or Slurm's tools are missing. */
/* BT_EINVAL with a message when SLURM_JOB_ID or SLURM_JOB_NODELIST is not set (not inside
 * an allocation): what launch_slurm_open checks first, for a caller to check before it
 * makes anything. */
int launch_slurm_check_env(bt_diag *diag);
int launch_slurm_open(launch_slurm *s, const char *listen, const char *token, size_t ranks,
                      bt_diag *diag);
void launch_slurm_close(launch_slurm *s);
/* The address the control channel and the store listen on. */
const char *launch_slurm_listen(const launch_slurm *s);

/* BT_EINVAL when the run wants more nodes (nodes + spares) than the allocation has. */
int launch_slurm_check_nodes(const launch_slurm *s, uint32_t wanted, bt_diag *diag);

/* The srun argv for one attempt: ntasks ranks, block-distributed tasks_per_node to a
 * node, on the hosts of the logical nodes in active[0..n_active) (--nodelist=FILES.hosts),
 * every host of excluded (a flag per logical node, total of them) given to --exclude
 * (FILES.exclude, when there is one), then worker_argv. files: a path prefix for those
 * files (a run directory's, e.g. RUN_DIR/specs/s00-a00; it must hold a '/'), written
 * here. step_name names the step (squeue). Returns s->argv (valid until the next call),
 * or NULL with a message: a node without a host, a file that cannot be written (s->files_err
 * then set), an argument too long (nothing is ever cut short). The files are written as
 * the run's own are (ckpt_write_file_atomic_at): 0600, through FILE.tmp and a rename, a
 * FIFO or link put at FILE.tmp refused, one at FILE replaced, never followed. */
char **launch_slurm_step_argv(launch_slurm *s, const uint32_t *active, uint32_t n_active,
                              const unsigned char *excluded, uint32_t total, int ntasks,
                              int tasks_per_node, const char *step_name, const char *files,
                              char *const *worker_argv, bt_diag *diag);

/* launch_output_cb for the srun child (arg: the launch_slurm): "R: line" goes on to
 * s->inner as rank R's line; srun's own lines go on as rank -1's and its reports of
 * failed tasks and nodes are kept. */
void launch_slurm_output(void *arg, int rank, int stream, const char *line, size_t len);

/* lo, a job of the step's ranks (nprocs of them), made the one srun process that starts
 * them: argv (launch_slurm_step_argv's), plain, its output relabelled through s
 * (launch_slurm_output) to lo's own callback, its signals sent to the step's tasks
 * (launch_slurm_signal). The descriptors this process holds per
 * rank are counted for every rank of the step: lo's fds_per_rank (the caller's, e.g. a
 * control connection) and, with more than one rank, each one's connection to the
 * rendezvous store. */
void launch_slurm_wrap(launch_slurm *s, launch_opts *lo, char **argv);

/* One line on how the step failed: srun's exit and what srun reported. */
void launch_slurm_describe(const launch_slurm *s, const launch_job *job, char *buf, size_t cap);

/* After a failed attempt (launch_slurm_probe.c): which of the attempt's hosts are lost.
 * A state query and a probe step (and a second state query where hosts did not answer),
 * whatever the number of hosts. why[k] gets the evidence against host k. */
#define SLURM_WHY_MAX      512
#define SLURM_PROBE_ENDING 3
#define SLURM_LOST_SRUN    1 /* srun reported a node failure on the host */
#define SLURM_LOST_STATE   2 /* Slurm has it down, failing, not responding or powered down */
/* Slurm's word on the hosts of logical nodes idx[0..n) (each < s->n_hosts) from ONE
 * `sinfo --local --all --noheader --Node --nodes=SLURM_JOB_NODELIST --format=%N %T %E` (at
 * most timeout_s, its output read whole), and srun's reports of the attempt: lost[k] =
 * SLURM_LOST_SRUN for each host srun reported failed, else SLURM_LOST_STATE where Slurm has
 * it DOWN, FAIL(ING), not responding ('*', NOT_RESPONDING) or powered down or powering down
 * ('~', '%', POWER(ED|ING)_DOWN), with its state and reason in why[k]; else 0. A drained or
 * draining host is not lost (a draining one runs its job's steps; `scontrol reboot ASAP`
 * drains every host). 0, or -1 when sinfo's answer could not be read (why in note; srun's
 * reports are still counted). */
int launch_slurm_judge(const launch_slurm *s, const uint32_t *idx, uint32_t n, unsigned char *lost,
                       char (*why)[SLURM_WHY_MAX], double timeout_s, char *note, size_t cap);
#define SLURM_PROBE_NAMED  1 /* srun named the host in a line of its own (a failed launch) */
#define SLURM_PROBE_SILENT 2 /* the host did not answer, and srun said nothing of it */
/* ONE probe step over the hosts of logical nodes idx[0..n): `srun --overlap --nodes=N
 * --ntasks=N --ntasks-per-node=1 --nodelist=PATH --kill-on-bad-exit=0 ... printenv
 * SLURMD_NODENAME`, PATH (holding a '/') written as the attempts' host files, at most
 * timeout_s in all. failed[k] = 0 for each host whose task printed its name,
 * SLURM_PROBE_NAMED where srun's line names it (that line in why[k]), SLURM_PROBE_SILENT
 * for the others (the step's end in why[k]); all 0 when srun exits 0. 0 (the step's end
 * in note when it failed: "did not finish in T s: LAST LINE", "failed (status S): ...");
 * SLURM_PROBE_ENDING when a line of srun's that names no host says the job itself is
 * ending (expired, cancelled, completing: its words in note); -1 when PATH could not be
 * written (note). */
int launch_slurm_probe(launch_slurm *s, const char *path, const uint32_t *idx, uint32_t n,
                       double timeout_s, unsigned char *failed, char (*why)[SLURM_WHY_MAX],
                       char *note, size_t cap);
/* Shared with launch_slurm_probe.c: whether host is one srun reported as a failed node;
 * whether srun's words say the job itself is ending; the hosts of logical nodes idx[0..n)
 * written to path (the number written, or -1 with a message). */
int launch_slurm_lost_has(const launch_slurm *s, const char *host);
int launch_slurm_job_gone(const char *out);
long launch_slurm_hosts_file(launch_slurm *s, const char *path, const uint32_t *idx, uint32_t n,
                             bt_diag *diag);

/* 1 when the allocation is going away (squeue shows the job in a state other than
 * RUNNING, or no longer knows it); state gets what squeue said. 0 when it runs or cannot
 * be told. */
int launch_slurm_job_ending(const launch_slurm *s, char *state, size_t cap);

/* 1 when the step ended as the workers' stop on request: srun exited 75 (a worker's
 * "stopped, checkpoint saved") and reported no other task exit status and no node
 * failure, e.g. Slurm's SIGTERM at a time limit or scancel reaching the workers first. */
int launch_slurm_stopped(const launch_slurm *s, const launch_job *job);

/* Cancels what is left of the attempt's step (srun killed before its tasks ended); hard:
 * SIGKILL to its tasks (scancel --signal=KILL), no SIGTERM they could act on first, once
 * per step. The step's id is found by its name with `squeue --steps` (tried twice).
 * 0 (also when no such step is listed: nothing is left), or BT_EIO when squeue or scancel
 * failed: say launch_slurm_cancel_advice. */
int launch_slurm_cancel_step(launch_slurm *s, int hard);
/* After a failed launch_slurm_cancel_step: "could not cancel step ID (why): run 'scancel
 * --signal=KILL ID'" (or how to find ID where squeue did not give it) into buf. */
void launch_slurm_cancel_advice(const launch_slurm *s, char *buf, size_t cap);

/* launch_opts.on_signal for the step (launch_slurm_wrap sets it; arg: the launch_slurm).
 * srun turns a SIGTERM of its own into SIGKILL for every task ("forcing job termination"),
 * so a stop never reaches the workers through srun: SIGTERM goes to the step's tasks
 * (`scancel --signal=TERM JOB.STEP`) and srun gets nothing (it exits when they do);
 * returns 0 (srun signalled, its tasks killed) only when that failed or the step is not
 * listed yet. SIGKILL: the tasks get
 * it through scancel first (srun's death alone leaves them running), then srun; returns
 * 0. */
int launch_slurm_signal(void *arg, int sig);

/* Runs argv (no shell) with output captured into out (cap bytes, NUL-terminated), at most
 * timeout_s; returns the exit status, 124 on timeout, or -1 when it cannot run. */
int launch_slurm_exec(char *const argv[], char *out, size_t cap, double timeout_s);
/* The same, keeping the last cap - 1 bytes of the output, not the first (where the last
 * error line is what matters). */
int launch_slurm_exec_tail(char *const argv[], char *out, size_t cap, double timeout_s);
/* The same, into a buffer grown as the output comes (*out, malloc'd: the caller frees it;
 * NULL and -1 when none could be had): the whole output, or its first max - 1 bytes. */
int launch_slurm_exec_grow(char *const argv[], char **out, size_t max, double timeout_s);

#endif
