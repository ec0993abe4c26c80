/* Reading a recipe file's bytes once (recipe_load.h: recipe_read_file), from whatever its
 * path names: a file, or a pipe or FIFO (`envsubst < t.yaml | baton run /dev/stdin`,
 * `baton run <(...)`, a named pipe), which gives its bytes once only.
 *
 * `baton run` blocks SIGINT, SIGTERM and SIGHUP from its first code on, so that one that
 * comes while the recipe is checked is a stop. Opening a FIFO waits for a writer, and
 * reading a pipe for its writer to close it, as long as that takes: blocked, those
 * signals could not end that wait (only SIGKILL could). So what may wait is opened and
 * read with them unblocked, and a stop then ends baton as it ends any other reader, before
 * anything is made (so does one that came before and waits blocked), even where SIGINT or
 * SIGTERM was ignored: blocked, baton run takes it as a stop all the same. A SIGHUP
 * ignored at start (nohup) is no stop and stays ignored (stop_signals.h). What is a
 * regular file is opened O_NONBLOCK (a FIFO put in its place since the stat cannot wait
 * then) and, should it be no regular file after all, opened again as one that may wait. */
#define _GNU_SOURCE /* O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recipe_load.h"
#include "util/stop_signals.h"

/* Whether reading a file of mode m may wait for a writer (a directory fails to read). */
static int read_may_wait(mode_t m) {
    return !S_ISREG(m) && !S_ISDIR(m);
}

/* The stop signals unblocked for a wait. One that was ignored at start but blocked
 * (SIGINT or SIGTERM: a background job of a shell without job control starts with SIGINT
 * ignored) is a stop for baton run all the same (the signalfd reads it, blocked), so it is
 * set to SIG_DFL for good: for the wait it ends baton as its default does, rather than
 * being dropped unblocked; blocked again after, its disposition makes no difference, and
 * SIG_IGN put back would throw away one that came meanwhile. The ranks get it ignored
 * again, as they would have inherited it (bt_stop_signals_child). A SIGHUP ignored at
 * start (nohup) is no stop signal (stop_signals.h): it is left as it is. old: the mask
 * before, to put back. */
static void read_wait_begin(sigset_t *old) {
    sigset_t stop, cur;
    bt_stop_signals(&stop);
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigismember(&stop, sig) != 1 || sigismember(&cur, sig) != 1) continue;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) signal(sig, SIG_DFL);
    }
    pthread_sigmask(SIG_UNBLOCK, &stop, old);
}

/* Opens path for reading: -1 with errno on failure. *waits: opened as a file that may
 * wait, with the stop signals unblocked (read_wait_begin; *old: the mask to put back). */
static int read_open(const char *path, int *waits, sigset_t *old) {
    struct stat st;
    *waits = stat(path, &st) == 0 && read_may_wait(st.st_mode);
    for (;;) {
        if (*waits) read_wait_begin(old);
        int fd;
        do
            fd = open(path, O_RDONLY | O_CLOEXEC | (*waits ? 0 : O_NONBLOCK));
        while (fd < 0 && errno == EINTR);
        if (*waits) return fd;
        /* not a regular file after all (a FIFO put there since the stat), or a lease
         * another process holds on it, which O_NONBLOCK does not wait for */
        int again =
            fd < 0 ? errno == EWOULDBLOCK : fstat(fd, &st) == 0 && read_may_wait(st.st_mode);
        if (!again) return fd;
        if (fd >= 0) close(fd);
        *waits = 1;
    }
}

/* Every byte of fd, at most RECIPE_MAX_BYTES + 1, into *data; -1 with errno on failure. */
static int read_all(int fd, char **data, size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return -1;
    for (;;) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;
        n += (size_t)got;
        if (got == 0 || n > RECIPE_MAX_BYTES) {
            *data = buf;
            *len = n;
            return 0;
        }
        if (n < cap) continue;
        size_t want = 2 * cap > RECIPE_MAX_BYTES + 1 ? RECIPE_MAX_BYTES + 1 : 2 * cap;
        char *p = realloc(buf, want);
        if (p == NULL) break;
        buf = p;
        cap = want;
    }
    int err = errno;
    free(buf);
    errno = err;
    return -1;
}

int recipe_read_file(const char *path, char **data, size_t *len, int *once, bt_diag *diag) {
    *data = NULL;
    *len = 0;
    int waits;
    sigset_t old;
    int fd = read_open(path, &waits, &old);
    if (once != NULL) *once = waits;
    int err = errno, rc = 0;
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(err));
        rc = err == ENOENT ? BT_ENOENT : BT_EIO;
    } else if (read_all(fd, data, len) != 0 && (err = errno) == ENOMEM) {
        bt_diag_set(diag, "%s: out of memory", path);
        rc = BT_ENOMEM;
    } else if (*data == NULL) {
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(err));
        rc = BT_EIO;
    }
    if (fd >= 0) close(fd);
    if (waits) pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
