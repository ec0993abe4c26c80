/* An existing directory given as a run directory that is no run's: refused when it holds
 * anything of its own (a project's root, `--run-dir .`), so that a run's files are never
 * mixed with the user's. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "journal.h"
#include "run_dir.h"
#include "util/buf.h"

/* Files only a run directory has: one of them there, it is a run's (maybe one whose
 * making was cut short), taken as it is. */
static const char *const foreign_marks[] = {"lock", JOURNAL_FILE, "secret", "run_id", "workdir"};

/* Every name baton gives an entry of a run directory (run_dir.h). */
static const char *const foreign_own[] = {
    "metrics.jsonl", "valid.jsonl", "worker", "job_id",         "baton.sbatch", "recipe.yaml",
    "overrides",     "specs",       "logs",   CKPT_ROOT_IN_RUN, "tb",           "rolled-back"};

static int foreign_in(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}

#define FOREIGN_N(list) (sizeof list / sizeof *list)

/* A name baton gives an entry of a run directory, or its batch job's output there
 * (slurm-JOBID.out: written before the job's baton starts, a script of the user's own
 * too). */
static int foreign_own_name(const char *name) {
    size_t n = strlen(name);
    if (n > 10 && strncmp(name, "slurm-", 6) == 0 && strcmp(name + n - 4, ".out") == 0) return 1;
    return foreign_in(name, foreign_own, FOREIGN_N(foreign_own)) ||
           foreign_in(name, foreign_marks, FOREIGN_N(foreign_marks));
}

int run_dir_check_foreign(const run_dir *d, bt_diag *diag) {
    DIR *dir = opendir(d->path);
    if (dir == NULL) {
        bt_diag_set(diag, "%s: cannot list the run directory: %s", d->path, strerror(errno));
        return BT_EINVAL;
    }
    size_t n = 0;
    int marked = 0;
    char first[256] = "";
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        marked |= foreign_in(e->d_name, foreign_marks, FOREIGN_N(foreign_marks));
        if (foreign_own_name(e->d_name)) continue;
        if (n++ == 0 || strcmp(e->d_name, first) < 0)
            snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(dir);
    if (marked || n == 0) return 0;
    bt_buf b;
    bt_buf_init(&b);
    bt_diag_set(diag,
                "%s: exists and is not a baton run directory (it holds %zu entr%s of its own, "
                "such as '%s'), and a run's files are not mixed with others; give --run-dir a "
                "new or empty directory, or 'baton resume' a run directory",
                d->path, n, n == 1 ? "y" : "ies", bt_buf_text_of(&b, first));
    bt_buf_free(&b);
    return BT_EINVAL;
}
