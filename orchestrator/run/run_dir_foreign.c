/* An existing directory given as a run directory that is no run's: refused when it holds
 * anything of its own (a project's root, `--run-dir .`), so that a run's files are never
 * mixed with the user's. Whether it is a run's, and which entries are baton's, goes by
 * each entry's kind as well as its name: a project's `workdir/` or `logs` file is the
 * project's, not a run's. With no mark there (no lock, no journal), a name of baton's is its
 * own only when it holds what a run's would before it starts: an empty directory (a
 * refused run's leftovers, emptied), a workdir naming a directory; another tool's
 * checkpoints/ or logs/, a notes file named workdir, are the user's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_dir.h"
#include "util/buf.h"
#include "util/file.h"

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

/* What a file browser leaves in a directory it showed: macOS Finder's .DS_Store (its
 * view settings), written on a shared mount too, whenever a Mac user opens it; nothing the
 * user made or reads. */
static int foreign_browser_made(const char *name, const struct stat *st) {
    return strcmp(name, ".DS_Store") == 0 && S_ISREG(st->st_mode);
}

/* The entry name of the run directory (dfd): 2 a mark (the directory is a run's), 1 baton's
 * own or none of the user's, 0 the user's. */
static int foreign_kind(int dfd, const char *name) {
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT; /* gone */
    const run_dir_name *e = run_dir_name_of(name);
    if (e != NULL && run_dir_name_is(e, &st)) return e->flags & RUN_DIR_MARK ? 2 : 1;
    if (e == NULL && S_ISREG(st.st_mode) && foreign_slurm_name(name)) return 1;
    return e == NULL && (foreign_fs_made(name, &st) || foreign_browser_made(name, &st));
}

/* name, one more entry of the user's, counted in *n and kept in first when it sorts first. */
static void foreign_count(const char *name, size_t *n, char *first, size_t cap) {
    if ((*n)++ == 0 || strcmp(name, first) < 0) snprintf(first, cap, "%s", name);
}

/* Whether the directory name in dfd holds anything: a run's, before it starts, are empty
 * (a refused run's, emptied by run_dir_unmake), so with no mark there one that does is
 * the user's (another tool's checkpoints/, logs/). What the file system or a file browser
 * put there does not count; an unreadable one does. */
static int foreign_dir_used(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        int gone = errno == ENOENT;
        if (fd >= 0) close(fd);
        return !gone;
    }
    int used = 0;
    struct stat st;
    for (struct dirent *e; !used && (e = readdir(dir)) != NULL;)
        used = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
               !(fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                 (foreign_fs_made(e->d_name, &st) || foreign_browser_made(e->d_name, &st)));
    closedir(dir);
    return used;
}

/* The file name in dfd, up to cap - 1 bytes, into out (NUL-terminated): its length, or -1
 * (no such regular file, or longer). */
static ssize_t foreign_read(int dfd, const char *name, char *out, size_t cap) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    ssize_t n = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size < cap)
        n = read(fd, out, cap - 1);
    if (fd >= 0) close(fd);
    if (n >= 0) out[n] = '\0';
    return n;
}

/* Whether dfd's workdir is a run's start note (run_dir_note_start): one absolute path, of
 * a directory that exists (a newline after it: one written with echo, as resume says to). */
