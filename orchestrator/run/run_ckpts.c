/* What the supervisor checks and tidies in the run's checkpoint root (RUN_DIR/checkpoints)
 * between attempts: whether a stage whose workers all exited 0 really ended with its final
 * checkpoint, and the .partial directories failed saves left behind. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"

/* (run_ctx.h) The recipe's name as the stages' specs carry it (recipe_resolve_stage): what the
 * workers' manifests record. Only the run's own checkpoints/ is looked at here, whose
 * checkpoints are all the run's (ckpt_same_run, whatever run id they record), so the
 * recipe's name and the stage's index decide, as they do for the worker there. */
const char *run_recipe_name(const run_ctx *c) {
    return c->doc->recipe->name ? c->doc->recipe->name : "";
}

/* Why the stage's final checkpoint, there but not read (ckpt_manifest_read's rc, errno
 * err), is no verdict on the stage: RUN_FINAL_UNREAD when another attempt may get past it,
 * RUN_FINAL_BROKEN when it would find it the same. What another attempt does: its workers
 * take the run's newest checkpoint they can load. One they refuse (damaged: a checksum
 * that does not match, bytes that do not decode, an empty manifest, manifest.pb not a
 * file or over the size cap) they pass over for the stage's previous one, train the steps
 * after it again and save the final checkpoint anew (the damaged one set aside as .old,
 * then removed): the recovery a user would make by hand, so retried (max_restarts bounds
 * a cause that recurs). A passing cause (EIO, ESTALE, EMFILE, ENFILE, ENOMEM, EINTR) may
 * be gone by then. Not so for one that says how the run directory is set up, not what the
 * workers wrote (EACCES, EPERM: another user's files, a root-squashed mount; ENOTDIR,
 * ELOOP, ENAMETOOLONG: a file or a link where a directory belongs): the workers, which
 * saved it and exited 0, would load it and exit 0 again, or fail on the same path, every
 * attempt up to max_restarts. Nor for a newer baton's format (BT_EUNSUPPORTED), which the
 * workers, of that newer version, take as complete. */
static int run_final_unread_kind(int rc, int err) {
    if (rc == BT_EUNSUPPORTED) return RUN_FINAL_BROKEN;
    if (rc != BT_EIO) return RUN_FINAL_UNREAD; /* BT_EINVAL: damaged */
    switch (err) {
    case EACCES:
    case EPERM:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG:
        return RUN_FINAL_BROKEN;
    default:
        return RUN_FINAL_UNREAD;
    }
}

