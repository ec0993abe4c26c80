/* Loading a checkpoint into a trainer under the trainer's own layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/buf.h"

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_resume.h"
#include "ckpt/ckpt_rope.h"
#include "train_ckpt.h"

static int load_shape_matches(const Baton__TensorEntry *e, const model_tensor *mt) {
    if (e->n_global_shape != (size_t)mt->ndim) return 0;
    for (int k = 0; k < mt->ndim; k++)
        if (e->global_shape[k] != (uint64_t)mt->global_shape[k]) return 0;
    return 1;
}

static const Baton__TensorEntry *load_entry(const ckpt_reader *r, const char *key,
                                            const model_tensor *mt, bt_diag *diag) {
    const char *dir = r->dir;
    const Baton__TensorEntry *e = ckpt_find_sorted(r->m, key); /* load_one sorted m */
    if (e == NULL) {
        bt_diag_set(diag, "%s: has no tensor %s, which this model needs", dir, key);
        return NULL;
    }
    if (!load_shape_matches(e, mt)) {
        bt_diag_set(diag,
                    "%s: tensor %s has shape %llu x %llu there, this model's is %d x %d (a "
                    "different model configuration)",
                    dir, key, (unsigned long long)e->global_shape[0],
                    (unsigned long long)(e->n_global_shape > 1 ? e->global_shape[1] : 1),
                    mt->global_shape[0], mt->ndim > 1 ? mt->global_shape[1] : 1);
        return NULL;
    }
    return e;
}

/* Where tensor mt's weights go: the whole box, or under ZeRO-3 this rank's flat part of it
 * in the parameter shard (NULL: no part here). */
static float *load_params_dest(trainer *t, const model_tensor *mt, ckpt_box *box) {
    uint64_t a, b;
    size_t at;
    if (t->zero.level != 3) return mt->data;
    if (!train_zero_part(&t->zero, mt->offset, mt->count, &a, &b, &at)) return NULL;
    if (a > 0 || b < mt->count) box->flat_begin = a, box->flat_end = b;
    return t->zero.params + at;
}

/* ckpt_reader_box into the trainer's memory: directly into host memory, or through a
 * host buffer into a device's. */
static int load_box(trainer *t, ckpt_reader *r, const Baton__TensorEntry *e, const ckpt_box *box,
                    float *out, bt_diag *diag) {
    if (t->be.host_memory) return ckpt_reader_box(r, e, box, out, diag);
    uint64_t n = ckpt_box_count(box);
    float *host = malloc((n ? n : 1) * sizeof *host);
    if (host == NULL) {
        bt_diag_set(diag, "%s: out of memory for %s (%llu floats)", r->dir, e->key,
                    (unsigned long long)n);
        return BT_ENOMEM;
    }
    int rc = ckpt_reader_box(r, e, box, host, diag);
    if (rc == 0) t->be.from_host(&t->be, out, host, n * sizeof *host);
    free(host);
    return rc;
}

static int load_params(trainer *t, ckpt_reader *r, bt_diag *diag) {
    for (int i = 0; i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        model_tensor_info(&t->m, i, &mt);
        const Baton__TensorEntry *e = load_entry(r, mt.name, &mt, diag);
        ckpt_box b;
        int nd;
        uint64_t gs[2];
        train_ckpt_tensor_box(&mt, &nd, gs, &b);
        float *out = load_params_dest(t, &mt, &b);
        if (e != NULL && out == NULL) continue;
        int rc = e ? load_box(t, r, e, &b, out, diag) : BT_EINVAL;
        if (rc != 0) return rc;
    }
    return 0;
}

