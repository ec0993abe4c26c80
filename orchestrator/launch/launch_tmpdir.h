/* The launch server's private temp dir: TMPDIR/baton-launch-<pid>-XXXXXX, mode 0700
 * (PMIx's server dir and the jobs' rendezvous files live there). The server holds a lock
 * on the file `lock` in it for as long as it lives, and removes the dir when it closes; one
 * whose process was killed (kill -9 of `baton run`) cannot, so the next server sharing
 * TMPDIR removes the dirs whose lock it can take, whatever PID namespace made them. */
#ifndef BATON_LAUNCH_TMPDIR_H
#define BATON_LAUNCH_TMPDIR_H

#include <stddef.h>

#include "util/err.h"

/* Whether $TMPDIR (or /tmp) is a directory this user can create the dir in: checked
 * before anything is made, so that a stale TMPDIR (a finished job's scratch) is a clear
 * usage error naming it. BT_EINVAL with the message. */
int launch_tmpdir_check(bt_diag *diag);

/* Creates the dir, its lock file locked, and writes its path to out and the lock's
 * descriptor (close-on-exec; -1 where the file system has no flock) to *lock_fd;
 * BT_EINVAL (TMPDIR too long) or BT_EIO with diag set, out "" then. */
int launch_tmpdir_make(char *out, size_t cap, int *lock_fd, bt_diag *diag);

/* Checks that dir (launch_tmpdir_make's) is still there as an attempt starts, and makes it
 * again (0700, locked) where something removed it during the run (a temp-file cleaner,
 * an older baton's sweep from another PID namespace); also a lock file removed alone. 1
 * when the dir was made again, 0 when it was there, BT_EIO with diag set when it cannot be
 * made or its name now holds something else. */
int launch_tmpdir_keep(const char *dir, int *lock_fd, bt_diag *diag);

/* Removes the dirs under TMPDIR of launch servers of this user that are gone: those whose
 * lock can be taken; those without a lock file (an older baton's) by the pid in their name,
 * when no process of this PID namespace has it. Returns how many. */
int launch_tmpdir_sweep(void);

#endif
