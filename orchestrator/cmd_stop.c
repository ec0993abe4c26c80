/* baton stop RUN_DIR [--wait]: asks the baton run (or resume) working in a run directory
 * to stop, as a SIGTERM or Ctrl-C in its own terminal does: the process its lock file
 * records (run/run_holder.h), on this host and in this PID namespace, checked to hold that
 * lock file still, is sent SIGTERM (through a pidfd where the kernel has them, so that a
 * process that ended meanwhile and whose pid was reused is never signalled), marked as
 * baton stop's (RUN_HOLDER_STOP_VALUE). A run whose record says it is stopping already is
 * sent nothing: a second SIGTERM would kill its workers before their stop checkpoint. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "run/journal.h"
#include "run/run_dir.h"
#include "run/run_holder.h"
#include "util/buf.h"
#include "util/shquote.h"

#define STOP_NOT_RUNNING    3    /* no baton run works in RUN_DIR: nothing to stop */
#define STOP_WAIT_MS        100  /* --wait: how often the lock is tested */
#define STOP_PROGRESS_S     30   /* --wait: a line said this often while it waits */
#define STOP_RECORD_WAIT_MS 2000 /* a run starting writes its record this soon after its lock */
#define STOP_PGREP          "pgrep -af 'baton (run|resume)'"

static void stop_usage(FILE *f) {
    fprintf(f, "usage: baton stop RUN_DIR [--wait]\n\n"
               "Asks the baton run (or resume) working in RUN_DIR to stop, as SIGTERM or\n"
               "Ctrl-C in its own terminal does: its workers write a stop checkpoint and it\n"
               "exits 75; 'baton resume RUN_DIR' continues the run. The process is the one\n"
               "the run directory's lock file records (baton status names it); it must run\n"
               "on this host, in this PID namespace, and be yours. It is sent one SIGTERM;\n"
               "a run already stopping is sent nothing (a second SIGTERM, as from kill,\n"
               "would kill its workers at once, losing the stop checkpoint).\n\n"
               "  --wait   wait until it has let go of the run directory (its stop\n"
               "           checkpoint written), then show the run's status\n"
               "  --help   show this help\n\n"
               "Exit status: 0 asked to stop, or stopping already (with --wait: and it let\n"
               "go), 1 it could not be signalled (another user's process, one not recorded\n"
               "or not verified to hold the lock: said how to find it), 2 usage, RUN_DIR is\n"
               "not a run directory, or the run's process is on another host or in another\n"
               "PID namespace (said which), 3 no baton run is working in RUN_DIR.\n");
}

/* SIGTERM, marked as baton stop's, to the process pidfd fd, or to pid where there is no
 * pidfd or the kernel refuses to signal through one (ENOSYS; EPERM from a seccomp profile
 * or an LSM, where kill() is allowed): 0, or -1 with errno. */
static int stop_send(int fd, pid_t pid) {
    union sigval v = {.sival_int = RUN_HOLDER_STOP_VALUE};
    if (fd < 0) return sigqueue(pid, SIGTERM, v);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = SIGTERM;
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    si.si_value = v;
    if (pidfd_send_signal(fd, SIGTERM, &si, 0) == 0) return 0;
    if ((errno != ENOSYS && errno != EPERM) || kill(pid, 0) != 0) return -1;
    return sigqueue(pid, SIGTERM, v);
}

/* Whether the process (pidfd fd, or pid) has ended. */
static int stop_ended(int fd, pid_t pid) {
    int r = fd >= 0 ? pidfd_send_signal(fd, 0, NULL, 0) : kill(pid, 0);
    return r != 0 && errno == ESRCH;
}

/* SIGTERM to h's process, once it is checked (again, its pidfd open) to hold dir's lock
 * file: 0, or -1 with errno (ESRCH: it ended; EPERM: not yours; ESTALE: it does not hold
 * the lock file, or cannot be checked to). A pidfd refused (no pidfds, or EPERM from a
 * seccomp profile or an LSM: pidfd_open checks no permission) leaves the pid, checked the
 * same way. */
