#define _GNU_SOURCE /* realpath, F_OFD_SETLK */
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/crc32c.h"
#include "indexed.h"
#include "journal.h"
#include "loader.h"
#include "run_holder.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"

#define RUN_DIR_MAX_FILE (64u << 20)

void run_dir_file(const run_dir *d, const char *sub, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", d->path, sub);
}

/* An attempt's spec (NAME.pb) in RUN_DIR/specs: 1 with its name in what, 0 when there is
 * none (or no specs/), -1 when the directory cannot be read (diag). */
static int run_dir_has_spec(const run_dir *d, char *what, size_t cap, bt_diag *diag) {
    char dir[4200];
    run_dir_file(d, "specs", dir, sizeof dir);
    DIR *dh = opendir(dir);
    if (dh == NULL && errno == ENOENT) return 0;
    struct dirent *de = NULL;
    while (dh != NULL && (errno = 0, de = readdir(dh)) != NULL) {
        size_t k = strlen(de->d_name);
        if (k > 3 && strcmp(de->d_name + k - 3, ".pb") == 0) break; /* an attempt's spec */
    }
    int err = de == NULL ? errno : 0;
    if (de != NULL) snprintf(what, cap, "specs/%s", de->d_name);
    if (dh != NULL) closedir(dh);
    if (de == NULL && err != 0) {
        bt_diag_set(diag, "%s: cannot read: %s", dir, strerror(err));
        return -1;
    }
    return de != NULL;
}

int run_dir_has_history(const run_dir *d, char *what, size_t cap, bt_diag *diag) {
    char dir[4200], **names = NULL;
    size_t n = 0;
    run_dir_file(d, CKPT_ROOT_IN_RUN, dir, sizeof dir);
    /* complete checkpoints only; a root that cannot be listed (EACCES, EIO) tells nothing */
    int rc = ckpt_list(dir, &names, &n, diag);
    if (rc == 0 && n > 0) snprintf(what, cap, "%s/%s", CKPT_ROOT_IN_RUN, names[n - 1]);
    ckpt_names_free(names, n);
    if (rc != 0) return -1;
    return n > 0 ? 1 : run_dir_has_spec(d, what, cap, diag);
}

int run_dir_check_resumable(const char *path, bt_diag *diag) {
    Baton__JournalRecord **v;
    size_t n;
    journal_tail tail;
    if (journal_read(path, &v, &n, &tail, diag) != 0) return BT_EINVAL;
    journal_records_free(v, n);
    run_dir d = {.lock_fd = -1, .dir_lock_fd = -1};
    char file[4200], what[300];
    snprintf(d.path, sizeof d.path, "%s", path);
    /* a record, a run made by baton run or submit (its workdir noted; no attempt yet), or
     * a run's traces (whose lost journal the run itself refuses, saying more) */
    if (n > 0 || tail.size > 0 || run_dir_has_file(path, "workdir", NULL) ||
        run_dir_has_history(&d, what, sizeof what, diag) != 0)
        return 0;
    run_dir_file(&d, JOURNAL_FILE, file, sizeof file);
    bt_buf cmd;
    bt_buf_init(&cmd);
    bt_diag_set(diag, "%s: not a run directory (%s); start a run with %s", path,
                access(file, F_OK) == 0 ? "its journal is empty" : "no journal",
                bt_shell_cmd(&cmd, "baton run RECIPE --run-dir", path));
    bt_buf_free(&cmd);
    return BT_EINVAL;
}

/* A file kept in the run directory: written on first use, compared afterwards: 0 the
 * same (or written), 1 other bytes (nothing said), else the error (diag). */
static int run_dir_keep(run_dir *d, const char *name, const char *data, size_t n, bt_diag *diag) {
    char copy[4200], *kept = NULL;
    size_t n2 = 0;
    run_dir_file(d, name, copy, sizeof copy);
    if (bt_read_private(copy, RUN_DIR_MAX_FILE, 0, &kept, &n2) != 0)
        return ckpt_write_file_atomic(copy, data, n, diag);
    int same = n == n2 && memcmp(data, kept, n) == 0;
    free(kept);
    return same ? 0 : 1;
}

int run_dir_read_overrides(const run_dir *d, char **text, size_t *n) {
    char path[4200];
    run_dir_file(d, "overrides", path, sizeof path);
    *text = NULL, *n = 0;
    return bt_read_private(path, RUN_DIR_MAX_FILE, 0, text, n) == 0 ? 0 : -1;
}

void run_dir_sets_line(const char *text, char *out, size_t cap) {
    size_t k = 0;
    out[0] = '\0';
    for (const char *p = text; *p && k + 1 < cap;) {
        size_t len = strcspn(p, "\n");
        if (len > 0) {
            int w = snprintf(out + k, cap - k, "%s--set %.*s", k ? " " : "", (int)len, p);
            k = w > 0 && (size_t)w < cap - k ? k + (size_t)w : cap - 1;
        }
        p += len + (p[len] == '\n');
    }
    if (k == 0) snprintf(out, cap, "no --set");
}

