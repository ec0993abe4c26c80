/* Undoing what run_dir_open made, after a refusal before any attempt started: only the
 * directories this process's mkdir made (run_dir.made), and in the run directory only the
 * files baton writes there; in one that was there before, only those it wrote. Another run's
 * directory made meanwhile beside it (two runs of a sweep both found runs/ missing) is never
 * touched: a parent is removed with rmdir, which fails on one that is not empty. */
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
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

/* The first entry of directory path named .nfs* into nfs (cap bytes; "" for none); 1 when
 * every entry is so named (and there is one), 0 when another is there too, -1 when it
 * cannot be read. */
static int unmake_only_nfs(const char *path, char *nfs, size_t cap) {
    DIR *dir = opendir(path);
    if (dir == NULL) return -1;
    int other = 0;
    nfs[0] = '\0';
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (strncmp(e->d_name, ".nfs", 4) != 0)
            other = 1;
        else if (nfs[0] == '\0')
            snprintf(nfs, cap, "%s", e->d_name);
    }
    closedir(dir);
    return !other && nfs[0] != '\0';
}

/* rmdir of the run directory itself (at) once its entries are removed. On NFS a file
 * removed while open (the lock file: its descriptor is open until run_dir_close) stays as
 * .nfsXXXX until its last descriptor closes, and the client removes it then (a moment
 * later: an RPC), so while nothing else is there the locks are released and rmdir tried
 * again for up to 2 s. 0, or -1 with errno; nfs: such a name still there ("" for none). */
static int unmake_rmdir_leaf(run_dir *d, const char *at, char *nfs, size_t cap) {
    nfs[0] = '\0';
    for (int k = 0;; k++) {
        if (rmdir(at) == 0) return nfs[0] = '\0', 0;
        if (errno != ENOTEMPTY && errno != EEXIST) return -1;
        if (unmake_only_nfs(at, nfs, cap) != 1) break; /* another file is there */
        if (k == 40) return errno = ENOTEMPTY, -1;
        /* a run that takes the directory meanwhile makes files there: rmdir then fails */
        run_dir_close(d);
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    nfs[0] = '\0';
    errno = ENOTEMPTY;
    return -1;
}

/* What run_dir_unmake says of directory at, which it made, that it could not remove
 * (why: the errno; err: that of removing its entry bad, or 0; nfs: an NFS placeholder,
 * the only entry left, or ""), after first (what it removed, or ""). */
static void unmake_say_kept(char *said, size_t cap, const char *first, const char *at,
                            const char *bad, int err, int why, const char *nfs) {
    const char *sep = first[0] ? "; " : "";
    if (err != 0)
        snprintf(said, cap, "%s%scould not remove %s/%s, which it made: %s", first, sep, at, bad,
                 strerror(why));
    else if (nfs[0] != '\0')
        snprintf(said, cap,
                 "%s%skept %s, which it made: nothing is in it but %s, which NFS keeps for a "
                 "removed file that is still open (it goes once that file is closed; then "
                 "rmdir it)",
                 first, sep, at, nfs);
    else if (why == ENOTEMPTY || why == EEXIST)
        snprintf(said, cap, "%s%skept %s, which it made: other files are in it now", first, sep,
                 at);
    else
        snprintf(said, cap, "%s%scould not remove %s, which it made: %s", first, sep, at,
                 strerror(why));
}

int run_dir_unmake(run_dir *d, char *said, size_t cap) {
    char bad[64] = "", removed[4096] = "", at[4096], nfs[256] = "";
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
        int leaf = d->made_leaf && i + 1 == d->n_made;
        if (err == 0 && (leaf ? unmake_rmdir_leaf(d, at, nfs, sizeof nfs) : rmdir(at)) == 0) {
            snprintf(removed, sizeof removed, "%s", at);
            continue;
        }
        int why = err ? err : errno;
        char first[4200] = "";
        if (removed[0]) snprintf(first, sizeof first, "removed %s, which it made", removed);
        unmake_say_kept(said, cap, first, at, bad, err, why, nfs);
        rc = err != 0 || (why != ENOTEMPTY && why != EEXIST) ? -1 : 2;
    }
    if (rc == 1) snprintf(said, cap, "removed %s, which it made", removed);
    run_dir_close(d);
    return rc;
}
