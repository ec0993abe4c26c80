/* The names baton gives the entries of a run directory: one table, from which every list
 * of them is derived (the symbolic links refused in an existing one, the marks and the
 * names of its own that run_dir_check_foreign goes by, what run_dir_unmake removes), so
 * that an entry added here is known to all of them. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "journal.h"
#include "run_dir.h"

const run_dir_name run_dir_names[] = {
    /* the recipe as given: the bytes baton parsed, never the file read again (what `baton
     * resume` reruns) */
    {"recipe.yaml", RUN_DIR_LINKS},
    /* the recipe's bytes the baton run, resume or submit that took the run last started
     * with (written each time one takes it), while recipe.yaml may be edited for the next
     * resume: what baton status shows the steps and ETA of while that one runs */
    {RUN_DIR_RUNNING_RECIPE, RUN_DIR_LINKS},
    /* its --set assignments, one per line (reapplied by `baton resume`) */
    {"overrides", RUN_DIR_LINKS},
    /* the directory the run started in (run_dir_note_start): a file holding its path */
    {"workdir", RUN_DIR_LINKS},
    /* the --worker it was started with, if any (used again by `baton resume`); checked
     * where it is read, saying more (run_dir_read_worker) */
    {"worker", 0},
    /* the control channel's per-run token (0600) */
    {"secret", RUN_DIR_LINKS},
    /* the run's identity (32 random hex digits, made with the directory): every attempt's
     * spec carries it and every checkpoint's manifest records it, so that a checkpoint of
     * another run named by `init:` is never taken for one of this run's own
     * (ckpt_same_run) */
    {"run_id", RUN_DIR_LINKS},
    /* held (an OFD lock) by the one `baton run` working here, which also holds a flock on
     * the directory itself: a lock file deleted as "stale" lets no second one in on this
     * host (on NFS a directory's flock is local to each client; only the OFD lock reaches
     * the server); the first file run_dir_open makes; it holds the holder's record
     * (run_holder.h), emptied as a holder takes it and as it lets go (run_dir_close) */
    {"lock", RUN_DIR_MARK | RUN_DIR_LINKS},
    /* run_state.h / journal.h: there from the run's start */
    {JOURNAL_FILE, RUN_DIR_MARK | RUN_DIR_LINKS},
    /* the control channel's metrics, one line a step, and each stage's validation loss */
    {"metrics.jsonl", RUN_DIR_LINKS},
    {"valid.jsonl", RUN_DIR_LINKS},
    /* baton submit's: the batch job's id and its script */
    {"job_id", RUN_DIR_LINKS},
    {"baton.sbatch", RUN_DIR_LINKS},
    /* the StageSpec of every attempt (sNN-aMM.pb) */
    {"specs", RUN_DIR_DIR | RUN_DIR_LINKS},
    /* every attempt's worker output (sNN-aMM.log) and rank 0's metrics log (sNN-aMM.metrics,
     * stages/metrics_log.h) */
    {"logs", RUN_DIR_DIR | RUN_DIR_LINKS},
    /* stages/ckpt/ckpt.h */
    {CKPT_ROOT_IN_RUN, RUN_DIR_DIR | RUN_DIR_LINKS},
    /* the control channel's metrics as TensorBoard event files (tb_writer.h) */
    {"tb", RUN_DIR_DIR | RUN_DIR_LINKS},
    /* checkpoints a rollback set aside (run_rollback.c), sNN-aMM/ each */
    {"rolled-back", RUN_DIR_DIR | RUN_DIR_LINKS},
};

const size_t run_dir_n_names = sizeof run_dir_names / sizeof *run_dir_names;
_Static_assert(sizeof run_dir_names / sizeof *run_dir_names <= RUN_DIR_NAMES_MAX,
               "run_dir.had has a slot for each name");

const run_dir_name *run_dir_name_of(const char *name) {
    for (size_t i = 0; i < run_dir_n_names; i++)
        if (strcmp(name, run_dir_names[i].name) == 0) return &run_dir_names[i];
    return NULL;
}

int run_dir_name_is(const run_dir_name *e, const struct stat *st) {
    return e->flags & RUN_DIR_DIR ? S_ISDIR(st->st_mode) : S_ISREG(st->st_mode);
}

int run_dir_has_file(const char *run_dir_path, const char *name, struct stat *st) {
    char path[4200];
    struct stat own;
    st = st ? st : &own;
    snprintf(path, sizeof path, "%s/%s", run_dir_path, name);
    return lstat(path, st) == 0 && S_ISREG(st->st_mode);
}
