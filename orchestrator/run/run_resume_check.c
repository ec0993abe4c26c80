/* A run's kept recipe (RUN_DIR/recipe.yaml, which a user may edit while the run is
 * stopped) against the checkpoint its next stage resumes, before any worker starts
 * (run_ctx.h run_resume_check): what the workers would refuse only once started — a
 * stage's steps below its checkpoint's step, another model shape, a seed, seq_len or
 * mixture weight under which the checkpoint's data position indexes other samples
 * (ckpt_resume.h; for a checkpoint that does not record the weights, those of the spec it
 * was saved under) — is refused at once, exit 2, nothing journaled, and said with what
 * changed and the way on. So is a checkpoint the workers would start from that a newer
 * baton wrote (a format beyond CKPT_FORMAT_VERSION): the workers refuse it too, rather than
 * fall back to an older one and train the steps since again (a downgrade). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_resume.h"
#include "run_ctx.h"
#include "run_edit.h"

/* The names in the run's checkpoints/ (root: its path, 4200 bytes), in training order;
 * nonzero (none) when it cannot be listed, which the attempt then says. */
static int resume_ckpt_names(const run_ctx *c, char *root, char ***names, size_t *n) {
    bt_diag d;
    bt_diag_init(&d);
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, 4200);
    *names = NULL, *n = 0;
    return ckpt_list(root, names, n, &d);
}

/* The manifest of the newest checkpoint in the run's checkpoints/ that stage's spec s
 * resumes (its own by the manifest, as the worker judges: ckpt_run_relation), and its
 * name; NULL when there is none, or when they cannot be read (the attempt then says why,
 * as it always did). */
static Baton__Manifest *resume_own_ckpt(const run_ctx *c, const Baton__StageSpec *s, char *name,
                                        size_t cap) {
    char root[4200], **names = NULL, dir[4400];
    size_t n = 0;
    bt_diag d;
    bt_diag_init(&d);
    if (resume_ckpt_names(c, root, &names, &n) != 0) n = 0;
    Baton__Manifest *m = NULL;
    for (size_t i = n; i-- > 0 && m == NULL;) { /* names sort in training order */
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        if (ckpt_manifest_read(dir, &m, &d) != 0) {
            m = NULL;
            break; /* the workers say what is wrong with it */
        }
        if (m->model != NULL && m->has_step &&
            ckpt_run_relation(m, s->recipe_name, c->dir->run_id, s->stage_index, 1) ==
                CKPT_SAME_STAGE) {
            snprintf(name, cap, "%s/%s", CKPT_ROOT_IN_RUN, names[i]);
            continue;
        }
        baton__manifest__free_unpacked(m, NULL);
        m = NULL;
    }
    ckpt_names_free(names, n);
    return m;
}

/* Stage s's steps below checkpoint m's: refused (the workers would load it and stop at
 * once, without the stage's final checkpoint). */
static int resume_check_steps(const run_ctx *c, const Baton__StageSpec *s, const Baton__Manifest *m,
                              const char *name) {
    if (m->step <= s->stage->steps) return 0;
    run_err(c,
            "stage \"%s\" has steps: %llu in %s/recipe.yaml, but its checkpoint %s is at step "
            "%llu: a stage does not train backwards. Set its steps to %llu or more to continue "
            "it (%llu ends it at that checkpoint), and put what should follow in a new stage "
            "after it; nothing was started\n",
            s->stage->name, (unsigned long long)s->stage->steps, c->dir->path, name,
            (unsigned long long)m->step, (unsigned long long)m->step, (unsigned long long)m->step);
    return BT_EINVAL;
}

static int resume_check_model(const run_ctx *c, const Baton__StageSpec *s, const Baton__Manifest *m,
                              const char *name) {
    char why[200];
    if (!ckpt_resume_model_diff(m, s->model, why, sizeof why)) return 0;
    run_err(c,
            "stage \"%s\" cannot resume from its checkpoint %s: the model in %s/recipe.yaml "
            "is not the one the stage trained (%s). A stage keeps its model's shape: put it "
            "back to continue the run; nothing was started\n",
            s->stage->name, name, c->dir->path, why);
    return BT_EINVAL;
}

/* A mixture's weights that checkpoint m (name) does not record, from a baton before it
 * did: taken into m from the spec of the attempt that saved it (the journal's record of
 * its commit, else the stage's newest attempt), which the stage ran under; where they
 * came from into from ("" when not taken). */
static void resume_spec_weights(const run_ctx *c, const Baton__StageSpec *s, Baton__Manifest *m,
                                const char *name, char *from, size_t cap) {
    from[0] = '\0';
    const Baton__Data *now = s->data;
    if (now == NULL || now->n_mix < 2 || m->n_data != now->n_mix) return;
    size_t missing = 0, k = s->stage_index;
    for (size_t i = 0; i < m->n_data; i++)
        missing += !m->data[i]->has_weight;
    if (missing == 0 || k >= RUN_MAX_STAGES) return;
    const char *base = strrchr(name, '/');
    long attempt =
        strcmp(base ? base + 1 : name, c->journaled[k].name) == 0 ? c->journaled[k].attempt : -1;
    char file[64];
    Baton__StageSpec *was = run_edit_spec(c->dir->path, k, attempt, file, sizeof file);
    const Baton__Data *d = was ? was->data : NULL;
    int ok = d != NULL && d->n_mix == m->n_data;
    for (size_t i = 0; ok && i < m->n_data; i++)
        ok = d->mix[i]->weight > 0 && d->mix[i]->path && m->data[i]->path &&
             strcmp(d->mix[i]->path, m->data[i]->path) == 0;
    for (size_t i = 0; ok && i < m->n_data; i++)
        if (!m->data[i]->has_weight)
            m->data[i]->has_weight = 1, m->data[i]->weight = d->mix[i]->weight;
    if (ok)
        snprintf(from, cap,
                 " (the checkpoint, saved by a baton that did not record them, ran under the "
                 "weights of %s)",
                 file);
    if (was) baton__stage_spec__free_unpacked(was, NULL);
}