static int load_moments(trainer *t, ckpt_reader *r, bt_diag *diag) {
    static const char *const prefix[2] = {"optim.exp_avg.", "optim.exp_avg_sq."};
    for (int i = 0; i < model_n_tensors(&t->m); i++) {
        model_tensor mt;
        model_tensor_info(&t->m, i, &mt);
        uint64_t a, b;
        size_t at;
        if (!train_ckpt_moment_part(t, &mt, &a, &b, &at)) continue;
        ckpt_box box;
        int nd;
        uint64_t gs[2];
        train_ckpt_tensor_box(&mt, &nd, gs, &box);
        if (a > 0 || b < mt.count) box.flat_begin = a, box.flat_end = b;
        for (int k = 0; k < 2; k++) {
            char key[160];
            snprintf(key, sizeof key, "%s%s", prefix[k], mt.name);
            const Baton__TensorEntry *e = load_entry(r, key, &mt, diag);
            float *out = (k == 0 ? t->opt.m : t->opt.v) + at;
            int rc = e ? load_box(t, r, e, &box, out, diag) : BT_EINVAL;
            if (rc != 0) return rc;
        }
    }
    t->opt.step = r->m->optim_step;
    return 0;
}

/* Saved with optimizer state (an imported model is not). */
static int load_has_moments(const Baton__Manifest *m) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strncmp(m->tensors[i]->key, "optim.", 6) == 0) return 1;
    return 0;
}

/* The delayed-scaling state saved by the same stage (same GEMMs and history length). An
 * expert's missing altogether (a checkpoint from before the experts ran fp8) starts
 * afresh, counted in t->fp8_fresh. A format-1 gradient state is rescaled to today's loss
 * scaling (ckpt_fp8_legacy_factor). */
static int load_fp8(trainer *t, ckpt_reader *r, bt_diag *diag) {
    const char *dir = r->dir;
    const Baton__Manifest *m = r->m;
    if (t->fp8 == NULL) return 0;
    t->fp8_fresh = 0;
    for (int g = 0; g < t->m.n_gemm + t->m.n_xgemm; g++) {
        int loaded = 0;
        for (int k = 0; k < BACKEND_FP8_SLOTS; k++) {
            char name[96];
            train_ckpt_fp8_name(t, g, k, name, sizeof name);
            const Baton__Fp8State *f = ckpt_fp8_find_sorted(m, name);
            prec_fp8_meta *meta = &t->fp8[g].meta[k];
            if (f == NULL && g >= t->m.n_gemm) {
                t->fp8_fresh++;
                continue;
            }
            if (f == NULL || ckpt_fp8_history_len(f) != meta->len || f->pos >= meta->len) {
                bt_diag_set(diag, "%s: no usable fp8 scaling state for %s", dir, name);
                return BT_EINVAL;
            }
            int rc = ckpt_reader_fp8(r, f, meta->history, diag);
            if (rc != 0) return rc;
            meta->scale = f->scale, meta->pos = f->pos;
            float legacy = ckpt_fp8_legacy_factor(m, name);
            if (legacy != 1.0f) prec_fp8_meta_rescale(meta, legacy);
            loaded++;
        }
        t->fp8[g].fresh = loaded < BACKEND_FP8_SLOTS; /* calibrated before step 1 */
    }
    return 0;
}

int train_ckpt_load_params(trainer *t, const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    int rc = load_params(t, &r, diag);
    rc = rc ? rc : load_fp8(t, &r, diag); /* nothing unless t runs fp8 */
    ckpt_reader_close(&r);
    return rc;
}

static int load_model_matches(const trainer *t, const Baton__Manifest *m, const char *dir,
                              bt_diag *diag) {
    char why[160];
    if (!ckpt_resume_model_diff(m, t->spec->model, why, sizeof why)) return 0;
    bt_diag_set(diag, "%s: saved from a different model (%s)", dir, why);
    return BT_EINVAL;
}

/* How the checkpoint whose manifest is m stands against this stage of this run: another
 * run's (by the run id its manifest records, ckpt_same_run) is CKPT_OTHER_RECIPE, a
 * hand-off at most. in_root: it was found in the run's own checkpoints/, which holds only
 * the run's own. */