/* The command that continues the run d with the --set assignments overrides (one per line)
 * and writes its overrides file again, as a message shows it (shquote.h), into out. */
static const char *run_dir_rerun_cmd(const run_dir *d, const char *overrides, bt_buf *out) {
    char recipe[4200];
    run_dir_file(d, "recipe.yaml", recipe, sizeof recipe);
    bt_buf line;
    bt_buf_init(&line);
    bt_buf_printf(&line, "baton run ");
    bt_buf_shell_word(&line, recipe);
    bt_buf_printf(&line, " --run-dir ");
    bt_buf_shell_word(&line, d->path);
    for (const char *p = overrides; *p;) {
        size_t len = strcspn(p, "\n");
        char *set = len > 0 ? strndup(p, len) : NULL;
        if (set != NULL) bt_buf_printf(&line, " --set "), bt_buf_shell_word(&line, set);
        free(set);
        p += len + (p[len] == '\n');
    }
    bt_shell_shown(out, bt_buf_str(&line));
    bt_buf_free(&line);
    return bt_buf_str(out);
}

/* The --set lines of text (n bytes) as baton resume reads them (one per line, empty lines
 * skipped), each ended by a newline, as the caller's overrides are: a copy edited by hand
 * (no last newline, an empty line) compares the same. Free it. */
static char *run_dir_sets_canon(const char *text, size_t n) {
    char *out = malloc(n + 2), *o = out;
    for (size_t i = 0; out != NULL && i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t len = nl ? (size_t)(nl - (text + i)) : n - i;
        if (len > 0) memcpy(o, text + i, len), o += len, *o++ = '\n';
        i += len + (nl != NULL);
    }
    if (out != NULL) *o = '\0';
    return out;
}

/* The kept overrides against the CRC32C the journal's RUN_STARTED has of them as the run
 * started (journals older than that have none: nothing to check). `baton resume`
 * reapplies the kept copy, so a lost one would go on as none, under another schedule in
 * the middle of a stage: it is refused rather than replaced. A lost copy is no loss when
 * the caller's overrides (none, for resume) are the run's: it is written again. An edited
 * copy is the user's edit, taken as an edit of the kept recipe.yaml is (the same checks
 * judge the recipe it gives, run_edit.h) and said (d->note). */
static int run_dir_check_overrides(run_dir *d, const char *overrides, bt_diag *diag) {
    Baton__JournalRecord **v;
    size_t n;
    journal_tail tail;
    int rc = journal_read(d->path, &v, &n, &tail, diag);
    if (rc != 0) return rc;
    const Baton__JournalRecord *started = journal_run_started(v, n);
    char *kept = NULL, copy[4200], sets[2048];
    size_t kept_n = 0;
    int have = started ? run_dir_read_overrides(d, &kept, &kept_n) == 0 : 0;
    if (started) {
        run_dir_file(d, "overrides", copy, sizeof copy);
        size_t k = (size_t)snprintf(sets, sizeof sets, "%s ",
                                    started->detail ? "went on with" : "was started with");
        if (started->overrides)
            run_dir_sets_line(started->overrides, sets + k, sizeof sets - k);
        else
            snprintf(sets + k, sizeof sets - k, "--set overrides of CRC32C %08x",
                     started->overrides_crc32c);
    }
    if (started && !have && errno != ENOENT) {
        bt_diag_set(diag, "%s: cannot read: %s", copy, strerror(errno));
        rc = BT_EIO;
    } else if (started && !have &&
               crc32c_update(0, overrides, strlen(overrides)) != started->overrides_crc32c) {
        bt_buf cmd;
        bt_buf_init(&cmd);
        if (started->overrides)
            bt_diag_set(diag,
                        "%s is missing (the run %s); restore it with those "
                        "assignments, one per line, or continue with %s, which writes it again; "
                        "to start over, choose another --run-dir",
                        copy, sets, run_dir_rerun_cmd(d, started->overrides, &cmd));
        else
            bt_diag_set(diag,
                        "%s is missing (the run %s); restore it, or continue "
                        "with 'baton run' and the run's --set, which writes it again; to start "
                        "over, choose another --run-dir",
                        copy, sets);
        bt_buf_free(&cmd);
        rc = BT_EINVAL;
    } else if (have && crc32c_update(0, kept, kept_n) != started->overrides_crc32c) {
        snprintf(d->note, sizeof d->note,
                 "%.1200s was edited (the run %.1000s): taken as it is now, as an edit of the "
                 "kept recipe.yaml is",
                 copy, sets);
    }
    free(kept);
    journal_records_free(v, n);
    return rc;
}

/* The overrides kept (RUN_DIR/overrides): written when there is no copy; else 0 when the
 * copy holds the caller's --set lines (run_dir_sets_canon), written again as they are
 * read when edited by hand otherwise (an empty line, no last newline: the bytes whose
 * CRC32C the journal keeps, as status compares), 1 when other ones (nothing said), else
 * the error (diag). */
