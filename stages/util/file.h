/* Whole-file reads, directory creation and a run's own files, shared by both programs. */
#ifndef BATON_FILE_H
#define BATON_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Reads path whole into a malloc'd, NUL-terminated buffer (*out, *len bytes before the
 * NUL). Returns 0, or -1 with errno set (EFBIG when it exceeds max bytes). */
int bt_read_file(const char *path, size_t max, char **out, size_t *len);

/* mkdir -p: creates path and every missing parent with mode. 0, or -1 with errno. */
int bt_mkdir_p(const char *path, mode_t mode);

/* A file of the run's own (metrics, logs, the journal): open(path, flags) made
 * close-on-exec, created 0600 whatever the umask, and a symbolic link at path refused
 * (ELOOP), never followed: nothing planted there redirects what baton writes. The fd, or
 * -1 with errno. */
int bt_open_private(const char *path, int flags);

/* The same as a stream: how is "r" (read), "w" (truncate) or "a" (append). NULL with
 * errno. */
FILE *bt_fopen_private(const char *path, const char *how);

/* A directory of the run's own: made 0700 (whatever the umask) unless one is there; a
 * symbolic link there is refused (ELOOP), anything else not a directory ENOTDIR. 0, or
 * -1 with errno. */
int bt_mkdir_private(const char *path);

#endif
