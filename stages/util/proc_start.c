/* The process's inherited state put right at start (proc_start.h). */
#include "proc_start.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec_self.h"
#include "fd_inherited.h"
#include "stop_signals.h"

/* fd, closed, opened on /dev/null the other way round (stdin for writing, stdout and
 * stderr for reading, as glibc does for a set-user-ID program): the number is taken, and
 * using it fails with EBADF as a closed one would, so a write to a closed stdout is still
 * said (`baton --version >&-`: "write error: Bad file descriptor"). The lowest free number
 * is fd itself, as those below it are open already (the loop goes up from 0). */
static void proc_start_fd(int fd) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) return;
    int got = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (got >= 0 && got != fd) close(got); /* cannot be: fd was the lowest free one */
}

void bt_proc_start(void) {
    bt_exec_self_restore(); /* its name, where it executed itself again */
    for (int fd = 0; fd <= 2; fd++)
        proc_start_fd(fd);
    bt_fd_inherited_note(); /* the caller's descriptors, before any of ours is opened */
    bt_stop_signals_note(); /* the stop signals ignored at start (nohup: SIGHUP) */
    signal(SIGCHLD, SIG_DFL);
    mode_t old = umask(077);
    umask(old & 077);
}
