/* A run directory: everything one `baton run` owns, 0700; one that another user owns or
 * may write is refused, and so is a symbolic link where baton keeps a file or directory
 * (it opens them O_NOFOLLOW). What it holds, under fixed names: run_dir_names, each said
 * there (recipe.yaml, running-recipe.yaml, overrides, workdir, worker, secret, run_id,
 * lock, journal, metrics.jsonl, valid.jsonl, job_id, baton.sbatch, specs/, logs/,
 * checkpoints/, tb/, rolled-back/). */
#ifndef BATON_RUN_DIR_H
#define BATON_RUN_DIR_H

#include <stddef.h>
#include <sys/stat.h>

#include "recipe.h"

/* What an entry of run_dir_names is and where it counts. RUN_DIR_DIR: a directory, else
 * a regular file. RUN_DIR_MARK: there as its kind, the directory is a run's
 * (run_dir_check_foreign): every run directory has it from its first moment (lock, the
 * first file run_dir_open makes) or its run's start (journal), and no other directory
 * is likely to. RUN_DIR_LINKS: in an existing directory, refused as a symbolic link, or as
 * a directory another user owns or may write (run_dir_open; else checked where it is
 * read). */
#define RUN_DIR_DIR   1u
#define RUN_DIR_MARK  2u
#define RUN_DIR_LINKS 4u

typedef struct run_dir_name {
    const char *name;
    unsigned flags; /* RUN_DIR_DIR, RUN_DIR_MARK, RUN_DIR_LINKS */
} run_dir_name;

/* run_dir_names.c: every name baton gives an entry of a run directory, files first; each
 * is removed by run_dir_unmake (a directory only when empty), and each, of its kind, is
 * baton's own to run_dir_check_foreign. */
extern const run_dir_name run_dir_names[];
extern const size_t run_dir_n_names;
/* The most names run_dir_names may hold (run_dir.had: checked where the table is). */
#define RUN_DIR_NAMES_MAX 32
/* The copy of the recipe bytes the process that took the run last read (run_dir_open). */
#define RUN_DIR_RUNNING_RECIPE "running-recipe.yaml"
/* name's entry in run_dir_names, or NULL. */
const run_dir_name *run_dir_name_of(const char *name);
/* Whether st (lstat's) is of e's kind: a directory, or a regular file. */
int run_dir_name_is(const run_dir_name *e, const struct stat *st);
/* Whether run_dir_path/name is a regular file (a symbolic link not followed); its lstat in
 * *st where st is not NULL. */
int run_dir_has_file(const char *run_dir_path, const char *name, struct stat *st);

/* The most directories a path of 4096 bytes names ("a/a/a/..."): every one it made is
 * recorded, so that a refusal removes them all, however deep. */
#define RUN_DIR_MADE_MAX 2048

/* "LOCK_FD,DIR_LOCK_FD": the run's locks, which a baton run that continues in a fresh
 * process (run_afresh.h) keeps open across the exec, so that no other baton takes the run
 * over in between; run_dir_lock takes them over and removes the variable. */
#define RUN_DIR_LOCKS_ENV "BATON_RUN_LOCKS"

typedef struct run_dir {
    char path[4096];
    char token[65];
    char run_id[33]; /* RUN_DIR/run_id */
    int lock_fd;
    int dir_lock_fd;           /* the directory, flock'ed */
    int started;               /* a run worked here before this command (workdir, or a journal) */
    char warning[4300];        /* what the caller says as a warning (the directory's mode), or "" */
    char parent_warning[8600]; /* another, on a directory above it (run_dir_check_parents) */
    char note[2600];           /* a note the caller says: RUN_DIR/overrides edited, or "" */
    char given[4096];          /* the path as given, which run_dir_open made */
    size_t made[RUN_DIR_MADE_MAX]; /* the directories it made itself: prefixes of given */
    size_t n_made;                 /* how many, outermost first */
    int made_leaf;                 /* the run directory itself among them */
    /* An existing directory locked by run_dir_open: had[i], whether run_dir_names[i] was
     * there before (lock: before it was locked; any other: once locked), so that a refusal
     * removes only what this command wrote in it (run_dir_unmake). */
    int wrote_in;
    unsigned char had[RUN_DIR_NAMES_MAX];
} run_dir;

