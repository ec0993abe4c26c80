/* Removal of launch dirs through descriptors (launch_rmtree.h). */
#define _GNU_SOURCE
#include "launch_rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LAUNCH_RMTREE_OPEN (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

static int launch_rmtree_same(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev;
}

static void launch_rmtree_level(int fd, int depth);

/* Removes the entry name of the dir open as fd, a subdir emptied first. 1 when something
 * was removed. */
static int launch_rmtree_entry(int fd, const char *name, int depth) {
    struct stat st;
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return unlinkat(fd, name, 0) == 0;
    if (depth >= LAUNCH_RMTREE_DEPTH) return 0;
    int sub = openat(fd, name, LAUNCH_RMTREE_OPEN);
    if (sub < 0) return 0; /* swapped for a link or a file meanwhile: the next pass sees it */
    struct stat now;
    int same = fstat(sub, &now) == 0 && launch_rmtree_same(&st, &now);
    if (same) launch_rmtree_level(sub, depth + 1);
    close(sub);
    return same && unlinkat(fd, name, AT_REMOVEDIR) == 0;
}

/* One dir's entries, depth levels below the top; passes until one removes nothing (entries
 * removed while a directory stream reads on may make it skip some). */
static void launch_rmtree_level(int fd, int depth) {
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
                removed += launch_rmtree_entry(fd, e->d_name, depth);
        closedir(d);
        if (removed == 0) return;
    }
}

void launch_rmtree_below(int fd) {
    if (fd >= 0) launch_rmtree_level(fd, 0);
}

int launch_rmtree_at(int parent, const char *name, int fd) {
    launch_rmtree_below(fd);
    struct stat mine, there;
    if (fstat(fd, &mine) != 0) return -1;
    if (fstatat(parent, name, &there, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 1 : -1;
    if (!launch_rmtree_same(&mine, &there)) return 1; /* a squatter's: left alone */
    /* A squatter between the check and here is a non-empty dir (refused: ENOTEMPTY), a
     * link or a file (refused: ENOTDIR), or an empty dir: nothing of theirs is lost. */
    return unlinkat(parent, name, AT_REMOVEDIR) == 0 ? 0 : -1;
}

/* Opens path's parent into *parent and points *name at its last component. 0, or -1. */
static int launch_rmtree_parent(const char *path, int *parent, const char **name) {
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

int launch_rmtree_held(const char *path, int fd) {
    int parent;
    const char *name;
    if (launch_rmtree_parent(path, &parent, &name) != 0) {
        launch_rmtree_below(fd); /* ours all the same: emptied */
        return -1;
    }
    int rc = launch_rmtree_at(parent, name, fd);
    int err = errno;
    close(parent);
    errno = err;
    return rc;
}

int launch_rmtree_name(int parent, const char *name) {
    int fd = openat(parent, name, LAUNCH_RMTREE_OPEN);
    if (fd < 0) return errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? 1 : -1;
    int rc = launch_rmtree_at(parent, name, fd);
    int err = errno;
    close(fd);
    errno = err;
    return rc;
}

int launch_rmtree(const char *path) {
    int parent;
    const char *name;
    if (launch_rmtree_parent(path, &parent, &name) != 0) return -1;
    int rc = launch_rmtree_name(parent, name);
    int err = errno;
    close(parent);
    errno = err;
    return rc;
}
