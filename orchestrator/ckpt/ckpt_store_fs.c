/* INTO/NAME.partial → INTO/NAME, and small path helpers, for unpack and pull. */
#include "ckpt_store_fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "util/cleanup.h"

int ckpt_path_basename(const char *path, char *out, size_t cap, bt_diag *diag) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t begin = end;
    while (begin > 0 && path[begin - 1] != '/')
        begin--;
    if (end == begin || end - begin >= cap) {
        bt_diag_set(diag, "%s: no directory name to use", path);
        return BT_EINVAL;
    }
    memcpy(out, path + begin, end - begin);
    out[end - begin] = '\0';
    return 0;
}

void ckpt_path_parent(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(out, cap, ".");
    } else if (slash == path) {
        snprintf(out, cap, "/");
    } else {
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
    }
}

int ckpt_partial_prepare(const char *into, const char *name, int keep, char *partial, char *final,
                         size_t cap, bt_diag *diag) {
    struct stat st;
    int n1 = snprintf(final, cap, "%s/%s", into, name);
    int n2 = snprintf(partial, cap, "%s/%s%s", into, name, CKPT_PARTIAL_SUFFIX);
    if (n1 < 0 || n2 < 0 || (size_t)n2 >= cap) {
        bt_diag_set(diag, "%s/%s: path too long", into, name);
        return BT_EINVAL;
    }
    if (lstat(final, &st) == 0) {
        bt_diag_set(diag, "%s: already exists; remove it or choose another --into", final);
        return BT_EINVAL;
    }
    int rc = ckpt_out_mkdirs(into, diag);
    if (rc < 0) return rc;
    if (!keep && lstat(partial, &st) == 0 && ckpt_remove_dir(partial) < 0) {
        bt_diag_set(diag, "%s: cannot remove the stale partial copy", partial);
        return BT_EIO;
    }
    if (mkdir(partial, 0700) == 0 || errno == EEXIST) return 0;
    bt_diag_set(diag, "%s: cannot create directory: %s", partial, strerror(errno));
    return BT_EIO;
}

int ckpt_partial_publish(const char *into, const char *partial, const char *final, bt_diag *diag) {
    if (ckpt_fsync_dir(partial) < 0 || rename(partial, final) != 0 || ckpt_fsync_dir(into) < 0) {
        bt_diag_set(diag, "%s: cannot publish as %s: %s", partial, final, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

int ckpt_write_all(int fd, const void *p, size_t n, const char *path, bt_diag *diag) {
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            bt_diag_set(diag, "%s: write error: %s", path, strerror(errno));
            return BT_EIO;
        }
        b += w, n -= (size_t)w;
    }
    return 0;
}

int ckpt_path_join(char *out, size_t cap, const char *dir, const char *file) {
    int n = snprintf(out, cap, "%s/%s", dir, file);
    return n < 0 || (size_t)n >= cap ? BT_EINVAL : 0;
}

int ckpt_out_mkdirs(const char *dir, bt_diag *diag) {
    if (bt_cleanup_mkdirs(dir, 0777) == 0) return 0;
    bt_diag_set(diag, "%s: cannot create the directory: %s", dir, strerror(errno));
    return errno == ENOTDIR || errno == EEXIST ? BT_EINVAL : BT_EIO;
}

int ckpt_out_begin(const char *root, const char *name, char *part, size_t cap, bt_diag *diag) {
    int rc = ckpt_out_mkdirs(root, diag);
    rc = rc ? rc : ckpt_begin(root, name, diag);
    ckpt_partial_dir(root, name, part, cap);
    if (rc == 0 && bt_cleanup_add(part, BT_CLEANUP_TREE) != 0) rc = BT_ENOMEM;
    return rc;
}
