/* Which hosts of a failed attempt are lost (launch_slurm.h): Slurm's word on all of them
 * from one sinfo, and one probe step over as many hosts as are asked about. A query and a
 * step per host took hours at 16384 hosts; these take one slurmctld request each, and
 * Slurm starts a step's tasks on its hosts in a tree. Host names are looked up in a sorted
 * index of the hosts asked about (sinfo and the probe print one name a line). */
#define _GNU_SOURCE
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_slurm.h"

/* The hosts of logical nodes idx[0..n), by name: order sorts 0..n by host name. */
typedef struct {
    const launch_slurm *s;
    const uint32_t *idx;
    uint32_t n;
    uint32_t *order;
} slurm_names;

static const char *slurm_name_at(const slurm_names *m, uint32_t k) {
    return m->s->hosts[m->idx[k]];
}

static int slurm_names_cmp(const void *a, const void *b, void *arg) {
    const slurm_names *m = arg;
    return strcmp(slurm_name_at(m, *(const uint32_t *)a), slurm_name_at(m, *(const uint32_t *)b));
}

static int slurm_names_init(slurm_names *m, const launch_slurm *s, const uint32_t *idx,
                            uint32_t n) {
    m->s = s, m->idx = idx, m->n = n;
    if ((m->order = malloc((n ? n : 1) * sizeof *m->order)) == NULL) return -1;
    for (uint32_t k = 0; k < n; k++)
        m->order[k] = k;
    qsort_r(m->order, n, sizeof *m->order, slurm_names_cmp, m);
    return 0;
}

/* k whose host is name, or -1. */
static long slurm_names_find(const slurm_names *m, const char *name) {
    uint32_t lo = 0, hi = m->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(slurm_name_at(m, m->order[mid]), name);
        if (c == 0) return m->order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Whether a state of sinfo's (idle, down*, idle~, mixed-) or scontrol's
 * (DOWN+NOT_RESPONDING, IDLE+POWERED_DOWN) says the host cannot run a step: down, failing,
 * not responding ('*'), powered down or powering down ('~', '%'). Not drain: a draining
 * host runs its job's steps (and `scontrol reboot ASAP` drains them all), a drained one
 * runs nothing of it; not a pending power down ('!', POWER_DOWN), done once it is idle. */
static int slurm_state_bad(const char *state, size_t len) {
    static const char *bad[] = {"down",       "fail",         "failing",      "not_responding",
                                "no_respond", "powered_down", "powering_down"};
    for (size_t i = 0; i < len;) {
        size_t w = strcspn(state + i, "+"), end = w;
        if (w > len - i) w = end = len - i;
        while (end > 0 && strchr("*~#!%$@^-", state[i + end - 1])) {
            if (strchr("*~%", state[i + end - 1])) return 1;
            end--;
        }
        for (size_t b = 0; b < sizeof bad / sizeof *bad; b++)
            if (strlen(bad[b]) == end && strncasecmp(state + i, bad[b], end) == 0) return 1;
        i += w + 1;
    }
    return 0;
}

/* sinfo's lines "NAME STATE REASON..." into lost and why (SLURM_LOST_STATE), for the hosts
 * not already judged. */
static void slurm_judge_lines(const slurm_names *m, char *out, unsigned char *lost,
                              char (*why)[SLURM_WHY_MAX]) {
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char name[SLURM_HOST_MAX];
        int at = 0;
        if (sscanf(l, "%255s %n", name, &at) != 1 || at == 0) continue;
        const char *state = l + at;
        size_t len = strcspn(state, " \t");
        long k = slurm_names_find(m, name);
        if (k < 0 || lost[k] || len == 0 || !slurm_state_bad(state, len)) continue;
        const char *reason = state + len + strspn(state + len, " \t");
        int said = reason[0] && strcmp(reason, "none") != 0;
        lost[k] = SLURM_LOST_STATE;
        snprintf(why[k], SLURM_WHY_MAX, "Slurm has %s in state %.*s%s%.300s%s", name,
                 (int)(len < 128 ? len : 128), state, said ? " (reason: " : "", said ? reason : "",
                 said ? ")" : "");
    }
}

