/* LD_PRELOAD'ed into `baton run` by check-run.sh's retain-kill case: a baton-worker about
 * to unlink a file named BATON_TEST_UNLINK_FILE whose path holds BATON_TEST_UNLINK_DIR
 * kills itself with SIGKILL instead, as a kill -9 in the middle of a retention's removal of
 * an old checkpoint would. Once: it first creates the file BATON_TEST_UNLINK_ONCE, whose
 * presence disarms it. Other processes (baton itself) and other paths unlink as usual. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* By the program's file: the comm of a worker is "exe" (the launcher runs it so). */
static int is_worker(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    const char *base = strrchr(exe, '/');
    return strcmp(base ? base + 1 : exe, "baton-worker") == 0;
}

/* The one path to strike at, once. */
static int strike(const char *path) {
    const char *dir = getenv("BATON_TEST_UNLINK_DIR"), *file = getenv("BATON_TEST_UNLINK_FILE");
    const char *once = getenv("BATON_TEST_UNLINK_ONCE");
    const char *base = strrchr(path, '/');
    if (dir == NULL || file == NULL || once == NULL || base == NULL) return 0;
    if (strcmp(base + 1, file) != 0 || strstr(path, dir) == NULL || !is_worker()) return 0;
    int fd = open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return 0; /* struck already */
    close(fd);
    return 1;
}

int unlink(const char *path) {
    static int (*real)(const char *);
    if (real == NULL) real = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    if (strike(path)) kill(getpid(), SIGKILL);
    return real(path);
}
