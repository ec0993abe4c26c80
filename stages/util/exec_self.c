/* A program executing its own file again (exec_self.h). */
#define _GNU_SOURCE
#include "exec_self.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int bt_exec_self_runnable(void) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    return strncmp(base, "ld-", 3) != 0 && strncmp(base, "ld.so", 5) != 0;
}

int bt_exec_self(char *const argv[]) {
    if (!bt_exec_self_runnable()) {
        errno = ENOEXEC;
        return -1;
    }
    char comm[17] = ""; /* PR_GET_NAME writes up to 16 bytes, the NUL included */
    if (prctl(PR_GET_NAME, (unsigned long)comm, 0, 0, 0) != 0) comm[0] = '\0';
    if (comm[0] != '\0' && setenv(BT_EXEC_SELF_COMM_ENV, comm, 1) != 0) return -1;
    execv("/proc/self/exe", argv);
    int err = errno;
    unsetenv(BT_EXEC_SELF_COMM_ENV);
    errno = err;
    return -1;
}

void bt_exec_self_restore(void) {
    const char *name = getenv(BT_EXEC_SELF_COMM_ENV);
    if (name == NULL) return;
    char comm[17] = "";
    if (name[0] != '\0' && prctl(PR_GET_NAME, (unsigned long)comm, 0, 0, 0) == 0 &&
        strcmp(comm, "exe") == 0)
        prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
    unsetenv(BT_EXEC_SELF_COMM_ENV);
}
