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
/* Fills partial and final with INTO/NAME.partial and INTO/NAME. Refuses when NAME exists
 * (BT_EINVAL); creates INTO and its missing parents (ckpt_out_mkdirs). keep != 0 keeps an existing
 * NAME.partial (a resumed pull), else it is removed; the .partial directory exists (0700) on
 * return. */
int ckpt_partial_prepare(const char *into, const char *name, int keep, char *partial, char *final,
                         size_t cap, bt_diag *diag);
/* fsyncs partial, renames it to final and fsyncs INTO. */
int ckpt_partial_publish(const char *into, const char *partial, const char *final, bt_diag *diag);
/* DIR/FILE into out; 0, or BT_EINVAL when it does not fit (out then truncated). */
int ckpt_path_join(char *out, size_t cap, const char *dir, const char *file);
/* Creates the missing directories of dir (0777 less the umask, as mkdir -p), each
 * registered for removal should the command fail or be stopped (util/cleanup.h). */
int ckpt_out_mkdirs(const char *dir, bt_diag *diag);
/* The start of a tool's new checkpoint directory root/name (reshard, import): root's
 * missing directories (ckpt_out_mkdirs), then a fresh root/name.partial (ckpt_begin)
 * into part, registered for removal on failure. */
int ckpt_out_begin(const char *root, const char *name, char *part, size_t cap, bt_diag *diag);
/* Writes all of n bytes to fd (named path in messages). */
int ckpt_write_all(int fd, const void *p, size_t n, const char *path, bt_diag *diag);

#endif
