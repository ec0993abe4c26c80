/* Whole-file reads and directory creation shared by both programs. */
#ifndef BATON_FILE_H
#define BATON_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads path whole into a malloc'd, NUL-terminated buffer (*out, *len bytes before the
 * NUL). Returns 0, or -1 with errno set (EFBIG when it exceeds max bytes). */
int bt_read_file(const char *path, size_t max, char **out, size_t *len);

/* mkdir -p: creates path and every missing parent with mode. 0, or -1 with errno. */
int bt_mkdir_p(const char *path, mode_t mode);

#endif
