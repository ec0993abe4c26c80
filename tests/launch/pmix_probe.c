/* pmix_probe: a PMIx client for the launcher tests, written against boot.h.
 *
 *   pmix_probe --size N [--nodes K] [--tag TAG] [--fence-timeout S]
 *              [--fault-rank R (--exit-code C | --kill-self SIG | --abort C | --hang)
 *               [--at init|fence|end] [--ignore-term] [--linger]]
 *
 * Checks that rank, size, local rank/size, node id, node rank, host name and namespace
 * are what `baton launch -n N --nodes K` must assign (block distribution, computed here
 * independently), then puts a blob, fences, and checks every other rank's blob. On the
 * fault rank it misbehaves at the given point instead: before the put (init), between
 * commit and fence so the others wait in the fence (fence, the default), or after the
 * exchange, before finalize (end). With --linger the other ranks sleep at that point
 * (up to 60 s) instead of going on, so only the launcher can end them. --tag is
 * ignored: it marks the test's processes.
 *
 * Exit status: 0 all checks passed, 3 a check failed, 4 a bootstrap call failed,
 * 2 bad usage; the faults exit as asked. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "boot.h"

typedef struct probe_args {
    int size, nodes, fault_rank, exit_code, kill_sig, abort_status, hang, ignore_term, linger;
    double fence_timeout;
    const char *at;
} probe_args;

typedef struct probe_expect {
    int node, local_rank, local_size;
} probe_expect;

static int probe_usage(void) {
    fprintf(stderr, "usage: pmix_probe --size N [--nodes K] [--tag TAG] [--fence-timeout S] "
                    "[--fault-rank R (--exit-code C | --kill-self SIG | --abort C | --hang) "
                    "[--at init|fence|end] [--ignore-term] [--linger]]\n");
    return 2;
}

static int probe_parse(int argc, char **argv, probe_args *a) {
    *a = (probe_args){.nodes = 1,
                      .fault_rank = -1,
                      .exit_code = -1,
                      .abort_status = -1,
                      .fence_timeout = 60,
                      .at = "fence"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *flag = strcmp(o, "--hang") == 0          ? &a->hang
                    : strcmp(o, "--ignore-term") == 0 ? &a->ignore_term
                    : strcmp(o, "--linger") == 0      ? &a->linger
                                                      : NULL;
        if (flag != NULL) {
            *flag = 1;
            continue;
        }
        if (v == NULL) return -1;
        i++;
        if (strcmp(o, "--size") == 0)
            a->size = atoi(v);
        else if (strcmp(o, "--nodes") == 0)
            a->nodes = atoi(v);
        else if (strcmp(o, "--fault-rank") == 0)
            a->fault_rank = atoi(v);
        else if (strcmp(o, "--exit-code") == 0)
            a->exit_code = atoi(v);
        else if (strcmp(o, "--kill-self") == 0)
            a->kill_sig = atoi(v);
        else if (strcmp(o, "--abort") == 0)
            a->abort_status = atoi(v);
        else if (strcmp(o, "--fence-timeout") == 0)
            a->fence_timeout = atof(v);
        else if (strcmp(o, "--at") == 0)
            a->at = v;
        else if (strcmp(o, "--tag") != 0)
            return -1;
    }
    return a->size >= 1 && a->nodes >= 1 && a->nodes <= a->size ? 0 : -1;
}

/* Block distribution, computed by dealing the ranks out node by node. */
static probe_expect probe_expected(int rank, int size, int nodes) {
    probe_expect e = {0};
    int first = 0;
    for (int k = 0; k < nodes; k++) {
        int count = size / nodes + (k < size % nodes);
        if (rank < first + count) {
            e.node = k;
            e.local_rank = rank - first;
            e.local_size = count;
            return e;
        }
        first += count;
    }
    return e;
}

static int probe_check_int(const boot_info *b, const char *what, int got, int want) {
    if (got == want) return 0;
    fprintf(stderr, "pmix_probe rank %d: FAIL %s is %d, expected %d\n", b->rank, what, got, want);
    return 1;
}

