/* How baton judges a failed attempt's hosts under Slurm (launch_slurm_judge,
 * launch_slurm_probe in orchestrator/launch/launch_slurm_probe.c), with a fake sinfo and
 * srun first on PATH that log their arguments:
 *  - one sinfo --local for the job's node list (SLURM_JOB_NODELIST as given): states in
 *    sinfo's words (down*, mixed*, failing, idle~) and scontrol's (DOWN+NOT_RESPONDING, a
 *    state longer than 63 characters) are lost on Slurm's word, drained, draining@, IDLE+DRAIN,
 *    a pending power down, idle, allocated, completing are not; srun's own node-failure
 *    reports are lost on srun's, also when sinfo fails (said in note); a host listed twice
 *    (two partitions) or not asked about changes nothing; a name that begins another's is
 *    not it; 240 KB of sinfo output (past the 74 KB once read for 11 hosts) read whole;
 *  - one probe step over all hosts asked about, their names in its host file: srun's exit 0
 *    is every host answering; a host that did not print its name failed: named where srun's
 *    line names it (also "Job credential revoked": a host's word, not the job's end), else
 *    silent with the step's end; a step cut off at its limit: the hosts that answered
 *    before it answered, the others silent ("did not finish in 1 s"); a line naming no host
 *    that says the job is ending is SLURM_PROBE_ENDING; a probe over one host says its name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fake_tools.h"
#include "util/clock.h"
#include "launch_slurm.h"

static char *hosts[] = {"node1", "node12", "node3", "gpu-a", "gpu-b", "gpu-c",
                        "gpu-d", "gpu-e",  "gpu-f", "gpu-g", "gpu-h"};
#define N_HOSTS (sizeof hosts / sizeof *hosts)

static void alloc(launch_slurm *s) {
    memset(s, 0, sizeof *s);
    snprintf(s->job_id, sizeof s->job_id, "77");
    s->hosts = hosts, s->n_hosts = (int)N_HOSTS;
    s->nodelist = "node[1,12,3],gpu-[a-h]";
    s->failed_task = -1;
}

static char why[N_HOSTS][SLURM_WHY_MAX];

static void want_verdicts(const char *what, const unsigned char *got, const unsigned char *want) {
    for (size_t k = 0; k < N_HOSTS; k++) {
        if (got[k] != want[k]) fprintf(stderr, "%s: %s: %d: %s\n", what, hosts[k], got[k], why[k]);
        CHECK(got[k] == want[k]);
    }
}

int main(void) {
    fake_tools_init("bt-slurm-probe");
    char got[4096], note[1024], file[512];
    launch_slurm s;
    unsigned char lost[N_HOSTS], failed[N_HOSTS];
    uint32_t all[N_HOSTS], some[] = {1, 3, 5};
    for (uint32_t k = 0; k < N_HOSTS; k++)
        all[k] = k;
    enum {
        S = SLURM_LOST_STATE,
        R = SLURM_LOST_SRUN,
        NA = SLURM_PROBE_NAMED,
        SI = SLURM_PROBE_SILENT
    };

    /* one sinfo: Slurm's words judged, node1 (whose name begins node12's) not node12 */
    script("sinfo", "printf 'node12 down* Not responding\\nnode1 idle none\\nnode3 "
                    "IDLE+DRAIN maintenance\\ngpu-a drained bad gpu\\ngpu-a drained bad gpu\\n"
                    "gpu-b mixed* none\\ngpu-c allocated none\\ngpu-d draining@ Reboot ASAP\\n"
                    "gpu-e idle~ none\\ngpu-f MIXED+POWER_DOWN none\\ngpu-g failing bad dimm\\n"
                    "gpu-h ALLOCATED+COMPLETING+REBOOT_REQUESTED+PLANNED+MAINT+NOT_RESPONDING "
                    "gone\\nother down* none\\n'");
    alloc(&s);
    snprintf(s.lost_hosts, sizeof s.lost_hosts, "gpu-c");
    CHECK(launch_slurm_judge(&s, all, N_HOSTS, lost, why, 10, note, sizeof note) == 0);
    calls(got, sizeof got);
    CHECK(strcmp(got, "sinfo --local --all --noheader --Node --nodes=node[1,12,3],gpu-[a-h] "
                      "--format=%N %T %E\n") == 0);
    unsigned char want[N_HOSTS] = {0, S, 0, 0, S, R, 0, S, 0, S, S};
    want_verdicts("sinfo", lost, want);
    CHECK(strcmp(why[1], "Slurm has node12 in state down* (reason: Not responding)") == 0);
    CHECK(strcmp(why[4], "Slurm has gpu-b in state mixed*") == 0);
    CHECK(strcmp(why[5], "srun reported a node failure on gpu-c") == 0);
    CHECK(strcmp(why[9], "Slurm has gpu-g in state failing (reason: bad dimm)") == 0);
    CHECK(strcmp(why[10], "Slurm has gpu-h in state "
                          "ALLOCATED+COMPLETING+REBOOT_REQUESTED+PLANNED+MAINT+NOT_RESPONDING "
                          "(reason: gone)") == 0);
    /* hosts not asked about: their lines change nothing */
    CHECK(launch_slurm_judge(&s, some, 3, lost, why, 10, note, sizeof note) == 0);
    CHECK(lost[0] == S && lost[1] == 0 && lost[2] == R);
    CHECK(strcmp(why[2], "srun reported a node failure on gpu-c") == 0);
    calls(got, sizeof got);
    /* 240 KB of lines: read whole, the last one counts */
    script("sinfo", "yes 'node1 idle none' | head -n 15000; echo 'node3 down* none'");
    CHECK(launch_slurm_judge(&s, all, N_HOSTS, lost, why, 10, note, sizeof note) == 0);
    if (note[0]) fprintf(stderr, "240 KB: %s\n", note);
    CHECK(lost[2] == S && lost[0] == 0);
    calls(got, sizeof got);

    /* sinfo failing: said, srun's reports still count */
    script("sinfo", "echo 'sinfo: error: Unable to contact slurm controller' >&2; exit 1");
    CHECK(launch_slurm_judge(&s, all, N_HOSTS, lost, why, 10, note, sizeof note) == -1);
    fprintf(stderr, "sinfo failing: %s\n", note);
    CHECK(strstr(note, "failed (status 1): sinfo: error: Unable to contact") != NULL);
    CHECK(lost[5] == R && lost[0] == 0 && lost[1] == 0);
    calls(got, sizeof got);

    /* a probe step over all hosts, its exit 0: all answered, one srun, the host file */
    snprintf(file, sizeof file, "%s/s00-a00.probe", dir);
    script("srun", "exit 0");
    CHECK(launch_slurm_probe(&s, file, all, N_HOSTS, 10, failed, why, note, sizeof note) == 0);
    for (size_t k = 0; k < N_HOSTS; k++)
        CHECK(failed[k] == 0);
    calls(got, sizeof got);
    char want_call[1024];
    snprintf(want_call, sizeof want_call,
             "srun --export=ALL --overlap --nodes=11 --ntasks=11 --ntasks-per-node=1 "
             "--nodelist=%s --time=1 --quiet --kill-on-bad-exit=0 --job-name=baton-probe "
             "printenv SLURMD_NODENAME\n",
             file);
    CHECK(strcmp(got, want_call) == 0);
    FILE *f = fopen(file, "r");
    size_t len = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[len] = '\0';
    if (f) fclose(f);
    CHECK(strcmp(got, "node1\nnode12\nnode3\ngpu-a\ngpu-b\ngpu-c\ngpu-d\ngpu-e\ngpu-f\ngpu-g\n"
                      "gpu-h\n") == 0);

    /* some hosts silent: srun's line naming one (whatever its words), the step's end for
     * the others */
    script("srun", "printf 'node1\\ngpu-a\\ngpu-e\\ngpu-f\\ngpu-g\\ngpu-h\\n'; echo 'srun: error: "
                   "Task launch for StepId=77.4 failed on node node12: Communication connection "
                   "failure' >&2\necho 'srun: error: Task launch for StepId=77.4 failed on node "
                   "gpu-b: Job credential revoked' >&2\nprintf 'gpu-c\\nnode3\\n'; echo 'srun: "
                   "error: gpu-d: task 6: Exited with exit code 1' >&2; exit 1");
    CHECK(launch_slurm_probe(&s, file, all, N_HOSTS, 10, failed, why, note, sizeof note) == 0);
    unsigned char want_failed[N_HOSTS] = {0, NA, 0, 0, NA, 0, SI, 0, 0, 0, 0};
    want_verdicts("partial", failed, want_failed);
    fprintf(stderr, "silent: %s\n", why[6]);
    CHECK(strcmp(why[1], "a probe step: srun: error: Task launch for StepId=77.4 failed on node "
                         "node12: Communication connection failure") == 0);
    CHECK(strcmp(why[4], "a probe step: srun: error: Task launch for StepId=77.4 failed on node "
                         "gpu-b: Job credential revoked") == 0);
    CHECK(strcmp(why[6], "no answer from gpu-d to a probe step on 11 hosts of job 77, which "
                         "failed (status 1): srun: error: gpu-d: task 6: Exited with exit code "
                         "1") == 0);
    CHECK(strcmp(note, "failed (status 1): srun: error: gpu-d: task 6: Exited with exit code 1") ==
          0);
    /* the step cut off at its limit: who answered before it, answered; the others silent */
    script("srun", "printf 'node1\\nnode12\\ngpu-h\\n'; exec sleep 20");
    double t0 = bt_clock_now();
    CHECK(launch_slurm_probe(&s, file, all, N_HOSTS, 1, failed, why, note, sizeof note) == 0);
    CHECK(bt_clock_now() - t0 < 5);
    unsigned char want_cut[N_HOSTS] = {0, 0, SI, SI, SI, SI, SI, SI, SI, SI, 0};
    want_verdicts("cut off", failed, want_cut);
    CHECK(strcmp(note, "did not finish in 1 s") == 0);
    CHECK(strcmp(why[2], "no answer from node3 to a probe step on 11 hosts of job 77, which did "
                         "not finish in 1 s") == 0);
    /* one host: said by its name */
    script("srun", "echo 'srun: error: Unable to create step for job 77: Requested node "
                   "configuration is not available' >&2; exit 1");
    CHECK(launch_slurm_probe(&s, file, some + 1, 1, 10, failed, why, note, sizeof note) == 0);
    CHECK(failed[0] == SI);
    CHECK(strcmp(why[0], "a probe step on gpu-a failed (status 1): srun: error: Unable to create "
                         "step for job 77: Requested node configuration is not available") == 0);
    /* the job ending: no verdict */
    script("srun", "echo 'srun: error: Unable to create step for job 77: Job/step already "
                   "completing or completed' >&2; exit 1");
    CHECK(launch_slurm_probe(&s, file, all, N_HOSTS, 10, failed, why, note, sizeof note) ==
          SLURM_PROBE_ENDING);
    CHECK(strstr(note, "already completing") != NULL);
    calls(got, sizeof got);

    fake_tools_done();
    return check_status();
}
