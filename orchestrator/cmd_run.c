#define _DEFAULT_SOURCE /* realpath */
/* baton run RECIPE [--run-dir DIR] and baton resume RUN_DIR: the supervised multi-stage
 * run (run/supervise.h). Everything that can be checked before a worker starts is: the
 * recipe, the run directory, the data. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton_version.h"
#include "cli.h"
#include "launch.h"
#include "launch_slurm.h"
#include "launch_tmpdir.h"
#include "recipe.h"
#include "run/run_afresh.h"
#include "run/run_dir.h"
#include "run/journal.h"
#include "run/run_holder.h"
#include "run/run_state.h"
#include "run/run_worker.h"
#include "run/submit.h"
#include "run/supervise.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"
#include "util/utf8.h"

static void run_usage(FILE *f) {
    fprintf(f, "usage: baton run RECIPE [--run-dir DIR] [--nodes K] [--gpus-per-node G]\n"
               "                 [--set KEY=VALUE ...] [--worker PATH] [--quiet]\n"
               "                 [--launcher local|slurm] [--listen ADDRESS]\n\n"
               "Runs every stage of RECIPE in order, each as a job of baton-worker ranks under\n"
               "the embedded PMIx server, handing each stage the previous stage's final\n"
               "checkpoint, and restarting a failed attempt from the newest complete\n"
               "checkpoint (restart.max_restarts, restart.backoff; no progress for\n"
               "restart.heartbeat_timeout counts as a hang). Everything is journaled in the run\n"
               "directory; running again on the same directory (or 'baton resume') continues\n"
               "where it stood. See 'baton status RUN_DIR'. Not retried: a non-finite loss met\n"
               "again at the same step from the same checkpoint, and loss spikes after a\n"
               "stage's 5 rollbacks (restart.spike_zscore).\n\n"
               "  --run-dir DIR   the run directory (default: runs/<recipe name>,\n"
               "                  runs/<file stem> for a recipe without a name), created 0700;\n"
               "                  an existing one must be empty or a run's\n"
               "  --nodes K, --gpus-per-node G   the cluster (as --set cluster.nodes=K ...)\n"
               "  --set KEY=VALUE override a recipe field: a dotted path as in the YAML, stages\n"
               "                  by name or index (stages.pretrain.steps=100,\n"
               "                  defaults.optimizer.lr=1e-3); kept with the run for resume\n"
               "  --worker PATH   the worker program (default: baton-worker next to baton,\n"
               "                  else in PATH); kept with the run (RUN_DIR/worker) and used\n"
               "                  again on resume; one of another build is refused\n"
               "  --launcher L    local (default): the embedded PMIx server on this host;\n"
               "                  slurm: inside an allocation, each attempt is an\n"
               "                  'srun --mpi=pmix' step on the allocation's hosts\n"
               "  --listen ADDR   (slurm) the address the workers reach this host at\n"
               "                  (default: its first non-loopback IPv4 address that is up)\n"
               "  --quiet         no progress lines\n\n"
               "Exit status: 0 the run completed, 1 it failed (restarts exhausted, or a\n"
               "failure every restart would meet again), 2 bad recipe, run directory or data\n"
               "(nothing was started), 75 stopped by a signal (resumable).\n");
}

static void resume_usage(FILE *f) {
    fprintf(f, "usage: baton resume RUN_DIR [--worker PATH] [--quiet] [--launcher local|slurm]\n"
               "                    [--listen ADDRESS]\n\n"
               "Continues a stopped or interrupted run from its run directory, with the recipe\n"
               "copy, the --set overrides and the --worker kept there (RUN_DIR/recipe.yaml,\n"
               "RUN_DIR/overrides, RUN_DIR/worker), from the newest complete checkpoint. It\n"
               "works in the directory the run started in (RUN_DIR/workdir), where the\n"
               "recipe's relative data paths resolve, and says so (a project moved: write\n"
               "its new path into RUN_DIR/workdir). A completed run is reported as such,\n"
               "unless its kept recipe was edited since to add stages or steps to its last\n"
               "stage: those are trained. Stages removed, inserted or reordered among those\n"
               "the run started are refused (docs/running.md:\n"
               "Changing a run's recipe).\n\n"
               "  --worker PATH   the worker program (default: the one the run was started\n"
               "                  with, else baton-worker next to baton); said when it\n"
               "                  replaces the run's\n"
               "  --launcher L    local (default) or slurm (inside an allocation; what a\n"
               "                  'baton submit' job runs)\n"
               "  --listen ADDR   (slurm) the address the workers reach this host at\n"
               "                  (default: its first non-loopback IPv4 address that is up)\n"
               "  --quiet         no progress lines\n\n"
               "Exit status: 0 the run completed, 1 it failed (restarts exhausted, or a\n"
               "failure every restart would meet again), 2 bad run directory, recipe or data\n"
               "(nothing was started), 75 stopped by a signal (resumable).\n");
}

static void submit_usage(FILE *f) {
    fprintf(f, "usage: baton submit RECIPE [--run-dir DIR] [--nodes K] [--gpus-per-node G]\n"
               "                    [--set KEY=VALUE ...] [--worker PATH] [--template FILE]\n"
               "                    [--dry-run] [SBATCH_OPTION[=VALUE] ...]\n"
               "                    [-- SBATCH_OPTIONS ...]\n\n"
               "Makes the run directory, writes RUN_DIR/baton.sbatch from\n"
               "deploy/slurm/baton.sbatch.in with the recipe's nodes and gpus_per_node, every\n"
               "sbatch option given as an #SBATCH line, and 'baton resume RUN_DIR --launcher\n"
               "slurm' as its command, runs sbatch on it and prints the job id.\n\n"
               "  --run-dir DIR   the run directory (default as for baton run)\n"
               "  --nodes K, --gpus-per-node G   the cluster (as --set cluster.nodes=K ...): the\n"
               "                  allocation asked for (--nodes=K too; after -- it is sbatch's)\n"
               "  --set KEY=VALUE override a recipe field, as for baton run\n"
               "  --worker PATH   the worker program the job runs\n"
               "  --template FILE the batch script template (default: $BATON_SBATCH_TEMPLATE,\n"
               "                  else deploy/slurm/baton.sbatch.in)\n"
               "  --dry-run       write the script only, do not run sbatch\n"
               "  --launcher, --listen  refused: the job runs 'baton resume RUN_DIR --launcher\n"
               "                  slurm' itself, at its host's first non-loopback IPv4 address\n"
               "  SBATCH_OPTION   any other option is sbatch's (--time=1:00:00 or --time\n"
               "                  1:00:00, -p debug or -pdebug), as is everything after --;\n"
               "                  the options the script sets itself (--nodes=/-N,\n"
               "                  --ntasks-per-node, --ntasks/-n, --gpus-per-node=, --gpus/-G,\n"
               "                  --output/-o, --open-mode, --chdir/-D) are refused, also\n"
               "                  abbreviated as sbatch takes them (--out=x, --nod=2), as is a\n"
               "                  value-taking option given bare\n\n"
               "Every option and the template are checked before the run directory is made; a\n"
               "run directory submit made and could not use (refused, or sbatch refused the\n"
               "job) is removed again. After an sbatch failure that may have queued the job\n"
               "all the same (a timeout, a reply lost: 'Socket timed out on send/recv\n"
               "operation') it is kept, and submit says how to look for the job.\n\n"
               "Exit status: 0 submitted (or written, --dry-run), 1 sbatch failed, 2 bad\n"
               "recipe, run directory, option or template.\n");
}

#define RUN_MAX_SETS 32

typedef struct run_args {
    const char *recipe, *run_dir, *worker, *launcher, *listen;
    int quiet, resume;
    bt_diag naming;   /* a stage name against the rules made after runs could start with it */
    recipe_sets sets; /* --set, --nodes, --gpus-per-node */
    /* baton submit */
    int submit, dry_run;
    const char *template_path;
    char *sbatch[RUN_MAX_SETS];       /* options for sbatch, as given */
    char *sbatch_value[RUN_MAX_SETS]; /* the value given apart (--time 1:00:00), or NULL */
    int n_sbatch;
} run_args;

