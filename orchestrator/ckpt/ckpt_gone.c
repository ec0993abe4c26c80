/* A checkpoint removed while it is read (ckpt_gone.h). */
#include "ckpt_gone.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

int ckpt_gone(const char *cmd, const char *named, const char *dir, bt_diag *diag) {
    if (dir[0] == '\0' || !ckpt_removed(dir)) return 0;
    char newest[CKPT_PATH_MAX];
    bt_diag d;
    bt_diag_init(&d);
    int itself = ckpt_resolve(named, newest, sizeof newest, &d) != 0 || strcmp(named, dir) == 0;
    if (itself) {
        bt_diag_init(diag);
        bt_diag_set(diag,
                    "%s: the checkpoint was removed while it was being read (a run's retention "
                    "removes its older checkpoints as it saves new ones); nothing is wrong with "
                    "the others: name the run directory to read its newest",
                    dir);
        return 0;
    }
    fprintf(stderr,
            "%s: note: %s was removed while it was being read (the run's retention, as it "
            "saved a newer one); reading %s, the newest of %s, instead\n",
            cmd, dir, newest, named);
    return 1;
}

void ckpt_gone_fault(const char *dir) {
    const char *f = getenv("BATON_FAULT_CKPT_REMOVE"), *base = strrchr(dir, '/');
    if (f == NULL || strcmp(base ? base + 1 : dir, f) != 0) return;
    char gone[CKPT_PATH_MAX + 16];
    snprintf(gone, sizeof gone, "%s%s", dir, CKPT_DELETING_SUFFIX);
    if (rename(dir, gone) == 0) ckpt_remove_dir(gone);
}
