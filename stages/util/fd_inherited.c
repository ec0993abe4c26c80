/* The descriptors a process was started with (fd_inherited.h). */
#define _GNU_SOURCE
#include "fd_inherited.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FD_INHERITED_SCAN 1024 /* the fcntl loop's end, where /proc cannot be read */

typedef struct fd_noted {
    int fd;
    dev_t dev;
    ino_t ino;
} fd_noted;

static fd_noted noted[BT_FD_INHERITED_MAX];
static int n_noted, done;

/* fd, kept where it is open and not close-on-exec, while there is room. */
static void fd_inherited_add(int fd) {
    struct stat st;
    int flags = fcntl(fd, F_GETFD);
    if (fd < 3 || flags < 0 || (flags & FD_CLOEXEC) || n_noted >= BT_FD_INHERITED_MAX) return;
    if (fstat(fd, &st) != 0) return;
    noted[n_noted++] = (fd_noted){fd, st.st_dev, st.st_ino};
}

/* getdents64's order is the kernel's (ascending for /proc/self/fd); sorted all the same,
 * in place (a few entries: insertion sort). */
static void fd_inherited_sort(void) {
    for (int i = 1; i < n_noted; i++)
        for (int j = i; j > 0 && noted[j - 1].fd > noted[j].fd; j--) {
            fd_noted t = noted[j];
            noted[j] = noted[j - 1], noted[j - 1] = t;
        }
}

static int fd_inherited_scan(void) {
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    char buf[4096] __attribute__((aligned(8)));
    for (long got; (got = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0;) {
        for (long off = 0; off < got;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            int fd = 0, digits = 0;
            for (const char *p = e->d_name; *p >= '0' && *p <= '9' && fd < (1 << 28); p++)
                fd = fd * 10 + (*p - '0'), digits++;
            if (digits > 0 && e->d_name[digits] == '\0' && fd != dir) fd_inherited_add(fd);
            off += e->d_reclen;
        }
    }
    close(dir);
    return 0;
}

void bt_fd_inherited_note(void) {
    if (done) return;
    done = 1;
    if (fd_inherited_scan() != 0)
        for (int fd = 3; fd < FD_INHERITED_SCAN; fd++)
            fd_inherited_add(fd);
    fd_inherited_sort();
}

int bt_fd_inherited_list(int *fds) {
    int n = 0;
    for (int i = 0; i < n_noted; i++) {
        struct stat st;
        if (fstat(noted[i].fd, &st) == 0 && st.st_dev == noted[i].dev && st.st_ino == noted[i].ino)
            fds[n++] = noted[i].fd;
    }
    return n;
}