static int foreign_workdir_run(int dfd) {
    char path[4200];
    struct stat st;
    ssize_t n = foreign_read(dfd, "workdir", path, sizeof path);
    if (n > 1 && path[n - 1] == '\n') path[--n] = '\0';
    return n > 0 && path[0] == '/' && strlen(path) == (size_t)n && strchr(path, '\n') == NULL &&
           stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether dfd's file name holds digits hex digits, as run_dir_random writes them. */
static int foreign_hex(int dfd, const char *name, size_t digits) {
    char text[80];
    ssize_t n = foreign_read(dfd, name, text, sizeof text);
    return n == (ssize_t)digits && strspn(text, "0123456789abcdef") == digits;
}

/* With no mark in dfd: 1 when it is a run directory whose lock file was deleted (a run
 * made, such as a batch job's not started yet: its workdir, secret and run_id are there,
 * none a user would write); else 0, the names of baton's that are the user's counted
 * (foreign_count). */
static int foreign_unmarked(int dfd, size_t *n, char *first, size_t cap) {
    if (foreign_workdir_run(dfd) && foreign_hex(dfd, "secret", 64) &&
        foreign_hex(dfd, "run_id", 32))
        return 1;
    struct stat st;
    for (size_t i = 0; i < run_dir_n_names; i++) {
        const run_dir_name *e = &run_dir_names[i];
        if (!(e->flags & RUN_DIR_DIR) || fstatat(dfd, e->name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (foreign_dir_used(dfd, e->name)) foreign_count(e->name, n, first, cap);
    }
    if (fstatat(dfd, "workdir", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        !foreign_workdir_run(dfd))
        foreign_count("workdir", n, first, cap);
    return 0;
}

/* Whether the run directory's file name holds exactly the n bytes of data. */
static int foreign_same(const run_dir *d, const char *name, const char *data, size_t n) {
    char path[4200], *have = NULL;
    size_t got = 0;
    run_dir_file(d, name, path, sizeof path);
    int same =
        bt_read_private(path, n + 1, 0, &have, &got) == 0 && got == n && memcmp(have, data, n) == 0;
    free(have);
    return same;
}

/* In a directory that is no run's, the files baton keeps and compares (recipe.yaml, the
 * recipe's bytes; overrides, the --set lines) are its own only when they hold what this
 * run would keep (one put there by hand to run it from, `baton run D/recipe.yaml --run-dir
 * D`): any other is the user's, not a run's copy to continue from. seen: which of the two
 * is there as a regular file (1 recipe.yaml, 2 overrides); returns which are the user's. */
static unsigned foreign_kept(const run_dir *d, unsigned seen, const recipe_doc *recipe,
                             const char *overrides) {
    unsigned users = 0;
    if ((seen & 1) && recipe->text != NULL &&
        !foreign_same(d, "recipe.yaml", recipe->text, recipe->text_len))
        users |= 1;
    if ((seen & 2) && !foreign_same(d, "overrides", overrides, strlen(overrides))) users |= 2;
    return users;
}

/* The refusal's note on the kept files counted as the user's (foreign_kept), into out. */
static void foreign_kept_note(unsigned users, char *out, size_t cap) {
    out[0] = '\0';
    if (users != 0)
        snprintf(out, cap,
                 "; with no lock or journal there, its %s %s no run's cop%s but yours, as %s "
                 "not the %s given, byte for byte",
                 users == 3   ? "recipe.yaml and overrides"
                 : users == 1 ? "recipe.yaml"
                              : "overrides",
                 users == 3 ? "are" : "is", users == 3 ? "ies" : "y",
                 users == 3 ? "they are" : "it is",
                 users == 3   ? "recipe and --set"
                 : users == 1 ? "recipe"
                              : "--set");
}

int run_dir_check_foreign(const run_dir *d, const recipe_doc *recipe, const char *overrides,
                          bt_diag *diag) {
    DIR *dir = opendir(d->path);
    if (dir == NULL) {
        bt_diag_set(diag, "%s: cannot list the run directory: %s", d->path, strerror(errno));
        return BT_EINVAL;
    }
    size_t n = 0;
    int marked = 0;
    unsigned seen = 0;
    char first[256] = "", note[256];
    for (struct dirent *e; (e = readdir(dir)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int kind = foreign_kind(dirfd(dir), e->d_name);
        marked |= kind == 2;
        if (kind == 1 && strcmp(e->d_name, "recipe.yaml") == 0) seen |= 1;
        if (kind == 1 && strcmp(e->d_name, "overrides") == 0) seen |= 2;
        if (kind == 0) foreign_count(e->d_name, &n, first, sizeof first);
    }
    if (!marked) marked = foreign_unmarked(dirfd(dir), &n, first, sizeof first);
    closedir(dir);
    unsigned users = marked ? 0 : foreign_kept(d, seen, recipe, overrides);
    if (users & 1) foreign_count("recipe.yaml", &n, first, sizeof first);
    if (users & 2) foreign_count("overrides", &n, first, sizeof first);
    if (marked || n == 0) return 0;
    foreign_kept_note(users, note, sizeof note);
    bt_buf b;
    bt_buf_init(&b);
    bt_diag_set(diag,
                "%s: exists and is not a baton run directory (it holds %zu entr%s of its own, "
                "such as '%s'%s), and a run's files are not mixed with others; give --run-dir a "
                "new or empty directory, or 'baton resume' a run directory",
                d->path, n, n == 1 ? "y" : "ies", bt_buf_text_of(&b, first), note);
    bt_buf_free(&b);
    return BT_EINVAL;
}
