/* `baton submit`: a readable batch script from deploy/slurm/baton.sbatch.in for a run
 * directory, written to RUN_DIR/baton.sbatch and given to sbatch. */
#ifndef BATON_SUBMIT_H
#define BATON_SUBMIT_H

#include "util/err.h"

typedef struct submit_opts {
    const char *run_dir;  /* an opened run directory (recipe copy and overrides inside) */
    const char *job_name; /* the recipe's name */
    const char *baton, *worker;
    unsigned nodes, tasks_per_node;
    unsigned gpus_per_node;    /* a CUDA recipe's devices per node (#SBATCH --gpus-per-node);
                                  0: a CPU recipe, none asked for */
    const char *workdir;       /* where the recipe's relative paths (data) resolve: the
                                  directory baton submit ran in (#SBATCH --chdir) */
    char *const *sbatch;       /* extra sbatch options, each written as an #SBATCH line */
    char *const *sbatch_value; /* NULL, or per option its value given apart (or NULL) */
    int n_sbatch;
    const char *template_path; /* NULL: $BATON_SBATCH_TEMPLATE, then the installed one */
    int dry_run;               /* write the script, do not submit */
} submit_opts;

/* What submit_batch checks before it writes anything (the options, the values an #SBATCH
 * line cannot carry: a line break, a backslash in a filename pattern; the template read
 * and rendered, every value quoted for sbatch or the shell, sbatch_quote.h): for a run
 * directory not made yet. BT_EINVAL with the message. */
int submit_precheck(const submit_opts *o, bt_diag *diag);
/* Writes the script and (unless dry_run) runs `sbatch --parsable` on it; *job_id gets
 * the job id (cap bytes), also kept in RUN_DIR/job_id. Errors name the template, the script or
 * sbatch's message. An extra option the script sets itself from the recipe or needs as it is
 * (--nodes,
 * --ntasks-per-node, --ntasks, --gpus-per-node, --output, --open-mode, --chdir: Slurm
 * would take the later line and the run would not match its allocation) is refused,
 * saying what to do instead. A template that cannot be read is BT_EINVAL; sbatch failing
 * BT_EIO, with *unsure set where that failure is no clear refusal (killed at its 60 s
 * timeout or by a signal, a lost reply from slurmctld: "Socket timed out on send/recv
 * operation", "Connection reset by peer", a status other than 1 or SLURM_EXIT_ERROR):
 * Slurm may have queued the job all the same. A refusal is confirmed with squeue (a job
 * of the script listed: submitted, 0 and its id; squeue failing: *unsure 2). sbatch's
 * job id is its output's last line that is one (a site's messages may come first); ""
 * (warned of) when none is. */
int submit_batch(const submit_opts *o, char *script, size_t script_cap, char *job_id, size_t cap,
                 int *unsure, bt_diag *diag);

#endif