static int run_dir_keep_sets(run_dir *d, const char *overrides, bt_diag *diag) {
    char *kept = NULL, path[4200];
    size_t n = 0, len = strlen(overrides);
    if (run_dir_read_overrides(d, &kept, &n) != 0)
        return run_dir_keep(d, "overrides", overrides, len, diag);
    char *canon = run_dir_sets_canon(kept, n);
    int same = canon != NULL && strcmp(canon, overrides) == 0, rc = same ? 0 : 1;
    run_dir_file(d, "overrides", path, sizeof path);
    if (same && (n != len || memcmp(kept, overrides, n) != 0))
        rc = ckpt_write_file_atomic(path, overrides, len, diag);
    free(canon), free(kept);
    return rc;
}

/* The recipe's bytes this process works with, as RUN_DIR_RUNNING_RECIPE, written each time
 * one takes the run: the kept recipe.yaml may be edited while it runs (the edit is taken
 * at the next resume), and baton status then shows the steps and ETA of what runs, from
 * this copy (only when its CRC32C is the one the holder's record names, run_holder.h). A
 * failure (a full disk) is not said: status then shows no planned steps for an edited
 * recipe of the run. */
static void run_dir_note_running(const run_dir *d, const recipe_doc *recipe) {
    char path[4200];
    bt_diag ignore;
    bt_diag_init(&ignore);
    run_dir_file(d, RUN_DIR_RUNNING_RECIPE, path, sizeof path);
    ckpt_write_file_atomic(path, recipe->text, recipe->text_len, &ignore);
}

/* The recipe's bytes as loaded kept (recipe.yaml), and the overrides: never the recipe's
 * file read again, which a pipe or FIFO cannot give twice (an empty copy: a run that
 * cannot be resumed) and an editor may have changed since it was parsed. */
static int run_dir_recipe(run_dir *d, const recipe_doc *recipe, const char *overrides,
                          bt_diag *diag) {
    if (recipe->text == NULL) { /* a recipe_doc not from recipe_load_file: none to keep */
        bt_diag_set(diag, "%s: the recipe's text is not at hand to keep", recipe->file);
        return BT_EINVAL;
    }
    int rc = run_dir_keep(d, "recipe.yaml", recipe->text, recipe->text_len, diag);
    if (rc == 1) run_dir_other_recipe(d, recipe, diag);
    rc = rc ? rc : run_dir_keep_sets(d, overrides, diag);
    if (rc == 1) run_dir_other_sets(d, overrides, diag);
    if (rc == 0) run_dir_note_running(d, recipe);
    return rc == 1 ? BT_EINVAL : rc;
}

/* bytes (at most 32) random bytes as hex into out (2 * bytes + 1), kept in the run
 * directory's file name (0600): the hex digits the file begins with when it holds as many,
 * else new ones, written there. what: what they are, for a message. */
static int run_dir_random(run_dir *d, const char *name, size_t bytes, char *out, const char *what,
                          bt_diag *diag) {
    char path[4200], *have = NULL;
    size_t n = 0, hex = 2 * bytes;
    run_dir_file(d, name, path, sizeof path);
    int got = bt_read_private(path, RUN_DIR_MAX_FILE, 1, &have, &n);
    if (got != 0 && errno != ENOENT) {
        bt_diag_set(diag,
                    "%s: not used as the run's %s: %s; another user may have planted it: "
                    "remove it (a new one is made)",
                    path, what,
                    errno == ELOOP    ? "it is a symbolic link"
                    : errno == EINVAL ? "it is not a regular file"
                    : errno == EPERM  ? "it is not yours alone (owner, or mode not 0600)"
                                      : strerror(errno));
        return BT_EINVAL;
    }
    if (got == 0 && n >= hex && strspn(have, "0123456789abcdef") >= hex) {
        memcpy(out, have, hex);
        out[hex] = '\0';
        free(have);
        return 0;
    }
    free(have);
    unsigned char raw[32];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    int ok = fd >= 0 && read(fd, raw, bytes) == (ssize_t)bytes;
    if (fd >= 0) close(fd);
    if (!ok) {
        bt_diag_set(diag, "/dev/urandom: cannot read the run's %s: %s", what, strerror(errno));
        return BT_EIO;
    }
    for (size_t i = 0; i < bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return ckpt_write_file_atomic(path, out, hex, diag);
}

/* fd, where it is open on path's file (a lock the baton run that executed this one in
 * its place kept open for it: RUN_DIR_LOCKS_ENV), made close-on-exec again; else -1. Its
 * lock, held already, is then taken again on it: nothing can come in between. */
static int run_dir_adopt(int fd, const char *path) {
    struct stat a, b;
    if (fd < 3 || fstat(fd, &a) != 0 || stat(path, &b) != 0) return -1;
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) return -1;
    return fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 ? fd : -1;
}

