/* The kept recipe, edited between runs, against the run's history (run_edit.h). */
#include "run_edit.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"
#include "util/file.h"

#define EDIT_SPEC_MAX (64u << 20) /* a spec file read whole */

static uint64_t edit_steps(const recipe_doc *doc, size_t i) {
    Baton__Stage *eff = NULL;
    uint64_t n = 0;
    if (recipe_effective_stage(doc, i, &eff) == 0 && eff) n = eff->steps;
    if (eff) protobuf_c_message_free_unpacked(&eff->base, NULL);
    return n;
}

int run_edit_extends(const recipe_doc *doc, const run_state *st, size_t i) {
    const run_stage_state *s = i < RUN_MAX_STAGES ? &st->stage[i] : NULL;
    if (s == NULL || i >= doc->recipe->n_stages || !s->completed || i + 1 != st->n_stages) return 0;
    return s->last_step > 0 && edit_steps(doc, i) > s->last_step;
}

size_t run_edit_work_left(const recipe_doc *doc, const run_state *st) {
    for (size_t i = 0; i < doc->recipe->n_stages && i < RUN_MAX_STAGES; i++)
        if (!st->stage[i].completed || run_edit_extends(doc, st, i)) return i + 1;
    return 0;
}

void run_edit_work_text(const recipe_doc *doc, const run_state *st, char *out, size_t cap) {
    size_t i = run_edit_work_left(doc, st);
    out[0] = '\0';
    if (i-- == 0) return;
    const char *name = doc->recipe->stages[i]->name;
    if (st->stage[i].completed)
        snprintf(out, cap, "stage \"%s\" (%llu steps, completed with %llu)", name,
                 (unsigned long long)edit_steps(doc, i),
                 (unsigned long long)st->stage[i].last_step);
    else
        snprintf(out, cap, "stage \"%s\" (%s)", name,
                 st->stage[i].started ? "not completed" : "new");
}

/* The newest attempt of each of the first n stages that left a spec (best[i], -1 none). */
static void edit_spec_attempts(const char *run_dir, size_t n, long *best) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/specs", run_dir);
    for (size_t i = 0; i < n; i++)
        best[i] = -1;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        unsigned s, a;
        char tail[8] = "";
        if (sscanf(de->d_name, "s%u-a%u%7s", &s, &a, tail) == 3 && strcmp(tail, ".pb") == 0 &&
            s < n && (long)a > best[s])
            best[s] = (long)a;
    }
    if (d) closedir(d);
}

Baton__StageSpec *run_edit_spec(const char *run_dir, size_t i, long attempt, char *file,
                                size_t cap) {
    char *buf = NULL;
    size_t len = 0;
    if (attempt < 0 && i < RUN_MAX_STAGES) {
        long best[RUN_MAX_STAGES];
        edit_spec_attempts(run_dir, i + 1, best);
        attempt = best[i];
    }
    if (attempt < 0) return NULL;
    snprintf(file, cap, "specs/s%02zu-a%02ld.pb", i, attempt);
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run_dir, file);
    if (bt_read_private(path, EDIT_SPEC_MAX, 0, &buf, &len) != 0) return NULL;
    Baton__StageSpec *s = baton__stage_spec__unpack(NULL, len, (const uint8_t *)buf);
    free(buf);
    return s;
}

static char *edit_spec_name(const char *run_dir, size_t i, long attempt) {
    char file[64], *name = NULL;
    Baton__StageSpec *s = run_edit_spec(run_dir, i, attempt, file, sizeof file);
    if (s && s->stage && s->stage->name) name = strdup(s->stage->name);
    if (s) baton__stage_spec__free_unpacked(s, NULL);
    return name;
}

void run_edit_names(const char *run_dir, size_t n, char **names) {
    long best[RUN_MAX_STAGES];
    n = n < RUN_MAX_STAGES ? n : RUN_MAX_STAGES;
    edit_spec_attempts(run_dir, n, best);
    for (size_t i = 0; i < n; i++)
        names[i] = best[i] >= 0 ? edit_spec_name(run_dir, i, best[i]) : NULL;
}

void run_edit_names_free(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]), names[i] = NULL;
}

static long edit_find(char *const *names, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return (long)i;
    return -1;
}

/* The newest checkpoint the journal has committed, for a new run's init:, into out. */
static void edit_newest_ckpt(const run_ctx *c, char *out, size_t cap) {
    out[0] = '\0';
    for (size_t k = RUN_MAX_STAGES; k-- > 0 && !out[0];)
        if (c->journaled[k].name[0])
            snprintf(out, cap, "%s/%s/%s", c->dir->path, CKPT_ROOT_IN_RUN, c->journaled[k].name);
}

/* What happened at the first position i whose recorded stage is not the recipe's there
 * (rec: the run's names, n_rec of them; now: the recipe's): into what. 0 when it is a
 * stage renamed in place (neither name is found at another position). */