int run_stage_finished(run_ctx *c, uint32_t stage, uint64_t steps, char *why, size_t cap) {
    char root[4200], name[64], dir[4300];
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    ckpt_name(stage, steps, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int rc = ckpt_manifest_read(dir, &m, &d), err = errno;
    if (rc == 0 && m->model == NULL) { /* an empty file decodes as an empty message */
        bt_diag_set(&d, "%s/%s: damaged: no model in it", dir, CKPT_MANIFEST);
        rc = BT_EINVAL;
    }
    int ok = rc == 0 && m->has_step && m->step == steps && m->stage_final &&
             ckpt_stage_relation(m, run_recipe_name(c), stage) == CKPT_SAME_STAGE;
    if (ok) run_data_end_seen(c, stage, m);
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (ok) return RUN_FINAL_DONE;
    if (rc != 0 && rc != BT_ENOENT) { /* there, but no verdict on it */
        int kind = run_final_unread_kind(rc, err);
        snprintf(why, cap, "workers exited 0, but the stage's final checkpoint cannot be read: %s",
                 d.msg);
        return kind;
    }
    if (c->prog.have_step)
        snprintf(why, cap,
                 "workers exited 0 at step %llu of %llu without the stage's final checkpoint "
                 "(%s/%s)",
                 (unsigned long long)c->prog.step, (unsigned long long)steps, CKPT_ROOT_IN_RUN,
                 name);
    else
        snprintf(why, cap,
                 "workers exited 0 without a completed step (the stage has %llu) and without "
                 "the stage's final checkpoint (%s/%s)",
                 (unsigned long long)steps, CKPT_ROOT_IN_RUN, name);
    return RUN_FINAL_SHORT;
}
void run_ckpt_note_record(run_ctx *c, const Baton__JournalRecord *r) {
    uint32_t k = r->stage_index;
    run_data_note_record(c, r);
    if (k >= RUN_MAX_STAGES) return;
    if (r->kind == BATON__JOURNAL_RECORD__KIND__CHECKPOINT_COMMITTED && r->detail && r->has_step &&
        strlen(r->detail) < sizeof c->journaled[k].name) {
        snprintf(c->journaled[k].name, sizeof c->journaled[k].name, "%s", r->detail);
        c->journaled[k].step = r->step;
        c->journaled[k].attempt = r->has_attempt ? (long)r->attempt : -1;
        if (r->step >= c->journaled[k].past) c->journaled[k].past = r->step + 1;
    } else if (r->kind == BATON__JOURNAL_RECORD__KIND__ROLLBACK && r->has_step) {
        /* those from the record's step on (the first spiking step; for the request the
         * rollback limit refused, it or the guard's warm-up before it) are in rolled-back/:
         * saved again, they are new commits */
        if (c->journaled[k].past > r->step) c->journaled[k].past = r->step;
        /* moved with them; what remains of the stage before it is not known here, so
         * nothing is required of it */
        if (c->journaled[k].step >= r->step) c->journaled[k].name[0] = '\0';
    }
}

/* Checkpoint root/name when its manifest reads and makes it stage's own (*step: its step). */
static int run_ckpt_is_own(const run_ctx *c, const char *root, const char *name, uint32_t stage,
                           uint64_t *step) {
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int own = ckpt_manifest_read(dir, &m, &d) == 0 && m->model != NULL && m->has_step &&
              ckpt_stage_relation(m, run_recipe_name(c), stage) == CKPT_SAME_STAGE;
    if (own) *step = m->step;
    if (m) baton__manifest__free_unpacked(m, NULL);
    return own;
}

size_t run_ckpt_journal_found(run_ctx *c, uint32_t stage, uint32_t attempt) {
    char root[4200], **names = NULL;
    size_t n = 0, added = 0;
    bt_diag d;
    bt_diag_init(&d);
    if (stage >= RUN_MAX_STAGES) return 0;
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    if (ckpt_list(root, &names, &n, &d) != 0) n = 0;       /* the next attempt's start says why */
    for (size_t i = 0; i < n && !c->journal_broken; i++) { /* training order */
        uint64_t step = 0;
        if (!run_ckpt_is_own(c, root, names[i], stage, &step) || step < c->journaled[stage].past)
            continue;
        Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
        r.has_attempt = attempt != RUN_NO_ATTEMPT, r.attempt = r.has_attempt ? attempt : 0;
        r.has_step = 1, r.step = step;
        r.detail = names[i];
        if (run_journal(c, BATON__JOURNAL_RECORD__KIND__CHECKPOINT_COMMITTED, stage, &r) == 0)
            added++;
    }
    ckpt_names_free(names, n);
    return added;
}

/* How checkpoint root/name stands against stage as the worker judges it: by its manifest
 * (ckpt_stage_relation); by its name only when the manifest cannot be read or is empty
 * (the worker refuses it then, saying why). *step: the checkpoint's step. */
static ckpt_stage_rel run_ckpt_relation(const run_ctx *c, const char *root, const char *name,
                                        uint32_t stage, uint64_t *step) {
    char dir[4400];
    unsigned st = 0;
    unsigned long long at = 0;
    sscanf(name, "s%u-step%llu", &st, &at); /* ckpt_list lists no other names */
    ckpt_stage_rel rel = st < stage    ? CKPT_EARLIER_STAGE
                         : st == stage ? CKPT_SAME_STAGE
                                       : CKPT_LATER_STAGE;
    *step = at;
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (ckpt_manifest_read(dir, &m, &d) == 0 && m->model != NULL) {
        rel = ckpt_stage_relation(m, run_recipe_name(c), stage);
        if (m->has_step) *step = m->step;
    }
    if (m) baton__manifest__free_unpacked(m, NULL);
    return rel;
}

/* The newest complete checkpoint in the run's checkpoint root that stage may start from
 * (any but a later stage's), or with own set only the stage's own: 1 with its name in out
 * and its step in *step, 0 when there is none, -1 when the root cannot be listed (d). */
static int run_ckpt_find(run_ctx *c, uint32_t stage, int own, char *out, size_t cap, uint64_t *step,
                         bt_diag *d) {
    char root[4200], **names = NULL;
    size_t n = 0;
    out[0] = '\0';
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    if (ckpt_list(root, &names, &n, d) != 0) {
        ckpt_names_free(names, n);
        return -1;
    }
    for (size_t i = n; i-- > 0;) { /* newest first: ckpt_list sorts in training order */
        ckpt_stage_rel rel = run_ckpt_relation(c, root, names[i], stage, step);
        if (own ? rel == CKPT_SAME_STAGE : rel != CKPT_LATER_STAGE) {
            snprintf(out, cap, "%s", names[i]);
            break;
        }
    }
    ckpt_names_free(names, n);
    return out[0] != '\0';
}

int run_ckpt_start_from(run_ctx *c, uint32_t stage, char *out, size_t cap, bt_diag *d) {
    uint64_t step;
    return run_ckpt_find(c, stage, 0, out, cap, &step, d);
}

int run_ckpt_own(run_ctx *c, uint32_t stage, char *out, size_t cap, uint64_t *step, bt_diag *d) {
    return run_ckpt_find(c, stage, 1, out, cap, step, d);
}

/* Stage's own checkpoints all gone though the journal records one committed, while another
 * (an earlier stage's: have) remains: the hand-off from it would train the stage again
 * from step 0, without a word (1, with why). -1 with why when the root cannot be listed. */
static int run_ckpt_own_gone(run_ctx *c, uint32_t stage, const char *have, char *why, size_t cap) {
    char mine[128];
    uint64_t step;
    bt_diag d;
    bt_diag_init(&d);
    if (stage >= RUN_MAX_STAGES || c->journaled[stage].name[0] == '\0') return 0;
    int own = run_ckpt_own(c, stage, mine, sizeof mine, &step, &d);
    if (own < 0) snprintf(why, cap, "%s", d.msg);
    if (own != 0) return own < 0 ? -1 : 0; /* -1: cannot be listed; 0: one is there */
    snprintf(why, cap,
             "the journal records checkpoint %s/%s (step %llu) as the stage's newest "
             "committed, but it is gone from %s/%s with every other checkpoint of the stage: "
             "only another stage's is left (%s/%s), from which it would start again at step "
             "0; not restarting it so. Restore the stage's checkpoints (a backup, 'baton ckpt "
             "pull') and resume, or train the stage again as a new run in another --run-dir "
             "with %s/%s/%s as its recipe's init",
             CKPT_ROOT_IN_RUN, c->journaled[stage].name,
             (unsigned long long)c->journaled[stage].step, c->dir->path, CKPT_ROOT_IN_RUN,
             CKPT_ROOT_IN_RUN, have, c->dir->path, CKPT_ROOT_IN_RUN, have);
    return 1;
}

int run_ckpt_missing(run_ctx *c, uint32_t stage, char *why, size_t cap) {
    char have[128];
    uint64_t step;
    bt_diag d;
    bt_diag_init(&d);
    int found = run_ckpt_find(c, stage, 0, have, sizeof have, &step, &d);
    if (found < 0) {
        snprintf(why, cap, "%s", d.msg);
        return -1;
    }
    if (found) return run_ckpt_own_gone(c, stage, have, why, cap);
    for (uint32_t k = stage + 1; k-- > 0;) {
        if (k >= RUN_MAX_STAGES || c->journaled[k].name[0] == '\0') continue;
        snprintf(why, cap,
                 "the journal records checkpoint %s/%s as committed, but it is gone from %s/%s "
                 "with every other checkpoint this stage could start from; not starting it "
                 "from random weights. Restore the checkpoint (a backup, 'baton ckpt pull') "
                 "and resume",
                 CKPT_ROOT_IN_RUN, c->journaled[k].name, c->dir->path, CKPT_ROOT_IN_RUN);
        return 1;
    }
    return 0;
}

/* A name ending in suffix, with something before it. */
static int run_has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Removes the real directories directly in root whose names end in suffix (only those a
 * checkpoint's name makes, sNN-stepNNNNNNNN + suffix, with ckpt_only); their names,
 * comma-separated, into removed. Returns how many. */
static size_t run_sweep_suffix(run_ctx *c, const char *root, const char *suffix, int ckpt_only,
                               char *removed, size_t cap) {
    char p[4600];
    DIR *d = opendir(root);
    removed[0] = '\0';
    if (d == NULL) return 0; /* no checkpoint yet */
    struct dirent *de;
    size_t n = 0, l = 0;
    while ((de = readdir(d)) != NULL) {
        if (ckpt_only ? !ckpt_name_is(de->d_name, suffix) : !run_has_suffix(de->d_name, suffix))
            continue;
        /* lstat: a symbolic link named so is not followed (nor removed) */
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (ckpt_remove_dir(p) != 0) {
            run_err(c, "%s: cannot remove this directory: %s\n", p, strerror(errno));
            continue;
        }
        if (l < cap) l += (size_t)snprintf(removed + l, cap - l, "%s%s", n ? ", " : "", de->d_name);
        n++;
    }
    closedir(d);
    return n;
}

void run_sweep_partials(run_ctx *c) {
    char root[4200], removed[512];
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    size_t n = run_sweep_suffix(c, root, CKPT_PARTIAL_SUFFIX, 0, removed, sizeof removed);
    if (n > 0) {
        run_progress_end(&c->prog);
        run_err(c,
                "removed %zu unfinished checkpoint save(s) in %s (a .partial "
                "directory is never a valid checkpoint): %s\n",
                n, root, removed);
    }
    /* a .deleting is retention's rename of a checkpoint: any other name is not ours */
    n = run_sweep_suffix(c, root, CKPT_DELETING_SUFFIX, 1, removed, sizeof removed);
    if (n > 0) {
        run_progress_end(&c->prog);
        run_err(c,
                "removed what is left of %zu checkpoint(s) whose removal by retention was cut "
                "short in %s: %s\n",
                n, root, removed);
    }
}