/* A flock on the run directory itself, which no one deletes as a stale lock file: 0
 * taken (or flock unsupported there, e.g. some network file systems: the lock file alone
 * then), -1 held by another baton run. Waits a moment, as `baton status` tests it by
 * taking it briefly (run_dir_busy). On NFS it holds against this host's processes only
 * (the client keeps a directory's flock to itself): across hosts the OFD lock on the
 * lock file alone keeps a second baton run out. */
static int run_dir_lock_dir(run_dir *d, int inherited) {
    d->dir_lock_fd = run_dir_adopt(inherited, d->path);
    if (d->dir_lock_fd < 0) d->dir_lock_fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->dir_lock_fd < 0) return 0; /* run_dir_lock says why it is not usable */
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int tries = 0; tries < 10; tries++) {
        if (flock(d->dir_lock_fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK) break;
        nanosleep(&nap, NULL);
    }
    int held = errno == EWOULDBLOCK;
    close(d->dir_lock_fd);
    d->dir_lock_fd = -1;
    return held ? -1 : 0;
}

/* An open-file-description write lock on RUN_DIR/lock and a flock on RUN_DIR: held while a
 * baton run works here (released by the kernel if it dies); `baton status` only tests
 * them (run_dir_busy). */
int run_dir_lock(run_dir *d, bt_diag *diag) {
    char path[4200];
    int kept[2] = {-1, -1}; /* the lock file's, the directory's */
    const char *env = getenv(RUN_DIR_LOCKS_ENV);
    if (env != NULL && sscanf(env, "%d,%d", &kept[0], &kept[1]) != 2) kept[0] = kept[1] = -1;
    unsetenv(RUN_DIR_LOCKS_ENV); /* nothing this process starts is handed them */
    char holder[4600];
    if (run_dir_lock_dir(d, kept[1]) != 0) {
        run_holder_refusal(d->path, holder, sizeof holder);
        bt_diag_set(diag, "%s: another baton run is working in this run directory%s", d->path,
                    holder);
        return BT_EINVAL;
    }
    run_dir_file(d, "lock", path, sizeof path);
    d->lock_fd = run_dir_adopt(kept[0], path);
    int adopted = d->lock_fd >= 0;
    if (d->lock_fd < 0) d->lock_fd = bt_open_private(path, O_RDWR | O_CREAT);
    int err = errno;
    /* the directory refusing a new file is said as such (EACCES, EPERM, EROFS); anything
     * else is the lock file's: something planted (a FIFO, a link, a directory: EINVAL,
     * ELOOP, EISDIR), or a full disk, named as the lock file */
    if (d->lock_fd < 0 && err != EACCES && err != EPERM && err != EROFS) {
        int planted = err == EINVAL || err == ELOOP || err == EISDIR;
        bt_diag_set(diag, "%s: cannot open: %s%s", path, bt_file_why(err),
                    planted ? " (baton keeps a regular file there: remove what is there, "
                              "then try again)"
                            : "");
        return BT_EINVAL;
    }
    if (d->lock_fd < 0 && (err == EACCES || err == EPERM) &&
        run_dir_has_file(d->path, "lock", NULL)) { /* there, but not writable by this user */
        bt_diag_set(diag,
                    "%s: the run's lock file cannot be opened for writing: %s (make it "
                    "writable by you: chmod u+w %s)",
                    path, strerror(err), path);
        return BT_EINVAL;
    }
    if (d->lock_fd < 0) {
        bt_diag_set(diag, "%s: the run directory is not writable: %s", d->path, strerror(err));
        return BT_EINVAL;
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(d->lock_fd, F_OFD_SETLK, &fl) != 0) {
        run_holder_refusal(d->path, holder, sizeof holder);
        bt_diag_set(diag, "%s: another baton run is working in this run directory%s", d->path,
                    holder);
        close(d->lock_fd);
        d->lock_fd = -1;
        return BT_EINVAL;
    }
    /* a holder's record left by one killed (run_holder.h) is no one's now; one taken over
     * across an exec is this process's own */
    if (!adopted) (void)!ftruncate(d->lock_fd, 0);
    return 0;
}

/* Whether a baton run holds the flock on directory path (taken shared for a moment). */
static int run_dir_busy_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return busy;
}

int run_dir_busy(const char *path) {
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/lock", path);
    int fd = open(lock, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW); /* a FIFO: no wait */
    int busy = 0;
    if (fd >= 0) {
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        busy = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
        close(fd);
    }
    return busy || run_dir_busy_dir(path); /* the lock file deleted as stale */
}

static const char *run_dir_unsafe(const struct stat *st, char *why, size_t cap);

/* An existing run directory that another user owns or may write is refused: that user
 * could plant files and symbolic links in it for baton to write through (as ssh's
 * StrictModes refuses such a home). */
