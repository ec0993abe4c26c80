/* A file a user names for a command's output (baton spec --out FILE), written without
 * destroying what the name stands for:
 *  - a new path or a regular file: written atomically beside it (PATH.partial, made new
 *    with O_EXCL, fsync, rename, fsync of the directory), so a reader never sees half a
 *    file and a failure leaves the old one; a replaced file keeps its permissions. A
 *    PATH.partial already there is removed first only when it is this user's own regular
 *    file with no other link (a leftover); a FIFO, link, hard link or another user's file
 *    there is refused, named, never written through;
 *  - /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, and any other name or link
 *    that leads to the file stdout or stderr has open (`//dev/stdout`,
 *    `/dev/fd/../fd/1`): the open descriptor itself, as the shell does (nothing reopened,
 *    truncated or replaced: `>> log` keeps appending); one not open for writing is
 *    refused;
 *  - a character device or a FIFO (/dev/null, a named pipe): written in place, never
 *    replaced by a regular file, never made the controlling tty; the descriptor opened
 *    must be the very file looked at (a name swapped meanwhile is refused);
 *  - a symbolic link: followed, its target written by the rules above (a link to a
 *    regular file keeps the link, the target is replaced atomically in its directory) —
 *    except a link in a sticky directory that others may write (/tmp) owned by neither
 *    this user nor the directory's owner, which is refused (the kernel's
 *    protected_symlinks rule, kept whatever the sysctl says: another user may have
 *    planted it);
 *  - a directory, a block device, a socket, a dangling link, an empty name: refused. */
#ifndef BATON_OUT_FILE_H
#define BATON_OUT_FILE_H

#include <stddef.h>

#include "err.h"

typedef struct bt_out {
    char final[4096]; /* the name in dir_fd to rename the .partial to; "" when in place */
    char tmp[4096];   /* the .partial being written, in dir_fd; "" when written in place */
    int dir_fd;       /* the directory of both, opened once; -1 when written in place */
    int fd;           /* where the bytes go */
    int own_fd;       /* fd was opened here (not stdout's or another inherited one) */
} bt_out;

/* Opens path for writing as above: 0; BT_EINVAL when path is refused (diag says why; a
 * usage error), BT_EIO when it cannot be created (diag names path and the errno). */
int bt_out_open(bt_out *o, const char *path, bt_diag *diag);

/* Ends the writing: ok (everything written) → fsync and rename into place (atomic), or
 * nothing more (in place); !ok → the .partial removed. 0, or BT_EIO with diag naming path
 * (the one the user gave). */
int bt_out_close(bt_out *o, int ok, const char *path, bt_diag *diag);

/* The whole of buf (n bytes) written to path by these rules: 0, BT_EINVAL or BT_EIO. */
int bt_out_write_file(const char *path, const void *buf, size_t n, bt_diag *diag);

/* coreutils' close_stdout, for the end of a program: flushes stdout and, when that or an
 * earlier write to it failed (a full disk, a closed descriptor), says "PROG: write error:
 * REASON" on stderr and returns -1 (the caller exits 1): output lost is not success. A
 * reader that went away (EPIPE, with SIGPIPE ignored) is not an error: the output was not
 * wanted. 0 when all is well. */
int bt_stdout_check(const char *prog);

#endif