/* Creates (0700) or reopens path for recipe (its bytes as loaded, recipe->text, named
 * recipe->file) and overrides (the --set lines), whose bytes must equal the copies kept
 * there when the directory already holds a run; the
 * kept overrides must also still be those the journal says the run started with (a lost
 * copy is written again only when overrides are those); takes the lock; makes the
 * secret and the run id (run_id) where they are not there yet. Every failure
 * (unwritable; an existing directory another user owns or group or others may write; a
 * symbolic link for specs/, logs/, checkpoints/ or tb/; another run's directory; an
 * existing directory that is no run's and holds files of its own (run_dir_check_foreign);
 * locked by another baton run; a directory above it that any user may rename entries in:
 * run_dir_check_parents) is a clear message and BT_EINVAL / BT_EIO. d->warning and
 * d->parent_warning: for the caller to say (a directory others may read; one above it
 * that some users may rename entries in). */
int run_dir_open(run_dir *d, const char *path, const recipe_doc *recipe, const char *overrides,
                 bt_diag *diag);
/* The directories above path (walked as the kernel resolves it; for a path not made yet,
 * above where it will be made) and above every symbolic link on its way (whoever may
 * rename entries there may point the link elsewhere): one that any other user may rename
 * entries in (writable by others, not sticky) is refused, BT_EINVAL naming it, its mode
 * and what to do; the first that some may (writable by a group other than your own
 * private one, not sticky; owned by another user than root, or than the uid a user
 * namespace shows for root's files) is d->parent_warning for the caller to say. A link
 * another user may have planted (in a sticky directory others may write, neither yours
 * nor the directory owner's: bt_link_planted) is refused, BT_EINVAL naming it. A
 * component that is not a directory is left for making path to report. */
int run_dir_check_parents(run_dir *d, const char *path, bt_diag *diag);
void run_dir_close(run_dir *d);
/* Takes the run's locks (run_dir_open does): 0, or BT_EINVAL when another baton run holds
 * them or the lock file cannot be made (diag). Locks named in RUN_DIR_LOCKS_ENV that are
 * open on the run's files are taken over rather than opened again. */
int run_dir_lock(run_dir *d, bt_diag *diag);
/* run_dir_differs.c: why run_dir_open refuses recipe (as loaded: its bytes, not its file
 * read again), not the recipe kept with the run (RUN_DIR/recipe.yaml): its first
 * differences from the kept one (recipe_diff.h), and how to continue the run with the edit
 * (edit the kept copy, then baton resume). */
void run_dir_other_recipe(const run_dir *d, const recipe_doc *recipe, bt_diag *diag);
/* Why it refuses overrides (the --set lines given), not the run's: both named. */
void run_dir_other_sets(const run_dir *d, const char *overrides, bt_diag *diag);
/* Overrides text (one assignment a line) as --set options on one line ("--set a=1 --set
 * b=2"), or "no --set". */
void run_dir_sets_line(const char *text, char *out, size_t cap);
/* The bytes of the kept overrides (free *text); -1 (errno set) when they cannot be read. */
int run_dir_read_overrides(const run_dir *d, char **text, size_t *n);
/* Whether a baton run holds path's lock now (tested, not taken). */
int run_dir_busy(const char *path);
/* run_dir_arg.c: a run directory dir named on baton CMD's command line (status, stop),
 * checked before anything in it is read: BT_EINVAL, diag saying which ("'': an empty name;
 * give a run directory", "DIR: no such directory", "DIR: cannot read: ...", "DIR: not a
 * directory (baton CMD takes a run directory)", "DIR: not a run directory (its journal is
 * not a file)"), else 0: a journal missing or empty is for the caller to judge. */
