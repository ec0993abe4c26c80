/* baton plan RECIPE [--json] [--set KEY=VALUE ...] [--nodes K] [--gpus-per-node G]:
 * validates a recipe (with baton run's overrides) and prints, per stage, the parameter
 * count, rank layout, memory per GPU, communication and step time. Needs neither data
 * nor a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plan.h"
#include "plan_precision.h"
#include "recipe.h"

static void plan_usage(FILE *f) {
    fprintf(f, "usage: baton plan RECIPE [--json] [--set KEY=VALUE ...] [--nodes K]\n"
               "                  [--gpus-per-node G]\n\n"
               "Checks RECIPE and shows, for every stage: exact parameter count, the rank\n"
               "layout (rank -> node, gpu, tp/cp/ep/dp/pp), memory per GPU of the heaviest\n"
               "rank with the formula behind each figure, communication per step by group,\n"
               "FLOPs per step and the step time, and how evenly the pipeline stages share\n"
               "the compute (when the slowest does 10%% more than the mean, the\n"
               "parallel.stage_layers split that evens it best, if it fits).\n\n"
               "The step time is compute + pipeline bubble + exposed communication, compute\n"
               "being model FLOPs / (devices x peak x cluster.mfu): cluster.mfu (default\n"
               "0.4) is the efficiency of the compute alone, before the bubble and the\n"
               "communication not hidden. The plan prints the end-to-end MFU its step time\n"
               "implies (model FLOPs / (devices x peak x step)), the figure the workers log\n"
               "and papers report; to match a published end-to-end MFU, raise cluster.mfu\n"
               "until the printed one equals it.\n\n"
               "  --json   print the plan as one JSON object instead of text\n"
               "  --set KEY=VALUE, --nodes K, --gpus-per-node G\n"
               "           override the recipe as baton run does (e.g. --set\n"
               "           defaults.parallel.virtual_stages=2), to plan a layout before\n"
               "           running it; applied in the order given (--set repeats;\n"
               "           --nodes and --gpus-per-node are given once)\n"
               "  --help   show this help\n\n"
               "A stage whose heaviest rank does not fit in cluster.gpu.memory is told which\n"
               "settings fit on the same devices (tp and pp with dp taking the rest, ZeRO,\n"
               "recomputation, micro_batch: each re-planned), the best three with their\n"
               "memory and step time.\n\n"
               "Exit status: 0 every stage fits (or cluster.gpu.memory is not given), 1 some\n"
               "stage does not fit (the plan is printed in full, --json too), 2 invalid recipe\n"
               "or usage.\n");
}

/* The recipe's warnings about a stage (recipe_doc.stage_warn), in the order given. */
typedef struct plan_recipe_warn {
    size_t stage;
    char text[400];
} plan_recipe_warn;

typedef struct plan_all {
    Baton__StageSpec **specs;
    plan_stage *stages;
    size_t n;
    plan_recipe_warn *warns;
    size_t n_warns;
} plan_all;

static void plan_all_free(plan_all *pa) {
    for (size_t i = 0; i < pa->n; i++)
        if (pa->specs[i] != NULL) protobuf_c_message_free_unpacked(&pa->specs[i]->base, NULL);
    free(pa->specs);
    free(pa->stages);
    free(pa->warns);
}

static void plan_keep_warning(void *ctx, size_t stage, const char *text) {
    plan_all *pa = ctx;
    plan_recipe_warn *w = realloc(pa->warns, (pa->n_warns + 1) * sizeof *w);
    if (w == NULL) return; /* it was printed; the list goes without it */
    pa->warns = w, w += pa->n_warns++;
    w->stage = stage;
    snprintf(w->text, sizeof w->text, "%s", text);
}

/* The recipe's warnings about each stage at the head of the stage's list (as many as fit). */
static void plan_add_recipe_warnings(plan_all *pa) {
    for (size_t i = 0; i < pa->n; i++) {
        plan_stage *ps = &pa->stages[i];
        int k = 0;
        for (size_t j = 0; j < pa->n_warns; j++)
            k += pa->warns[j].stage == i;
        k = k < PLAN_MAX_WARNINGS - ps->n_warnings ? k : PLAN_MAX_WARNINGS - ps->n_warnings;
        if (k <= 0) continue;
        memmove(ps->warnings[k], ps->warnings[0], (size_t)ps->n_warnings * sizeof ps->warnings[0]);
        ps->n_warnings += k;
        for (size_t j = 0, at = 0; j < pa->n_warns && at < (size_t)k; j++)
            if (pa->warns[j].stage == i)
                snprintf(ps->warnings[at++], sizeof ps->warnings[0], "%s", pa->warns[j].text);
    }
}