static int run_dir_check_owner(const run_dir *d, const struct stat *st, bt_diag *diag) {
    char why[128];
    if (run_dir_unsafe(st, why, sizeof why) == NULL) return 0;
    char mode[32] = "";
    if (st->st_uid != geteuid()) snprintf(mode, sizeof mode, " (mode %03o)", st->st_mode & 0777);
    bt_diag_set(diag,
                "%s: not used as a run directory: it is %s%s, so another user could plant "
                "files or symbolic links in it that baton would write through; make it yours "
                "and writable by you alone (chown, chmod 700), or choose another run directory",
                d->path, why, mode);
    return BT_EINVAL;
}

/* What baton keeps in a run directory under fixed names (run_dir_names, RUN_DIR_LINKS):
 * none may be a symbolic link (another user's, planted to redirect the run's writes), nor
 * a directory another user owns or may write. */
static int run_dir_check_entries(const run_dir *d, bt_diag *diag) {
    char path[4200], why[128];
    for (size_t i = 0; i < run_dir_n_names; i++) {
        struct stat st;
        if (!(run_dir_names[i].flags & RUN_DIR_LINKS)) continue;
        run_dir_file(d, run_dir_names[i].name, path, sizeof path);
        const char *bad = lstat(path, &st) != 0  ? NULL
                          : S_ISLNK(st.st_mode)  ? "a symbolic link"
                          : !S_ISDIR(st.st_mode) ? NULL /* a file, or said where it is used */
                                                 : run_dir_unsafe(&st, why, sizeof why);
        if (bad == NULL) continue;
        bt_diag_set(diag,
                    "%s: %s, which baton does not use in a run directory: another user may "
                    "have made it to redirect what the run writes; %s",
                    path, bad,
                    S_ISLNK(st.st_mode) ? "remove it"
                                        : "make it yours and writable by you alone, or remove it");
        return BT_EINVAL;
    }
    return 0;
}

/* A directory that was there: refused when another user could have planted anything in
 * it (run_dir_check_owner, run_dir_check_entries); d->warning when others may read it. */
static int run_dir_check_existing(run_dir *d, const struct stat *st, bt_diag *diag) {
    if (run_dir_check_owner(d, st, diag) != 0 || run_dir_check_entries(d, diag) != 0)
        return BT_EINVAL;
    if (st->st_mode & 077)
        snprintf(d->warning, sizeof d->warning,
                 "%s is readable by other users (mode %03o); run directories baton creates "
                 "are 0700",
                 d->path, (unsigned)(st->st_mode & 0777));
    return 0;
}

/* specs/ and logs/ made 0700 unless there (never through a symbolic link). */
static int run_dir_subdirs(const run_dir *d, bt_diag *diag) {
    const char *subs[] = {"specs", "logs"};
    char sub[4200];
    for (size_t i = 0; i < 2; i++) {
        run_dir_file(d, subs[i], sub, sizeof sub);
        if (bt_mkdir_private(sub) != 0 && errno != ENOTDIR) { /* a file: said where used */
            bt_diag_set(diag, "%s: cannot create: %s", sub, strerror(errno));
            return BT_EINVAL;
        }
    }
    return 0;
}

/* d->path made (0700) unless there, each directory made recorded (d->made: only those
 * are removed after a refusal, run_dir_unmake); *st and *existed: what is there now and
 * whether this call did not make it. A file there is refused before anything is said
 * about its mode. */
static int run_dir_make(run_dir *d, struct stat *st, int *existed, bt_diag *diag) {
    size_t len = strlen(d->path);
    while (len > 1 && d->path[len - 1] == '/')
        len--;
    snprintf(d->given, sizeof d->given, "%s", d->path);
    int rc = bt_mkdir_p_made(d->path, 0700, d->made, RUN_DIR_MADE_MAX, &d->n_made);
    d->made_leaf = d->n_made > 0 && d->made[d->n_made - 1] == len;
    *existed = !d->made_leaf;
    if (rc == 0 && stat(d->path, st) != 0) rc = -1;
    if (rc == 0 && !S_ISDIR(st->st_mode)) {
        bt_diag_set(diag, "%s: exists and is not a directory (give --run-dir another path)",
                    d->path);
        return BT_EINVAL;
    }
    if (rc == 0 && (*existed || chmod(d->path, 0700) == 0)) return 0;
    int err = errno;
    char cwd[PATH_MAX];
    int rel = d->path[0] != '/' && getcwd(cwd, sizeof cwd) != NULL;
    bt_diag_set(diag, "%s: cannot create the run directory: %s%s%s%s", d->path, strerror(err),
                rel ? " (relative to " : "", rel ? cwd : "", rel ? ")" : "");
    return BT_EINVAL;
}

/* Whether d holds an entry named name, of any kind. */
static int run_dir_has_entry(const run_dir *d, const char *name) {
    char path[4200];
    struct stat st;
    run_dir_file(d, name, path, sizeof path);
    return lstat(path, &st) == 0;
}

/* d->had: which of run_dir_names an existing directory, just locked, holds (the lock file
 * as it was before: lock_was), for run_dir_unmake to keep. Taken once the lock is held, so
 * that what a baton run that held it before wrote counts as there before. */