static int probe_check_info(const boot_info *b, const probe_args *a) {
    probe_expect e = probe_expected(b->rank, a->size, a->nodes);
    char host[32];
    snprintf(host, sizeof host, "node%d", e.node);
    int bad = probe_check_int(b, "size", b->size, a->size);
    bad += probe_check_int(b, "number of nodes", b->num_nodes, a->nodes);
    bad += probe_check_int(b, "node id", b->node_id, e.node);
    bad += probe_check_int(b, "local rank", b->local_rank, e.local_rank);
    bad += probe_check_int(b, "local size", b->local_size, e.local_size);
    bad += probe_check_int(b, "node rank", b->node_rank, e.local_rank);
    if (strcmp(b->hostname, host) != 0) {
        fprintf(stderr, "pmix_probe rank %d: FAIL host name is '%s', expected '%s'\n", b->rank,
                b->hostname, host);
        bad++;
    }
    if (strncmp(b->nspace, "baton-", 6) != 0) {
        fprintf(stderr, "pmix_probe rank %d: FAIL namespace '%s'\n", b->rank, b->nspace);
        bad++;
    }
    return bad;
}

/* The fault, if this rank is the fault rank and this is the point. */
static void probe_fault(const boot_info *b, const probe_args *a, const char *point) {
    if (strcmp(a->at, point) != 0) return;
    if (b->rank != a->fault_rank) {
        for (int i = 0; a->linger && i < 60; i++)
            sleep(1);
        return;
    }
    fprintf(stderr, "pmix_probe rank %d: fault at %s\n", b->rank, point);
    if (a->exit_code >= 0) exit(a->exit_code);
    if (a->kill_sig > 0) {
        signal(a->kill_sig, SIG_DFL);
        kill(getpid(), a->kill_sig);
    }
    if (a->abort_status >= 0) {
        bt_diag d;
        bt_diag_init(&d);
        char msg[64];
        snprintf(msg, sizeof msg, "pmix_probe abort on rank %d", b->rank);
        if (boot_abort(a->abort_status, msg, &d) != 0) fprintf(stderr, "%s\n", d.msg);
        exit(a->abort_status); /* right after the abort: the launcher must still say abort */
    }
    while (a->hang)
        pause();
}

static void probe_blob(const boot_info *b, int rank, char *out, size_t cap) {
    snprintf(out, cap, "probe blob of rank %d in %s", rank, b->nspace);
}

static int probe_exchange(const boot_info *b, const probe_args *a) {
    bt_diag d;
    bt_diag_init(&d);
    char mine[320], want[320], got[320];
    probe_blob(b, b->rank, mine, sizeof mine);
    if (boot_put_blob(b, "probe", mine, strlen(mine) + 1, &d) != 0 || boot_commit(&d) != 0)
        goto fail;
    probe_fault(b, a, "fence");
    if (boot_fence(b, a->fence_timeout, &d) != 0) goto fail;
    int bad = 0;
    for (int r = 0; r < b->size; r++) {
        size_t len = 0;
        if (boot_get_blob(b, r, "probe", got, sizeof got, &len, 10, &d) != 0) goto fail;
        probe_blob(b, r, want, sizeof want);
        if (len != strlen(want) + 1 || memcmp(got, want, len) != 0) {
            fprintf(stderr, "pmix_probe rank %d: FAIL blob of rank %d is '%.*s'\n", b->rank, r,
                    (int)len, got);
            bad++;
        }
    }
    /* Too small a buffer is reported with the needed length. */
    size_t len = 0;
    if (boot_get_blob(b, (b->rank + 1) % b->size, "probe", got, 4, &len, 10, &d) != BT_ERANGE ||
        len != strlen(mine) + 1) {
        fprintf(stderr, "pmix_probe rank %d: FAIL short buffer not reported (len %zu)\n", b->rank,
                len);
        bad++;
    }
    return bad ? 3 : 0;
fail:
    fprintf(stderr, "pmix_probe rank %d: %s\n", b->rank, d.msg);
    return 4;
}

int main(int argc, char **argv) {
    probe_args a;
    if (probe_parse(argc, argv, &a) != 0) return probe_usage();
    bt_diag d;
    bt_diag_init(&d);
    boot_info b;
    if (boot_init(&b, &d) != 0) {
        fprintf(stderr, "pmix_probe: %s\n", d.msg);
        return 4;
    }
    if (a.ignore_term && b.rank == a.fault_rank) signal(SIGTERM, SIG_IGN);
    int rc = probe_check_info(&b, &a) ? 3 : 0;
    probe_fault(&b, &a, "init");
    if (rc == 0) rc = probe_exchange(&b, &a);
    probe_fault(&b, &a, "end");
    if (boot_finalize(&d) != 0) {
        fprintf(stderr, "pmix_probe rank %d: %s\n", b.rank, d.msg);
        if (rc == 0) rc = 4;
    }
    if (rc == 0)
        printf("pmix_probe rank %d/%d: node %d (%s) local %d/%d: ok\n", b.rank, b.size, b.node_id,
               b.hostname, b.local_rank, b.local_size);
    return rc;
}
