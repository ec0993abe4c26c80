/* baton run RECIPE [--run-dir DIR] and baton resume RUN_DIR: the supervised multi-stage
 * run (run/supervise.h). Everything that can be checked before a worker starts is: the
 * recipe, the run directory, the data. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "recipe.h"
#include "run/run_dir.h"
#include "run/run_state.h"
#include "run/supervise.h"
#include "util/buf.h"

static void run_usage(FILE *f) {
    fprintf(f, "usage: baton run RECIPE [--run-dir DIR] [--nodes K] [--gpus-per-node G]\n"
               "                 [--set KEY=VALUE ...] [--worker PATH] [--quiet]\n"
               "       baton resume RUN_DIR [--worker PATH] [--quiet]\n\n"
               "Runs every stage of RECIPE in order, each as a job of baton-worker ranks under\n"
               "the embedded PMIx server, handing each stage the previous stage's final\n"
               "checkpoint, and restarting a failed attempt from the newest complete\n"
               "checkpoint (restart.max_restarts, restart.backoff; no progress for\n"
               "restart.heartbeat_timeout counts as a hang). Everything is journaled in the run\n"
               "directory; running again on the same directory (or 'baton resume') continues\n"
               "where it stood. See 'baton status RUN_DIR'.\n\n"
               "  --run-dir DIR   the run directory (default: runs/<recipe name>), created 0700\n"
               "  --nodes K, --gpus-per-node G   the cluster (as --set cluster.nodes=K ...)\n"
               "  --set KEY=VALUE override a recipe field: a dotted path as in the YAML, stages\n"
               "                  by name or index (stages.pretrain.steps=100,\n"
               "                  defaults.optimizer.lr=1e-3); kept with the run for resume\n"
               "  --worker PATH   the worker program (default: baton-worker next to baton)\n"
               "  --quiet         no progress lines\n\n"
               "Exit status: 0 the run completed, 1 it failed (restarts exhausted), 2 bad\n"
               "recipe, run directory or data (nothing was started), 75 stopped by a signal\n"
               "(resumable).\n");
}

#define RUN_MAX_SETS 32

typedef struct run_args {
    const char *recipe, *run_dir, *worker;
    int quiet, resume;
    char *sets[RUN_MAX_SETS]; /* KEY=VALUE, owned */
    int n_sets;
} run_args;

static int run_add_set(run_args *a, const char *key, const char *value) {
    if (a->n_sets == RUN_MAX_SETS) {
        fprintf(stderr, "baton run: at most %d --set overrides\n", RUN_MAX_SETS);
        return -1;
    }
    size_t n = strlen(key) + strlen(value) + 2;
    char *s = malloc(n);
    if (s == NULL) return -1;
    snprintf(s, n, "%s%s", key, value);
    a->sets[a->n_sets++] = s;
    return 0;
}

static int run_parse(int argc, char **argv, run_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            run_usage(stdout);
            return 1;
        } else if (strcmp(o, "--quiet") == 0) {
            a->quiet = 1;
        } else if (strcmp(o, "--run-dir") == 0 && v && !a->resume) {
            a->run_dir = argv[++i];
        } else if (strcmp(o, "--set") == 0 && v && !a->resume) {
            if (run_add_set(a, "", argv[++i]) != 0) return -1;
        } else if (strcmp(o, "--nodes") == 0 && v && !a->resume) {
            if (run_add_set(a, "cluster.nodes=", argv[++i]) != 0) return -1;
        } else if (strcmp(o, "--gpus-per-node") == 0 && v && !a->resume) {
            if (run_add_set(a, "cluster.gpus_per_node=", argv[++i]) != 0) return -1;
        } else if (strcmp(o, "--worker") == 0 && v) {
            a->worker = argv[++i];
        } else if (o[0] != '-' && a->recipe == NULL && !a->resume) {
            a->recipe = o;
        } else if (o[0] != '-' && a->run_dir == NULL && a->resume) {
            a->run_dir = o;
        } else {
            fprintf(stderr, "baton %s: unexpected argument '%s'\n", a->resume ? "resume" : "run",
                    o);
            run_usage(stderr);
            return -1;
        }
    }
    if ((!a->resume && a->recipe == NULL) || (a->resume && a->run_dir == NULL)) {
        run_usage(stderr);
        return -1;
    }
    return 0;
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