static const char *run_name(const run_args *a) {
    return a->submit ? "submit" : a->resume ? "resume" : "run";
}

/* The command's own usage. */
static void run_usage_of(const run_args *a, FILE *f) {
    if (a->submit)
        submit_usage(f);
    else if (a->resume)
        resume_usage(f);
    else
        run_usage(f);
}

/* Whether argv[i] is the value of the sbatch option before it written apart (--time
 * 1:00:00): not an option itself, and, while no recipe was given, not a name ending in
 * .yaml or .yml (the recipe after a flag such as --requeue). */
static int run_sbatch_value(int argc, char **argv, int i, const run_args *a) {
    const char *o = argv[i - 1];
    if (i >= argc || argv[i][0] == '-' || o[0] != '-' || strchr(o, '=') != NULL) return 0;
    size_t n = strlen(argv[i]);
    int yaml = (n > 5 && strcmp(argv[i] + n - 5, ".yaml") == 0) ||
               (n > 4 && strcmp(argv[i] + n - 4, ".yml") == 0);
    return a->recipe != NULL || !yaml;
}

/* baton submit's own options and sbatch's (anything after --, or an unknown option with
 * its value attached); 1 when argv[*i] was taken, -1 when one of submit's own was given
 * twice (said). */
static int run_parse_submit(int argc, char **argv, int *i, run_args *a) {
    const char *o = argv[*i];
    if (strcmp(o, "--dry-run") == 0) {
        if (a->dry_run) return cli_twice("submit", o), -1;
        a->dry_run = 1;
    } else if (strcmp(o, "--template") == 0 && *i + 1 < argc) {
        if (cli_once("submit", o, a->template_path, argv[*i + 1]) != 0) return -1;
        a->template_path = argv[++*i];
    } else if (strcmp(o, "--") == 0) {
        while (*i + 1 < argc && a->n_sbatch < RUN_MAX_SETS) {
            a->sbatch[a->n_sbatch++] = argv[++*i];
            if (*i + 1 < argc && argv[*i + 1][0] != '-' && strchr(argv[*i], '=') == NULL)
                a->sbatch_value[a->n_sbatch - 1] = argv[++*i];
        }
    } else if (o[0] == '-' && a->n_sbatch < RUN_MAX_SETS) {
        a->sbatch[a->n_sbatch++] = argv[*i];
        if (run_sbatch_value(argc, argv, *i + 1, a)) a->sbatch_value[a->n_sbatch - 1] = argv[++*i];
    } else {
        return 0;
    }
    return 1;
}

/* Whether o is an option of this command that takes a value. */
static int run_takes_value(const run_args *a, const char *o) {
    static const char *const all[] = {"--worker", "--launcher", "--listen"};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        if (strcmp(o, all[k]) == 0) return !a->submit || k == 0; /* submit: --worker only */
    if (strcmp(o, "--run-dir") == 0) return !a->resume;
    return a->submit && strcmp(o, "--template") == 0;
}

/* -1 after saying why when o is --launcher or --listen given to submit, else 0: the job
 * submit writes runs 'baton resume RUN_DIR --launcher slurm' itself, and neither is an
 * sbatch option (written as an #SBATCH line, sbatch would refuse it). */
static int run_submit_refuses(const run_args *a, const char *o) {
    if (!a->submit) return 0;
    if (strcmp(o, "--launcher") == 0)
        fprintf(stderr, "baton submit: --launcher is not submit's: the job it submits runs "
                        "'baton resume RUN_DIR --launcher slurm' itself\n");
    else if (strcmp(o, "--listen") == 0)
        fprintf(stderr, "baton submit: --listen is not submit's: the job's 'baton resume "
                        "--launcher slurm' takes its host's first non-loopback IPv4 address; "
                        "for another, write the script with --dry-run, add --listen ADDR to its "
                        "last line and sbatch it\n");
    else
        return 0;
    return -1;
}