static int stop_signal(const run_holder *h, const char *dir) {
    int fd = pidfd_open(h->pid, 0); /* the process itself from here on, whatever its pid */
    if (fd < 0 && errno == ESRCH) return -1;
    int rc = -1, held = run_holder_has_lock(h, dir);
    errno = ESTALE;
    if (held == 1)
        rc = stop_send(fd, h->pid);
    else if (held == 0 && stop_ended(fd, h->pid))
        errno = ESRCH;
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
                "signalled; find the baton run holding the run directory with %s (or %s) and "
                "stop it with kill -TERM PID\n",
                dir, (long)h->pid, STOP_PGREP, stop_fuser(dir, &cmd));
    else
        fprintf(stderr, "baton stop: %s: cannot signal pid %ld: %s\n", dir, (long)h->pid,
                strerror(err));
    bt_buf_free(&cmd);
    return BT_EXIT_FAILURE;
}

/* A record on this host whose process cannot be checked to hold the lock file (its
 * /proc/PID/fd unreadable): not signalled, said; the exit status. */
static int stop_unverified(const run_holder *h, const char *dir) {
    if (kill(h->pid, 0) != 0 && (errno == EPERM || errno == ESRCH))
        return stop_failed(h, dir, errno);
    fprintf(stderr,
            "baton stop: %s: pid %ld, which the lock file records, cannot be checked to hold "
            "it (/proc/%ld/fd cannot be read): not signalled; find the baton run holding the "
            "run directory with %s and stop it with kill -TERM PID\n",
            dir, (long)h->pid, (long)h->pid, STOP_PGREP);
    return BT_EXIT_FAILURE;
}

/* Until no baton run holds dir (the one asked let go: it stopped, or it completed first),
 * a line every STOP_PROGRESS_S; then the run's status (baton status). */
static void stop_wait(const char *dir, const run_holder *h) {
    struct timespec nap = {0, STOP_WAIT_MS * 1000 * 1000};
    printf("baton stop: %s: waiting until it exits (its stop checkpoint can take minutes)\n", dir);
    fflush(stdout);
    for (long ms = 0; run_dir_busy(dir); ms += STOP_WAIT_MS) {
        nanosleep(&nap, NULL);
        if (ms > 0 && ms % (STOP_PROGRESS_S * 1000) == 0) {
            printf("baton stop: %s: still waiting for baton %s pid %ld to write its stop "
                   "checkpoint and exit (%ld s)\n",
                   dir, h->command, (long)h->pid, ms / 1000);
            fflush(stdout);
        }
    }
    printf("baton stop: %s: baton %s pid %ld let go of the run directory\n", dir, h->command,
           (long)h->pid);
    fflush(stdout);
    char *argv[] = {(char *)"status", (char *)dir, NULL};
    cmd_status(2, argv);
}

/* RUN_DIR checked: a directory (run_dir_check_arg), a run's (a journal or a lock file in
 * it). */
static int stop_check_dir(const char *dir) {
    char file[4200], lock[4200];
    bt_diag d;
    bt_diag_init(&d);
    if (run_dir_check_arg("stop", dir, &d) != 0) {
        cli_error("stop", &d, 0);
        return BT_EXIT_USAGE;
    }
    snprintf(file, sizeof file, "%s/%s", dir, JOURNAL_FILE);
    snprintf(lock, sizeof lock, "%s/lock", dir);
    if (access(file, F_OK) == 0) return 0;
    int err = errno;
    if (access(lock, F_OK) == 0 || run_dir_busy(dir)) return 0;
    if (err == EACCES) { /* another user's run directory, closed to others */
        fprintf(stderr,
                "baton stop: %s: cannot read: %s (another user's run directory: that user, "
                "or root, can stop its run)\n",
                file, strerror(err));
        return BT_EXIT_FAILURE;
    }
    fprintf(stderr, "baton stop: %s: not a run directory (no journal)\n", dir);
    return BT_EXIT_USAGE;
}

/* The holder of dir, its record waited for up to STOP_RECORD_WAIT_MS while the lock is
 * held and none is there (a run starting writes it milliseconds after taking the lock): 0,
 * or -1 when no baton run holds dir. */