static ckpt_stage_rel load_relation(const trainer *t, const Baton__Manifest *m, int in_root) {
    const Baton__StageSpec *s = t->spec;
    return ckpt_run_relation(m, s->recipe_name, s->run_id, s->stage_index, in_root);
}

/* A checkpoint a later stage of this run saved is no start for this one when it was
 * found in a run directory or checkpoint root: a run's directory holds them once its
 * stages went on, and a stage run again there would otherwise take the newest, a later
 * stage's weights, moments and schedule position. Later by its manifest's stage index
 * (load_relation), as `baton run` judges which checkpoint an attempt starts from.
 * (A checkpoint directory named itself is taken as given.) */
static int load_not_later(const trainer *t, const Baton__Manifest *m, const char *dir, int in_root,
                          bt_diag *diag) {
    const Baton__StageSpec *s = t->spec;
    if (load_relation(t, m, in_root) != CKPT_LATER_STAGE) return 0;
    bt_diag_set(diag,
                "%s: saved by stage %u (%s) of recipe %s, which comes after this stage %u "
                "(%s): a stage never starts from a later stage's checkpoint",
                dir, m->stage_index, m->stage_name ? m->stage_name : "?", m->recipe_name,
                s->stage_index, s->stage && s->stage->name ? s->stage->name : "?");
    return BT_EINVAL;
}

/* What a checkpoint sets besides the weights and moments, as train_init left it: put back
 * before every candidate, so that one refused (on any rank: the ranks that loaded it fall
 * back too) leaves nothing behind when the next is another stage's (which sets none of it). */
typedef struct load_start {
    uint64_t step, first_sample, skipped_steps;
    train_scaler scaler;
    int mix_by_slot;
} load_start;

static void load_undo(trainer *t, const load_start *s) {
    t->ld.cfg.mix_by_slot = s->mix_by_slot;
    t->step = t->step0 = s->step;
    t->first_sample = s->first_sample, t->skipped_steps = s->skipped_steps;
    t->scaler = s->scaler;
    train_spike_forget(&t->spike);
    t->fp8_fresh = 0;
    train_fp8_reset(t);
}

/* A resumed stage keeps the mixture order its checkpoint was saved under: by slot for one
 * from before manifests recorded it (loader.h), so that it goes on as the run went. */
static int load_sample_order(trainer *t, const Baton__Manifest *m, const char *dir, bt_diag *diag) {
    if (m->has_sample_order && m->sample_order > 1) {
        bt_diag_set(diag,
                    "%s: saved under sample order %u, which this baton does not know (a later "
                    "baton's checkpoint)",
                    dir, m->sample_order);
        return BT_EINVAL;
    }
    t->ld.cfg.mix_by_slot = !(m->has_sample_order && m->sample_order == 1);
    return 0;
}

/* The counts a checkpoint recorded for the training data against the files' now: 1 and
 * what differs in what (data rewritten under the same names, where the data position
 * would index other samples), else 0. */
static int load_data_differs(const trainer *t, const Baton__Manifest *m, char *what, size_t cap) {
    if (m->n_data != t->ld.n_src) {
        snprintf(what, cap,
                 "it was saved reading %zu training source%s and the stage reads %zu now",
                 m->n_data, m->n_data == 1 ? "" : "s", t->ld.n_src);
        return 1;
    }
    loader_source src[TRAIN_CKPT_MAX_SOURCES];
    size_t n = loader_sources_from_data(t->spec->data, src, TRAIN_CKPT_MAX_SOURCES);
    for (size_t i = 0; i < m->n_data && i < n && i < TRAIN_CKPT_MAX_SOURCES; i++) {
        const Baton__DataCounts *d = m->data[i];
        const indexed_dataset *ds = &t->ld.src[i].ds;
        if (d->tokens == ds->n_tokens && d->documents == ds->n_documents) continue;
        snprintf(what, cap,
                 "its training data %s changed since this checkpoint (%llu tokens, %llu "
                 "document%s now; %llu, %llu when saved as %s)",
                 src[i].prefix, (unsigned long long)ds->n_tokens,
                 (unsigned long long)ds->n_documents, ds->n_documents == 1 ? "" : "s",
                 (unsigned long long)d->tokens, (unsigned long long)d->documents,
                 d->path ? d->path : "?");
        return 1;
    }
    return 0;
}