/* --run-dir (not resume's), --worker, --launcher or --listen with its value at argv[*i]
 * (*i moves past it): 1 taken, 0 not one (or its value missing), -1 given twice or
 * --launcher/--listen given to submit (said). */
static int run_parse_value(int argc, char **argv, int *i, run_args *a) {
    const char *o = argv[*i];
    if (run_submit_refuses(a, o) != 0) return -1;
    const char **v = strcmp(o, "--worker") == 0                  ? &a->worker
                     : strcmp(o, "--launcher") == 0              ? &a->launcher
                     : strcmp(o, "--listen") == 0                ? &a->listen
                     : strcmp(o, "--run-dir") == 0 && !a->resume ? &a->run_dir
                                                                 : NULL;
    if (v == NULL || *i + 1 >= argc) return 0;
    if (cli_once(run_name(a), o, *v, argv[*i + 1]) != 0) return -1;
    *v = argv[++*i];
    return 1;
}

/* An argument run_parse does not take: an unknown option (for resume, one of the
 * overrides a run keeps from its start, said so) or an extra argument. */
static void run_unexpected(const run_args *a, const char *o) {
    size_t n = strcspn(o, "=");
    int kept = a->resume && ((n == 5 && strncmp(o, "--set", n) == 0) ||
                             (n == 7 && strncmp(o, "--nodes", n) == 0) ||
                             (n == 15 && strncmp(o, "--gpus-per-node", n) == 0));
    if (o[0] != '-')
        fprintf(stderr, "baton %s: unexpected argument '%s'\n", run_name(a), o);
    else if (kept)
        fprintf(stderr,
                "baton resume: unknown option '%s' (a run keeps the overrides it was started "
                "with, in RUN_DIR/overrides, and resume reapplies them; to change them, edit "
                "that file, one KEY=VALUE per line)\n",
                o);
    else
        fprintf(stderr, "baton %s: unknown option '%s'\n", run_name(a), o);
    run_usage_of(a, stderr);
}

/* A new run's --run-dir whose first component is '~' (--run-dir=~/x: the shell expands '~'
 * only at a word's start, not after '='): refused while nothing is there, as it would make
 * a directory named '~' here, saying how to write it; one there already is used. */
static int run_check_tilde(const run_args *a) {
    const char *p = a->run_dir;
    struct stat st;
    if (a->resume || p == NULL || p[0] != '~' || (p[1] != '\0' && p[1] != '/') ||
        lstat(p, &st) == 0)
        return 0;
    fprintf(stderr,
            "baton %s: --run-dir '%s': the shell did not expand '~' (it does not after '='), "
            "so a directory named '~' would be made here; write --run-dir %s (with a space) "
            "or $HOME%s, or ./%s for a directory named '~'\n",
            run_name(a), p, p, p + 1, p);
    return -1;
}

static int run_parse(int argc, char **argv, run_args *a) {
    int taken;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            run_usage_of(a, stdout);
            return 1;
        } else if (strcmp(o, "--quiet") == 0) {
            if (a->quiet) return cli_twice(run_name(a), o), -1;
            a->quiet = 1;
        } else if ((taken = run_parse_value(argc, argv, &i, a)) != 0) {
            if (taken < 0) return -1;
        } else if (!a->resume &&
                   (taken = recipe_sets_parse(&a->sets, a->submit ? "baton submit" : "baton run",
                                              argc, argv, &i)) != 0) {
            if (taken == -1) run_usage_of(a, stderr);
            if (taken < 0) return -1;
        } else if (v == NULL && run_takes_value(a, o)) {
            fprintf(stderr, "baton %s: %s needs a value\n", run_name(a), o);
            run_usage_of(a, stderr);
            return -1;
        } else if (a->submit && (taken = run_parse_submit(argc, argv, &i, a)) != 0) {
            if (taken < 0) return -1; /* else taken: a submit option */
        } else if (o[0] != '-' && a->recipe == NULL && !a->resume) {
            a->recipe = o;
        } else if (o[0] != '-' && a->run_dir == NULL && a->resume) {
            a->run_dir = o;
        } else {
            run_unexpected(a, o);
            return -1;
        }
    }
    if (a->launcher && strcmp(a->launcher, "local") != 0 && strcmp(a->launcher, "slurm") != 0) {
        fprintf(stderr, "baton %s: --launcher '%s': expected local or slurm\n", run_name(a),
                a->launcher);
        return -1;
    }
    if ((!a->resume && a->recipe == NULL) || (a->resume && a->run_dir == NULL)) {
        fprintf(stderr, "baton %s: no %s given\n", run_name(a),
                a->resume ? "run directory" : "recipe");
        run_usage_of(a, stderr);
        return -1;
    }
    if (a->run_dir != NULL && a->run_dir[0] == '\0') {
        fprintf(stderr, "baton %s: %s'': an empty name; give a run directory\n", run_name(a),
                a->resume ? "" : "--run-dir ");
        return -1;
    }
    return run_check_tilde(a);
}

/* baton-worker next to this program, else the name (found through PATH). */
static const char *run_worker_path(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 32);
    if (n <= 0) return "baton-worker";
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash == NULL) return "baton-worker";
    strcpy(slash + 1, "baton-worker");
    return access(buf, X_OK) == 0 ? buf : "baton-worker";
}

/* For the default worker taken from PATH (not beside baton): where baton looked, said if
 * it is not in PATH either; NULL for a path. */
static const char *run_worker_note(const char *worker, char *buf, size_t cap) {
    if (strchr(worker, '/') != NULL) return NULL;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    if (slash != NULL) *slash = '\0';
    snprintf(buf, cap,
             "looked for baton-worker beside baton, as %.*s/baton-worker, then in PATH; "
             "give --worker PATH",
             slash ? 1024 : 1, slash ? self : "?");
    return buf;
}

