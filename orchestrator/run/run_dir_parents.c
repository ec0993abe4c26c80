/* The directories above a run directory: whoever may rename or replace an entry in one of
 * them may put a directory of their own where the run directory (or the next ancestor) is,
 * and so plant files and links for baton to write through, whatever the run directory's
 * own owner and mode (run_dir_check_owner). As OpenSSH's safe_path judges a path: each
 * ancestor owned by root or by you, and writable by no one else unless sticky (/tmp, 1777:
 * others may add entries, never rename or remove yours). */
#define _DEFAULT_SOURCE /* readlink, lstat, S_ISVTX */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run_dir.h"
#include "util/buf.h"
#include "util/file.h"
#include "util/shquote.h"

/* p cut to its parent directory in place ("a/b/" -> "a", "a" -> ".", "/a" -> "/"); 0 when
 * p has none ("/", "."). */
static int run_dir_parent(char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    if (strcmp(p, "/") == 0 || strcmp(p, ".") == 0) return 0;
    char *slash = strrchr(p, '/');
    if (slash == NULL)
        snprintf(p, 2, ".");
    else if (slash == p)
        p[1] = '\0';
    else
        *slash = '\0';
    return 1;
}

/* gid: your own user-private group (named as you are, with no other member), whose write
 * permission gives no one else anything (the layout umask 002 makes on many systems). */
static int run_dir_own_group(gid_t gid) {
    if (gid != getegid()) return 0;
    const struct passwd *pw = getpwuid(geteuid());
    const struct group *gr = pw ? getgrgid(gid) : NULL;
    if (gr == NULL || strcmp(gr->gr_name, pw->pw_name) != 0) return 0;
    for (char *const *m = gr->gr_mem; *m; m++)
        if (strcmp(*m, pw->pw_name) != 0) return 0;
    return 1;
}

/* The uid a user namespace shows for the users it does not map: host root's files among
 * them (/tmp, / under apptainer --fakeroot, rootless podman, unshare -r), which no one in
 * the namespace can be told apart from root by; -1 in the initial namespace (its uid_map
 * maps every uid: "0 0 4294967295"), where that uid is a user of its own (nobody). */
static long run_dir_unmapped_uid(void) {
    static long uid = -2;
    if (uid != -2) return uid;
    uid = -1;
    unsigned long inside, outside, count;
    FILE *f = fopen("/proc/self/uid_map", "r");
    if (f == NULL) return uid;
    int initial = fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
                  outside == 0 && count == 4294967295UL;
    fclose(f);
    if (initial) return uid;
    uid = 65534; /* the kernel's default */
    f = fopen("/proc/sys/kernel/overflowuid", "r");
    if (f != NULL && fscanf(f, "%lu", &count) == 1) uid = (long)count;
    if (f != NULL) fclose(f);
    return uid;
}

/* Who else may rename entries of directory st: 2 anyone (writable by others, not sticky),
 * 1 some (writable by a group not yours alone, not sticky; or owned by another user than
 * root, or than the unmapped uid a user namespace shows for root's), 0 no one; why says
 * so. */
static int run_dir_parent_open(const struct stat *st, char *why, size_t cap) {
    int sticky = (st->st_mode & S_ISVTX) != 0;
    unsigned mode = (unsigned)(st->st_mode & 07777);
    if ((st->st_mode & S_IWOTH) && !sticky) {
        snprintf(why, cap, "writable by others without the sticky bit (mode %04o)", mode);
        return 2;
    }
    if ((st->st_mode & S_IWGRP) && !sticky && !run_dir_own_group(st->st_gid)) {
        snprintf(why, cap, "writable by its group (gid %u) without the sticky bit (mode %04o)",
                 (unsigned)st->st_gid, mode);
        return 1;
    }
    if (st->st_uid != 0 && st->st_uid != geteuid() && (long)st->st_uid != run_dir_unmapped_uid()) {
        snprintf(why, cap, "owned by uid %u, neither root nor you", (unsigned)st->st_uid);
        return 1;
    }
    return 0;
}

/* Why path is refused: real, a directory above below (the run directory, or a link on its
 * way), is why; the chmod commands that would make it safe, its path one shell word. */
static void run_dir_parent_refused(const char *path, const char *real, const char *below,
                                   const char *why, bt_diag *diag) {
    bt_buf ow, t;
    bt_buf_init(&ow), bt_buf_init(&t);
    bt_diag_set(diag,
                "%s: not used as a run directory: %s, a directory above %s, is %s, so any "
                "user could rename what is in it and put a directory of their own in the run "
                "directory's path for baton to write in; choose a run directory whose every "
                "parent is writable by you or root alone or is sticky (as /tmp is), or make "
                "it so with %s (or %s)",
                path, real, below, why, bt_shell_cmd(&ow, "chmod o-w", real),
                bt_shell_cmd(&t, "chmod +t", real));
    bt_buf_free(&ow), bt_buf_free(&t);
}

/* Judges dir (resolved) and every directory above it, for the run directory path; link:
 * the symbolic link on path's way that dir holds, NULL when dir is above path itself. */
