/* The rendezvous directory of ranks that share a host: made (or found) by name, checked
 * to be this user's own before anything is written there, and removed at the end
 * through a descriptor, so that a name another user took first (a symbolic link to
 * their target, a directory they can write) is refused and nothing it leads to is
 * touched. */
#ifndef BATON_WORKER_RDZV_H
#define BATON_WORKER_RDZV_H

#include "util/err.h"

/* mkdir(dir, 0700), or the directory already there (another rank made it): accepted
 * only when lstat finds a real directory (no link) owned by this user that neither group
 * nor others may write. 0, or BT_EIO with a diag that names dir and says why. */
int worker_rdzv_claim(const char *dir, bt_diag *diag);

/* Removes dir when it still is such a directory: its entries that are not directories,
 * by unlinkat in a descriptor opened O_NOFOLLOW on the inode checked (links removed,
 * never followed), then dir itself if its name still leads to that inode. Quiet: a
 * name that fails the checks is left alone. */
void worker_rdzv_remove(const char *dir);

#endif
