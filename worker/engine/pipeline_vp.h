/* Running the interleaved 1F1B schedule (stages/pipe_schedule.h, which makes each stage's
 * list of actions; the planner counts its buffers from the same lists) on a pipeline's
 * group: transfers on the communication queue where pipeline_set_queue made one, as
 * pipeline_run_1f1b's (pipeline.h). */
#ifndef BATON_PIPELINE_VP_H
#define BATON_PIPELINE_VP_H

#include "comm.h"
#include "pipe_schedule.h"
#include "pipeline.h"
#include "util/err.h"

/* Runs s on p's group (a collective over it: every stage runs its own list). A failed
 * transfer returns BT_EIO with diag naming it; a failed computation its code. */
int pipeline_vp_run(pipeline *p, const pipe_schedule *s, const pipeline_stage *st, bt_diag *diag);

#endif
