#include "worker_ranks.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_gloo.h"

/* The rendezvous directory: BATON_JOB_DIR when the launcher gives one (it is private to
 * the job attempt and removed with it), else a directory named after the PMIx namespace
 * (fresh per attempt) under TMPDIR, which rank 0 removes at the end. */
static int ranks_store_dir(worker_ranks *w, char *dir, size_t cap, bt_diag *diag) {
    const char *job = getenv("BATON_JOB_DIR");
    if (job != NULL && job[0] != '\0') {
        snprintf(dir, cap, "%s/rendezvous", job);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, cap, "%s/baton-rdzv-%s", tmp && tmp[0] ? tmp : "/tmp", w->info.nspace);
        if (w->info.rank == 0) snprintf(w->store, sizeof w->store, "%s", dir);
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        bt_diag_set(diag, "rendezvous directory %s: %s", dir, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

int worker_ranks_join(worker_ranks *w, double timeout_s, bt_diag *diag) {
    memset(w, 0, sizeof *w);
    if (getenv("PMIX_RANK") == NULL && getenv("PMIX_NAMESPACE") == NULL)
        return 0; /* started by hand: one process */
    int rc = boot_init(&w->info, diag);
    if (rc != 0) return rc;
    w->under_pmix = 1;
    if (w->info.size == 1) return 0;
    char dir[512];
    rc = ranks_store_dir(w, dir, sizeof dir, diag);
    if (rc != 0) return rc;
    comm_bootstrap bs = {.rank = w->info.rank,
                         .size = w->info.size,
                         .store_dir = dir,
                         .prefix = w->info.nspace,
                         .timeout_ms = (int)(timeout_s * 1000),
                         .name = "world"};
    return comm_gloo_init(&w->world, &bs, diag);
}

/* Removes the rendezvous directory: the store keeps only plain files in it. */
static void ranks_remove_store(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void worker_ranks_leave(worker_ranks *w) {
    if (w->world != NULL) comm_destroy(w->world);
    if (w->under_pmix) boot_finalize(NULL);
    if (w->store[0] != '\0') ranks_remove_store(w->store);
    memset(w, 0, sizeof *w);
}
