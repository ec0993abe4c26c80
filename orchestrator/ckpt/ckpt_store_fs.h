/* Local-directory steps shared by unpack and pull: a checkpoint is first assembled under
 * INTO/NAME.partial and renamed to INTO/NAME only once every CRC has been checked, so a
 * reader never sees a half-restored checkpoint under its final name. */
#ifndef BATON_CKPT_STORE_FS_H
#define BATON_CKPT_STORE_FS_H

#include <stddef.h>

#include "util/err.h"

/* The last component of a directory path (trailing slashes ignored) into out. */
int ckpt_path_basename(const char *path, char *out, size_t cap, bt_diag *diag);
/* The directory holding path ("." when there is no '/') into out. */
void ckpt_path_parent(const char *path, char *out, size_t cap);
/* Fills partial and final with INTO/NAME.partial and INTO/NAME. Refuses when NAME exists;
 * creates INTO when missing. keep != 0 keeps an existing NAME.partial (a resumed pull),
 * else it is removed; the .partial directory exists (0700) on return. */
int ckpt_partial_prepare(const char *into, const char *name, int keep, char *partial, char *final,
                         size_t cap, bt_diag *diag);
/* fsyncs partial, renames it to final and fsyncs INTO. */
int ckpt_partial_publish(const char *into, const char *partial, const char *final, bt_diag *diag);
/* DIR/FILE into out; 0, or BT_EINVAL when it does not fit (out then truncated). */
int ckpt_path_join(char *out, size_t cap, const char *dir, const char *file);
/* Writes all of n bytes to fd (named path in messages). */
int ckpt_write_all(int fd, const void *p, size_t n, const char *path, bt_diag *diag);

#endif