/* sinfo's output at most: a line a host of the job a partition it is in (64 of them), of a
 * name, a state and a reason; read as it comes (pages touched as written). */
static size_t slurm_judge_max(const launch_slurm *s) {
    return (size_t)(s->n_hosts > 0 ? s->n_hosts : 1) * 64 * (SLURM_HOST_MAX + 512) + 65536;
}

int launch_slurm_judge(const launch_slurm *s, const uint32_t *idx, uint32_t n, unsigned char *lost,
                       char (*why)[SLURM_WHY_MAX], double timeout_s, char *note, size_t cap) {
    note[0] = '\0';
    for (uint32_t k = 0; k < n; k++) {
        lost[k] = launch_slurm_lost_has(s, s->hosts[idx[k]]) ? SLURM_LOST_SRUN : 0;
        if (lost[k])
            snprintf(why[k], SLURM_WHY_MAX, "srun reported a node failure on %s", s->hosts[idx[k]]);
    }
    if (n == 0) return 0;
    size_t list_len = strlen(s->nodelist ? s->nodelist : "") + 16, max = slurm_judge_max(s);
    char *out = NULL, *nodes = malloc(list_len);
    slurm_names m = {0};
    int rc = -1;
    if (nodes == NULL || slurm_names_init(&m, s, idx, n) != 0) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    snprintf(nodes, list_len, "--nodes=%s", s->nodelist ? s->nodelist : "");
    /* --local: this cluster's hosts alone, also in a federation that shows them all */
    char *argv[] = {"sinfo", "--local",           "--all", "--noheader", "--Node",
                    nodes,   "--format=%N %T %E", NULL};
    int st = launch_slurm_exec_grow(argv, &out, max, timeout_s);
    if (out == NULL) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    if (st != 0 || strlen(out) + 1 >= max) {
        out[strcspn(out, "\n")] = '\0';
        if (st == 0)
            snprintf(note, cap, "'sinfo' printed more than %zu bytes", max - 1);
        else if (st == 124)
            snprintf(note, cap, "'sinfo --Node' did not answer in %.0f s", timeout_s);
        else
            snprintf(note, cap, "'sinfo --Node' failed (status %d)%s%.300s", st, out[0] ? ": " : "",
                     out);
        goto done;
    }
    slurm_judge_lines(&m, out, lost, why);
    rc = 0;
done:
    free(m.order);
    free(nodes);
    free(out);
    return rc;
}

/* srun's line about one host of the probe ("Task launch for StepId=J.S failed on node
 * HOST: WHY", "Node failure on HOST"): its k, or -1. */
static long slurm_probe_host_of(const slurm_names *m, const char *line) {
    char host[SLURM_HOST_MAX];
    const char *p = strstr(line, "failed on node ");
    if (p && sscanf(p, "failed on node %255[^:\n]", host) == 1) return slurm_names_find(m, host);
    p = strstr(line, "Node failure on ");
    if (p && sscanf(p, "Node failure on %255s", host) == 1) return slurm_names_find(m, host);
    return -1;
}

/* The probe's output: the hosts that printed their name answered (failed[k] = 0); srun's
 * line naming a host is evidence about that host alone (SLURM_PROBE_NAMED, the line in its
 * why), whatever its words (a host's own "Job credential revoked" does not end the job).
 * SLURM_PROBE_ENDING (srun's line in note) when a line naming no host says the job is
 * ending; last gets srun's last line. */
