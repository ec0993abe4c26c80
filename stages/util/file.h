/* Whole-file and line-by-line reads (a JSON-lines file's numbers too), directory
 * creation, a run's own files and which symbolic links not to follow, shared by both
 * programs. */
#ifndef BATON_FILE_H
#define BATON_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "err.h"

struct stat;

/* Reads path whole into a malloc'd, NUL-terminated buffer (*out, *len bytes before the
 * NUL). Returns 0, or -1 with errno set (EFBIG when it is longer than max bytes; one of
 * exactly max bytes is read). */
int bt_read_file(const char *path, size_t max, char **out, size_t *len);

/* bt_read_file for a run's own file: a symbolic link is refused (ELOOP), never followed,
 * and anything but a regular file (EINVAL); strict: also one not owned by this user or
 * that its group or others may read or write (EPERM), as for a secret. */
int bt_read_private(const char *path, size_t max, int strict, char **out, size_t *len);

/* mkdir -p: creates path and every missing parent with mode. 0, or -1 with errno. */
int bt_mkdir_p(const char *path, mode_t mode);
/* The same, saying which directories this call made itself (mkdir returned 0; one there
 * already, or made meanwhile by another process, is not among them): their lengths as
 * prefixes of path, outermost first, in made[0..*n_made) (at most cap of them: the
 * outermost). Trailing slashes are not part of any prefix. */
int bt_mkdir_p_made(const char *path, mode_t mode, size_t *made, size_t cap, size_t *n_made);

/* A file of the run's own (metrics, logs, the journal): open(path, flags) made
 * close-on-exec, created 0600 whatever the umask, and a symbolic link at path refused
 * (ELOOP), never followed: nothing planted there redirects what baton writes. Opened for
 * writing (O_WRONLY, O_RDWR), anything but a regular file is refused (EINVAL), opened
 * O_NONBLOCK (cleared after, unless flags has it) so that a FIFO put there never makes the
 * open wait for a reader, nor O_TRUNC truncate it. The fd, or -1 with errno. */
int bt_open_private(const char *path, int flags);

/* The same as a stream: how is "r" (read), "w" (truncate) or "a" (append). NULL with
 * errno. Read too, anything but a regular file is refused (EINVAL), opened O_NONBLOCK so
 * that a FIFO put there never makes the open wait for a writer. */
FILE *bt_fopen_private(const char *path, const char *how);

/* A directory of the run's own: made 0700 (whatever the umask) unless one is there; a
 * symbolic link there is refused (ELOOP), anything else not a directory ENOTDIR. 0, or
 * -1 with errno. */
int bt_mkdir_private(const char *path);

/* The kernel's protected_symlinks rule, kept whatever the sysctl says: whether a symbolic
 * link (link, as lstat'ed) in directory dir (as stat'ed) may have been planted by another
 * user, and so is not to be followed: dir is sticky and others may write it (/tmp), and
 * the link is neither this user's nor dir's owner's (whoever owns a link in a sticky
 * directory may replace it, to have baton, root say, write where they choose). */
int bt_link_planted(const struct stat *link, const struct stat *dir);

/* Why bt_read_private, bt_open_private, bt_fopen_private or bt_file_open_read refused a
 * file, for a message: EINVAL "not a regular file ...", ELOOP "a symbolic link ...", else
 * strerror. */
const char *bt_file_why(int err);

/* A run's own file opened for reading (close-on-exec; a symbolic link refused, as
 * bt_fopen_private) into *in: 0, with *in NULL when there is no such file; else BT_EIO,
 * diag naming path. */
int bt_file_open_read(const char *path, FILE **in, bt_diag *diag);

/* Called with each whole line of a file: line (NUL-terminated, its newline kept), its len
 * bytes and the offset in the file it starts at; nonzero stops the reading. */
typedef int (*bt_line_fn)(void *arg, const char *line, size_t len, off_t at);

/* Reads in (named path in messages) line by line from where it stands, each whole line
 * to fn, until fn returns nonzero (returned). A last line without its newline (a writer
 * killed mid-line) is never passed on; *torn says whether there was one. BT_EIO on a read
 * error, diag naming path; BT_ENOMEM (also fn's), diag naming path unless fn set one. */
int bt_file_lines(FILE *in, const char *path, bt_line_fn fn, void *arg, int *torn, bt_diag *diag);

/* The number after key (with its quotes, colon and space, e.g. "\"loss\": ") in a line
 * of a JSON-lines file, a JSON null read as NaN, into *out: 0, or -1 when it has none. */
int bt_json_line_num(const char *line, const char *key, double *out);

#endif
