/* Which hosts of a failed attempt are lost (launch_slurm.h): Slurm's word on all of them
 * from one sinfo, and one probe step over as many hosts as are asked about. A query and a
 * step per host took hours at 16384 hosts; these take one slurmctld request each, and
 * Slurm starts a step's tasks on its hosts in a tree. Host names are looked up in a sorted
 * index of the hosts asked about (sinfo and the probe print one name a line). */
#define _GNU_SOURCE
#include <ctype.h>
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

/* A state of sinfo's (idle, down*, drained, mixed+drain) or scontrol's (DOWN+NOT_RESPONDING)
 * that says the host cannot run a step: down, draining or drained, failing, not responding. */
static int slurm_state_bad(const char *state) {
    char low[64];
    size_t i = 0;
    for (; state[i] && i + 1 < sizeof low; i++)
        low[i] = (char)tolower((unsigned char)state[i]);
    low[i] = '\0';
    return strstr(low, "down") || strstr(low, "drain") || strstr(low, "fail") ||
           strstr(low, "not_responding") || strchr(low, '*');
}

/* sinfo's lines "NAME STATE REASON..." into lost and why. */
static void slurm_judge_lines(const slurm_names *m, char *out, unsigned char *lost,
                              char (*why)[SLURM_WHY_MAX]) {
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char name[SLURM_HOST_MAX], state[64];
        int used = 0;
        if (sscanf(l, "%255s %63s %n", name, state, &used) != 2) continue;
        long k = slurm_names_find(m, name);
        if (k < 0 || lost[k] || !slurm_state_bad(state)) continue;
        const char *reason = l + used;
        int said = reason[0] && strcmp(reason, "none") != 0;
        lost[k] = 1;
        snprintf(why[k], SLURM_WHY_MAX, "Slurm has %s in state %s%s%.300s%s", name, state,
                 said ? " (reason: " : "", said ? reason : "", said ? ")" : "");
    }
}

int launch_slurm_judge(const launch_slurm *s, const uint32_t *idx, uint32_t n, unsigned char *lost,
                       char (*why)[SLURM_WHY_MAX], double timeout_s, char *note, size_t cap) {
    note[0] = '\0';
    for (uint32_t k = 0; k < n; k++) {
        lost[k] = launch_slurm_lost_has(s, s->hosts[idx[k]]);
        if (lost[k])
            snprintf(why[k], SLURM_WHY_MAX, "srun reported a node failure on %s", s->hosts[idx[k]]);
    }
    if (n == 0) return 0;
    /* a line a host (one per partition it is in): name, state, reason */
    size_t out_cap = (size_t)n * 2 * (SLURM_HOST_MAX + 128) + 65536; /* pages touched as written */
    size_t list_len = strlen(s->nodelist ? s->nodelist : "") + 16;
    char *out = malloc(out_cap), *nodes = malloc(list_len);
    slurm_names m = {0};
    int rc = -1;
    if (out == NULL || nodes == NULL || slurm_names_init(&m, s, idx, n) != 0) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    snprintf(nodes, list_len, "--nodes=%s", s->nodelist ? s->nodelist : "");
    char *argv[] = {"sinfo", "--all", "--noheader", "--Node", nodes, "--format=%N %T %E", NULL};
    int st = launch_slurm_exec(argv, out, out_cap, timeout_s);
    if (st != 0 || strlen(out) + 1 >= out_cap) {
        out[strcspn(out, "\n")] = '\0';
        if (st == 0)
            snprintf(note, cap, "'sinfo' printed more than %zu bytes", out_cap - 1);
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
 * words about a host go to its why. SLURM_PROBE_ENDING (srun's line in note) when srun
 * says the job is ending; last gets srun's last line. */
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
        if (launch_slurm_job_gone(l)) {
            snprintf(note, cap, "%.400s", l);
            return SLURM_PROBE_ENDING;
        }
        snprintf(last, last_cap, "%.300s", l);
        long k = slurm_probe_host_of(m, l);
        if (k >= 0) snprintf(why[k], SLURM_WHY_MAX, "a probe step: %.400s", l);
    }
    return 0;
}

/* What the step's failure says of a host that did not answer and srun did not name. */
static void slurm_probe_silent(const launch_slurm *s, uint32_t n, const char *host, int st,
                               double timeout_s, const char *last, char *why) {
    char end[64];
    if (st == 124)
        snprintf(end, sizeof end, "did not finish in %.0f s", timeout_s);
    else
        snprintf(end, sizeof end, "failed (status %d)", st);
    if (n == 1)
        snprintf(why, SLURM_WHY_MAX, "a probe step on %s %s%s%.300s", host, end,
                 last[0] ? ": " : "", last);
    else
        snprintf(why, SLURM_WHY_MAX,
                 "no answer from %s to a probe step on %u hosts of job %s, which %s%s%.250s", host,
                 n, s->job_id, end, last[0] ? ": " : "", last);
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
    char nodes[32], tasks[32], list[4200], last[320] = "";
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
    size_t out_cap = (size_t)n * (SLURM_HOST_MAX + 16) + 65536; /* pages touched as written */
    char *out = malloc(out_cap);
    slurm_names m = {0};
    int rc = -1;
    if (out == NULL || slurm_names_init(&m, s, idx, n) != 0) {
        snprintf(note, cap, "out of memory");
        goto done;
    }
    int st = launch_slurm_exec(argv, out, out_cap, timeout_s);
    rc = 0;
    if (st == 0) goto done; /* every task ran: every host answered */
    memset(failed, 1, n);
    for (uint32_t k = 0; k < n; k++)
        why[k][0] = '\0';
    rc = slurm_probe_lines(&m, out, failed, why, last, sizeof last, note, cap);
    for (uint32_t k = 0; k < n && rc == 0; k++)
        if (failed[k] && why[k][0] == '\0')
            slurm_probe_silent(s, n, s->hosts[idx[k]], st, timeout_s, last, why[k]);
done:
    free(m.order);
    free(out);
    return rc;
}