/* Checkpoint dir of this stage saved under another seed, seq_len or mixture weights
 * (what, ckpt_resume_order_diff): its data position counts in other samples. For the
 * run's own checkpoints (own) a refusal, BT_EINVAL; for one init names a warning by world
 * rank 0 (say), as for changed data. */
static int load_order_changed(const trainer *t, const Baton__Manifest *m, const char *dir, int own,
                              int say, const char *what, bt_diag *diag) {
    const Baton__StageSpec *s = t->spec;
    const char *stage = s->stage && s->stage->name ? s->stage->name : "?";
    if (own) {
        bt_diag_set(diag,
                    "%s: stage \"%s\" cannot resume: %s since this checkpoint, so its data "
                    "position (sample %llu) would index other samples. Put the old value back "
                    "in the recipe, or change it from a new stage on (set this stage's steps "
                    "to %llu, the checkpoint's, and add one after it), or start a new run from "
                    "these weights (init: %s)",
                    dir, stage, what, (unsigned long long)m->data_position,
                    (unsigned long long)m->step, dir);
        return BT_EINVAL;
    }
    if (say)
        fprintf(stderr,
                "baton-worker: warning: %s: stage \"%s\" continues from it as init names it, "
                "though %s since: its data position (sample %llu) indexes other samples now\n",
                dir, stage, what, (unsigned long long)m->data_position);
    return 0;
}

/* Whether checkpoint dir resumes this stage over changed data (load_data_differs): for
 * the run's own checkpoints (own) a refusal, BT_EINVAL; for one named by init or --init
 * the user's choice, which world rank 0 warns about (0). 0 also when it is another
 * stage's, records no counts (an older checkpoint) or cannot be read (load_one then says
 * why). */
static int load_data_changed(const trainer *t, const char *dir, int own, int say, bt_diag *diag) {
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (ckpt_manifest_read(dir, &m, &d) != 0) return 0;
    const Baton__StageSpec *s = t->spec;
    const char *stage = s->stage && s->stage->name ? s->stage->name : "?";
    char what[1024];
    int rc = 0;
    if (load_relation(t, m, own) != CKPT_SAME_STAGE) {
        /* another stage's: read from its own data position */
    } else if (ckpt_resume_order_diff(m, s, what, sizeof what)) {
        rc = load_order_changed(t, m, dir, own, say, what, diag);
    } else if (m->n_data > 0 && load_data_differs(t, m, what, sizeof what)) {
        if (own) {
            bt_diag_set(diag,
                        "%s: stage \"%s\" cannot resume: %s, so its data position (sample "
                        "%llu) would index other samples. Put the stage's data back, or start "
                        "a new run from these weights (init: %s)",
                        dir, stage, what, (unsigned long long)m->data_position, dir);
            rc = BT_EINVAL;
        } else if (say) {
            fprintf(stderr,
                    "baton-worker: warning: %s: stage \"%s\" continues from it as init names "
                    "it, though %s: its data position (sample %llu) indexes other samples "
                    "now\n",
                    dir, stage, what, (unsigned long long)m->data_position);
        }
    }
    baton__manifest__free_unpacked(m, NULL);
    return rc;
}

/* Checkpoint dir, loaded as another stage's or run's (init), trained with a RoPE other
 * than this stage's: a note naming the fields (a context extension changes them on
 * purpose; a rope block copied without its truncate: false, by a slip). */
