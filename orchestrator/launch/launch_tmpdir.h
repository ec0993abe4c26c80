/* The launch server's private temp dir: TMPDIR/baton-launch-<pid>-XXXXXX, mode 0700
 * (PMIx's server dir and the jobs' rendezvous files live there), removed when the server
 * closes. One whose process was killed (kill -9 of `baton run`) cannot remove it, so the
 * next server sharing TMPDIR sweeps the dirs of servers that are gone.
 *
 * Liveness is a lock, not a pid: the server holds flock(LOCK_EX) on the dir itself for as
 * long as it lives, so a sweeper in another PID namespace sharing TMPDIR (containers) sees
 * the dir taken, where its kill(pid, 0) would name another process or none. A lock on the
 * dir goes with its inode and cannot be removed or aged out on its own, and
 * systemd-tmpfiles' cleaning skips a dir it cannot lock. The dir is made under a hidden
 * name (".baton-launch-..."), locked and marked there, then renamed, so it is never seen
 * under its public name unlocked. The marker file (LAUNCH_TMPDIR_MARK) says the lock is
 * what judges the dir: one without it (an older baton's, or one on a file system with no
 * flock on directories, as NFS) is judged by the pid in its name, as before. */
#ifndef BATON_LAUNCH_TMPDIR_H
#define BATON_LAUNCH_TMPDIR_H

#include <stddef.h>

#include "util/err.h"

#define LAUNCH_TMPDIR_PREFIX "baton-launch-"
#define LAUNCH_TMPDIR_MARK   "dir-locked"

/* $TMPDIR, or /tmp where it is unset or empty. */
const char *launch_tmpdir_root(void);

/* A relative $TMPDIR made absolute against the current directory (realpath where it
 * exists) and exported so: before `baton resume` enters the run's working directory, and
 * for the workers and a fresh process alike, it names the directory it named where the
 * command was given. Nothing changes where TMPDIR is unset, empty or absolute. */
void launch_tmpdir_absolute(void);

/* Whether $TMPDIR (or /tmp) is a directory this user can create the dir in: checked
 * before anything is made, so that a stale TMPDIR (a finished job's scratch) is a clear
 * usage error naming it. BT_EINVAL with the message. */
int launch_tmpdir_check(bt_diag *diag);

/* Creates the dir, locked, and writes its path to out and its descriptor (close-on-exec,
 * holding the lock; not locked where the file system has no flock) to *lock_fd;
 * BT_EINVAL (TMPDIR too long) or BT_EIO with diag set, out "" then. */
int launch_tmpdir_make(char *out, size_t cap, int *lock_fd, bt_diag *diag);

/* Checks that dir (launch_tmpdir_make's, cap bytes) is still this server's as a job starts.
 * 0 when it is. 1 when something removed it during the run (a temp-file cleaner, an older
 * baton's sweep from another PID namespace): made again at its path, locked (the new lock
 * is taken before the old descriptor is closed). 2 when its name now holds something else
 * (another user's dir, a symbolic link: a squatter), left alone: a new dir is made, its
 * path written to dir, and diag says what happened (PMIx needs neither path: its clients
 * reach the server over TCP, its URI in their environment). BT_EIO with diag set when no
 * dir can be made. */
int launch_tmpdir_keep(char *dir, size_t cap, int *lock_fd, bt_diag *diag);

/* Removes the dirs under TMPDIR of this user's launch servers that are gone: a marked one
 * whose lock can be taken; one without a marker (an older baton's) or where directories
 * cannot be locked, when no process of this PID namespace has the pid in its name; a
 * hidden one (a server killed while making it) also when its lock can be taken and its
 * marker is there, or else when it is over LAUNCH_TMPDIR_HIDDEN_S old and its pid gone.
 * Returns how many. */
#define LAUNCH_TMPDIR_HIDDEN_S 60
int launch_tmpdir_sweep(void);

#endif