/* The overrides kept with a run (resume), one per line, into a. */
static int run_read_sets(run_args *a, const char *run_dir) {
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/overrides", run_dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0]) rc = run_add_set(a, "", line);
    }
    fclose(f);
    return rc;
}

/* The recipe with its overrides applied and validated, and the data checked. */
static int run_load(run_args *a, recipe_doc *doc, bt_diag *diag) {
    int rc = recipe_load_file(a->recipe, doc, diag);
    if (rc != 0) return rc;
    for (int i = 0; rc == 0 && i < a->n_sets; i++)
        rc = recipe_apply_set(doc, a->sets[i], diag);
    rc = rc ? rc : recipe_validate(doc, diag);
    if (rc == 0 && doc->recipe->n_stages > RUN_MAX_STAGES) {
        bt_diag_set(diag, "%s: %zu stages; baton run takes at most %d", a->recipe,
                    doc->recipe->n_stages, RUN_MAX_STAGES);
        rc = BT_ERECIPE;
    }
    rc = rc ? rc : run_dir_check_data(doc, diag);
    if (rc != 0) recipe_doc_free(doc);
    return rc;
}

static int run_main(run_args *a) {
    char recipe_copy[4200], dflt[512], worker[PATH_MAX];
    if (a->resume) {
        snprintf(recipe_copy, sizeof recipe_copy, "%s/recipe.yaml", a->run_dir);
        a->recipe = recipe_copy;
        if (run_read_sets(a, a->run_dir) != 0) return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    recipe_doc doc;
    if (run_load(a, &doc, &diag) != 0) {
        fprintf(stderr, "baton %s: %s\n", a->resume ? "resume" : "run", diag.msg);
        return BT_EXIT_USAGE;
    }
    if (a->run_dir == NULL) {
        snprintf(dflt, sizeof dflt, "runs/%s", doc.recipe->name ? doc.recipe->name : "run");
        a->run_dir = dflt;
    }
    bt_buf sets;
    bt_buf_init(&sets);
    for (int i = 0; i < a->n_sets; i++)
        bt_buf_printf(&sets, "%s\n", a->sets[i]);
    run_dir dir;
    int rc = run_dir_open(&dir, a->run_dir, a->recipe, bt_buf_str(&sets), &diag);
    bt_buf_free(&sets);
    if (rc != 0) {
        fprintf(stderr, "baton %s: %s\n", a->resume ? "resume" : "run", diag.msg);
        recipe_doc_free(&doc);
        return BT_EXIT_USAGE;
    }
    if (!a->quiet) printf("baton run: %s, run directory %s\n", a->recipe, dir.path);
    run_opts o = {.worker = a->worker ? a->worker : run_worker_path(worker, sizeof worker),
                  .quiet = a->quiet};
    int status = run_supervise(&dir, &doc, &o);
    run_dir_close(&dir);
    recipe_doc_free(&doc);
    return status;
}

static void run_args_free(run_args *a) {
    for (int i = 0; i < a->n_sets; i++)
        free(a->sets[i]);
}

static int run_command(int argc, char **argv, int resume) {
    run_args a = {.resume = resume};
    int prc = run_parse(argc, argv, &a);
    int status = prc ? (prc > 0 ? BT_EXIT_OK : BT_EXIT_USAGE) : run_main(&a);
    run_args_free(&a);
    return status;
}

int cmd_run(int argc, char **argv) {
    return run_command(argc, argv, 0);
}

int cmd_resume(int argc, char **argv) {
    return run_command(argc, argv, 1);
}
