/* What a command that writes files takes away again when it fails or is stopped by a
 * signal: a registry of the paths it created (a partial file, a .partial directory, the
 * missing parent directories it made), and handlers for SIGINT, SIGTERM, SIGHUP and
 * SIGXFSZ that only note the signal (async-signal-safe: a recursive removal is not). The
 * command checks for it in its loops (bt_cleanup_check) and fails through its normal
 * error path; bt_cleanup_exit then removes what is still registered and dies of the
 * signal (the shell's 128 + N). A signal that comes after the command completed (status
 * 0: its output is in place) changes nothing but a note: the exit status stays 0. The
 * handler of INT, TERM and HUP resets itself: a second one kills at once (SIGXFSZ comes
 * with every write past the limit and stays caught). A signal the process was started
 * ignoring (nohup, trap '') stays ignored. For one command per process, used from its
 * main thread. */
#ifndef BATON_CLEANUP_H
#define BATON_CLEANUP_H

#include <sys/types.h>

#include "err.h"

typedef enum bt_cleanup_kind {
    BT_CLEANUP_FILE, /* unlink */
    BT_CLEANUP_TREE, /* a directory with everything in it (links removed, never followed) */
    BT_CLEANUP_DIR,  /* rmdir: a directory that something else has written into since stays */
} bt_cleanup_kind;

/* Installs the handlers (once). */
void bt_cleanup_install(void);
/* The signal caught so far, 0 for none. */
int bt_cleanup_signal(void);
/* 0, or BT_EIO with "interrupted by SIGNAME" in diag once a signal was caught. */
int bt_cleanup_check(bt_diag *diag);
/* Registers path to remove on failure; BT_ENOMEM when it cannot. */
int bt_cleanup_add(const char *path, bt_cleanup_kind kind);
/* path is no longer to be removed (it was published, or is gone). */
void bt_cleanup_forget(const char *path);
/* mkdir -p of path with mode, every directory it creates registered (BT_CLEANUP_DIR, so
 * that a failure takes them away again, the deepest first). 0, or -1 with errno. */
int bt_cleanup_mkdirs(const char *path, mode_t mode);
/* Removes the registered paths, the latest registered first, and forgets them. */
void bt_cleanup_run(void);
/* The command's end. Status 0 (the command completed, its output published): forgets
 * what is registered and returns 0, a signal caught since only noted on stderr. Else
 * removes what is registered, then dies of the caught signal (does not return) or
 * returns status. */
int bt_cleanup_exit(int status);

#endif
