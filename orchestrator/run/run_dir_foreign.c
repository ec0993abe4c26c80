/* An existing directory given as a run directory that is no run's: refused when it holds
 * anything of its own (a project's root, `--run-dir .`), so that a run's files are never
 * mixed with the user's. Whether it is a run's, and which entries are baton's, goes by
 * each entry's kind as well as its name: a project's `workdir/` or `logs` file is the
 * project's, not a run's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "run_dir.h"
#include "util/buf.h"

/* digits, at least one, from *p on: 1 with *p past them. */
static int foreign_digits(const char **p) {
    size_t n = strspn(*p, "0123456789");
    *p += n;
    return n > 0;
}

/* A batch job's output: slurm-JOBID.out, or .err (--error), JOBID as Slurm writes it for
 * a job (digits) or an array task (digits_digits): written before the job's baton starts,
 * a script of the user's own that keeps sbatch's default names too. */
static int foreign_slurm_name(const char *name) {
    const char *p = name + 6;
    if (strncmp(name, "slurm-", 6) != 0 || !foreign_digits(&p)) return 0;
    if (*p == '_' && (p++, !foreign_digits(&p))) return 0;
    return strcmp(p, ".out") == 0 || strcmp(p, ".err") == 0;
}

/* What the file system itself puts in a directory, none of the user's: ext4's lost+found/
 * on a fresh file system's root (a run directory on another disk), the snapshot directory
 * of a NetApp (.snapshot/) or ZFS (.zfs/) share that lists it, and the name an NFS client
 * gives a removed file still open (.nfs and hex digits, gone once it is closed). */
static int foreign_fs_made(const char *name, const struct stat *st) {
    static const char *const dirs[] = {"lost+found", ".snapshot", ".zfs"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (strcmp(name, dirs[i]) == 0) return S_ISDIR(st->st_mode);
    return strncmp(name, ".nfs", 4) == 0 && name[4] != '\0' &&
           strspn(name + 4, "0123456789abcdefABCDEF") == strlen(name + 4);
}

/* The entry name of the run directory (dfd): 2 a mark (the directory is a run's), 1 baton's
 * own or none of the user's, 0 the user's. */
static int foreign_kind(int dfd, const char *name) {
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT; /* gone */
    const run_dir_name *e = run_dir_name_of(name);
    if (e != NULL && run_dir_name_is(e, &st)) return e->flags & RUN_DIR_MARK ? 2 : 1;
    if (e == NULL && S_ISREG(st.st_mode) && foreign_slurm_name(name)) return 1;
    return e == NULL && foreign_fs_made(name, &st);
}

int run_dir_check_foreign(const run_dir *d, bt_diag *diag) {
    DIR *dir = opendir(d->path);
    if (dir == NULL) {
        bt_diag_set(diag, "%s: cannot list the run directory: %s", d->path, strerror(errno));
        return BT_EINVAL;
    }
    size_t n = 0;
    int marked = 0;
    char first[256] = "";
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int kind = foreign_kind(dirfd(dir), e->d_name);
        marked |= kind == 2;
        if (kind != 0) continue;
        if (n++ == 0 || strcmp(e->d_name, first) < 0)
            snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(dir);
    if (marked || n == 0) return 0;
    bt_buf b;
    bt_buf_init(&b);
    bt_diag_set(diag,
                "%s: exists and is not a baton run directory (it holds %zu entr%s of its own, "
                "such as '%s'), and a run's files are not mixed with others; give --run-dir a "
                "new or empty directory, or 'baton resume' a run directory",
                d->path, n, n == 1 ? "y" : "ies", bt_buf_text_of(&b, first));
    bt_buf_free(&b);
    return BT_EINVAL;
}