static int slurm_probe_lines(const slurm_names *m, char *out, unsigned char *failed,
                             char (*why)[SLURM_WHY_MAX], char *last, size_t last_cap, char *note,
                             size_t cap) {
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "srun: ", 6) != 0) {
            char name[SLURM_HOST_MAX];
            long k = sscanf(l, "%255s", name) == 1 ? slurm_names_find(m, name) : -1;
            if (k >= 0) failed[k] = 0;
            continue;
        }
        long k = slurm_probe_host_of(m, l);
        if (k >= 0) {
            if (failed[k]) failed[k] = SLURM_PROBE_NAMED;
            if (failed[k]) snprintf(why[k], SLURM_WHY_MAX, "a probe step: %.400s", l);
            continue;
        }
        if (launch_slurm_job_gone(l)) {
            snprintf(note, cap, "%.400s", l);
            return SLURM_PROBE_ENDING;
        }
        snprintf(last, last_cap, "%.300s", l);
    }
    return 0;
}

/* How the step ended, when it failed ("did not finish in 19 s: LAST"). */
static void slurm_probe_end(int st, double timeout_s, const char *last, char *end, size_t cap) {
    if (st == 124)
        snprintf(end, cap, "did not finish in %.0f s%s%.300s", timeout_s, last[0] ? ": " : "",
                 last);
    else
        snprintf(end, cap, "failed (status %d)%s%.300s", st, last[0] ? ": " : "", last);
}

/* What the step's end says of a host that did not answer and srun did not name. */
static void slurm_probe_silent(const launch_slurm *s, uint32_t n, const char *host, const char *end,
                               char *why) {
    if (n == 1)
        snprintf(why, SLURM_WHY_MAX, "a probe step on %s %.400s", host, end);
    else
        snprintf(why, SLURM_WHY_MAX,
                 "no answer from %s to a probe step on %u hosts of job %s, which %.350s", host, n,
                 s->job_id, end);
}

int launch_slurm_probe(launch_slurm *s, const char *path, const uint32_t *idx, uint32_t n,
                       double timeout_s, unsigned char *failed, char (*why)[SLURM_WHY_MAX],
                       char *note, size_t cap) {
    note[0] = '\0';
    memset(failed, 0, n);
    if (n == 0) return 0;
    bt_diag d;
    bt_diag_init(&d);
    if (launch_slurm_hosts_file(s, path, idx, n, &d) < 0) {
        snprintf(note, cap, "%s", d.msg);
        return -1;
    }
    char nodes[32], tasks[32], list[4200], last[320] = "", end[400];
    snprintf(nodes, sizeof nodes, "--nodes=%u", n);
    snprintf(tasks, sizeof tasks, "--ntasks=%u", n);
    snprintf(list, sizeof list, "--nodelist=%s", path);
    /* --export=ALL, as the attempts' steps: PATH finds printenv whatever the job's sbatch
     * --export; SLURMD_NODENAME is set by slurmd for each task: its host's name */
    char *argv[] = {"srun",
                    "--export=ALL",
                    "--overlap",
                    nodes,
                    tasks,
                    "--ntasks-per-node=1",
                    list,
                    "--time=1",
                    "--quiet",
                    "--kill-on-bad-exit=0",
                    "--job-name=baton-probe",
                    "printenv",
                    "SLURMD_NODENAME",
                    NULL};
    /* a name, or srun's lines, a host; read as it comes (pages touched as written) */
    size_t max = (size_t)n * 4 * (SLURM_HOST_MAX + 512) + 65536;
    char *out = NULL;
    slurm_names m = {0};
    int rc = -1;
    if (slurm_names_init(&m, s, idx, n) != 0) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    int st = launch_slurm_exec_grow(argv, &out, max, timeout_s);
    if (out == NULL) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    rc = 0;
    if (st == 0) goto done; /* every task ran: every host answered */
    memset(failed, SLURM_PROBE_SILENT, n);
    for (uint32_t k = 0; k < n; k++)
        why[k][0] = '\0';
    rc = slurm_probe_lines(&m, out, failed, why, last, sizeof last, note, cap);
    if (rc != 0) goto done;
    slurm_probe_end(st, timeout_s, last, end, sizeof end);
    snprintf(note, cap, "%s", end);
    for (uint32_t k = 0; k < n; k++)
        if (failed[k] == SLURM_PROBE_SILENT)
            slurm_probe_silent(s, n, s->hosts[idx[k]], end, why[k]);
done:
    free(m.order);
    free(out);
    return rc;
}
