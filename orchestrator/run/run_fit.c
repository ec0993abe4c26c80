/* `baton plan`'s memory verdict said as `baton run` starts (run_ctx.h run_fit_warn). */
#include <stdio.h>
#include <stdlib.h>

#include "plan.h"
#include "run_ctx.h"
#include "run_edit.h"

/* Stage i's warning when its heaviest rank does not fit (plan_stage_memory). */
static void run_fit_stage(const run_ctx *c, size_t i, plan_stage *ps) {
    Baton__StageSpec *s = NULL;
    bt_diag d;
    bt_diag_init(&d);
    if (recipe_resolve_stage(c->doc, i, &s, &d) != 0) return; /* the attempt says why */
    if (plan_stage_memory(s, ps, &d) == 0 && ps->mem.fits == 0) {
        char need[32], have[32];
        plan_format_memory(need, sizeof need, ps->mem.total);
        plan_format_memory(have, sizeof have, ps->mem.capacity);
        int cpu = s->cluster == NULL || s->cluster->device != BATON__CLUSTER__DEVICE__CUDA;
        run_err(c,
                "warning: stage \"%s\" does not fit in memory: its heaviest rank (pipeline "
                "stage %u) needs %s, cluster.gpu.memory is %s ('baton plan' says what fits); "
                "starting it all the same%s\n",
                s->stage && s->stage->name ? s->stage->name : "?", ps->mem.heaviest_pp_stage, need,
                have,
                cpu ? " (on the CPU engine that memory is only declared)"
                    : ": an allocation may fail");
    }
    protobuf_c_message_free_unpacked(&s->base, NULL);
}

void run_fit_warn(const run_ctx *c) {
    plan_stage *ps = malloc(sizeof *ps);
    if (ps == NULL) return;
    for (size_t i = 0; i < c->doc->recipe->n_stages; i++)
        if (!c->st.stage[i].completed || run_edit_extends(c->doc, &c->st, i))
            run_fit_stage(c, i, ps);
    free(ps);
}
