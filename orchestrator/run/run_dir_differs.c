/* What a run directory's kept recipe and overrides differ in from those given to baton
 * run (run_dir.h). */
#define _GNU_SOURCE /* strndup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "recipe_diff.h"
#include "run_dir.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"

#define DIFFERS_SHOWN 4 /* differences named */

/* The differences of the recipe given (its bytes as loaded) from the kept copy into out
 * ("" when either cannot be loaded: no more than "another recipe" can be said). */
static void differs_text(const char *kept, const recipe_doc *recipe, bt_buf *out) {
    recipe_doc was, now;
    bt_diag d;
    bt_diag_init(&d);
    if (recipe_load_kept(kept, &was, &d) != 0) return;
    if (recipe_load_buffer(recipe->file, recipe->text, recipe->text_len, &now, &d) == 0) {
        if (recipe_diff(&was, &now, DIFFERS_SHOWN, out) == 0)
            bt_buf_printf(out, "only in comments or layout: the two read as the same recipe");
        recipe_doc_free(&now);
    }
    recipe_doc_free(&was);
}

/* How recipe becomes the kept copy, into out: "make it the kept copy (cp FILE KEPT)"; where
 * it came from a pipe or FIFO, whose bytes are gone (a cp would wait for a terminal's, or
 * find /dev/fd/63 closed), its text written there by whatever gave it. */
static void differs_how(const recipe_doc *recipe, const char *kept, bt_buf *out) {
    if (recipe->text_once) {
        bt_buf_printf(out,
                      "write the new recipe into the kept copy with what made it, as %s "
                      "gives its text once (e.g. envsubst < t.yaml > ",
                      recipe->file);
        bt_buf_shell_word(out, kept);
        bt_buf_printf(out, ")");
        return;
    }
    bt_buf_printf(out, "make it the kept copy (cp ");
    bt_buf_shell_word(out, recipe->file);
    bt_buf_printf(out, " ");
    bt_buf_shell_word(out, kept);
    bt_buf_printf(out, ")");
}

/* A refusal's closing words on a run directory whose lock file was deleted (none there
 * before run_dir_open locked it, d->had), into out ("" for one that had it): that is
 * no sign of a directory free for another run. */
static void differs_lock_note(const run_dir *d, char *out, size_t cap) {
    int journal = run_dir_has_file(d->path, JOURNAL_FILE, NULL);
    out[0] = '\0';
    for (size_t i = 0; i < run_dir_n_names; i++)
        if (strcmp(run_dir_names[i].name, "lock") == 0 && d->wrote_in && !d->had[i])
            snprintf(out, cap,
                     ". Its lock file was deleted; that does not free it for another run "
                     "(%s there %s the run's); a baton resume makes the lock file again",
                     journal ? "the journal" : "the workdir, secret and run_id",
                     journal ? "is" : "are");
}

void run_dir_other_recipe(const run_dir *d, const recipe_doc *recipe, bt_diag *diag) {
    const char *recipe_file = recipe->file;
    char kept[4200];
    run_dir_file(d, "recipe.yaml", kept, sizeof kept);
    bt_buf what;
    bt_buf_init(&what);
    differs_text(kept, recipe, &what);
    const char *diffs = bt_buf_str(&what);
    bt_buf how, cmd;
    bt_buf_init(&how), bt_buf_init(&cmd);
    differs_how(recipe, kept, &how);
    char lock[256];
    differs_lock_note(d, lock, sizeof lock);
    bt_diag_set(diag,
                "%s: this run directory belongs to a run with another recipe (kept in %s)%s%s%s"
                "%s. To continue the run with the edit, %s and run %s (docs/running.md, "
                "\"Changing a run's recipe\", says which edits a run takes); to start a new "
                "run, choose another --run-dir%s",
                d->path, kept, diffs[0] ? ": " : "", diffs[0] ? recipe_file : "",
                diffs[0] ? " differs from it: " : "", diffs, bt_buf_str(&how),
                bt_shell_cmd(&cmd, "baton resume", d->path), lock);
    bt_buf_free(&what), bt_buf_free(&how), bt_buf_free(&cmd);
}

void run_dir_other_sets(const run_dir *d, const char *overrides, bt_diag *diag) {
    char copy[4200], *kept = NULL, was[2048], now[2048];
    size_t n = 0;
    run_dir_file(d, "overrides", copy, sizeof copy);
    char *text = bt_read_private(copy, 1u << 20, 0, &kept, &n) == 0 ? strndup(kept, n) : NULL;
    run_dir_sets_line(text ? text : "", was, sizeof was);
    run_dir_sets_line(overrides, now, sizeof now);
    free(kept), free(text);
    bt_buf cmd;
    bt_buf_init(&cmd);
    char lock[256];
    differs_lock_note(d, lock, sizeof lock);
    bt_diag_set(diag,
                "%s: this run directory belongs to a run with other --set overrides (kept in "
                "%s: the run has %s; given: %s); give the run's own to continue it, or continue "
                "it with %s; to run with other overrides, choose another --run-dir%s",
                d->path, copy, was, now, bt_shell_cmd(&cmd, "baton resume", d->path), lock);
    bt_buf_free(&cmd);
}
