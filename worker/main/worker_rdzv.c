#include "worker_rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/rmtree.h"

/* Why st, lstat's answer for a name, is not a rendezvous directory of ours; NULL if it
 * is one. */
static const char *rdzv_unfit(const struct stat *st) {
    if (S_ISLNK(st->st_mode)) return "a symbolic link";
    if (!S_ISDIR(st->st_mode)) return "not a directory";
    if (st->st_uid != geteuid()) return "owned by another user";
    if ((st->st_mode & 022) != 0) return "writable by group or others";
    return NULL;
}

int worker_rdzv_claim(const char *dir, bt_diag *diag) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        bt_diag_set(diag, "rendezvous directory %s: %s", dir, strerror(errno));
        return BT_EIO;
    }
    struct stat st;
    if (lstat(dir, &st) != 0) {
        bt_diag_set(diag, "rendezvous directory %s: %s", dir, strerror(errno));
        return BT_EIO;
    }
    const char *why = rdzv_unfit(&st);
    if (why != NULL) {
        bt_diag_set(diag,
                    "rendezvous directory %s is %s, not a directory of this user's that only it "
                    "may write: refused (something else took the name; remove it, or set "
                    "TMPDIR to a private directory)",
                    dir, why);
        return BT_EIO;
    }
    return 0;
}

void worker_rdzv_remove(const char *dir) {
    struct stat st, held;
    if (lstat(dir, &st) != 0 || rdzv_unfit(&st) != NULL) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    /* the store keeps plain files only: no subdir is entered (one left keeps the dir) */
    if (fstat(fd, &held) == 0 && held.st_dev == st.st_dev && held.st_ino == st.st_ino)
        bt_rmtree_held(dir, fd, 0);
    close(fd);
}
