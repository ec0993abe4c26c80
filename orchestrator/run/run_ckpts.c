/* What the supervisor checks and tidies in the run's checkpoint root (RUN_DIR/checkpoints)
 * between attempts: whether a stage whose workers all exited 0 really ended with its final
 * checkpoint. */
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "run_ctx.h"

int run_stage_finished(run_ctx *c, uint32_t stage, uint64_t steps, char *why, size_t cap) {
    char root[4200], name[64], dir[4300];
    run_dir_file(c->dir, CKPT_ROOT_IN_RUN, root, sizeof root);
    ckpt_name(stage, steps, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    Baton__Manifest *m = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int ok = ckpt_manifest_read(dir, &m, &d) == 0 && m->has_step && m->step == steps &&
             m->stage_final && m->stage_index == stage;
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (ok) return 1;
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
    return 0;
}
