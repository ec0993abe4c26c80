/* Undoing what run_dir_open made, after a refusal before any attempt started: only the
 * directories this process's mkdir made (run_dir.made), and in the run directory only the
 * files baton writes there; in one that was there before, only those it wrote. Another run's
 * directory made meanwhile beside it (two runs of a sweep both found runs/ missing) is never
 * touched: a parent is removed with rmdir, which fails on one that is not empty. */
#include "run_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/err.h"

/* Removes baton's own entries from the run directory (dfd): every name of run_dir_names
 * but those had marks (NULL: none), a directory only when empty (before any attempt, each
 * is); *n counts those removed; 0, or the first error but for those left for the
 * directory's rmdir to report (not empty, of another kind), its name in bad. */
static int unmake_entries(int dfd, const unsigned char *had, size_t *n, char *bad, size_t cap) {
    int err = 0;
    for (size_t i = 0; i < run_dir_n_names; i++) {
        const char *name = run_dir_names[i].name;
        int dir = (run_dir_names[i].flags & RUN_DIR_DIR) != 0;
        if (had != NULL && had[i]) continue;
        if (unlinkat(dfd, name, dir ? AT_REMOVEDIR : 0) == 0) {
            (*n)++;
            continue;
        }
        if (errno == ENOENT || errno == ENOTEMPTY || errno == EEXIST || errno == EISDIR ||
            errno == ENOTDIR)
            continue;
        if (err == 0) err = errno, snprintf(bad, cap, "%s", name);
    }
    return err;
}

/* The run directory's own entries (but those had marks) removed under its lock (taken
 * again when d was closed): 0; 1 when another baton run holds it (kept); else an errno, in
 * bad the name. */
static int unmake_leaf(run_dir *d, const unsigned char *had, size_t *n, char *bad, size_t cap) {
    bt_diag diag;
    bt_diag_init(&diag);
    if (d->lock_fd < 0 && run_dir_lock(d, &diag) != 0) {
        run_dir_close(d);
        if (run_dir_busy(d->path)) return 1;
    }
    int dfd =
        d->dir_lock_fd >= 0 ? d->dir_lock_fd : open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = dfd >= 0 ? unmake_entries(dfd, had, n, bad, cap) : 0;
    if (dfd >= 0 && dfd != d->dir_lock_fd) close(dfd);
    return err;
}

/* A directory that was there before (d->wrote_in): what this command wrote in it removed,
 * and only that (d->had), so that a refused run leaves it as it was: no lock file turning
 * it into a run's. Returns as run_dir_unmake does (1: all it wrote removed). */
static int unmake_wrote(run_dir *d, char *said, size_t cap) {
    char bad[64] = "";
    size_t n = 0;
    int err = unmake_leaf(d, d->had, &n, bad, sizeof bad), rc = n > 0;
    if (err == 1)
        snprintf(said, cap, "kept what it wrote in %s: another baton run works in it", d->given);
    else if (err != 0)
        snprintf(said, cap, "could not remove %s/%s, which it wrote: %s", d->given, bad,
                 strerror(err));
    else if (n > 0)
        snprintf(said, cap, "removed what it wrote in %s, which was there before", d->given);
    rc = err == 1 ? 2 : err != 0 ? -1 : rc;
    run_dir_close(d);
    return rc;
}

int run_dir_unmake(run_dir *d, char *said, size_t cap) {
    char bad[64] = "", removed[4096] = "", at[4096];
    said[0] = '\0';
    if (!d->made_leaf && d->wrote_in) return unmake_wrote(d, said, cap);
    int rc = d->n_made == 0 ? 0 : 1, err = 0;
    size_t n = 0;
    if (d->made_leaf) {
        err = unmake_leaf(d, NULL, &n, bad, sizeof bad);
        if (err == 1) {
            snprintf(said, cap, "kept %s, which it made: another baton run works in it", d->given);
            run_dir_close(d);
            return 2;
        }
    }
    /* the lock is held until the directory is gone: no second run takes it meanwhile */
    for (size_t i = d->n_made; rc == 1 && i-- > 0;) {
        snprintf(at, sizeof at, "%.*s", (int)d->made[i], d->given);
        if (err == 0 && rmdir(at) == 0) {
            snprintf(removed, sizeof removed, "%s", at);
            continue;
        }
        int why = err ? err : errno;
        const char *sep = removed[0] ? "; " : "";
        char first[4200] = "";
        if (removed[0]) snprintf(first, sizeof first, "removed %s, which it made", removed);
        if (err != 0)
            snprintf(said, cap, "%s%scould not remove %s/%s, which it made: %s", first, sep, at,
                     bad, strerror(why));
        else if (why == ENOTEMPTY || why == EEXIST)
            snprintf(said, cap, "%s%skept %s, which it made: other files are in it now", first, sep,
                     at);
        else
            snprintf(said, cap, "%s%scould not remove %s, which it made: %s", first, sep, at,
                     strerror(why));
        rc = err != 0 || (why != ENOTEMPTY && why != EEXIST) ? -1 : 2;
    }
    if (rc == 1) snprintf(said, cap, "removed %s, which it made", removed);
    run_dir_close(d);
    return rc;
}
