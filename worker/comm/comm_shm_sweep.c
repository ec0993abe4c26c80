/* Stale shared-memory segments of dead processes (comm_shm.h: comm_shm_sweep). */
#define _GNU_SOURCE
#include "comm_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_SWEEP_PREFIX "baton-comm-"

/* The creator's pid in "baton-comm-PID-...", or 0 when the name is not one of ours. */
static pid_t shm_sweep_pid(const char *name) {
    size_t n = strlen(SHM_SWEEP_PREFIX);
    if (strncmp(name, SHM_SWEEP_PREFIX, n) != 0 || name[n] < '1' || name[n] > '9') return 0;
    char *end;
    errno = 0;
    long pid = strtol(name + n, &end, 10);
    return errno == 0 && *end == '-' && pid > 0 && pid <= 0x3fffffff ? (pid_t)pid : 0;
}

/* A segment of this user, untouched for min_age_s, whose creator no longer exists. */
static int shm_sweep_stale(int dfd, const char *name, double min_age_s, time_t now) {
    pid_t pid = shm_sweep_pid(name);
    struct stat st;
    if (pid == 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) return 0;
    if ((double)(now - st.st_mtime) < min_age_s) return 0;
    return kill(pid, 0) != 0 && errno == ESRCH; /* EPERM: alive, another user's */
}

int comm_shm_sweep(double min_age_s) {
    DIR *d = opendir("/dev/shm");
    if (d == NULL) return 0;
    int removed = 0;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char name[300];
        if (!shm_sweep_stale(dirfd(d), e->d_name, min_age_s, now)) continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        removed += shm_unlink(name) == 0;
    }
    closedir(d);
    return removed;
}
