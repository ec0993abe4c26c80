/* baton stop RUN_DIR [--wait]: asks the baton run (or resume) working in a run directory
 * to stop, as a SIGTERM or Ctrl-C in its own terminal does: the process its lock file
 * records (run/run_holder.h), on this host, checked to hold that lock file still, is sent
 * SIGTERM with kill(2) (through a pidfd where the kernel has them, so that a process that
 * ended meanwhile and whose pid was reused is never signalled). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "run/journal.h"
#include "run/run_dir.h"
#include "run/run_holder.h"
#include "run/supervise.h"
#include "util/buf.h"
#include "util/shquote.h"

#define STOP_NOT_RUNNING 3 /* no baton run works in RUN_DIR: nothing to stop */
#define STOP_WAIT_MS     100

static void stop_usage(FILE *f) {
    fprintf(f, "usage: baton stop RUN_DIR [--wait]\n\n"
               "Asks the baton run (or resume) working in RUN_DIR to stop, as SIGTERM or\n"
               "Ctrl-C in its own terminal does: its workers write a stop checkpoint and it\n"
               "exits 75; 'baton resume RUN_DIR' continues the run. The process is the one\n"
               "the run directory's lock file records (baton status names it); it must run\n"
               "on this host, and be yours. It is sent SIGTERM, nothing else.\n\n"
               "  --wait   wait until it has let go of the run directory, then show the\n"
               "           run's status\n"
               "  --help   show this help\n\n"
               "Exit status: 0 asked to stop (with --wait: and it let go), 1 it could not be\n"
               "signalled (another user's process, or one not recorded: said how to find\n"
               "it), 2 usage, RUN_DIR is not a run directory, or the run's process is on\n"
               "another host (said which), 3 no baton run is working in RUN_DIR.\n");
}

/* SIGTERM to h's process, once it is checked to hold dir's lock file: 0, or -1 with errno
 * (ESRCH: it ended; EPERM: not yours; ESTALE: it does not hold the lock file). */
static int stop_signal(const run_holder *h, const char *dir) {
    int fd = pidfd_open(h->pid, 0); /* the process itself from here on, whatever its pid */
    if (fd < 0 && errno != ENOSYS) return -1;
    int rc = 0;
    if (run_holder_has_lock(h, dir) == 0) {
        errno = ESTALE;
        rc = -1;
    } else if (fd >= 0) {
        rc = pidfd_send_signal(fd, SIGTERM, NULL, 0);
    } else {
        rc = kill(h->pid, SIGTERM);
    }
    int err = errno;
    if (fd >= 0) close(fd);
    errno = err;
    return rc;
}

/* 'fuser -v RUN_DIR/lock', which names the process holding the lock file, into out. */
static const char *stop_fuser(const char *dir, bt_buf *out) {
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/lock", dir);
    return bt_shell_cmd(out, "fuser -v", lock);
}

/* Why h could not be signalled (err), said; the exit status. */
static int stop_failed(const run_holder *h, const char *dir, int err) {
    bt_buf cmd;
    bt_buf_init(&cmd);
    if (err == ESRCH) {
        printf("baton stop: %s: baton %s pid %ld ended meanwhile: nothing to stop\n", dir,
               h->command, (long)h->pid);
        return STOP_NOT_RUNNING;
    }
    if (err == EPERM)
        fprintf(stderr,
                "baton stop: %s: not permitted to signal baton %s pid %ld (another user's "
                "process: that user, or root, can stop it)\n",
                dir, h->command, (long)h->pid);
    else if (err == ESTALE)
        fprintf(stderr,
                "baton stop: %s: pid %ld, which the lock file records, does not hold it: not "
                "signalled; find the baton run holding the run directory with %s and stop it "
                "with kill -TERM PID\n",
                dir, (long)h->pid, stop_fuser(dir, &cmd));
    else
        fprintf(stderr, "baton stop: %s: cannot signal pid %ld: %s\n", dir, (long)h->pid,
                strerror(err));
    bt_buf_free(&cmd);
    return BT_EXIT_FAILURE;
}