static void load_rope_note(const trainer *t, const char *dir) {
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (ckpt_manifest_read(dir, &m, &d) != 0) return;
    char what[1024];
    const Baton__StageSpec *s = t->spec;
    if (load_relation(t, m, 0) != CKPT_SAME_STAGE &&
        ckpt_rope_diff(m->model, s->model, what, sizeof what) > 0)
        fprintf(stderr,
                "baton-worker: note: %s was trained with another RoPE than stage \"%s\" trains "
                "with (%s): the stage uses its own\n",
                dir, s->stage && s->stage->name ? s->stage->name : "?", what);
    baton__manifest__free_unpacked(m, NULL);
}

/* Loads checkpoint directory dir, every shard file opened once (ckpt_reader); one a later
 * stage saved is refused unless dir was named itself (refuse_later 0). in_root: dir is in
 * the run's own checkpoints/ (load_relation). *other_model set: refused as another
 * model's (a recipe changed, not damage). */
static int load_one(trainer *t, const char *dir, int refuse_later, int in_root, int *other_model,
                    bt_diag *diag) {
    Baton__Manifest *m = NULL;
    ckpt_reader r;
    int rc = ckpt_manifest_read(dir, &m, diag);
    if (rc == 0 && m->model == NULL) { /* an empty file decodes as an empty message */
        bt_diag_set(diag, "%s/%s: not a checkpoint manifest (no model in it: empty or damaged)",
                    dir, CKPT_MANIFEST);
        rc = BT_EINVAL;
    }
    if (rc == 0 && refuse_later) rc = load_not_later(t, m, dir, in_root, diag);
    ckpt_reader_init(&r, dir, m);
    if (rc == 0) ckpt_manifest_sort_keys(m); /* every lookup below in log time */
    if (rc == 0 && (rc = load_model_matches(t, m, dir, diag)) != 0) *other_model = 1;
    rc = rc ? rc : load_params(t, &r, diag);
    if (rc != 0) goto out;
    const Baton__StageSpec *s = t->spec;
    int resume = load_relation(t, m, in_root) == CKPT_SAME_STAGE;
    int reset = !resume && s->stage->optimizer && s->stage->optimizer->reset;
    optim_adamw_reset(&t->opt);
    if (!reset && load_has_moments(m)) rc = load_moments(t, &r, diag);
    if (rc == 0 && resume) rc = load_sample_order(t, m, dir, diag);
    if (rc == 0 && resume) {
        t->step = t->step0 = m->step;
        t->first_sample = m->data_position;
        t->skipped_steps = m->skipped_steps;
        train_scaler_from_pb(&t->scaler, m->loss_scaler);
        train_spike_from_pb(&t->spike, m->spike_guard); /* none: it warms up again */
        rc = load_fp8(t, &r, diag);
    } else if (rc == 0 && !reset) {
        /* An fp16 stage after an fp16 stage keeps the loss scale the earlier one found, as
         * it keeps the moments (nothing unless both run fp16: only fp16 saves a scaler);
         * its skipped-step count is its own. */
        train_scaler_from_pb(&t->scaler, m->loss_scaler);
        t->scaler.overflow_steps = 0;
    }
    if (rc == 0 && t->be.sync(&t->be) != 0) { /* a failed copy into device memory */
        bt_diag_set(diag, "%s: copying into %s memory failed: %s", dir, t->be.name,
                    t->be.error ? t->be.error(&t->be) : "(no message)");
        rc = BT_EIO;
    }
out:
    t->load_files = (uint32_t)r.opens;
    ckpt_reader_close(&r);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return rc;
}

/* The checkpoints path stands for, newest first: itself when it is one (*explicit set),
 * else the complete checkpoints of the run directory or checkpoint root. */
