/* LD_PRELOAD'ed by check-holder.sh's holder-pidfd case into baton stop, as
 * $BATON_TEST_PIDFD says: "open-eperm" pidfd_open(2) fails with EPERM (a seccomp profile or
 * an LSM refusing the syscall); "send-eperm" pidfd_send_signal(2) of a real signal fails
 * with EPERM; "open-kill" pidfd_open opens the pidfd, then kills that process (SIGKILL) and
 * waits (5 s at most) until it is reaped: a holder that ends between baton stop's reading
 * of its record and its signal. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fault(const char *mode) {
    const char *s = getenv("BATON_TEST_PIDFD");
    return s != NULL && strcmp(s, mode) == 0;
}

int pidfd_open(pid_t pid, unsigned int flags) {
    if (fault("open-eperm")) {
        errno = EPERM;
        return -1;
    }
    int fd = (int)syscall(SYS_pidfd_open, pid, flags);
    if (fd >= 0 && fault("open-kill") && kill(pid, SIGKILL) == 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/%ld", (long)pid);
        for (int i = 0; i < 500 && access(proc, F_OK) == 0; i++)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return fd;
}

int pidfd_send_signal(int pidfd, int sig, siginfo_t *info, unsigned int flags) {
    if (sig != 0 && fault("send-eperm")) {
        errno = EPERM;
        return -1;
    }
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, info, flags);
}
