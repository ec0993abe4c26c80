#define _GNU_SOURCE /* F_OFD_SETLK */
#include "export_partial.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt_store_fs.h"

/* This host's name as a partial's name holds it: [A-Za-z0-9._-], anything else '_'. */
static void partial_host(char *host, size_t cap) {
    if (gethostname(host, cap) != 0) snprintf(host, cap, "localhost");
    host[cap - 1] = '\0';
    for (char *p = host; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-') *p = '_';
}

int export_partial_template(const char *out, size_t len, char *tmp, size_t cap) {
    char host[65];
    partial_host(host, sizeof host);
    int n = snprintf(tmp, cap, "%.*s.partial-%s-%ld-XXXXXX", (int)len, out, host, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The pid in name when it is BASE.partial-HOST-PID-XXXXXX (base and host: ours), else 0. */
static long partial_pid(const char *name, const char *base, size_t blen, const char *host) {
    static const char tag[] = ".partial-";
    size_t hlen = strlen(host);
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, tag, sizeof tag - 1) != 0) return 0;
    const char *p = name + blen + sizeof tag - 1;
    if (strncmp(p, host, hlen) != 0 || p[hlen] != '-') return 0;
    p += hlen + 1;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 9 || p[digits] != '-' || strlen(p + digits + 1) != 6) return 0;
    for (const char *x = p + digits + 1; *x; x++)
        if (!isalnum((unsigned char)*x)) return 0;
    return strtol(p, NULL, 10);
}

/* An exclusive OFD lock on fd without waiting: 0 taken, -1 held by another (or failed). */
static int partial_try_lock(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

int export_partial_lock(const char *tmp) {
    char lock[CKPT_PATH_MAX], fresh[CKPT_PATH_MAX];
    if (snprintf(lock, sizeof lock, "%s/" EXPORT_PARTIAL_LOCK, tmp) >= (int)sizeof lock ||
        snprintf(fresh, sizeof fresh, "%s/" EXPORT_PARTIAL_LOCK "-new", tmp) >= (int)sizeof fresh)
        return -1;
    int fd = open(fresh, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    /* locked under another name first: a sweep never finds the lock file unlocked */
    if (partial_try_lock(fd) != 0 || rename(fresh, lock) != 0) {
        int err = errno;
        unlink(fresh);
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

void export_partial_unlink_lock(const char *tmp) {
    char lock[CKPT_PATH_MAX];
    if (snprintf(lock, sizeof lock, "%s/" EXPORT_PARTIAL_LOCK, tmp) < (int)sizeof lock)
        unlink(lock);
}

/* Whether the partial directory p was left by an export that no longer runs: it holds
 * its lock file (no link) and no one holds the lock. The lock is kept, in *fd, until the
 * directory is removed. */
static int partial_abandoned(const char *p, int *fd) {
    char lock[CKPT_PATH_MAX];
    *fd = -1;
    if (snprintf(lock, sizeof lock, "%s/" EXPORT_PARTIAL_LOCK, p) >= (int)sizeof lock) return 0;
    *fd = open(lock, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    return *fd >= 0 && partial_try_lock(*fd) == 0;
}

void export_partial_sweep(const char *out, size_t len) {
    char path[CKPT_PATH_MAX], parent[CKPT_PATH_MAX], host[65];
    if (len >= sizeof path) return;
    snprintf(path, sizeof path, "%.*s", (int)len, out);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    ckpt_path_parent(path, parent, sizeof parent);
    partial_host(host, sizeof host);
    DIR *d = opendir(parent);
    if (d == NULL) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long pid = partial_pid(de->d_name, base, strlen(base), host);
        struct stat st;
        char p[CKPT_PATH_MAX];
        int fd;
        if (pid <= 0 || snprintf(p, sizeof p, "%s/%s", parent, de->d_name) >= (int)sizeof p ||
            lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
            continue;
        if (partial_abandoned(p, &fd) && ckpt_remove_dir(p) == 0)
            printf("baton ckpt export: removed %s, left by an export that no longer runs "
                   "(pid %ld)\n",
                   slash ? p : de->d_name, pid);
        if (fd >= 0) close(fd);
    }
    closedir(d);
}
