/* A run continued in a fresh process (run_afresh.h). */
#define _GNU_SOURCE
#include "run_afresh.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fd_close.h"
#include "util/shquote.h"

static int run_afresh_count(void) {
    const char *n = getenv("BATON_AFRESH");
    return n != NULL && n[0] >= '0' && n[0] <= '9' ? atoi(n) : 0;
}

int run_afresh_allowed(void) {
    return run_afresh_count() < RUN_MAX_AFRESH;
}

int run_afresh(const char *prog, int quiet, const char *worker, const char *run_dir) {
    char n[16];
    snprintf(n, sizeof n, "%d", run_afresh_count() + 1);
    char *argv[8];
    int k = 0;
    argv[k++] = "baton", argv[k++] = "resume";
    if (quiet) argv[k++] = "--quiet";
    if (worker) argv[k++] = "--worker", argv[k++] = (char *)worker;
    argv[k++] = "--", argv[k++] = (char *)run_dir, argv[k] = NULL;
    fflush(NULL);
    /* none of this process's descriptors (the stuck PMIx thread's sockets) goes along */
    bt_fd_cloexec_from(3);
    if (setenv("BATON_AFRESH", n, 1) == 0) execv("/proc/self/exe", argv);
    int err = errno;
    bt_buf cmd;
    bt_buf_init(&cmd);
    fprintf(stderr, "baton %s: cannot continue in a fresh process (/proc/self/exe: %s); %s does\n",
            prog, strerror(err), bt_shell_cmd(&cmd, "baton resume", run_dir));
    bt_buf_free(&cmd);
    return BT_EXIT_FAILURE;
}
