/* A checkpoint removed while it is read (ckpt_gone.h). */
#include "ckpt_gone.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "util/cleanup.h"

#define CKPT_GONE_WHY "a run's retention removes its older checkpoints as it saves new ones"

/* Checkpoint dir, which try k (from 1) read for named, was removed while read: 1 after a
 * note on stderr when named has a newest checkpoint to read instead and tries are left;
 * else 0 with diag saying what went. */
static int ckpt_gone_next(const char *cmd, const char *named, const char *dir, int k,
                          bt_diag *diag) {
    char newest[CKPT_PATH_MAX];
    bt_diag d;
    bt_diag_init(&d);
    int none = ckpt_resolve(named, newest, sizeof newest, &d) != 0;
    bt_diag_init(diag);
    if (strcmp(named, dir) == 0)
        bt_diag_set(diag,
                    "%s: the checkpoint was removed while it was being read (" CKPT_GONE_WHY
                    "); nothing is wrong with the others: name the run directory to read its "
                    "newest",
                    dir);
    else if (none && k == 1)
        bt_diag_set(diag,
                    "%s was removed while it was being read (" CKPT_GONE_WHY "), and %s holds "
                    "no complete checkpoint now: none is damaged",
                    dir, named);
    else if (none || k >= CKPT_GONE_TRIES)
        bt_diag_set(diag,
                    "%s was removed while it was being read, as was each checkpoint of %s read "
                    "before it (%d tried; " CKPT_GONE_WHY ", here faster than one is read): "
                    "none is damaged; try again, or name a stage's final checkpoint, which "
                    "retention keeps",
                    dir, named, k);
    else
        fprintf(stderr,
                "%s: note: %s was removed while it was being read (the run's retention, as it "
                "saved a newer one); reading %s, the newest of %s, instead\n",
                cmd, dir, newest, named);
    return !bt_diag_isset(diag);
}

int ckpt_gone_retry(const char *cmd, const char *named, ckpt_gone_try fn, void *ctx, char *dir,
                    size_t cap, int *gone, bt_diag *diag) {
    int rc = 0, went = 0;
    for (int k = 1;; k++) {
        dir[0] = '\0';
        bt_diag_init(diag);
        rc = fn(ctx, dir, cap, diag);
        went = rc != 0 && dir[0] != '\0' && bt_cleanup_signal() == 0 && ckpt_removed(dir);
        if (!went || !ckpt_gone_next(cmd, named, dir, k, diag)) break;
        bt_cleanup_run(); /* the failed try's partial output */
    }
    if (gone) *gone = went;
    return went ? BT_EIO : rc;
}

void ckpt_gone_fault(const char *dir) {
    ckpt_gone_fault_at(dir, "open");
}

void ckpt_gone_fault_at(const char *dir, const char *at) {
    const char *f = getenv("BATON_FAULT_CKPT_REMOVE"), *base = strrchr(dir, '/');
    const char *where = getenv("BATON_FAULT_CKPT_REMOVE_AT");
    if (strcmp(where && where[0] ? where : "open", at) != 0) return;
    base = base ? base + 1 : dir;
    size_t n = strlen(base);
    for (const char *p = f; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, base, n) == 0) {
            char gone[CKPT_PATH_MAX + 16];
            snprintf(gone, sizeof gone, "%s%s", dir, CKPT_DELETING_SUFFIX);
            if (rename(dir, gone) == 0) ckpt_remove_dir(gone);
            return;
        }
        p += len + (end != NULL);
    }
}