/* The default worker taken from PATH, none being beside baton (*w a name): said unless
 * --quiet, where it was found (and, for a link, what it leads to), so that the output
 * tells which program ran (an older install's, say: its Hello refuses it then,
 * run_check_build); for the local launcher *w becomes that PATH entry (buf), made
 * absolute but not resolved: a launcher script that picks the program by the name it was
 * started as ($0) still sees baton-worker. Each attempt's journal record keeps it. Under
 * Slurm each node finds it in its own PATH. Nothing when it is not found (said where it
 * is launched). */
static void run_worker_found(const run_args *a, const char **w, char *buf, size_t cap) {
    char *exe = NULL, abs[PATH_MAX], real[PATH_MAX], cwd[PATH_MAX];
    bt_diag d;
    bt_diag_init(&d);
    if (launch_resolve_program(*w, &exe, &d) != 0) return;
    int slurm = a->launcher && strcmp(a->launcher, "slurm") == 0;
    const char *path = exe; /* a relative PATH entry: from here */
    if (exe[0] != '/' && getcwd(cwd, sizeof cwd) &&
        snprintf(abs, sizeof abs, "%s/%s", cwd, exe + (strncmp(exe, "./", 2) ? 0 : 2)) <
            (int)sizeof abs)
        path = abs;
    int link = realpath(path, real) && strcmp(real, path) != 0;
    if (!a->quiet)
        printf("baton %s: worker %s%s%s%s, found in PATH (none beside baton)%s\n", run_name(a),
               path, link ? " (" : "", link ? real : "", link ? ")" : "",
               slurm ? "; each node looks for baton-worker in its PATH" : "");
    if (!slurm && strlen(path) < cap) *w = strcpy(buf, path);
    free(exe);
}

/* --worker given to a run that keeps another (RUN_DIR/worker): taken for this invocation,
 * said even under --quiet; it replaces the kept one for good when that one cannot start
 * the run (run_worker_unusable: not there, not executable, or refused by exec), so that
 * 'baton resume' does not take the mistyped one again. Nonzero after saying why it
 * cannot be kept. */
static int run_other_worker(const run_args *a, const run_dir *dir, const char *kept) {
    if (!run_worker_unusable(dir->path, kept)) {
        printf("baton %s: worker %s (--worker), not the %s the run was started with (kept "
               "in %s/worker)\n",
               run_name(a), a->worker, kept, dir->path);
        return 0;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    if (run_worker_keep(dir, a->worker, &diag) != 0) {
        cli_error(run_name(a), &diag, 0);
        return -1;
    }
    printf("baton %s: worker %s (--worker), replacing %s, which the run was started with and "
           "which cannot start it; kept in %s/worker from now on\n",
           run_name(a), a->worker, kept, dir->path);
    return 0;
}

/* The worker this run of the run directory starts (*w): --worker as given, else the one
 * the run was started with (RUN_DIR/worker: a container's wrapper, say; read only when
 * continuing a run that started, and refused when another user could have written it),
 * else baton-worker next to baton. Said when the kept one is taken, and when --worker
 * replaces it (run_other_worker). *note: what to say with it should it not launch (where
 * the default one was looked for; the kept one's file), or NULL for a --worker given (it
 * was checked before anything was made). A new run's default worker that cannot be
 * launched is refused here, before its start is journaled (a run that started checks its
 * worker once it has work to do: run_supervise). Nonzero after saying why. */
static int run_pick_worker(const run_args *a, const run_dir *dir, char *buf, size_t cap,
                           const char **w, char *note, size_t note_cap, const char **notep) {
    bt_diag diag;
    bt_diag_init(&diag);
    int kept = dir->started ? run_dir_read_worker(dir->path, buf, cap, &diag) : 0;
    if (kept < 0 && a->worker == NULL) {
        cli_error(run_name(a), &diag, 0);
        return -1;
    }
    if (a->worker && kept > 0 && strcmp(a->worker, buf) != 0 && run_other_worker(a, dir, buf) != 0)
        return -1;
    if (kept > 0 && a->worker == NULL && !a->quiet)
        printf("baton %s: worker %s, as the run was started with (%s/worker)\n", run_name(a), buf,
               dir->path);
    *w = a->worker ? a->worker : kept > 0 ? buf : run_worker_path(buf, cap);
    if (a->worker == NULL && kept > 0)
        snprintf(note, note_cap,
                 "the worker the run was started with, kept in %s/worker; give --worker "
                 "PATH, which then replaces it",
                 dir->path);
    *notep = a->worker ? NULL : kept > 0 ? note : run_worker_note(*w, note, note_cap);
    if (a->worker == NULL && kept <= 0 && strchr(*w, '/') == NULL) run_worker_found(a, w, buf, cap);
    if (dir->started || a->worker || run_worker_check(*w, &diag) == 0) return 0;
    fprintf(stderr, "baton %s: %s%s%s%s\n", run_name(a), diag.msg, *notep ? " (" : "",
            *notep ? *notep : "", *notep ? ")" : "");
    return -1;
}

/* The overrides kept with a run (resume), one per line, into a. */
static int run_read_sets(run_args *a, const char *run_dir) {
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/overrides", run_dir);
    FILE *f = bt_fopen_private(path, "r"); /* a FIFO there is refused, never waited on */
    if (f == NULL && errno == ENOENT) return 0;
    if (f == NULL) {
        fprintf(stderr, "baton resume: %s: cannot read: %s\n", path, bt_file_why(errno));
        return -1;
    }
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0]) rc = recipe_sets_add(&a->sets, "baton resume", "", line);
    }
    fclose(f);
    return rc;
}

/* resume: the kept overrides it reapplies, said once (they take precedence over the kept
 * recipe: an edit of a key one of them sets has no effect). */
static void run_say_sets(const run_args *a, const char *run_dir) {
    if (a->sets.n == 0) return;
    printf("baton resume: reapplying the run's overrides (%s/overrides), which take precedence "
           "over its recipe.yaml:",
           run_dir);
    for (int i = 0; i < a->sets.n; i++)
        printf(" --set %s", a->sets.set[i]);
    printf("\n");
}