/* Until no baton run holds dir (the one asked let go: it stopped, or it completed first). */
static void stop_wait(const char *dir) {
    struct timespec nap = {0, STOP_WAIT_MS * 1000 * 1000};
    while (run_dir_busy(dir))
        nanosleep(&nap, NULL);
    run_dir d = {.lock_fd = -1, .dir_lock_fd = -1};
    snprintf(d.path, sizeof d.path, "%s", dir);
    printf("baton stop: %s: the baton run let go of the run directory\n", dir);
    run_print_summary(&d);
}

/* RUN_DIR checked: a directory, a run's (a journal or a lock file in it). */
static int stop_check_dir(const char *dir) {
    struct stat st;
    char file[4200], lock[4200];
    int found = stat(dir, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "baton stop: %s: %s\n", dir,
                found ? "not a directory (baton stop takes a run directory)" : strerror(errno));
        return BT_EXIT_USAGE;
    }
    snprintf(file, sizeof file, "%s/%s", dir, JOURNAL_FILE);
    snprintf(lock, sizeof lock, "%s/lock", dir);
    if (access(file, F_OK) == 0 || access(lock, F_OK) == 0 || run_dir_busy(dir)) return 0;
    fprintf(stderr, "baton stop: %s: not a run directory (no journal)\n", dir);
    return BT_EXIT_USAGE;
}

static int stop_run(const char *dir, int wait) {
    int rc = stop_check_dir(dir);
    if (rc != 0) return rc;
    bt_buf cmd;
    bt_buf_init(&cmd);
    run_holder h;
    if (!run_dir_busy(dir)) {
        printf("baton stop: %s: no baton run is working in it: nothing to stop (%s shows how "
               "the run stands)\n",
               dir, bt_shell_cmd(&cmd, "baton status", dir));
        rc = STOP_NOT_RUNNING;
    } else if (!run_holder_find(dir, &h)) {
        fprintf(stderr,
                "baton stop: %s: a baton run holds it, but its process is not recorded (one "
                "starting this moment, a baton older than this one, or its lock file "
                "deleted): find it with %s or pgrep -af 'baton (run|resume)', and stop it "
                "with kill -TERM PID\n",
                dir, stop_fuser(dir, &cmd));
        rc = BT_EXIT_FAILURE;
    } else if (!run_holder_here(&h)) {
        fprintf(stderr,
                "baton stop: %s: its baton %s (pid %ld) runs on %s, not on this host: run %s "
                "there, or kill -TERM %ld on %s\n",
                dir, h.command, (long)h.pid, h.host, bt_shell_cmd(&cmd, "baton stop", dir),
                (long)h.pid, h.host);
        rc = BT_EXIT_USAGE;
    } else if (stop_signal(&h, dir) != 0) {
        rc = stop_failed(&h, dir, errno);
    } else {
        printf("baton stop: %s: asked baton %s pid %ld to stop (SIGTERM): its workers write a "
               "stop checkpoint, then it exits; %s continues the run\n",
               dir, h.command, (long)h.pid, bt_shell_cmd(&cmd, "baton resume", dir));
        if (wait) stop_wait(dir);
    }
    bt_buf_free(&cmd);
    return rc;
}

int cmd_stop(int argc, char **argv) {
    const char *dir = NULL;
    int wait = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            stop_usage(stdout);
            return BT_EXIT_OK;
        } else if (strcmp(argv[i], "--wait") == 0) {
            if (wait) return cli_twice("stop", "--wait");
            wait = 1;
        } else if (strcmp(argv[i], "--") == 0 && i + 1 < argc && dir == NULL && i + 2 == argc) {
            dir = argv[++i];
        } else if (argv[i][0] != '-' && dir == NULL) {
            dir = argv[i];
        } else {
            if (argv[i][0] == '-')
                fprintf(stderr, "baton stop: unknown option '%s'\n", argv[i]);
            else
                fprintf(stderr, "baton stop: one run directory at a time (got '%s' and '%s')\n",
                        dir, argv[i]);
            stop_usage(stderr);
            return BT_EXIT_USAGE;
        }
    }
    if (dir == NULL) {
        fprintf(stderr, "baton stop: no run directory given\n");
        stop_usage(stderr);
        return BT_EXIT_USAGE;
    }
    return stop_run(dir, wait);
}
