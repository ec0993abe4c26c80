/* The launch server's private temp dir: TMPDIR/baton-launch-<pid>-XXXXXX, mode 0700
 * (PMIx's sockets and the jobs' rendezvous files live there). The server removes it when
 * it closes; one whose process was killed (kill -9 of `baton run`) cannot, so the next
 * server on the host removes those whose process is gone. */
#ifndef BATON_LAUNCH_TMPDIR_H
#define BATON_LAUNCH_TMPDIR_H

#include <stddef.h>

#include "util/err.h"

/* Whether $TMPDIR (or /tmp) is a directory this user can create the dir in: checked
 * before anything is made, so that a stale TMPDIR (a finished job's scratch) is a clear
 * usage error naming it. BT_EINVAL with the message. */
int launch_tmpdir_check(bt_diag *diag);

/* Creates the dir and writes its path to out; BT_EINVAL (TMPDIR too long) or BT_EIO with
 * diag set, out "" then. */
int launch_tmpdir_make(char *out, size_t cap, bt_diag *diag);

/* Removes the dirs under TMPDIR of launch servers of this user whose process no longer
 * exists; returns how many. */
int launch_tmpdir_sweep(void);

#endif