/* The recipe with its overrides applied and validated, and the data checked; *recipe_bad
 * set when the recipe or its overrides were refused (not the data). */
static int run_load(run_args *a, recipe_doc *doc, int *recipe_bad, bt_diag *diag) {
    /* resume: the run's kept copy, a regular file only (never a FIFO's endless wait) */
    int rc =
        a->resume ? recipe_load_kept(a->recipe, doc, diag) : recipe_load_file(a->recipe, doc, diag);
    *recipe_bad = rc != 0;
    if (rc != 0) return rc;
    rc = rc ? rc : recipe_sets_apply(&a->sets, doc, diag);
    doc->warn_cmd = run_name(a);
    rc = rc ? rc : recipe_validate_run(doc, diag, &a->naming);
    if (rc == 0 && doc->recipe->n_stages > RUN_MAX_STAGES) {
        bt_diag_set(diag, "%s: %zu stages; baton run takes at most %d", a->recipe,
                    doc->recipe->n_stages, RUN_MAX_STAGES);
        rc = BT_ERECIPE;
    }
    *recipe_bad = rc != 0;
    rc = rc ? rc : run_dir_check_data(doc, diag);
    if (rc != 0) recipe_doc_free(doc);
    return rc;
}

/* resume: the run's kept recipe or overrides refused by this baton's checks (d, said
 * before): which baton started the run, as its journal names it, and how to go on. */
static void run_kept_refused(const run_args *a, const bt_diag *d) {
    char build[256], who[400];
    int named = journal_started_build(a->run_dir, build, sizeof build);
    if (named == 1 && strcmp(build, BATON_VERSION) == 0)
        who[0] = '\0';
    else if (named == 1)
        snprintf(who, sizeof who, "the run was started by baton %s, whose checks let it through; ",
                 build);
    else if (named == 0)
        snprintf(who, sizeof who,
                 "the run was started by a baton older than this one (its journal names none), "
                 "whose checks let it through; ");
    else
        who[0] = '\0';
    int set = d->placed == 0 && strncmp(d->msg, "--set ", 6) == 0;
    fprintf(stderr,
            "baton resume: %sthis baton (%s) refuses it: edit %s/%s (%s) and run 'baton resume' "
            "again, which continues the run; the rules for an edited recipe decide what it "
            "takes (docs/running.md, \"Changing a run's recipe\")\n",
            who, BATON_VERSION, a->run_dir, set ? "overrides" : "recipe.yaml",
            set ? "the run's --set, one KEY=VALUE per line" : "the run's kept recipe");
}

/* --launcher slurm: the allocation, the listen address and the rendezvous store. */
static int run_open_slurm(run_args *a, recipe_doc *doc, run_dir *dir, launch_slurm *s,
                          run_opts *o) {
    bt_diag d;
    bt_diag_init(&d);
    const Baton__Cluster *cl = doc->recipe->cluster;
    uint32_t wanted = (cl && cl->nodes ? cl->nodes : 1) + (cl ? cl->spare_nodes : 0);
    size_t ranks = (size_t)wanted * (cl && cl->gpus_per_node ? cl->gpus_per_node : 1);
    int rc = launch_slurm_open(s, a->listen, dir->token, ranks, &d);
    rc = rc ? rc : launch_slurm_check_nodes(s, wanted, &d);
    if (rc != 0) {
        cli_error(run_name(a), &d, rc);
        launch_slurm_close(s);
        return BT_EXIT_USAGE;
    }
    if (!a->quiet)
        printf("baton %s: Slurm job %s, %d host%s, workers reach this host at %s\n", run_name(a),
               s->job_id, s->n_hosts, s->n_hosts == 1 ? "" : "s", s->listen);
    o->slurm = s;
    return 0;
}

/* What a submit_opts points at. */
typedef struct run_submit_paths {
    char baton[PATH_MAX], worker[PATH_MAX], cwd[PATH_MAX];
} run_submit_paths;

/* The batch script's settings for run directory path. */
static void run_submit_opts(const run_args *a, const recipe_doc *doc, const char *path,
                            run_submit_paths *p, submit_opts *so) {
    if (getcwd(p->cwd, sizeof p->cwd) == NULL) snprintf(p->cwd, sizeof p->cwd, ".");
    const Baton__Cluster *cl = doc->recipe->cluster;
    ssize_t n = readlink("/proc/self/exe", p->baton, sizeof p->baton - 1);
    p->baton[n > 0 ? n : 0] = '\0';
    /* an unnamed recipe's job is named as its run directory (runs/<file stem> by default) */
    const char *name = doc->recipe->name, *last = strrchr(path, '/');
    *so = (submit_opts){.run_dir = path,
                        .job_name = name && name[0]   ? name
                                    : last && last[1] ? last + 1
                                                      : "baton",
                        .baton = p->baton,
                        .worker =
                            a->worker ? a->worker : run_worker_path(p->worker, sizeof p->worker),
                        .nodes = (cl && cl->nodes ? cl->nodes : 1) + (cl ? cl->spare_nodes : 0),
                        .tasks_per_node = cl && cl->gpus_per_node ? cl->gpus_per_node : 1,
                        .gpus_per_node = cl && cl->device == BATON__CLUSTER__DEVICE__CUDA
                                             ? (cl->gpus_per_node ? cl->gpus_per_node : 1)
                                             : 0,
                        .workdir = p->cwd,
                        .sbatch = a->sbatch,
                        .sbatch_value = a->sbatch_value,
                        .n_sbatch = a->n_sbatch,
                        .template_path = a->template_path,
                        .dry_run = a->dry_run};
}

/* Every option, and the template, checked before the run directory is made: a refused
 * submit leaves nothing behind to block a corrected one. */