static int run_dir_judge(run_dir *d, const char *path, const char *dir, const char *link,
                         bt_diag *diag) {
    char real[PATH_MAX], why[160], below[PATH_MAX + 40];
    snprintf(real, sizeof real, "%s", dir);
    if (link != NULL)
        snprintf(below, sizeof below, "%s (a symbolic link on its path)", link);
    else
        snprintf(below, sizeof below, "it");
    do {
        struct stat st;
        if (stat(real, &st) != 0) return 0; /* gone meanwhile: making path says why */
        int open = run_dir_parent_open(&st, why, sizeof why);
        if (open == 2) {
            run_dir_parent_refused(path, real, below, why, diag);
            return BT_EINVAL;
        }
        if (open == 1 && d->parent_warning[0] == '\0')
            snprintf(d->parent_warning, sizeof d->parent_warning,
                     "%s is under %s, which is %s: those users could %s", path, real, why,
                     link ? "replace the symbolic link on its path and so choose where the "
                            "run directory is"
                          : "rename the run directory and put one of their own in its place");
    } while (run_dir_parent(real));
    return 0;
}

/* The symbolic link on path's way (link, as lstat'ed: st) in directory dir: refused when
 * another user may have planted it (bt_link_planted), as `--out` refuses one: in a sticky
 * directory others may write (/tmp), its owner, neither you nor the directory's, chooses
 * where it leads (a directory of yours for the run to be written into, say) and may
 * point it elsewhere at any time. */
static int run_dir_check_link(const char *path, const char *dir, const char *link,
                              const struct stat *st, bt_diag *diag) {
    struct stat ds;
    if (stat(dir, &ds) != 0 || !bt_link_planted(st, &ds)) return 0;
    bt_diag_set(diag,
                "%s: not used as a run directory: the symbolic link %s on its path is uid %u's, "
                "in %s, a sticky directory others may write (mode %04o), so another user may "
                "have planted it and may point it elsewhere; give the directory it leads to "
                "by its own path, or choose another run directory",
                path, link, (unsigned)st->st_uid, dir, (unsigned)(ds.st_mode & 07777));
    return BT_EINVAL;
}

/* path made absolute into abs: 0 when it cannot be. */
static int run_dir_absolute(const char *path, char *abs, size_t cap) {
    char cwd[PATH_MAX];
    if (path[0] == '/') return snprintf(abs, cap, "%s", path) < (int)cap;
    if (getcwd(cwd, sizeof cwd) == NULL) return 0;
    return snprintf(abs, cap, "%s/%s", cwd, path) < (int)cap;
}

/* The next component of *rest into comp (one without a slash), *rest moved past it; 0 at
 * the end (**rest is then '\0') or for a component longer than a name can be. */
static int run_dir_component(const char **rest, char *comp, size_t cap) {
    *rest += strspn(*rest, "/");
    size_t n = strcspn(*rest, "/");
    if (n == 0 || n >= cap) return 0;
    memcpy(comp, *rest, n);
    comp[n] = '\0';
    *rest += n;
    return 1;
}

/* Replaces the walk's rest with link's target followed by what was left after it
 * (rest_after); an absolute target starts again from "/" (cur). 0 when it does not fit. */
static int run_dir_follow(const char *link, const char *rest_after, char *cur, char *rest) {
    char target[PATH_MAX], left[PATH_MAX];
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = '\0';
    if (snprintf(left, sizeof left, "%s", rest_after) >= (int)sizeof left) return 0;
    if (snprintf(rest, PATH_MAX, "%s/%s", target, left) >= PATH_MAX) return 0;
    if (target[0] == '/') snprintf(cur, PATH_MAX, "/");
    return 1;
}

/* Walks path component by component as the kernel will (lstat: every symbolic link met is
 * judged where it is, by its owner and the directories above it, and followed; ".." taken
 * physically), and judges the directories above where the walk ends: above path when it
 * exists, else from the nearest existing ancestor it will be made in. A component that is
 * no directory ends the walk with nothing more judged: making path fails then, saying so;
 * so does a path the walk cannot follow (too long, too many links). */
int run_dir_check_parents(run_dir *d, const char *path, bt_diag *diag) {
    char cur[PATH_MAX] = "/", rest[PATH_MAX], comp[NAME_MAX + 1], next[PATH_MAX];
    if (!run_dir_absolute(path, rest, sizeof rest)) return 0;
    const char *r = rest;
    for (int links = 0;;) {
        if (!run_dir_component(&r, comp, sizeof comp))
            return *r == '\0' && run_dir_parent(cur) ? run_dir_judge(d, path, cur, NULL, diag) : 0;
        if (strcmp(comp, ".") == 0) continue;
        if (strcmp(comp, "..") == 0) {
            run_dir_parent(cur);
            continue;
        }
        if (snprintf(next, sizeof next, "%s%s%s", cur, strcmp(cur, "/") ? "/" : "", comp) >=
            (int)sizeof next)
            return 0;
        struct stat st;
        if (lstat(next, &st) != 0) return run_dir_judge(d, path, cur, NULL, diag);
        if (S_ISLNK(st.st_mode)) {
            if (run_dir_check_link(path, cur, next, &st, diag) != 0 ||
                run_dir_judge(d, path, cur, next, diag) != 0)
                return BT_EINVAL;
            if (++links > 40 || !run_dir_follow(next, r, cur, rest)) return 0;
            r = rest;
        } else if (S_ISDIR(st.st_mode)) {
            snprintf(cur, sizeof cur, "%s", next);
        } else {
            return 0;
        }
    }
}