static int edit_what(char *const *rec, size_t n_rec, char *const *now, size_t n_now, size_t i,
                     char *what, size_t cap) {
    const char *r = rec[i] ? rec[i] : "?";
    long j = edit_find(now, n_now, rec[i]);
    long k = i < n_now ? edit_find(rec, n_rec, now[i]) : -1;
    if (j >= 0 && (size_t)j != i)
        snprintf(what, cap,
                 "stage \"%s\" was the run's stage %zu and is the recipe's stage %ld now", r, i + 1,
                 j + 1);
    else if (i >= n_now)
        snprintf(what, cap,
                 "stage \"%s\", the run's stage %zu, is no longer in the recipe (the run has "
                 "history of %zu stages, the recipe has %zu)",
                 r, i + 1, n_rec, n_now);
    else if (k >= 0 && (size_t)k != i)
        snprintf(what, cap,
                 "the recipe's stage %zu is \"%s\", the run's stage %ld, and the run's stage "
                 "\"%s\" is no longer in it",
                 i + 1, now[i], k + 1, r);
    else
        return 0;
    return 1;
}

static void edit_refuse_moved(const run_ctx *c, const char *what, size_t i, bt_diag *diag) {
    char init[4400], to[200];
    edit_newest_ckpt(c, init, sizeof init);
    if (i < c->doc->recipe->n_stages)
        snprintf(to, sizeof to, "hand the run's stage %zu's history to \"%.100s\"", i + 1,
                 c->doc->recipe->stages[i]->name);
    else
        snprintf(to, sizeof to, "leave the run's stage %zu's history to no stage", i + 1);
    bt_diag_set(diag,
                "%s/recipe.yaml: %s: stages were removed, inserted or reordered among the "
                "stages the run has trained. The journal and the checkpoints tie each stage's "
                "history (its steps, checkpoints and data position) to its position, so "
                "continuing would %s; nothing was started. Put the stages the run has trained "
                "back in their order (a stage may be renamed in place; new stages go after "
                "them), or train the edited recipe as a new run in another --run-dir%s%s%s",
                c->dir->path, what, to, init[0] ? " with init: " : "", init,
                init[0] ? " (the run's newest checkpoint) in its recipe" : "");
}

int run_edit_moved(char *const *rec, size_t n_rec, const recipe_doc *doc, char *what, size_t cap,
                   size_t *at) {
    size_t n_now = doc->recipe->n_stages;
    char *now[RUN_MAX_STAGES] = {0};
    for (size_t i = 0; i < n_now && i < RUN_MAX_STAGES; i++)
        now[i] = doc->recipe->stages[i]->name;
    n_now = n_now < RUN_MAX_STAGES ? n_now : RUN_MAX_STAGES;
    for (size_t i = 0; i < n_rec && i < RUN_MAX_STAGES; i++) {
        if (i < n_now && (rec[i] == NULL || strcmp(rec[i], now[i]) == 0)) continue;
        if (edit_what(rec, n_rec, now, n_now, i, what, cap)) {
            *at = i;
            return 1;
        }
    }
    return 0;
}

/* Stages moved, removed or inserted among those the run has history of. */
static int edit_check_order(const run_ctx *c, bt_diag *diag) {
    size_t n_rec = c->st.n_stages < RUN_MAX_STAGES ? c->st.n_stages : RUN_MAX_STAGES, at = 0;
    char *rec[RUN_MAX_STAGES] = {0}, what[600];
    run_edit_names(c->dir->path, n_rec, rec);
    int moved = run_edit_moved(rec, n_rec, c->doc, what, sizeof what, &at);
    if (moved) edit_refuse_moved(c, what, at, diag);
    run_edit_names_free(rec, n_rec);
    return moved ? BT_EINVAL : 0;
}

/* The recipe renamed (name:) under stage i, which will train from a checkpoint of its own
 * that records another recipe name: the worker would take none of them for the stage's. */
static int edit_check_name(const run_ctx *c, size_t i, bt_diag *diag) {
    const char *name = c->doc->recipe->name ? c->doc->recipe->name : "";
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s/%s", c->dir->path, CKPT_ROOT_IN_RUN, c->journaled[i].name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int other = ckpt_manifest_read(dir, &m, &d) == 0 && m->recipe_name &&
                strcmp(m->recipe_name, name) != 0 && m->stage_index == i;
    if (other)
        bt_diag_set(diag,
                    "%s/recipe.yaml: the recipe's name: is \"%s\" now, but stage \"%s\" is in "
                    "progress under the name \"%s\", which its checkpoints record (%s/%s, step "
                    "%llu): a checkpoint is a stage's own only under its recipe's name, so the "
                    "stage would start again from step 0; nothing was started. Put back name: "
                    "%s in %s/recipe.yaml and resume (the name may change once the stage "
                    "completed), or start a new run in another --run-dir with init: %s",
                    c->dir->path, name, c->doc->recipe->stages[i]->name, m->recipe_name,
                    CKPT_ROOT_IN_RUN, c->journaled[i].name,
                    (unsigned long long)c->journaled[i].step, m->recipe_name, c->dir->path, dir);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return other ? BT_EINVAL : 0;
}

int run_edit_check(run_ctx *c, bt_diag *diag) {
    int rc = edit_check_order(c, diag);
    for (size_t i = 0; rc == 0 && i < c->doc->recipe->n_stages && i < RUN_MAX_STAGES; i++) {
        int todo = !c->st.stage[i].completed || run_edit_extends(c->doc, &c->st, i);
        if (todo && c->journaled[i].name[0]) rc = edit_check_name(c, i, diag);
    }
    return rc;
}