static int run_submit_precheck(const run_args *a, const recipe_doc *doc) {
    char path[PATH_MAX + 4096], cwd[PATH_MAX];
    if (a->run_dir[0] == '/' || getcwd(cwd, sizeof cwd) == NULL)
        snprintf(path, sizeof path, "%s", a->run_dir);
    else
        snprintf(path, sizeof path, "%s/%s", cwd, a->run_dir);
    static run_submit_paths p; /* large */
    submit_opts so;
    run_submit_opts(a, doc, path, &p, &so);
    bt_diag d;
    bt_diag_init(&d);
    if (submit_precheck(&so, &d) == 0) return 0;
    cli_error("submit", &d, 0);
    return BT_EXIT_USAGE;
}

/* After an sbatch failure that is no clear refusal (submit_batch's unsure): the run
 * directory path is kept, since a job Slurm queued all the same would start on it, and
 * the user is told how to find out and what to do either way. */
static void run_submit_unsure(const char *path, const char *script, int unsure) {
    bt_buf c1, c2;
    bt_buf_init(&c1), bt_buf_init(&c2);
    fprintf(stderr,
            "baton submit: kept %s: %s, and a queued job would run in that "
            "directory. 'squeue --me --format=%%i,%%T,%%o' lists your jobs with their "
            "scripts: look for %s (a job that started has written %s/slurm-JOBID.out). If "
            "Slurm has none, submit the script with %s, or remove the directory with %s\n",
            path,
            unsure == 2 ? "squeue could not confirm that Slurm queued no job of it (sbatch's "
                          "reply may have been lost after the job was queued)"
                        : "sbatch did not say that Slurm refused the job (its reply "
                          "may have been lost after the job was queued)",
            script, path, bt_shell_cmd(&c1, "sbatch", script), bt_shell_cmd(&c2, "rm -r", path));
    bt_buf_free(&c1), bt_buf_free(&c2);
}

/* baton submit: the run directory is made (and released: the job takes it), then the batch
 * script is written there and submitted. *unsure: sbatch failed with no clear refusal
 * (the directory is kept; said here). */
static int run_submit(run_args *a, recipe_doc *doc, run_dir *dir, int *unsure) {
    char script[4200], job[64], path[4096];
    snprintf(path, sizeof path, "%s", dir->path);
    run_dir_close(dir);
    static run_submit_paths p;
    submit_opts so;
    run_submit_opts(a, doc, path, &p, &so);
    bt_diag d;
    bt_diag_init(&d);
    int rc = submit_batch(&so, script, sizeof script, job, sizeof job, unsure, &d);
    if (rc != 0) {
        cli_error("submit", &d, rc);
        if (*unsure) run_submit_unsure(path, script, *unsure);
        return rc == BT_EINVAL ? BT_EXIT_USAGE : BT_EXIT_FAILURE; /* an option it refuses */
    }
    bt_buf cmd;
    bt_buf_init(&cmd);
    if (a->dry_run)
        printf("baton submit: wrote %s (not submitted: --dry-run)\n", script);
    else if (job[0] == '\0') /* warned of: sbatch named no job id */
        printf("baton submit: submitted, script %s, output in %s; follow it with %s\n", script,
               path, bt_shell_cmd(&cmd, "baton status", path));
    else
        printf("%s\nbaton submit: job %s, script %s, output %s/slurm-%s.out; "
               "follow it with %s\n",
               job, job, script, path, job, bt_shell_cmd(&cmd, "baton status", path));
    bt_buf_free(&cmd);
    return BT_EXIT_OK;
}

/* Why stem cannot name a directory of its own under runs/, or NULL: empty, hidden or
 * "."/".." (starting with '.'), or holding a control character ('/' cannot occur). Any
 * other file stem is taken as it is ("exp+1", "llama 3", non-ASCII). */
static const char *run_stem_problem(const char *stem) {
    if (stem[0] == '\0') return "is empty";
    if (stem[0] == '.') return "starts with '.' (a hidden directory, or . or ..)";
    return bt_has_control(stem) ? "holds a control character" : NULL;
}

/* The default run directory: runs/<recipe name>, or for a recipe without a name
 * runs/<its file's stem> (recipes/a.yaml: runs/a), so that two unnamed recipes do not
 * share one; a stem that cannot name a directory (run_stem_problem: ".x.yaml" would make
 * a hidden runs/.x, "..yaml" runs/. itself) is refused. */
static int run_default_dir(char *out, size_t cap, const char *name, const char *recipe,
                           bt_diag *diag) {
    if (name != NULL && name[0] != '\0') {
        snprintf(out, cap, "runs/%s", name);
        return 0;
    }
    const char *base = strrchr(recipe, '/');
    base = base ? base + 1 : recipe;
    size_t n = strlen(base);
    static const char *const ext[] = {".yaml", ".yml"};
    for (int k = 0; k < 2; k++) {
        size_t e = strlen(ext[k]);
        if (n > e && strcmp(base + n - e, ext[k]) == 0) {
            n -= e;
            break;
        }
    }
    char stem[256];
    snprintf(stem, sizeof stem, "%.*s", (int)n, base);
    const char *why = n >= sizeof stem ? "is longer than 255 bytes" : run_stem_problem(stem);
    if (why != NULL) {
        bt_diag_set(diag,
                    "%s: the recipe has no name:, so its file's stem would name the run "
                    "directory, and the stem \"%s\" %s; add a name: to the recipe (e.g. name: "
                    "pretrain) or give --run-dir DIR",
                    recipe, stem, why);
        return BT_ERECIPE;
    }
    snprintf(out, cap, "runs/%s", stem);
    return 0;
}

/* A stage name against the rules made after runs could be started with it: refused for a
 * new run, a warning for one that started with this recipe (resume, or run again on its
 * directory), which must still continue. */
static int run_check_naming(const run_args *a) {
    if (a->naming.msg[0] == '\0') return 0;
    if (!a->resume && !run_dir_has_started(a->run_dir)) {
        cli_error(run_name(a), &a->naming, 0);
        return -1;
    }
    cli_warning(run_name(a), &a->naming,
                " (accepted for this run, which started with it before the rule; a new run "
                "refuses it)");
    return 0;
}