/* Where stage i's fp16 loss scale comes from when not from its loss_scale.initial: the
 * stage before it, or for the first stage the recipe's init (plan_stage.scale_from). */
static void plan_scale_source(const recipe_doc *doc, plan_all *pa, size_t i) {
    const Baton__Stage *s = pa->specs[i]->stage, *prev = i ? pa->specs[i - 1]->stage : NULL;
    plan_stage *ps = &pa->stages[i];
    const char *init = doc->recipe->init;
    int reset = s->optimizer && s->optimizer->reset;
    ps->scale_carried = prev && plan_scale_carried(prev->precision, s->precision, reset);
    ps->scale_from = ps->scale_carried && prev->name ? prev->name : "";
    ps->scale_init = i == 0 && init != NULL && init[0] != '\0' && !reset;
}

static int plan_build_all(const recipe_doc *doc, plan_all *pa, bt_diag *diag) {
    size_t n = doc->recipe->n_stages;
    pa->specs = calloc(n, sizeof *pa->specs);
    pa->stages = calloc(n, sizeof *pa->stages);
    pa->n = n;
    if (pa->specs == NULL || pa->stages == NULL) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = recipe_resolve_stage(doc, i, &pa->specs[i], diag);
        if (rc == 0) rc = plan_stage_build(pa->specs[i], &pa->stages[i], diag);
        if (rc != 0) return rc;
        plan_scale_source(doc, pa, i);
    }
    return 0;
}

static void plan_print_text(const recipe_doc *doc, const plan_all *pa) {
    const Baton__Recipe *r = doc->recipe;
    printf("recipe %s (%s): %zu stage%s, seed %llu\n", r->name ? r->name : "(unnamed)", doc->file,
           pa->n, pa->n == 1 ? "" : "s", (unsigned long long)r->seed);
    for (size_t i = 0; i < pa->n; i++) {
        printf("\n");
        plan_report_text(stdout, pa->specs[i], &pa->stages[i]);
    }
}

/* The recipe's warnings go to stderr as ever and into pa, for the stages' lists. */
static int plan_load(const char *path, const recipe_sets *sets, recipe_doc *doc, plan_all *pa,
                     bt_diag *diag) {
    int rc = recipe_load_file(path, doc, diag);
    rc = rc ? rc : recipe_sets_apply(sets, doc, diag);
    doc->warn_cmd = "plan";
    doc->stage_warn = plan_keep_warning, doc->stage_warn_ctx = pa;
    return rc ? rc : recipe_validate(doc, diag);
}

static int plan_run(const char *path, const recipe_sets *sets, int json) {
    bt_diag diag;
    bt_diag_init(&diag);
    recipe_doc doc = {0};
    plan_all pa = {0};
    int rc = plan_load(path, sets, &doc, &pa, &diag);
    rc = rc ? rc : plan_build_all(&doc, &pa, &diag);
    if (rc == 0) plan_add_recipe_warnings(&pa);
    if (rc == 0 && json)
        plan_report_json(stdout, pa.specs, pa.stages, pa.n);
    else if (rc == 0)
        plan_print_text(&doc, &pa);
    else
        cli_error("plan", &diag, rc);
    int misfit = 0;
    for (size_t i = 0; rc == 0 && i < pa.n; i++)
        misfit |= pa.stages[i].mem.fits == 0;
    plan_all_free(&pa);
    recipe_doc_free(&doc);
    if (rc != 0) return rc == BT_ENOMEM ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
    return misfit ? BT_EXIT_FAILURE : BT_EXIT_OK;
}

int cmd_plan(int argc, char **argv) {
    const char *path = NULL;
    int json = 0, taken;
    recipe_sets sets = {0};
    for (int i = 1; i < argc; i++) {
        if ((taken = recipe_sets_parse(&sets, "baton plan", argc, argv, &i)) != 0) {
            if (taken < 0) {
                if (taken == -1) plan_usage(stderr);
                return recipe_sets_free(&sets), BT_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            plan_usage(stdout);
            return recipe_sets_free(&sets), BT_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            if (json) return recipe_sets_free(&sets), cli_twice("plan", "--json");
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "baton plan: unknown option '%s'\n", argv[i]);
            plan_usage(stderr);
            return recipe_sets_free(&sets), BT_EXIT_USAGE;
        } else if (path == NULL) {
            path = argv[i];
        } else {
            fprintf(stderr, "baton plan: one recipe at a time (got '%s' and '%s')\n", path,
                    argv[i]);
            return recipe_sets_free(&sets), BT_EXIT_USAGE;
        }
    }
    int rc = BT_EXIT_USAGE;
    if (path == NULL) {
        fprintf(stderr, "baton plan: no recipe given\n");
        plan_usage(stderr);
    } else
        rc = plan_run(path, &sets, json);
    recipe_sets_free(&sets);
    return rc;
}
