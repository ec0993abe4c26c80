/* bt_cleanup_exit's decision (stages/util/cleanup.h), each case in a child process of
 * its own (the registry and the caught signal are per process): a signal noted after the
 * command completed (status 0) leaves the output and exit status 0; a signal with a
 * failure removes what is registered and dies of it; a failure alone removes it and
 * returns the status. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/cleanup.h"

/* Runs one command's end in a child: registers path (a file it creates), raises sig
 * (0: none) and exits with what bt_cleanup_exit(status) returns. The wait status. */
static int child_end(const char *path, int sig, int status) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen(path, "w");
        if (f == NULL || fclose(f) != 0) _exit(99);
        /* bt_cleanup_install keeps a signal the process was started ignoring (a
         * background job of a script ignores SIGINT, nohup SIGHUP): this test's are not */
        signal(SIGINT, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGHUP, SIG_DFL);
        signal(SIGXFSZ, SIG_DFL);
        bt_cleanup_install();
        if (bt_cleanup_add(path, BT_CLEANUP_FILE) != 0) _exit(98);
        if (sig != 0) raise(sig);
        if (bt_cleanup_signal() != sig) _exit(97);
        _exit(bt_cleanup_exit(status));
    }
    int ws = -1;
    CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid);
    return ws;
}

int main(void) {
    char dir[] = "/tmp/baton-test-cleanup.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/out", dir);

    /* completed, then interrupted: exit 0, the output kept */
    int ws = child_end(path, SIGINT, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    CHECK(access(path, F_OK) == 0);
    unlink(path);
    ws = child_end(path, SIGTERM, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    CHECK(access(path, F_OK) == 0);
    unlink(path);

    /* completed, but a write it did not check went past the file size limit: kept, yet
     * dead of SIGXFSZ (no exit 0 over a cut-short write) */
    ws = child_end(path, SIGXFSZ, 0);
    CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGXFSZ);
    CHECK(access(path, F_OK) == 0);
    unlink(path);

    /* failed after a signal: the registered path removed, dead of that signal */
    ws = child_end(path, SIGHUP, 1);
    CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGHUP);
    CHECK(access(path, F_OK) != 0);

    /* failed without a signal: removed, the status returned */
    ws = child_end(path, 0, 2);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 2);
    CHECK(access(path, F_OK) != 0);

    /* completed without a signal: kept, 0 */
    ws = child_end(path, 0, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    CHECK(access(path, F_OK) == 0);
    unlink(path);
    rmdir(dir);
    return check_status();
}
