/* Descriptors closed before exec, with or without close_range (fd_close.h). */
#define _GNU_SOURCE
#include "fd_close.h"

#include "fd_inherited.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#define FD_CLOSE_MAX   (1 << 20)
#define FD_CLOSE_FLOOR 1024
#define FD_CLOSE_SLACK 256 /* opened by other threads between the scan and the fork */

/* One past the highest descriptor /proc/self/fd lists (its own aside), 0 when none;
 * -1 when it cannot be read. */
static long fd_close_top(void) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return -1;
    long top = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end == '\0' && end != e->d_name && fd != dirfd(d) && fd >= top) top = fd + 1;
    }
    closedir(d);
    return top;
}

int bt_fd_close_limit(void) {
    if (close_range(~0U, ~0U, 0) == 0) return FD_CLOSE_FLOOR; /* there: no loop, no scan */
    long top = fd_close_top();
    if (top >= 0)
        return top + FD_CLOSE_SLACK < FD_CLOSE_FLOOR ? FD_CLOSE_FLOOR
               : top < INT_MAX - FD_CLOSE_SLACK      ? (int)top + FD_CLOSE_SLACK
                                                     : INT_MAX;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > FD_CLOSE_MAX)
        return FD_CLOSE_MAX;
    return rl.rlim_cur < 1024 ? 1024 : (int)rl.rlim_cur;
}

void bt_fd_close_span(unsigned lo, unsigned hi, int limit) {
    if (lo > hi || close_range(lo, hi, 0) == 0) return;
    for (unsigned fd = lo; fd <= hi && fd < (unsigned)limit; fd++)
        close((int)fd);
}

/* close_range's CLOSE_RANGE_CLOEXEC on lo and up, but for keep (ascending); -1 where it
 * is missing (ENOSYS, EINVAL before Linux 5.11). */
static int fd_cloexec_ranges(unsigned lo, const int *keep, int n) {
    for (int i = 0; i < n; i++) {
        unsigned k = (unsigned)keep[i];
        if (k < lo) continue;
        if (k > lo && close_range(lo, k - 1, CLOSE_RANGE_CLOEXEC) != 0) return -1;
        lo = k + 1;
    }
    return close_range(lo, ~0U, CLOSE_RANGE_CLOEXEC);
}

static int fd_kept(int fd, const int *keep, int n) {
    for (int i = 0; i < n; i++)
        if (keep[i] == fd) return 1;
    return 0;
}

void bt_fd_cloexec_from(int lo) {
    int keep[BT_FD_INHERITED_MAX];
    int n = bt_fd_inherited_list(keep);
    if (fd_cloexec_ranges((unsigned)lo, keep, n) == 0) return;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) {
        for (int fd = lo, limit = bt_fd_close_limit(); fd < limit; fd++)
            if (!fd_kept(fd, keep, n))
                fcntl(fd, F_SETFD, FD_CLOEXEC); /* set alone: FD_CLOEXEC is its only flag */
        return;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end == '\0' && end != e->d_name && fd >= lo && fd != dirfd(d) &&
            !fd_kept((int)fd, keep, n))
            fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    }
    closedir(d);
}