static void run_dir_note_had(run_dir *d, int lock_was) {
    d->wrote_in = 1;
    for (size_t i = 0; i < run_dir_n_names; i++)
        d->had[i] = strcmp(run_dir_names[i].name, "lock") == 0
                        ? (unsigned char)lock_was
                        : (unsigned char)run_dir_has_entry(d, run_dir_names[i].name);
}

int run_dir_has_started(const char *run_dir_path) {
    struct stat st;
    if (run_dir_has_file(run_dir_path, "workdir", NULL)) return 1;
    return run_dir_has_file(run_dir_path, JOURNAL_FILE, &st) && st.st_size > 0;
}

/* A refused run_dir_open: what it made removed again (run_dir_unmake), a failure to
 * said after why it was refused; d closed. */
static void run_dir_open_undo(run_dir *d, bt_diag *diag) {
    char said[4500];
    if (run_dir_unmake(d, said, sizeof said) >= 0) return;
    size_t k = strlen(diag->msg);
    snprintf(diag->msg + k, sizeof diag->msg - k, " (and %s)", said);
}

int run_dir_open(run_dir *d, const char *path, const recipe_doc *recipe, const char *overrides,
                 bt_diag *diag) {
    memset(d, 0, sizeof *d);
    d->lock_fd = d->dir_lock_fd = -1;
    if (snprintf(d->path, sizeof d->path, "%s", path) >= (int)sizeof d->path) {
        bt_diag_set(diag, "%s: the run directory's path is too long", path);
        return BT_EINVAL;
    }
    struct stat st;
    int existed;
    if (run_dir_check_parents(d, path, diag) != 0) return BT_EINVAL; /* before making it */
    int rc = run_dir_make(d, &st, &existed, diag);
    char abs[PATH_MAX];
    if (rc == 0 && (realpath(d->path, abs) == NULL || strlen(abs) >= sizeof d->path)) {
        bt_diag_set(diag, "%s: cannot resolve the run directory: %s", d->path, strerror(errno));
        rc = BT_EINVAL;
    }
    if (rc == 0) /* workers and specs see one absolute path */
        snprintf(d->path, sizeof d->path, "%s", abs);
    /* judged again on the resolved path every later step uses: where the directory really
     * is, should a link on the way have changed since the first check */
    rc = rc ? rc : run_dir_check_parents(d, d->path, diag);
    if (rc == 0 && existed) rc = run_dir_check_existing(d, &st, diag);
    if (rc == 0 && existed) /* not mixed with others' */
        rc = run_dir_check_foreign(d, recipe, overrides, diag);
    int lock_was = existed && rc == 0 && run_dir_has_entry(d, "lock");
    rc = rc ? rc : run_dir_lock(d, diag);
    if (rc == 0 && existed) run_dir_note_had(d, lock_was);
    if (rc == 0) d->started = run_dir_has_started(d->path);
    rc = rc ? rc : run_dir_check_overrides(d, overrides, diag);
    rc = rc ? rc : run_dir_recipe(d, recipe, overrides, diag);
    rc = rc ? rc : run_dir_random(d, "secret", 32, d->token, "secret", diag);
    rc = rc ? rc : run_dir_random(d, "run_id", 16, d->run_id, "id", diag);
    rc = rc ? rc : run_dir_subdirs(d, diag);
    if (rc != 0) run_dir_open_undo(d, diag);
    return rc;
}

int run_dir_note_start(const run_dir *d, const char *worker, bt_diag *diag) {
    char path[4200], cwd[PATH_MAX];
    run_dir_file(d, "workdir", path, sizeof path);
    if (run_dir_has_file(d->path, "workdir", NULL)) return 0; /* the run started before */
    char kept[4200];
    run_dir_file(d, "worker", kept, sizeof kept);
    /* a worker file there before the run started is none of its own: never run */
    if (worker == NULL && unlink(kept) != 0 && errno != ENOENT) {
        bt_diag_set(diag, "%s: cannot remove (a new run keeps no worker): %s", kept,
                    strerror(errno));
        return BT_EINVAL;
    }
    if (worker != NULL) {
        int rc = ckpt_write_file_atomic(kept, worker, strlen(worker), diag);
        if (rc != 0) return rc;
    }
    if (getcwd(cwd, sizeof cwd) == NULL) return 0; /* nothing to note: resume stays put */
    return ckpt_write_file_atomic(path, cwd, strlen(cwd), diag);
}

/* Why st (of what, at path) may not name the program a run starts: owned by another user,
 * or writable by group or others (anyone who can write it chooses what runs); NULL when
 * it may. */
static const char *run_dir_unsafe(const struct stat *st, char *why, size_t cap) {
    if (st->st_uid != geteuid())
        snprintf(why, cap, "owned by uid %u, not by you (uid %u)", (unsigned)st->st_uid,
                 (unsigned)geteuid());
    else if (st->st_mode & 022)
        snprintf(why, cap, "writable by %s (mode %03o)",
                 (st->st_mode & 022) == 022 ? "group and others"
                 : (st->st_mode & 020) != 0 ? "its group"
                                            : "others",
                 (unsigned)(st->st_mode & 0777));
    else
        return NULL;
    return why;
}