static int stop_find(const char *dir, run_holder *h, run_holder_state *s) {
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int ms = 0;; ms += 20) {
        if (!run_dir_busy(dir)) return -1;
        *s = run_holder_find(dir, h);
        if ((*s != RUN_HOLDER_NONE && *s != RUN_HOLDER_GONE) || ms >= STOP_RECORD_WAIT_MS) return 0;
        nanosleep(&nap, NULL);
    }
}

/* The holder h (s) not signalled, said: not recorded, elsewhere, stopping already, not
 * verified; the exit status, or -1 when it is to be signalled. */
static int stop_refused(const char *dir, const run_holder *h, run_holder_state s, int wait) {
    bt_buf cmd;
    bt_buf_init(&cmd);
    int rc = BT_EXIT_FAILURE;
    char at[32];
    if (s == RUN_HOLDER_NONE || s == RUN_HOLDER_GONE) {
        fprintf(stderr,
                "baton stop: %s: a baton run holds it, but its process is not recorded (a "
                "baton older than this one, its lock file deleted, or one still starting): "
                "find it with %s (or %s), and stop it with kill -TERM PID\n",
                dir, STOP_PGREP, stop_fuser(dir, &cmd));
    } else if (h->stopping && s != RUN_HOLDER_NOT_HOLDER && s != RUN_HOLDER_UNVERIFIED) {
        run_holder_stop_time(h, at, sizeof at);
        printf("baton stop: %s: its baton %s is already stopping since %s (its workers write "
               "a stop checkpoint, then it exits): nothing sent%s",
               dir, h->command, at, s == RUN_HOLDER_HELD ? "" : "\n");
        if (s == RUN_HOLDER_HELD)
            printf(" (kill -TERM %ld kills its workers now, losing the stop checkpoint)\n",
                   (long)h->pid);
        fflush(stdout);
        if (wait) stop_wait(dir, h);
        rc = BT_EXIT_OK;
    } else if (s == RUN_HOLDER_OTHER_HOST || s == RUN_HOLDER_OTHER_NS) {
        char how[1200];
        run_holder_elsewhere(h, s, dir, how, sizeof how);
        if (s == RUN_HOLDER_OTHER_HOST)
            fprintf(stderr,
                    "baton stop: %s: its baton %s (pid %ld) runs on %s, not on this host: not "
                    "signalled; %s\n",
                    dir, h->command, (long)h->pid, h->host, how);
        else
            fprintf(stderr,
                    "baton stop: %s: its baton %s runs in another PID namespace (a container) "
                    "on this host, whose process ids are not this one's: not signalled; %s\n",
                    dir, h->command, how);
        rc = BT_EXIT_USAGE;
    } else if (s == RUN_HOLDER_NOT_HOLDER) {
        rc = stop_failed(h, dir, ESTALE);
    } else if (s == RUN_HOLDER_UNVERIFIED) {
        rc = stop_unverified(h, dir);
    } else {
        rc = -1;
    }
    bt_buf_free(&cmd);
    return rc;
}

static int stop_run(const char *dir, int wait) {
    int rc = stop_check_dir(dir);
    if (rc != 0) return rc;
    bt_buf cmd;
    bt_buf_init(&cmd);
    run_holder h;
    run_holder_state s = RUN_HOLDER_NONE;
    if (stop_find(dir, &h, &s) != 0) {
        printf("baton stop: %s: no baton run is working in it: nothing to stop (%s shows how "
               "the run stands)\n",
               dir, bt_shell_cmd(&cmd, "baton status", dir));
        rc = STOP_NOT_RUNNING;
    } else if ((rc = stop_refused(dir, &h, s, wait)) >= 0) {
        /* said */
    } else if (stop_signal(&h, dir) != 0) {
        rc = stop_failed(&h, dir, errno);
    } else {
        printf("baton stop: %s: asked baton %s pid %ld to stop (SIGTERM): its workers write a "
               "stop checkpoint, then it exits; %s continues the run\n",
               dir, h.command, (long)h.pid, bt_shell_cmd(&cmd, "baton resume", dir));
        fflush(stdout);
        rc = BT_EXIT_OK;
        if (wait) stop_wait(dir, &h);
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
        } else if (argv[i][0] != '-' && dir == NULL) { /* after "--": "./-d" (cli_split_eq) */
            dir = argv[i];
        } else {
            cli_bad_dir_arg("stop", dir, argv[i]);
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