/* A new run's directory (one no run started in) whose path holds a control character (a
 * newline, a tab) is refused: every line that names it (status's first, the messages'
 * commands) would break. One a run started in is taken, to be continued. Nonzero after
 * saying why. */
static int run_check_dir_name(const run_args *a) {
    if (!bt_has_control(a->run_dir) || a->resume || run_dir_has_started(a->run_dir)) return 0;
    bt_buf b;
    bt_buf_init(&b);
    fprintf(stderr,
            "baton %s: --run-dir %s: holds a control character (shown escaped), which would "
            "break every line that names the run directory; choose another --run-dir\n",
            run_name(a), bt_buf_text_of(&b, a->run_dir));
    bt_buf_free(&b);
    return -1;
}

/* A run directory opened and then refused before any attempt: what this command made of
 * it removed again (run_dir_unmake), said (tell: also when all went, unless --quiet); a
 * removal that failed is a warning naming what is left. */
static void run_unmake(run_args *a, run_dir *dir, int tell) {
    char said[4500];
    int rc = run_dir_unmake(dir, said, sizeof said);
    if (rc < 0)
        fprintf(stderr, "baton %s: warning: nothing started, but %s\n", run_name(a), said);
    else if (rc > 0 && tell && !a->quiet)
        printf("baton %s: nothing started: %s\n", run_name(a), said);
}

/* The run directory opened (made, locked, the recipe and overrides kept) and, for a new
 * run, the working directory and --worker noted; nonzero after saying why, with what it
 * made removed again. */
static int run_open_dir(run_args *a, const recipe_doc *doc, run_dir *dir) {
    bt_diag diag;
    bt_diag_init(&diag);
    bt_buf sets;
    bt_buf_init(&sets);
    for (int i = 0; i < a->sets.n; i++)
        bt_buf_printf(&sets, "%s\n", a->sets.set[i]);
    int rc = run_dir_open(dir, a->run_dir, doc, bt_buf_str(&sets), &diag);
    bt_buf_free(&sets);
    if (rc == 0) run_holder_note(dir->lock_fd, run_name(a), doc->text, doc->text_len);
    int noted = rc == 0 && !a->resume ? run_dir_note_start(dir, a->worker, &diag) : 0;
    if (rc != 0 || noted != 0) cli_error(run_name(a), &diag, 0);
    if (noted != 0) run_unmake(a, dir, 0);
    rc = rc ? rc : noted;
    if (rc == 0 && dir->warning[0])
        fprintf(stderr, "baton %s: warning: %s\n", run_name(a), dir->warning);
    if (rc == 0 && dir->parent_warning[0])
        fprintf(stderr, "baton %s: warning: %s\n", run_name(a), dir->parent_warning);
    if (rc == 0 && dir->note[0]) printf("baton %s: %s\n", run_name(a), dir->note);
    return rc;
}

/* baton submit once the recipe is loaded: a run directory it made and then could not use
 * is removed again (with any parent it made), so that a corrected retry starts afresh, but
 * not after an sbatch failure that may have queued the job (run_submit_unsure). */
static int run_submit_main(run_args *a, recipe_doc *doc) {
    run_dir dir;
    if (run_submit_precheck(a, doc) != 0) return BT_EXIT_USAGE;
    if (run_open_dir(a, doc, &dir) != 0) return BT_EXIT_USAGE; /* what it made removed */
    int unsure = 0, st = run_submit(a, doc, &dir, &unsure);
    if (st != BT_EXIT_OK && !unsure) run_unmake(a, &dir, 0);
    return st;
}

/* resume's RUN_DIR as an absolute path into abs (PATH_MAX); -1 after saying why it is
 * none: missing, or not a directory (a file given for it), said first, or reached through
 * a directory or symbolic link that run_dir_check_parents refuses (judged here, as given:
 * run_dir_open sees the resolved path only; its warnings are said there, for that path). */
