#include "launch_tmpdir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmix_host.h"

#define LAUNCH_TMPDIR_PREFIX "baton-launch-"
/* The longest $TMPDIR taken: the launcher's files go a few levels below it (its temp dir,
 * a job's directory, the rendezvous files), each path at most PATH_MAX bytes. */
#define LAUNCH_TMPDIR_ROOT_MAX (PATH_MAX - 128)

static const char *launch_tmpdir_root(void) {
    const char *root = getenv("TMPDIR");
    return root == NULL || root[0] == '\0' ? "/tmp" : root;
}

/* How root is named in a message: "$TMPDIR (PATH)", or "/tmp" when TMPDIR is unset. */
static void launch_tmpdir_name(char *out, size_t cap) {
    const char *env = getenv("TMPDIR");
    if (env != NULL && env[0] != '\0')
        snprintf(out, cap, "$TMPDIR (%s)", env);
    else
        snprintf(out, cap, "%s (TMPDIR is unset)", launch_tmpdir_root());
}

int launch_tmpdir_check(bt_diag *diag) {
    const char *root = launch_tmpdir_root();
    struct stat st;
    const char *why = NULL;
    char too_long[128];
    if (stat(root, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else if (access(root, W_OK | X_OK) != 0)
        why = errno == EACCES ? "not writable by this user" : strerror(errno);
    else if (strlen(root) > LAUNCH_TMPDIR_ROOT_MAX)
        why = too_long;
    if (why == NULL) return 0;
    snprintf(too_long, sizeof too_long,
             "too long (%zu bytes, at most %d: the launcher's files go below it)", strlen(root),
             LAUNCH_TMPDIR_ROOT_MAX);
    char name[4200];
    launch_tmpdir_name(name, sizeof name);
    bt_diag_set(diag,
                "%s: %s; the launcher's sockets and rendezvous files go there: set TMPDIR to "
                "a writable directory (or unset it for /tmp)",
                name, why);
    return BT_EINVAL;
}

int launch_tmpdir_make(char *out, size_t cap, bt_diag *diag) {
    const char *root = launch_tmpdir_root();
    int n = snprintf(out, cap, "%s/" LAUNCH_TMPDIR_PREFIX "%d-XXXXXX", root, (int)getpid());
    if (n < 0 || (size_t)n >= cap) {
        bt_diag_set(diag, "TMPDIR '%s' is too long for a temp dir path", root);
        out[0] = '\0';
        return BT_EINVAL;
    }
    if (mkdtemp(out) == NULL) { /* mode 0700 */
        int err = errno;
        char name[4200];
        launch_tmpdir_name(name, sizeof name);
        bt_diag_set(diag, "cannot create a temp dir under %s: %s", name, strerror(err));
        out[0] = '\0';
        return BT_EIO;
    }
    return 0;
}

/* The pid in a launch temp dir's name "baton-launch-<pid>-XXXXXX", or 0. */
static pid_t launch_tmpdir_pid(const char *name) {
    size_t k = strlen(LAUNCH_TMPDIR_PREFIX);
    if (strncmp(name, LAUNCH_TMPDIR_PREFIX, k) != 0) return 0;
    char *end;
    long pid = strtol(name + k, &end, 10);
    if (end == name + k || *end != '-' || strlen(end + 1) != 6 || pid <= 0) return 0;
    return (pid_t)pid;
}

int launch_tmpdir_sweep(void) {
    const char *root = launch_tmpdir_root();
    DIR *d = opendir(root);
    if (d == NULL) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        pid_t pid = launch_tmpdir_pid(e->d_name);
        if (pid == 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
        char path[4352];
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        pmixhost_rmtree(path);
        removed++;
    }
    closedir(d);
    return removed;
}