static int load_candidates(const char *path, char ***dirs, size_t *n, int *explicit,
                           bt_diag *diag) {
    char root[CKPT_PATH_MAX], probe[CKPT_PATH_MAX + 16];
    snprintf(probe, sizeof probe, "%s/%s", path, CKPT_MANIFEST);
    *dirs = NULL, *n = 0;
    if (access(probe, F_OK) == 0) {
        *dirs = malloc(sizeof **dirs);
        if (*dirs == NULL || ((*dirs)[0] = strdup(path)) == NULL) return BT_ENOMEM;
        *n = 1, *explicit = 1;
        return 0;
    }
    snprintf(root, sizeof root, "%s/%s", path, CKPT_ROOT_IN_RUN);
    if (access(root, F_OK) != 0) snprintf(root, sizeof root, "%s", path);
    char **names;
    int rc = ckpt_list(root, &names, n, diag);
    for (size_t i = 0; rc == 0 && i < *n / 2; i++) {
        char *x = names[i];
        names[i] = names[*n - 1 - i], names[*n - 1 - i] = x;
    }
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        char *d = bt_str_concat(root, "/");
        char *full = d ? bt_str_concat(d, names[i]) : NULL;
        free(d);
        if (full == NULL) rc = BT_ENOMEM;
        free(names[i]);
        names[i] = full;
    }
    *dirs = names;
    if (rc == 0 && *n == 0) {
        bt_diag_set(diag, "%s: no complete checkpoint there (nothing with %s)", path,
                    CKPT_MANIFEST);
        rc = BT_ENOENT;
    }
    return rc;
}

/* How many of the candidates, newest first, a later stage of this recipe saved
 * (load_not_later): passed over, said once by world rank 0. Names sort in training order,
 * so they are the first ones; a manifest that cannot be read ends the count (the load
 * refuses it, saying why). */
static size_t load_skip_later(const trainer *t, char **dirs, size_t n, int in_root, comm *world) {
    size_t k = 0;
    for (; k < n; k++) {
        Baton__Manifest *m = NULL;
        bt_diag d;
        bt_diag_init(&d);
        int later =
            ckpt_manifest_read(dirs[k], &m, &d) == 0 && load_not_later(t, m, dirs[k], in_root, &d);
        if (m) baton__manifest__free_unpacked(m, NULL);
        if (!later) break;
        if (world == NULL || comm_rank(world) == 0)
            fprintf(stderr, "baton-worker: passing over %s\n", d.msg);
    }
    return k;
}

/* Whether candidate dir of this run's own checkpoint root is this stage's: by its
 * manifest; by its name (sNN-step...) where the manifest cannot be read or is empty, as
 * baton run judges it. */
static int load_own(const trainer *t, const char *dir) {
    const Baton__StageSpec *s = t->spec;
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int own;
    if (ckpt_manifest_read(dir, &m, &d) == 0 && m->model != NULL) {
        own = load_relation(t, m, 1) == CKPT_SAME_STAGE;
    } else {
        const char *base = strrchr(dir, '/');
        unsigned st = 0;
        unsigned long long step;
        own =
            sscanf(base ? base + 1 : dir, "s%u-step%llu", &st, &step) == 2 && st == s->stage_index;
    }
    if (m) baton__manifest__free_unpacked(m, NULL);
    return own;
}

/* Test hook: BATON_FAULT_LOAD_EXIT=RANK:VOTE makes world rank RANK die (as by SIGKILL)
 * right before the load's vote VOTE (skip, data, load, newer or stop): the others' vote
 * then fails on a lost peer (tests/ckpt/check-faults.sh vote-rank-lost). */
static void load_fault_exit(comm *world, const char *vote) {
    const char *f = getenv("BATON_FAULT_LOAD_EXIT");
    int rank = -1;
    char want[16];
    if (f == NULL || world == NULL || sscanf(f, "%d:%15s", &rank, want) != 2) return;
    if (rank == comm_rank(world) && strcmp(want, vote) == 0) _exit(137);
}

/* 0 when no rank failed, else 1 + the highest world rank that failed (-1 when that is
 * not known: the vote itself failed, load_vote_lost). vote names it for load_fault_exit. */