static int resume_check_order(const run_ctx *c, const Baton__StageSpec *s, Baton__Manifest *m,
                              const char *name) {
    char why[600], from[160];
    resume_spec_weights(c, s, m, name, from, sizeof from);
    if (!ckpt_resume_order_diff(m, s, why, sizeof why)) return 0;
    run_err(c,
            "stage \"%s\" cannot resume from its checkpoint %s: %s in %s/recipe.yaml since it "
            "was saved%s, so its data position (sample %llu) would index other samples (some "
            "read twice, others never). Put the old value back to continue the stage, or "
            "change it from a new stage on (set this stage's steps to %llu, the checkpoint's, "
            "and add one after it); nothing was started\n",
            s->stage->name, name, why, c->dir->path, from, (unsigned long long)m->data_position,
            (unsigned long long)m->step);
    return BT_EINVAL;
}

/* Stage i, with no checkpoint of its own, starts from the newest of the earlier stages'
 * (the workers' hand-off, train_ckpt_load). One of a completed stage past the step it
 * completed at (an extension of it stopped, then undone in the recipe) holds weights
 * trained past that stage's end, on data the next stage would read again: refused. */
static int resume_check_handoff(const run_ctx *c, size_t i) {
    char root[4200], **names = NULL;
    size_t n = 0;
    if (resume_ckpt_names(c, root, &names, &n) != 0) return 0; /* the attempt says why */
    int rc = 0;
    for (size_t k = n; k-- > 0;) { /* names sort in training order */
        unsigned j;
        unsigned long long step;
        if (sscanf(names[k], "s%u-step%llu", &j, &step) != 2 || j >= i) continue;
        const run_stage_state *p = &c->st.stage[j];
        const char *name = c->doc->recipe->stages[j]->name;
        if (p->completed && step > p->last_step) {
            run_err(c,
                    "stage \"%s\" would start from %s/%s, stage \"%s\"'s, past step %llu where "
                    "\"%s\" completed (an extension of it stopped, then undone in %s/recipe.yaml): "
                    "its weights trained past that end. Give \"%s\" %llu steps or more to finish "
                    "the extension first, or move its checkpoints after step %llu out of %s/%s; "
                    "nothing was started\n",
                    c->doc->recipe->stages[i]->name, CKPT_ROOT_IN_RUN, names[k], name,
                    (unsigned long long)p->last_step, name, c->dir->path, name, step,
                    (unsigned long long)p->last_step, c->dir->path, CKPT_ROOT_IN_RUN);
            rc = BT_EINVAL;
        }
        break;
    }
    ckpt_names_free(names, n);
    return rc;
}

/* The checkpoint the workers would try first (train_ckpt_load: the newest in the run's
 * checkpoints/ that is not a later stage's) written by a newer baton: refused, naming it,
 * its format and this baton's, and the ways on. Stage spec s is the one the run goes on
 * with. */
static int resume_check_format(const run_ctx *c, const Baton__StageSpec *s) {
    char root[4200], **names = NULL, dir[4400];
    size_t n = 0;
    bt_diag d;
    bt_diag_init(&d);
    if (resume_ckpt_names(c, root, &names, &n) != 0) return 0; /* the attempt says why */
    int rc = 0;
    for (size_t k = n; k-- > 0;) { /* names sort in training order */
        Baton__Manifest *m = NULL;
        snprintf(dir, sizeof dir, "%s/%s", root, names[k]);
        int r = ckpt_manifest_read(dir, &m, &d);
        if (r == BT_EUNSUPPORTED) {
            run_err(c,
                    "%s. Resume the run with that baton (upgrade this one), or move %s out of "
                    "%s/%s to resume from the checkpoint before it, training the steps since "
                    "it again; nothing was started\n",
                    d.msg, names[k], c->dir->path, CKPT_ROOT_IN_RUN);
            rc = BT_EINVAL;
        }
        int later = r == 0 && m->model != NULL &&
                    ckpt_run_relation(m, s->recipe_name, c->dir->run_id, s->stage_index, 1) ==
                        CKPT_LATER_STAGE;
        if (m) baton__manifest__free_unpacked(m, NULL);
        if (!later) break;
    }
    ckpt_names_free(names, n);
    return rc;
}

int run_resume_check(run_ctx *c) {
    /* the stage the run goes on with, as run_supervise picks it: the first not completed,
     * or a completed last stage its recipe gives more steps now (run_edit_extends) */
    size_t k = run_edit_work_left(c->doc, &c->st);
    if (k == 0) return 0;
    size_t i = k - 1;
    Baton__StageSpec *s = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (recipe_resolve_stage(c->doc, i, &s, &d) != 0) return 0; /* the attempt says why */
    char name[300] = "";
    Baton__Manifest *m = s->stage ? resume_own_ckpt(c, s, name, sizeof name) : NULL;
    int rc = resume_check_format(c, s);
    if (m != NULL && rc == 0) rc = resume_check_model(c, s, m, name);
    if (m != NULL && rc == 0) rc = resume_check_steps(c, s, m, name);
    if (m != NULL && rc == 0) rc = resume_check_order(c, s, m, name);
    if (m == NULL && i > 0 && rc == 0) rc = resume_check_handoff(c, i);
    if (m) baton__manifest__free_unpacked(m, NULL);
    protobuf_c_message_free_unpacked(&s->base, NULL);
    return rc;
}
