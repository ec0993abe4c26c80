#include "cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGXFSZ};
#define CLEANUP_NSIG  (sizeof cleanup_signals / sizeof cleanup_signals[0])
#define CLEANUP_DEPTH 16 /* a tree deeper than this is left (ours are one level) */

static volatile sig_atomic_t cleanup_caught;
static int cleanup_installed;

typedef struct cleanup_entry {
    char *path;
    bt_cleanup_kind kind;
} cleanup_entry;

static cleanup_entry *cleanup_list;
static size_t cleanup_n, cleanup_cap;

static void cleanup_handler(int sig) {
    if (cleanup_caught == 0) cleanup_caught = sig;
}

void bt_cleanup_install(void) {
    if (cleanup_installed) return;
    cleanup_installed = 1;
    for (size_t i = 0; i < CLEANUP_NSIG; i++) {
        struct sigaction old, sa = {.sa_handler = cleanup_handler};
        /* every write past the size limit raises SIGXFSZ (two threads writing halves of
         * one tensor: two of them): only a person's signal, sent again, kills at once */
        sa.sa_flags = SA_RESTART | (cleanup_signals[i] == SIGXFSZ ? 0 : SA_RESETHAND);
        sigemptyset(&sa.sa_mask);
        if (sigaction(cleanup_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(cleanup_signals[i], &sa, NULL);
    }
}

int bt_cleanup_signal(void) {
    return cleanup_caught;
}

static const char *cleanup_signal_name(int sig) {
    return sig == SIGINT    ? "SIGINT"
           : sig == SIGTERM ? "SIGTERM"
           : sig == SIGHUP  ? "SIGHUP"
           : sig == SIGXFSZ ? "SIGXFSZ (file size limit exceeded)"
                            : "a signal";
}

int bt_cleanup_check(bt_diag *diag) {
    int sig = cleanup_caught;
    if (sig == 0) return 0;
    bt_diag_set(diag, "interrupted by %s", cleanup_signal_name(sig));
    return BT_EIO;
}

int bt_cleanup_add(const char *path, bt_cleanup_kind kind) {
    if (cleanup_n == cleanup_cap) {
        size_t cap = cleanup_cap ? cleanup_cap * 2 : 8;
        cleanup_entry *v = realloc(cleanup_list, cap * sizeof *v);
        if (v == NULL) return BT_ENOMEM;
        cleanup_list = v, cleanup_cap = cap;
    }
    char *p = strdup(path);
    if (p == NULL) return BT_ENOMEM;
    cleanup_list[cleanup_n++] = (cleanup_entry){p, kind};
    return 0;
}

void bt_cleanup_forget(const char *path) {
    size_t k = 0;
    for (size_t i = 0; i < cleanup_n; i++) {
        if (strcmp(cleanup_list[i].path, path) == 0)
            free(cleanup_list[i].path);
        else
            cleanup_list[k++] = cleanup_list[i];
    }
    cleanup_n = k;
}

int bt_cleanup_mkdirs(const char *path, mode_t mode) {
    size_t n = strlen(path);
    char *p = malloc(n + 2);
    if (p == NULL) return errno = ENOMEM, -1;
    memcpy(p, path, n + 1);
    p[n] = '/', p[n + 1] = '\0'; /* the last component too */
    int rc = 0;
    for (char *s = p + 1; rc == 0 && *s; s++) {
        if (*s != '/' || s[-1] == '/') continue;
        *s = '\0';
        if (mkdir(p, mode) == 0) {
            if (bt_cleanup_add(p, BT_CLEANUP_DIR) != 0) rmdir(p), errno = ENOMEM, rc = -1;
        } else if (errno != EEXIST) {
            rc = -1;
        } else {
            struct stat st;
            if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) errno = ENOTDIR, rc = -1;
        }
        *s = '/';
    }
    int err = errno;
    free(p);
    errno = err;
    return rc;
}

/* rm -r without following links: a link inside is removed itself. */
static void cleanup_tree(const char *dir, int depth) {
    struct stat st;
    if (lstat(dir, &st) != 0) return;
    if (!S_ISDIR(st.st_mode) || depth > CLEANUP_DEPTH) {
        if (!S_ISDIR(st.st_mode)) unlink(dir);
        return;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        size_t n = strlen(dir) + strlen(de->d_name) + 2;
        char *p = malloc(n);
        if (p == NULL) continue;
        snprintf(p, n, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0 && (errno == EISDIR || errno == EPERM)) cleanup_tree(p, depth + 1);
        free(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

void bt_cleanup_run(void) {
    while (cleanup_n > 0) {
        cleanup_entry *e = &cleanup_list[--cleanup_n];
        if (e->kind == BT_CLEANUP_FILE)
            unlink(e->path);
        else if (e->kind == BT_CLEANUP_TREE)
            cleanup_tree(e->path, 0);
        else
            rmdir(e->path);
        free(e->path);
    }
}

static void cleanup_clear(void) {
    for (size_t i = 0; i < cleanup_n; i++)
        free(cleanup_list[i].path);
    cleanup_n = 0;
}

static int cleanup_die(int sig);

int bt_cleanup_exit(int status) {
    int sig = cleanup_caught;
    if (status == 0) { /* the output is in place: a signal noted after that stops nothing */
        cleanup_clear();
        if (sig == SIGXFSZ) { /* but a write it did not check (stdout) was cut short */
            fprintf(stderr, "note: a write went past the file size limit (SIGXFSZ) after the "
                            "command completed; its output is kept\n");
            return cleanup_die(sig);
        }
        if (sig != 0)
            fprintf(stderr, "note: %s came after the command completed; its output is kept\n",
                    cleanup_signal_name(sig));
        return 0;
    }
    if (sig == 0) {
        bt_cleanup_run();
        return status;
    }
    bt_cleanup_run();
    return cleanup_die(sig);
}

/* Dies of sig, as the signal's default action would have. */
static int cleanup_die(int sig) {
    fflush(NULL);
    if (sig == SIGXFSZ) { /* a full quota is no crash: no core file */
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
    }
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig); /* not reached: the default action of each of these ends the process */
}
