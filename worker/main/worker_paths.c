#include "worker_paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "indexed.h"

static int worker_check_valid(const char *prefix) {
    indexed_dataset ds;
    bt_diag d;
    bt_diag_init(&d);
    if (indexed_open(&ds, prefix, &d) == 0) {
        indexed_close(&ds);
        return 0;
    }
    fprintf(stderr, "baton-worker: --valid %s: %s\n", prefix, d.msg);
    return -1;
}

static int worker_check_init(const char *init) {
    struct stat st;
    if (stat(init, &st) == 0) return 0;
    fprintf(stderr, "baton-worker: --init %s: %s\n", init,
            errno == ENOENT || errno == ENOTDIR ? "no such checkpoint or run directory"
                                                : strerror(errno));
    return -1;
}

/* The directory path names its file in ("." for a bare name) into dir. */
static void worker_dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static int worker_check_dump(const char *path) {
    const char *rank = getenv("PMIX_RANK");
    if (rank != NULL && strcmp(rank, "0") != 0) return 0; /* rank 0 writes it */
    char dir[4096];
    struct stat st;
    const char *why = NULL;
    worker_dir_of(path, dir, sizeof dir);
    if (path[0] == '\0' || path[strlen(path) - 1] == '/' ||
        (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
        why = "a directory, not a file to write";
    else if (stat(dir, &st) != 0)
        why = errno == ENOENT ? "its directory does not exist" : strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "its directory is not a directory";
    else if (access(dir, W_OK | X_OK) != 0)
        why = "its directory is not writable";
    if (why == NULL) return 0;
    fprintf(stderr, "baton-worker: --dump-params %s: %s\n", path, why);
    return -1;
}

int worker_check_paths(const char *valid, uint32_t eval_windows, const char *init,
                       const char *dump_params) {
    if (valid != NULL && eval_windows > 0 && worker_check_valid(valid) != 0) return -1;
    if (init != NULL && worker_check_init(init) != 0) return -1;
    return dump_params != NULL ? worker_check_dump(dump_params) : 0;
}