int run_dir_check_arg(const char *cmd, const char *dir, bt_diag *diag);
/* Every dataset the recipe's stages read (train, mix, valid) exists and opens. */
int run_dir_check_data(const recipe_doc *doc, bt_diag *diag);
/* A run's start (`baton run` or `baton submit` on a run directory without RUN_DIR/workdir
 * yet): RUN_DIR/worker gets worker, the --worker the run was started with (when one was
 * given: NULL, none), and RUN_DIR/workdir the directory baton works in, where the
 * recipe's relative data paths resolve; a worker file there already (none of this run's)
 * is removed when worker is NULL. Nothing when the run started before. */
int run_dir_note_start(const run_dir *d, const char *worker, bt_diag *diag);
/* The --worker the run was started with (RUN_DIR/worker) into out: 1, 0 when none is
 * kept, BT_EINVAL (diag naming the file and why) when it may not be run: a symbolic
 * link or not a regular file, or the file or the run directory owned by another user or
 * writable by group or others. Read only for a run that started (run_dir.started). */
int run_dir_read_worker(const char *run_dir_path, char *out, size_t cap, bt_diag *diag);
/* Whether a run started in the directory at path: its start noted (RUN_DIR/workdir, a
 * regular file), or a journal (a regular file) with anything in it (a run older than
 * workdir). A directory or anything else of those names is no sign of a run. */
int run_dir_has_started(const char *run_dir_path);
/* For `baton resume` from anywhere: changes into the run's workdir (when it has one and
 * it is not the current directory; *moved says so). run_dir_path must be absolute. A
 * workdir that is gone is an error naming it. */
int run_dir_enter_workdir(const char *run_dir_path, int *moved, bt_diag *diag);
/* Whether the directory shows that a run already worked here (a complete checkpoint in
 * checkpoints/, an attempt's spec in specs/): then a journal with no record is lost, not
 * new. 1 with what naming what was found, 0 when neither is there, -1 when either
 * directory cannot be read (diag: which, and why), which tells nothing either way. */
int run_dir_has_history(const run_dir *d, char *what, size_t cap, bt_diag *diag);
/* For `baton resume`: whether path holds a run to continue: a journal record, or a run
 * that baton run or submit made (RUN_DIR/workdir) or that left checkpoints or specs.
 * Else BT_EINVAL, "not a run directory (no journal)", as baton status says. */
int run_dir_check_resumable(const char *path, bt_diag *diag);
/* After a refusal before any attempt started (run_dir_unmake.c): removes what
 * run_dir_open made, and only that. In the run directory, when it made it, the files and
 * directories baton writes there (never any other, which is kept), under the run's lock
 * (taken again if closed; when another baton run holds it, the directory is kept); in one
 * that was there, only those of them it wrote itself (run_dir.had: a lock file it made
 * too), so that the directory is left as it was (1 when any was removed); then
 * the run directory and each parent it made, innermost first, with rmdir, stopping at the
 * first that cannot go: one not empty (another run's directory made in it meanwhile) is
 * kept, with all above it. 0: nothing was made; 1: all removed; 2: some kept because not
 * empty; -1: a removal failed otherwise. said: what was removed and kept, and why, for
 * the caller to say ("" for 0). Leaves d closed. */
int run_dir_unmake(run_dir *d, char *said, size_t cap);
/* run_dir_foreign.c: an existing directory run_dir_open is given: BT_EINVAL (diag naming
 * how many entries it holds, one of them, and what to give instead) when it is no run's
 * (no mark of run_dir_names there as a regular file: lock, journal) and holds an entry
 * that is not baton's own (a name of run_dir_names, of its kind, but a recipe.yaml or
 * overrides not holding the bytes of recipe or overrides, which is the user's; a batch
 * job's output slurm-JOBID.out or .err), nor one its file system makes (lost+found/,
 * .snapshot/, .zfs/, NFS's .nfsXXXX of a removed file still open) or a Mac's Finder
 * (.DS_Store); an empty one is taken. */
int run_dir_check_foreign(const run_dir *d, const recipe_doc *recipe, const char *overrides,
                          bt_diag *diag);
/* path/<sub> into out. */
void run_dir_file(const run_dir *d, const char *sub, char *out, size_t cap);

#endif
