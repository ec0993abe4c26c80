/* How baton signals and cancels a Slurm step (orchestrator/launch/launch_slurm.h), with a
 * fake squeue and scancel first on PATH that log their arguments:
 *  - a stop's SIGTERM goes to the step's tasks (`scancel --signal=TERM JOB.STEP`, the step
 *    found by its name) and srun gets none (launch_slurm_signal returns 1); SIGKILL goes to
 *    the tasks through scancel and on to srun (returns 0), once per step;
 *  - squeue failing is tried twice, then said with how to cancel the step by hand, and a
 *    stop's SIGTERM then goes to srun (returns 0); a failing scancel names the step's id
 *    and the scancel command; no step of that name is nothing left to cancel, and a
 *    stop's SIGTERM then goes to srun. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fake_tools.h"
#include "launch_slurm.h"

static void step(launch_slurm *s, const char *name) {
    memset(s, 0, sizeof *s);
    snprintf(s->job_id, sizeof s->job_id, "12");
    snprintf(s->step_name, sizeof s->step_name, "%s", name);
}

static const char *listing = "printf '12.0 extern\\n12.3 baton-r-s02-a00\\n12.4 other\\n'";

int main(void) {
    fake_tools_init("bt-slurm-cancel");
    char got[4096], advice[2048];
    launch_slurm s;

    /* the stop: SIGTERM to the tasks of the step named, none to srun */
    script("squeue", listing);
    script("scancel", "exit 0");
    step(&s, "baton-r-s02-a00");
    CHECK(launch_slurm_signal(&s, SIGTERM) == 1);
    calls(got, sizeof got);
    CHECK(strstr(got, "scancel --quiet --signal=TERM 12.3\n") != NULL);
    CHECK(strstr(got, "12.4") == NULL && strstr(got, "12.0") == NULL);
    /* the grace ran out: SIGKILL to the tasks, and on to srun; once */
    CHECK(launch_slurm_signal(&s, SIGKILL) == 0);
    calls(got, sizeof got);
    CHECK(strstr(got, "scancel --quiet --signal=KILL 12.3\n") != NULL);
    CHECK(launch_slurm_cancel_step(&s, 1) == 0);
    calls(got, sizeof got);
    CHECK(got[0] == '\0');

    /* squeue fails: tried twice, then the advice says how to find the step */
    script("squeue", "echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1");
    step(&s, "baton-r-s02-a00");
    CHECK(launch_slurm_cancel_step(&s, 1) == BT_EIO);
    calls(got, sizeof got);
    CHECK(strstr(got, "squeue") != NULL && strstr(strstr(got, "squeue") + 1, "squeue") != NULL);
    CHECK(strstr(got, "scancel") == NULL);
    launch_slurm_cancel_advice(&s, advice, sizeof advice);
    fprintf(stderr, "squeue failing: %s\n", advice);
    CHECK(strstr(advice, "could not cancel step baton-r-s02-a00 of job 12 (") != NULL);
    CHECK(strstr(advice, "Socket timed out") != NULL);
    CHECK(strstr(advice, "squeue --steps --jobs=12") != NULL);
    CHECK(strstr(advice, "scancel --signal=KILL") != NULL);
    CHECK(launch_slurm_signal(&s, SIGTERM) == 0); /* srun gets it: the old way */
    calls(got, sizeof got);

    /* scancel fails: the step's id and the command */
    script("squeue", listing);
    script("scancel",
           "echo 'scancel: error: Kill job error on job id 12.3: Access denied' >&2; exit 1");
    step(&s, "baton-r-s02-a00");
    CHECK(launch_slurm_cancel_step(&s, 1) == BT_EIO);
    launch_slurm_cancel_advice(&s, advice, sizeof advice);
    fprintf(stderr, "scancel failing: %s\n", advice);
    CHECK(strstr(advice, "could not cancel step 12.3 (") != NULL);
    CHECK(strstr(advice, "('scancel --signal=KILL 12.3' failed (status 1): scancel: error") !=
          NULL);
    CHECK(strstr(advice, "Access denied") != NULL);
    CHECK(strstr(advice, "run 'scancel --signal=KILL 12.3'") != NULL);
    CHECK(launch_slurm_cancel_step(&s, 1) == BT_EIO); /* not marked killed: tried again */
    calls(got, sizeof got);

    /* no step of that name: nothing left to cancel (the step ended with srun), but a stop's
     * SIGTERM then goes to srun (a step not started yet) */
    script("scancel", "exit 0");
    step(&s, "baton-r-s09-a00");
    CHECK(launch_slurm_cancel_step(&s, 1) == 0);
    step(&s, "baton-r-s09-a00");
    CHECK(launch_slurm_signal(&s, SIGTERM) == 0);
    calls(got, sizeof got);
    CHECK(strstr(got, "scancel") == NULL);

    fake_tools_done();
    return check_status();
}
