/* The directories above a run directory: whoever may rename or replace an entry in one of
 * them may put a directory of their own where the run directory (or the next ancestor) is,
 * and so plant files and links for baton to write through, whatever the run directory's
 * own owner and mode (run_dir_check_owner). As OpenSSH's safe_path judges a path: each
 * ancestor owned by root or by you, and writable by no one else unless sticky (/tmp, 1777:
 * others may add entries, never rename or remove yours). */
#define _DEFAULT_SOURCE /* realpath, S_ISVTX */
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

/* Who else may rename entries of directory st: 2 anyone (writable by others, not sticky),
 * 1 some (writable by a group not yours alone, not sticky; or owned by another user than
 * root), 0 no one; why says so. */
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
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        snprintf(why, cap, "owned by uid %u, neither root nor you", (unsigned)st->st_uid);
        return 1;
    }
    return 0;
}

/* The first existing directory to judge, resolved, into real: the parent of path when
 * path exists, else the nearest ancestor that does (what path will be made in). 0 when
 * none resolves (making path fails then, saying why). */
static int run_dir_first_parent(const char *path, char *real) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return 0;
    if (realpath(p, real) != NULL) return run_dir_parent(real);
    while (run_dir_parent(p))
        if (realpath(p, real) != NULL) return 1;
    return 0;
}

int run_dir_check_parents(run_dir *d, const char *path, bt_diag *diag) {
    char real[PATH_MAX], why[160];
    if (!run_dir_first_parent(path, real)) return 0;
    do {
        struct stat st;
        if (stat(real, &st) != 0) return 0; /* gone meanwhile: making path says why */
        int open = run_dir_parent_open(&st, why, sizeof why);
        if (open == 2) {
            bt_diag_set(diag,
                        "%s: not used as a run directory: %s, a directory above it, is %s, "
                        "so any user could rename what is in it and put a directory of "
                        "their own in the run directory's path for baton to write in; "
                        "choose a run directory whose every parent is writable by you or "
                        "root alone or is sticky (as /tmp is), or chmod o-w (or +t) %s",
                        path, real, why, real);
            return BT_EINVAL;
        }
        if (open == 1 && d->parent_warning[0] == '\0')
            snprintf(d->parent_warning, sizeof d->parent_warning,
                     "%s is under %s, which is %s: those users could rename the run "
                     "directory and put one of their own in its place",
                     path, real, why);
    } while (run_dir_parent(real));
    return 0;
}