/* The kept worker's bytes from fd (a file checked safe) into out: 1, or BT_EINVAL. */
static int run_dir_worker_text(int fd, const char *path, char *out, size_t cap, bt_diag *diag) {
    ssize_t n = read(fd, out, cap);
    if (n <= 0 || (size_t)n >= cap || memchr(out, '\0', (size_t)n) != NULL) {
        bt_diag_set(diag, "%s: not a program's path (%s)", path,
                    n < 0    ? strerror(errno)
                    : n == 0 ? "empty"
                             : "too long, or binary");
        return BT_EINVAL;
    }
    out[n] = '\0';
    return 1;
}

int run_dir_read_worker(const char *run_dir_path, char *out, size_t cap, bt_diag *diag) {
    char path[4200], why[128];
    snprintf(path, sizeof path, "%s/worker", run_dir_path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return 0;
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot be read: %s", path,
                    errno == ELOOP ? "a symbolic link (the run's worker must be a file)"
                                   : strerror(errno));
        return BT_EINVAL;
    }
    struct stat st, dst;
    const char *bad = NULL, *what = path;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        bad = "not a regular file";
    else if ((bad = run_dir_unsafe(&st, why, sizeof why)) == NULL) {
        what = run_dir_path;
        bad =
            stat(run_dir_path, &dst) != 0 ? strerror(errno) : run_dir_unsafe(&dst, why, sizeof why);
    }
    int rc = bad == NULL ? run_dir_worker_text(fd, path, out, cap, diag) : BT_EINVAL;
    close(fd);
    if (bad != NULL)
        bt_diag_set(diag,
                    "%s: the worker this run was started with is not used: %s is %s, so "
                    "another user may have chosen the program it names (make both yours "
                    "and writable by you alone, or give --worker PATH)",
                    path, what, bad);
    return rc;
}

/* Why the run's working directory dir (kept in file, RUN_DIR/workdir) cannot be entered
 * (err), and the echo that writes a new one, its redirect target one shell word. */
static void run_dir_workdir_gone(const char *run_dir_path, const char *dir, const char *file,
                                 int err, bt_diag *diag) {
    bt_buf echo;
    bt_buf_init(&echo);
    bt_buf_printf(&echo, "echo NEW_PATH > ");
    bt_buf_shell_word(&echo, file);
    bt_diag_set(diag,
                "%s: the run's working directory %s, where its relative data paths resolve, "
                "cannot be entered: %s; if it moved, write its new path into %s (%s) and "
                "resume again",
                run_dir_path, dir, strerror(err), file, bt_buf_str(&echo));
    bt_buf_free(&echo);
}

int run_dir_enter_workdir(const char *run_dir_path, int *moved, bt_diag *diag) {
    char path[4200], cwd[PATH_MAX], *dir = NULL;
    size_t n = 0;
    *moved = 0;
    snprintf(path, sizeof path, "%s/workdir", run_dir_path);
    if (bt_read_private(path, PATH_MAX, 0, &dir, &n) != 0) { /* none: an older run, stay */
        if (errno == ENOENT) return 0;
        bt_diag_set(diag, "%s: cannot read (not followed if a symbolic link): %s", path,
                    strerror(errno));
        return BT_EINVAL;
    }
    if (n > 0 && dir[n - 1] == '\n') dir[n - 1] = '\0'; /* one written by hand, with echo */
    int rc = 0;
    if (getcwd(cwd, sizeof cwd) == NULL || strcmp(cwd, dir) != 0) {
        if (chdir(dir) != 0) {
            run_dir_workdir_gone(run_dir_path, dir, path, errno, diag);
            rc = BT_EINVAL;
        } else {
            *moved = 1;
        }
    }
    free(dir);
    return rc;
}

void run_dir_close(run_dir *d) {
    /* the holder's record (run_holder.h) emptied while the lock is still held */
    if (d->lock_fd >= 0) (void)!ftruncate(d->lock_fd, 0), close(d->lock_fd);
    if (d->dir_lock_fd >= 0) close(d->dir_lock_fd);
    d->lock_fd = d->dir_lock_fd = -1;
}

/* For a message about path: "relative to CWD; " where path is relative (it resolves
 * against the working directory, not the recipe's), else "". */
static void run_dir_relative_note(char *out, size_t cap, const char *path) {
    char cwd[PATH_MAX];
    out[0] = '\0';
    if (path[0] != '/') snprintf(out, cap, "relative to %s; ", getcwd(cwd, sizeof cwd) ? cwd : "?");
}

/* The command that makes a missing dataset: passkey documents by their name ("passkey"
 * in the file name, as the shipped recipes and quickstart name them), else text. */
static const char *run_dir_data_maker(const char *prefix) {
    const char *base = strrchr(prefix, '/');
    return strstr(base ? base + 1 : prefix, "passkey") ? "baton data passkey"
                                                       : "baton data prepare";
}