static int run_resume_dir(const char *path, char *abs) {
    static run_dir probe;
    struct stat st;
    if (realpath(path, abs) == NULL || stat(abs, &st) != 0) {
        fprintf(stderr, "baton resume: %s: %s\n", path,
                errno == ENOENT || errno == ENOTDIR ? "no such directory" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "baton resume: %s: not a directory (baton resume takes a run directory)\n",
                path);
        return -1;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    if (run_dir_check_parents(&probe, path, &diag) != 0) {
        cli_error("resume", &diag, 0);
        return -1;
    }
    return 0;
}

/* resume: from anywhere, in the run's working directory (run_dir.h), with the run's kept
 * recipe and overrides; nonzero after saying why not. */
static int run_resume_enter(run_args *a, char *recipe_copy, size_t cap) {
    static char run_abs[PATH_MAX];
    bt_diag diag;
    bt_diag_init(&diag);
    int moved = 0;
    if (run_resume_dir(a->run_dir, run_abs) != 0) return -1;
    a->run_dir = run_abs;
    if (run_dir_check_resumable(a->run_dir, &diag) != 0 ||
        run_dir_enter_workdir(a->run_dir, &moved, &diag) != 0) {
        cli_error("resume", &diag, 0);
        return -1;
    }
    if (moved && !a->quiet) {
        char cwd[PATH_MAX];
        printf("baton resume: working in %s, where the run started\n",
               getcwd(cwd, sizeof cwd) ? cwd : "?");
    }
    snprintf(recipe_copy, cap, "%s/recipe.yaml", a->run_dir);
    a->recipe = recipe_copy;
    return run_read_sets(a, a->run_dir);
}

/* What the launcher needs, checked before the run directory is made, so that a refusal
 * leaves nothing behind: --launcher slurm inside an allocation; for the local launcher a
 * $TMPDIR that is a writable directory (its sockets go there). */
static int run_check_launcher(const run_args *a) {
    bt_diag diag;
    bt_diag_init(&diag);
    int slurm = a->launcher && strcmp(a->launcher, "slurm") == 0;
    if ((slurm ? launch_slurm_check_env(&diag) : launch_tmpdir_check(&diag)) == 0) return 0;
    cli_error(run_name(a), &diag, 0);
    return -1;
}

/* The run in its directory, opened (made where missing) by this command: the worker
 * chosen and checked, the Slurm allocation opened, then supervised. What this command
 * made of the directory and then refused before any attempt (the worker, the allocation,
 * an open-files limit too low for the launcher's servers)
 * is removed again, so that a corrected retry starts afresh: only that (run_dir_unmake). */
static int run_in_dir(run_args *a, recipe_doc *doc, run_afresh_to *to) {
    char worker[PATH_MAX], note[4400];
    run_dir dir;
    if (run_open_dir(a, doc, &dir) != 0) return BT_EXIT_USAGE;
    if (!a->quiet) printf("baton %s: %s, run directory %s\n", run_name(a), a->recipe, dir.path);
    if (a->resume && !a->quiet) run_say_sets(a, dir.path);
    const char *w = NULL, *wnote = NULL;
    int status = run_pick_worker(a, &dir, worker, sizeof worker, &w, note, sizeof note, &wnote);
    status = status != 0 ? BT_EXIT_USAGE : 0;
    run_opts o = {.worker = w,
                  .worker_note = wnote,
                  .worker_given = a->worker != NULL,
                  .quiet = a->quiet,
                  .prog = a->resume ? "baton resume" : "baton run",
                  .afresh = run_afresh_possible(),
                  .afresh_spent = !run_afresh_allowed(),
                  .progressed = &to->progressed};
    if (status == 0 && a->launcher && strcmp(a->launcher, "slurm") == 0) {
        launch_slurm *slurm = malloc(sizeof *slurm); /* large: the step's argv buffers */
        status = slurm ? run_open_slurm(a, doc, &dir, slurm, &o) : BT_EXIT_FAILURE;
        if (status != 0) free(slurm);
    }
    if (status == 0 && run_fds_check(doc, &o) != 0) status = BT_EXIT_USAGE;
    if (status != 0) run_unmake(a, &dir, 1); /* no attempt started: nothing of the run's */
    if (status == 0) status = run_supervise(&dir, doc, &o);
    if (o.slurm) launch_slurm_close(o.slurm);
    free(o.slurm);
    if (status == RUN_EXIT_AFRESH) { /* the locks go along (run_afresh) */
        snprintf(to->dir, sizeof to->dir, "%s", dir.path);
        to->lock_fd = dir.lock_fd, to->dir_lock_fd = dir.dir_lock_fd;
        dir.lock_fd = dir.dir_lock_fd = -1;
    }
    run_dir_close(&dir);
    return status;
}

static int run_main(run_args *a) {
    char recipe_copy[4200], dflt[512];
    static run_afresh_to afresh;
    if (!a->submit) run_signals_block(); /* submit runs sbatch, which should see a Ctrl-C */
    /* a line at a time into a file too (a Slurm job's output): in order with stderr. Only
     * here: `baton status | grep -q` must not meet a closed pipe between lines. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    bt_diag diag;
    bt_diag_init(&diag);
    static char worker_abs[PATH_MAX];
    /* a --worker path relative to here: absolute before resume enters the run's working
     * directory, and as the run keeps it (RUN_DIR/worker) */
    if (a->worker && strchr(a->worker, '/') && realpath(a->worker, worker_abs) != NULL)
        a->worker = worker_abs;
    /* one that cannot be launched: said before anything is made or journaled (submit's
     * job may run on a host that has it where this one does not) */
    if (!a->submit && a->worker && run_worker_check(a->worker, &diag) != 0) {
        cli_error(run_name(a), &diag, 0);
        return BT_EXIT_USAGE;
    }
    /* a relative $TMPDIR names a dir here: absolute before resume enters the run's working
     * directory, and so for the workers and a fresh process */
    if (!a->submit) launch_tmpdir_absolute();
    if (a->resume) run_afresh_fault_wait();
    if (a->resume && run_resume_enter(a, recipe_copy, sizeof recipe_copy) != 0)
        return BT_EXIT_USAGE;
    recipe_doc doc;
    int recipe_bad = 0;
    if (run_load(a, &doc, &recipe_bad, &diag) != 0) {
        cli_error(run_name(a), &diag, 0);
        if (a->resume && recipe_bad) run_kept_refused(a, &diag);
        return BT_EXIT_USAGE;
    }
    int status = 0;
    if (a->run_dir == NULL &&
        run_default_dir(dflt, sizeof dflt, doc.recipe->name, a->recipe, &diag) != 0) {
        cli_error(run_name(a), &diag, 0);
        status = BT_EXIT_USAGE;
    } else if (a->run_dir == NULL) {
        a->run_dir = dflt;
    }
    if (status == 0 && run_check_naming(a) != 0) status = BT_EXIT_USAGE;
    if (status == 0 && run_check_dir_name(a) != 0) status = BT_EXIT_USAGE;
    if (status == 0 && a->submit) {
        status = run_submit_main(a, &doc);
    } else if (status == 0 && run_check_launcher(a) != 0) {
        status = BT_EXIT_USAGE;
    } else if (status == 0) {
        status = run_in_dir(a, &doc, &afresh);
    }
    recipe_doc_free(&doc);
    return status == RUN_EXIT_AFRESH ? run_afresh(run_name(a), a->quiet, a->worker, &afresh)
                                     : status;
}

static void run_args_free(run_args *a) {
    recipe_sets_free(&a->sets);
}

static int run_command(int argc, char **argv, int resume, int submit) {
    run_args a = {.resume = resume, .submit = submit};
    int prc = run_parse(argc, argv, &a);
    int status = prc ? (prc > 0 ? BT_EXIT_OK : BT_EXIT_USAGE) : run_main(&a);
    run_args_free(&a);
    return status;
}

int cmd_run(int argc, char **argv) {
    return run_command(argc, argv, 0, 0);
}

int cmd_submit(int argc, char **argv) {
    return run_command(argc, argv, 0, 1);
}

int cmd_resume(int argc, char **argv) {
    return run_command(argc, argv, 1, 0);
}
