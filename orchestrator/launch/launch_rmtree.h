/* Removal of the launcher's temp dirs (launch_tmpdir.h) and of the jobs' dirs in them,
 * through descriptors. A dir is emptied relative to a descriptor held on it, never through
 * a path that could cross a symbolic link, and its name is removed only while it still
 * names that dir (same device and inode). In a shared /tmp anyone may take the name of a
 * dir once something removed it (a temp-file cleaner): whatever is there then, a link to
 * someone's files or another user's dir, is a squatter's and is left alone. */
#ifndef BATON_LAUNCH_RMTREE_H
#define BATON_LAUNCH_RMTREE_H

/* How deep launch_rmtree_below goes: the launcher's own trees are a few levels deep, and
 * each level holds a descriptor open. Deeper dirs are left. */
#define LAUNCH_RMTREE_DEPTH 32

/* Removes everything in the dir open as fd; the dir itself stays, fd open. Each entry is
 * reached relative to its dir and never followed: a symbolic link is unlinked, not what
 * it names, and a subdir is opened O_NOFOLLOW (one swapped for a link meanwhile is not
 * entered). Errors are ignored: what cannot be removed stays. */
void launch_rmtree_below(int fd);

/* Empties the dir open as fd, then removes the entry name of the dir open as parent if it
 * still is that dir. 0 when removed, 1 when name holds something else or nothing (left
 * alone), -1 when it could not be removed (errno). */
int launch_rmtree_at(int parent, const char *name, int fd);

/* launch_rmtree_at for a path: its parent is reached by path (TMPDIR may be a link), its
 * last component is not followed. */
int launch_rmtree_held(const char *path, int fd);

/* Removes the dir name of the dir open as parent and everything in it; a symbolic link
 * there is left, and none below it is followed. 0, 1 (no dir there) or -1 as
 * launch_rmtree_at. */
int launch_rmtree_name(int parent, const char *name);

/* launch_rmtree_name for a path, its parent reached by path. */
int launch_rmtree(const char *path);

#endif