#define RUN_DIR_MAX_DATASETS 64

/* The datasets checked so far (each once, however many stages read it) and a line for
 * each that cannot be read. */
typedef struct run_dir_missing {
    char *seen[RUN_DIR_MAX_DATASETS];
    size_t n_seen;
    int n, relative;
    char first[4096];        /* the first missing one's line, without the note */
    char first_prefix[1024]; /* and its prefix */
    int first_absent;        /* its files are not there (not: there but unreadable) */
    bt_buf lines;            /* every missing one's line, each with what makes it */
} run_dir_missing;

static void run_dir_check_prefix(run_dir_missing *m, const char *prefix, const char *stage,
                                 const char *what) {
    for (size_t i = 0; i < m->n_seen; i++)
        if (strcmp(m->seen[i], prefix) == 0) return;
    char *copy = m->n_seen < RUN_DIR_MAX_DATASETS ? strdup(prefix) : NULL;
    if (copy) m->seen[m->n_seen++] = copy;
    indexed_dataset ds;
    bt_diag inner;
    bt_diag_init(&inner);
    int rc = indexed_open(&ds, prefix, &inner);
    if (rc == 0) {
        indexed_close(&ds);
        return;
    }
    char line[4096];
    snprintf(line, sizeof line, "stage \"%s\": %s data %s: %s", stage, what, prefix, inner.msg);
    if (m->n == 0) {
        snprintf(m->first, sizeof m->first, "%s", line);
        snprintf(m->first_prefix, sizeof m->first_prefix, "%s", prefix);
        m->first_absent = rc == BT_ENOENT;
    }
    /* how to make it only where it is not there: a file there but unreadable (a float
     * dtype, corrupt) is no dataset to make */
    bt_buf_printf(&m->lines, "%s%s", m->n ? "\n  " : "", line);
    if (rc == BT_ENOENT)
        bt_buf_printf(&m->lines, " (make it with '%s')", run_dir_data_maker(prefix));
    m->n++;
    m->relative |= prefix[0] != '/';
}

/* The missing datasets' message: one as it always read, "(relative to CWD; make it with
 * ...)"; several one per line under a line that counts them and names the directory. */
static void run_dir_missing_diag(const run_dir_missing *m, bt_diag *diag) {
    char rel[PATH_MAX + 48], cwd[PATH_MAX];
    const char *prefix = m->first_prefix;
    if (m->n == 1 && !m->first_absent) {
        bt_diag_set(diag, "%s", m->first);
        return;
    }
    if (m->n == 1) {
        run_dir_relative_note(rel, sizeof rel, prefix);
        bt_diag_set(diag, "%s (%smake it with '%s')", m->first, rel, run_dir_data_maker(prefix));
        return;
    }
    rel[0] = '\0';
    if (m->relative)
        snprintf(rel, sizeof rel, " (relative paths resolve against %s)",
                 getcwd(cwd, sizeof cwd) ? cwd : "?");
    bt_diag_set(diag, "%d datasets the recipe reads cannot be read%s:\n  %s", m->n, rel,
                bt_buf_str(&m->lines));
}

int run_dir_check_data(const recipe_doc *doc, bt_diag *diag) {
    const char *init = doc->recipe->init;
    char dir[CKPT_PATH_MAX];
    bt_diag inner;
    bt_diag_init(&inner);
    if (init != NULL && init[0] != '\0' && ckpt_resolve(init, dir, sizeof dir, &inner) != 0) {
        char rel[PATH_MAX + 32];
        run_dir_relative_note(rel, sizeof rel, init);
        bt_diag_set(diag, "init: %s (%smake one with 'baton ckpt import', or give a run's)",
                    inner.msg, rel);
        return BT_EINVAL;
    }
    run_dir_missing m = {.n = 0};
    bt_buf_init(&m.lines);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < doc->recipe->n_stages; i++) {
        Baton__StageSpec *spec = NULL;
        rc = recipe_resolve_stage(doc, i, &spec, diag);
        loader_source src[16];
        size_t n = rc == 0 ? loader_sources_from_data(spec->data, src, 16) : 0;
        if (rc == 0 && n == 0) {
            bt_diag_set(diag, "stage \"%s\": no training data (data.train or data.mix)",
                        spec->stage->name);
            rc = BT_EINVAL;
        }
        for (size_t k = 0; rc == 0 && k < n; k++)
            run_dir_check_prefix(&m, src[k].prefix, spec->stage->name, "training");
        if (rc == 0 && spec->data->valid && spec->data->valid[0])
            run_dir_check_prefix(&m, spec->data->valid, spec->stage->name, "validation");
        if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
    }
    if (rc == 0 && m.n > 0) {
        run_dir_missing_diag(&m, diag);
        rc = BT_EINVAL;
    }
    for (size_t i = 0; i < m.n_seen; i++)
        free(m.seen[i]);
    bt_buf_free(&m.lines);
    return rc;
}