static int load_any_failed(comm *world, int failed, const char *vote) {
    float f = failed ? (float)(world ? comm_rank(world) : 0) + 1.0f : 0.0f;
    load_fault_exit(world, vote);
    if (world && comm_allreduce(world, &f, &f, 1, COMM_F32, COMM_MAX, NULL) != 0) return -1;
    return (int)f;
}

/* A vote on what (about dir) that failed: a rank was lost, or stopped answering, during
 * it (world's error says which), not a refusal. Said so, with mine_ok where this rank
 * found nothing wrong with dir (no reason to move it aside): BT_EIO, which baton run
 * retries. */
static int load_vote_lost(comm *world, const char *dir, const char *what, int mine_ok,
                          bt_diag *diag) {
    const char *why = comm_error(world);
    int hung = comm_fault_of(world) == COMM_FAULT_TIMEOUT;
    bt_diag_set(diag, "%s: the ranks could not agree on %s: a rank was %s during the vote (%s)%s",
                dir, what, hung ? "unresponsive" : "lost", why[0] ? why : "no message",
                mine_ok ? "; this rank found nothing wrong with the checkpoint" : "");
    return BT_EIO;
}

/* load_data_changed of the run's own checkpoint dir on every rank, which all refuse when
 * one does (BT_EINVAL). */
static int load_data_vote(const trainer *t, const char *dir, comm *world, bt_diag *diag) {
    int r = load_data_changed(t, dir, 1, 0, diag), any = load_any_failed(world, r != 0, "data");
    if (any == 0) return 0;
    if (any < 0 && r == 0) return load_vote_lost(world, dir, "loading it", 1, diag);
    if (r == 0)
        bt_diag_set(diag, "%s: its training data changed since, on rank %d: its log says why", dir,
                    any - 1);
    return any > 0 ? BT_EINVAL : BT_EIO;
}

/* Candidate dir, with older ones after it, refused (r, mine: this rank's code and message,
 * other: what says another rank's) as a newer baton's format on any rank: no fallback to an older
 * checkpoint, which would train the steps since again (a downgrade, unnoticed). BT_EUNSUPPORTED
 * with the way on in diag then, 0 when no rank found it so. */
static int load_newer_vote(const char *dir, int r, const bt_diag *mine, const char *other,
                           comm *world, bt_diag *diag) {
    /* the manifest's own format, not a tensor's dtype the reader does not convert */
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int mine_newer = r == BT_EUNSUPPORTED && ckpt_manifest_read(dir, &m, &d) == BT_EUNSUPPORTED;
    if (m) baton__manifest__free_unpacked(m, NULL);
    int newer = load_any_failed(world, mine_newer, "newer");
    if (newer == 0) return 0;
    if (newer < 0 && !mine_newer)
        return load_vote_lost(world, dir, "falling back to an older checkpoint", 0, diag);
    bt_diag_set(diag,
                "%s: not falling back to an older checkpoint, which would train the steps "
                "since it again: resume with the newer baton that wrote it (upgrade this one), "
                "or move %s aside to resume from the one before it",
                mine_newer ? mine->msg : other, dir);
    return BT_EUNSUPPORTED; /* this rank's own finding, or another's it heard of */
}

