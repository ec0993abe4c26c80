/* Removal of directories through descriptors (rmtree.h). */
#define _GNU_SOURCE
#include "rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BT_RMTREE_OPEN (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

static int bt_rmtree_same(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev;
}

static void bt_rmtree_level(int fd, int depth, int max);

/* Removes the entry name of the dir open as fd, a subdir emptied first (one max levels
 * down or deeper is left). 1 when something was removed. */
static int bt_rmtree_entry(int fd, const char *name, int depth, int max) {
    struct stat st;
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return unlinkat(fd, name, 0) == 0;
    if (depth >= max) return 0;
    int sub = openat(fd, name, BT_RMTREE_OPEN);
    if (sub < 0) return 0; /* swapped for a link or a file meanwhile: the next pass sees it */
    struct stat now;
    int same = fstat(sub, &now) == 0 && bt_rmtree_same(&st, &now);
    if (same) bt_rmtree_level(sub, depth + 1, max);
    close(sub);
    return same && unlinkat(fd, name, AT_REMOVEDIR) == 0;
}

/* One dir's entries, depth levels below the top; passes until one removes nothing (entries
 * removed while a directory stream reads on may make it skip some). */
static void bt_rmtree_level(int fd, int depth, int max) {
    for (int pass = 0; pass < 8; pass++) {
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
        if (d == NULL) {
            if (dup_fd >= 0) close(dup_fd);
            return;
        }
        rewinddir(d); /* the offset is shared with fd: start at the beginning */
        int removed = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                removed += bt_rmtree_entry(fd, e->d_name, depth, max);
        closedir(d);
        if (removed == 0) return;
    }
}

void bt_rmtree_below(int fd, int max) {
    if (fd >= 0) bt_rmtree_level(fd, 0, max);
}

int bt_rmtree_at(int parent, const char *name, int fd, int max) {
    bt_rmtree_below(fd, max);
    struct stat mine, there;
    if (fstat(fd, &mine) != 0) return -1;
    if (fstatat(parent, name, &there, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 1 : -1;
    if (!bt_rmtree_same(&mine, &there)) return 1; /* a squatter's: left alone */
    /* A squatter between the check and here is a non-empty dir (refused: ENOTEMPTY), a
     * link or a file (refused: ENOTDIR), or an empty dir: nothing of theirs is lost. */
    return unlinkat(parent, name, AT_REMOVEDIR) == 0 ? 0 : -1;
}

/* Opens path's parent into *parent and points *name at its last component. 0, or -1. */
static int bt_rmtree_parent(const char *path, int *parent, const char **name) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(dir, sizeof dir, ".");
        *name = path;
    } else {
        int n = slash == path ? 1 : (int)(slash - path);
        if (n >= (int)sizeof dir) return errno = ENAMETOOLONG, -1;
        memcpy(dir, path, (size_t)n);
        dir[n] = '\0';
        *name = slash + 1;
    }
    if ((*name)[0] == '\0') return errno = EINVAL, -1;
    *parent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return *parent >= 0 ? 0 : -1;
}

int bt_rmtree_held(const char *path, int fd, int max) {
    int parent;
    const char *name;
    if (bt_rmtree_parent(path, &parent, &name) != 0) {
        bt_rmtree_below(fd, max); /* ours all the same: emptied */
        return -1;
    }
    int rc = bt_rmtree_at(parent, name, fd, max);
    int err = errno;
    close(parent);
    errno = err;
    return rc;
}

int bt_rmtree_name(int parent, const char *name) {
    int fd = openat(parent, name, BT_RMTREE_OPEN);
    if (fd < 0) return errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? 1 : -1;
    int rc = bt_rmtree_at(parent, name, fd, BT_RMTREE_DEPTH);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int bt_rmtree(const char *path) {
    int parent;
    const char *name;
    if (bt_rmtree_parent(path, &parent, &name) != 0) return -1;
    int rc = bt_rmtree_name(parent, name);
    int err = errno;
    close(parent);
    errno = err;
    return rc;
}
