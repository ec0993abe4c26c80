#include "run_set_aside.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "spike_guard.h"
#include "util/file.h"

int run_set_aside(const char *root, const char *aside, uint32_t stage, uint64_t first, char *kept,
                  size_t cap, bt_diag *diag) {
    char bound[64], from[8500], to[8500];
    ckpt_name(stage, first, bound, sizeof bound);
    char **names;
    size_t n;
    int rc = ckpt_list(root, &names, &n, diag);
    if (rc != 0) return rc;
    snprintf(kept, cap, "none");
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (ckpt_name_cmp(names[k], bound) < 0) {
            snprintf(kept, cap, "%s", names[k]);
            continue;
        }
        snprintf(from, sizeof from, "%s/%s", root, names[k]);
        snprintf(to, sizeof to, "%s/%s", aside, names[k]);
        if (bt_mkdir_private(aside) != 0 || rename(from, to) != 0) {
            bt_diag_set(diag, "%s: cannot move it to %s: %s", from, aside, strerror(errno));
            rc = BT_EIO;
        }
    }
    ckpt_names_free(names, n);
    snprintf(from, sizeof from, "%s/%s", root, CKPT_LATEST);
    if (rc == 0 && unlink(from) != 0 && errno != ENOENT) {
        bt_diag_set(diag, "%s: cannot remove: %s", from, strerror(errno));
        rc = BT_EIO;
    }
    return rc;
}

/* The applied steps of window g the worker would take back (train_spike_from_pb): 0 for
 * none, lists of two lengths or a non-finite value. */
static size_t set_aside_window(const Baton__SpikeGuardState *g) {
    if (g == NULL || g->n_loss != g->n_grad_norm) return 0;
    for (size_t i = 0; i < g->n_loss; i++)
        if (!isfinite(g->loss[i]) || !isfinite(g->grad_norm[i])) return 0;
    return g->n_loss;
}

uint64_t run_set_aside_refused_from(const Baton__SpikeGuardState *g, uint64_t kept_step,
                                    uint64_t first) {
    size_t w = set_aside_window(g);
    uint64_t between = first > kept_step + 1 ? first - 1 - kept_step : 0;
    if (w > 0 && w + between >= SPIKE_GUARD_WARMUP) return first;
    return first > SPIKE_GUARD_WARMUP ? first - SPIKE_GUARD_WARMUP : 1;
}