int train_ckpt_load(trainer *t, const char *path, const char *run_dir, comm *world, bt_diag *diag) {
    char **dirs = NULL;
    size_t n = 0;
    int explicit = 0;
    int rc = load_candidates(path, &dirs, &n, &explicit, diag), any = 1;
    load_start start = {t->step, t->first_sample, t->skipped_steps, t->scaler,
                        t->ld.cfg.mix_by_slot};
    /* the run's own checkpoint root: they are the run's own (load_relation) */
    int own_root = !explicit && run_dir && strcmp(path, run_dir) == 0;
    /* the later stages' newest checkpoints passed over, as many as every rank found (a
     * rank that could not read a manifest stops counting there; load_one refuses a later
     * stage's checkpoint after it all the same, through the ranks' vote) */
    float skip = rc == 0 && !explicit ? -(float)load_skip_later(t, dirs, n, own_root, world) : 0.0f;
    load_fault_exit(world, "skip");
    if (world && comm_allreduce(world, &skip, &skip, 1, COMM_F32, COMM_MAX, NULL) != 0)
        rc = load_vote_lost(world, path, "the checkpoints to pass over", 0, diag);
    size_t first = (size_t)-skip;
    if (rc == 0 && first == n && n > 0) {
        bt_diag_set(diag,
                    "%s: no usable checkpoint (every complete one there is a later stage's; the "
                    "newest: %s)",
                    path, dirs[0]);
        rc = BT_ENOENT;
    }
    /* In the run's own root, once a checkpoint of this stage was refused, none of an
     * earlier stage is taken: its hand-off would train the stage again from step 0 */
    int refused_own = 0, say = world == NULL || comm_rank(world) == 0, other_model = 0;
    for (size_t i = first; rc == 0 && i < n && any; i++) {
        /* the data of the checkpoint about to be loaded: changed data ends the load (an
         * older checkpoint of the stage read the same), for the run's own checkpoints */
        if (own_root && (rc = load_data_vote(t, dirs[i], world, diag)) != 0) break;
        if (!own_root) load_data_changed(t, dirs[i], 0, say, diag);
        bt_diag mine;
        bt_diag_init(&mine);
        int r = load_one(t, dirs[i], !explicit, own_root, &other_model, &mine);
        if (r == 0 && !own_root && say) load_rope_note(t, dirs[i]);
        any = load_any_failed(world, r != 0, "load");
        if (!any) break;
        load_undo(t, &start); /* every rank, whether its own load failed or not */
        if (any < 0) {        /* nothing known of the others: no fallback, no refusal */
            if (r != 0) fprintf(stderr, "baton-worker: checkpoint refused: %s\n", mine.msg);
            rc = load_vote_lost(world, dirs[i], "loading it", r == 0, diag);
            break;
        }
        char other[64];
        snprintf(other, sizeof other, "on rank %d: its log says why", any - 1);
        if (i + 1 < n && (rc = load_newer_vote(dirs[i], r, &mine, other, world, diag)) != 0) break;
        if (r != 0) fprintf(stderr, "baton-worker: checkpoint refused: %s\n", mine.msg);
        refused_own = refused_own || (own_root && load_own(t, dirs[i]));
        /* voted whenever own_root, so that every rank takes part alike */
        int stop = refused_own && i + 1 < n && !load_own(t, dirs[i + 1]);
        int stop_any = own_root && i + 1 < n ? load_any_failed(world, stop, "stop") : 0;
        if (stop_any < 0) {
            rc = load_vote_lost(world, dirs[i + 1], "falling back to it", 0, diag);
        } else if (stop_any > 0) {
            /* a model changed in the recipe is no damage: the way on is the recipe */
            const char *hint = other_model ? "put the stage's model back in the recipe"
                                           : "'baton ckpt verify' says what is damaged";
            bt_diag_set(diag,
                        "%s: no usable checkpoint of this stage: every one it saved was refused "
                        "(the oldest: %s), and %s, an earlier stage's, would train it again "
                        "from step 0; not falling back to it (%s)",
                        path, r ? mine.msg : other, dirs[i + 1], hint);
            rc = r ? r : BT_EIO;
        } else if (i + 1 == n) {
            bt_diag_set(diag, "%s: no usable checkpoint (the oldest refused: %s)", path,
                        r ? mine.msg : other);
            rc = r ? r : BT_EIO;
        } else {
            fprintf(stderr, "baton-worker: falling back to %s\n", dirs[i + 1]);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(dirs[i]);
    free(dirs);
    return rc;
}
