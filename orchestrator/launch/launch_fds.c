/* The launcher's descriptors against RLIMIT_NOFILE (launch_fds.h). */
#include "launch_fds.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

/* Descriptors open in this process now (not counting the one that lists them). */
static long launch_fds_open(void) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return 64; /* no /proc: a guess at what a process of ours holds */
    long n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n > 0 ? n - 1 : 0;
}

long launch_fds_needed(int ranks, int per_rank, long others) {
    return launch_fds_open() + (long)ranks * per_rank + others + LAUNCH_FDS_STARTING;
}

static void launch_fds_limit(rlim_t v, char *out, size_t cap) {
    if (v == RLIM_INFINITY)
        snprintf(out, cap, "unlimited");
    else
        snprintf(out, cap, "%llu", (unsigned long long)v);
}

int launch_fds_check(int ranks, int per_rank, long others, char *note, size_t cap, bt_diag *diag) {
    struct rlimit rl;
    note[0] = '\0';
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0; /* nothing to judge by */
    long need = launch_fds_needed(ranks, per_rank, others);
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)need) return 0;
    char soft[32], hard[32];
    launch_fds_limit(rl.rlim_cur, soft, sizeof soft);
    launch_fds_limit(rl.rlim_max, hard, sizeof hard);
    if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)need) {
        struct rlimit up = {rl.rlim_max == RLIM_INFINITY ? (rlim_t)need : rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
            snprintf(note, cap,
                     "%d ranks need about %ld open files here, over the soft limit "
                     "(RLIMIT_NOFILE, ulimit -n) of %s: raised it to %llu (the hard limit %s)",
                     ranks, need, soft, (unsigned long long)up.rlim_cur, hard);
            return 0;
        }
        bt_diag_set(diag,
                    "%d ranks need about %ld open files here (%d per rank, %ld more "
                    "besides), but RLIMIT_NOFILE allows %s (soft; hard %s) and raising the soft "
                    "limit failed: %s; raise it (ulimit -n %ld) and run again",
                    ranks, need, per_rank, need - (long)ranks * per_rank, soft, hard,
                    strerror(errno), need);
        return BT_ERANGE;
    }
    bt_diag_set(diag,
                "%d ranks need about %ld open files here (%d per rank, %ld more "
                "besides), but RLIMIT_NOFILE allows %s (soft) and %s (hard): raise the hard "
                "limit (ulimit -Hn %ld as root, limits.conf, a container's --ulimit "
                "nofile=...) and run again, or run fewer ranks",
                ranks, need, per_rank, need - (long)ranks * per_rank, soft, hard, need);
    return BT_ERANGE;
}
