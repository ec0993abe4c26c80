/* The signals that ask baton to stop: SIGINT, SIGTERM and SIGHUP. `baton run` and
 * `baton launch` block them and read them from a signalfd; the recipe's reader unblocks
 * them while a pipe or FIFO may keep it waiting. One set, so that a stop signal added
 * later reaches every one of those.
 *
 * A SIGHUP ignored when the process started (`nohup baton run ...`, a shell's
 * `trap '' HUP`) is no stop: it is left out of the set, so it stays ignored, never blocked
 * nor read, and a hangup (an ssh connection lost) does not stop the run. SIGINT and
 * SIGTERM are stops even when ignored at start: a shell without job control starts its
 * background jobs with SIGINT ignored, and `kill -INT` to such a job is meant to stop it. */
#ifndef BATON_STOP_SIGNALS_H
#define BATON_STOP_SIGNALS_H

#include <signal.h>

/* Notes which stop signals are ignored (SIG_IGN) now, as the process starts. Called from
 * bt_proc_start, before anything changes them; the first call counts. Async-signal-safe. */
void bt_stop_signals_note(void);

/* set emptied, then the stop signals added (SIGHUP only when not ignored at start). */
void bt_stop_signals(sigset_t *set);

/* Between fork and exec (async-signal-safe): SIGINT and SIGTERM that were ignored at
 * start are ignored again, as the child would have inherited them from baton's caller
 * (the recipe's reader sets them to SIG_DFL while it waits). */
void bt_stop_signals_child(void);

#endif
