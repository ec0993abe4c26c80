/* Removal of directories through descriptors: the launcher's temp dirs (launch_tmpdir.h)
 * and the jobs' dirs in them, the worker's rendezvous dir (worker_rdzv.h). A dir is emptied
 * relative to a descriptor held on it, never through a path that could cross a symbolic link, and
 * its name is removed only while it still names that dir (same device and inode). In a shared /tmp
 * anyone may take the name of a dir once something removed it (a temp-file cleaner): whatever is
 * there then, a link to someone's files or another user's dir, is a squatter's and is left alone.
 */
#ifndef BATON_UTIL_RMTREE_H
#define BATON_UTIL_RMTREE_H

/* How deep bt_rmtree_name and bt_rmtree go (max of the others): the launcher's own trees
 * are a few levels deep, and each level holds a descriptor open. Deeper dirs are left. */
#define BT_RMTREE_DEPTH 32

/* Removes everything in the dir open as fd, subdirs up to max levels down (0: only what
 * is not a directory; a subdir then stays, and so does the dir); the dir itself stays, fd open.
 * Each entry is reached relative to its dir and never followed: a symbolic link is unlinked, not
 * what it names, and a subdir is opened O_NOFOLLOW (one swapped for a link meanwhile is not
 * entered). Errors are ignored: what cannot be removed stays. */
void bt_rmtree_below(int fd, int max);

/* Empties the dir open as fd, then removes the entry name of the dir open as parent if it
 * still is that dir. 0 when removed, 1 when name holds something else or nothing (left
 * alone), -1 when it could not be removed (errno). */
int bt_rmtree_at(int parent, const char *name, int fd, int max);

/* bt_rmtree_at for a path: its parent is reached by path (TMPDIR may be a link), its
 * last component is not followed. */
int bt_rmtree_held(const char *path, int fd, int max);

/* Removes the dir name of the dir open as parent and everything in it; a symbolic link
 * there is left, and none below it is followed. 0, 1 (no dir there) or -1 as
 * bt_rmtree_at. */
int bt_rmtree_name(int parent, const char *name);

/* bt_rmtree_name for a path, its parent reached by path. */
int bt_rmtree(const char *path);

#endif
