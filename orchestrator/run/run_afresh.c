/* A run continued in a fresh process (run_afresh.h). */
#define _GNU_SOURCE
#include "run_afresh.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "run_dir.h"
#include "util/err.h"
#include "util/exec_self.h"
#include "util/fd_close.h"
#include "util/shquote.h"

static int run_afresh_count(void) {
    const char *n = getenv("BATON_AFRESH");
    return n != NULL && n[0] >= '0' && n[0] <= '9' ? atoi(n) : 0;
}

void run_afresh_fault_wait(void) {
    const char *w = getenv("BATON_FAULT_AFRESH_WAIT");
    double s = w != NULL && run_afresh_count() > 0 ? atof(w) : 0;
    if (s <= 0) return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

int run_afresh_possible(void) {
    return bt_exec_self_runnable();
}

int run_afresh_allowed(void) {
    return run_afresh_count() < RUN_MAX_AFRESH;
}

/* The locks go along, open (not close-on-exec), named in RUN_DIR_LOCKS_ENV. */
static int run_afresh_locks(const run_afresh_to *to) {
    char fds[32];
    snprintf(fds, sizeof fds, "%d,%d", to->lock_fd, to->dir_lock_fd);
    if (to->lock_fd >= 0 && fcntl(to->lock_fd, F_SETFD, 0) != 0) return -1;
    if (to->dir_lock_fd >= 0 && fcntl(to->dir_lock_fd, F_SETFD, 0) != 0) return -1;
    return setenv(RUN_DIR_LOCKS_ENV, fds, 1);
}

/* bt_exec_self, or its failure the test hook stands in for (run_afresh.h). */
static void run_afresh_exec(char *const argv[]) {
    const char *f = getenv("BATON_FAULT_AFRESH_EXEC");
    if (f != NULL && f[0] != '\0')
        errno = EACCES;
    else
        bt_exec_self(argv);
}

int run_afresh(const char *prog, int quiet, const char *worker, const run_afresh_to *to) {
    char n[16];
    snprintf(n, sizeof n, "%d", to->progressed ? 1 : run_afresh_count() + 1);
    char *argv[8];
    int k = 0;
    argv[k++] = "baton", argv[k++] = "resume";
    if (quiet) argv[k++] = "--quiet";
    if (worker) argv[k++] = "--worker", argv[k++] = (char *)worker;
    argv[k++] = "--", argv[k++] = (char *)to->dir, argv[k] = NULL;
    fflush(NULL);
    /* none of this process's own descriptors (the stuck PMIx thread's sockets) goes
     * along; those its caller handed it do, as through any exec (fd_inherited.h) */
    bt_fd_cloexec_from(3);
    if (run_afresh_locks(to) == 0 && setenv("BATON_AFRESH", n, 1) == 0) run_afresh_exec(argv);
    int err = errno;
    bt_buf cmd;
    bt_buf_init(&cmd);
    fprintf(stderr, "baton %s: cannot continue in a fresh process (/proc/self/exe: %s); %s does\n",
            prog, strerror(err), bt_shell_cmd(&cmd, "baton resume", to->dir));
    bt_buf_free(&cmd);
    return BT_EXIT_FAILURE;
}
