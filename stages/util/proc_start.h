/* What baton and baton-worker put right about the state they were started in, before
 * anything else runs (from their .preinit_array under glibc, and first thing in main):
 * - fds 0, 1 and 2 that are closed are opened on /dev/null, in the direction that fails
 *   as a closed one does (EBADF). Otherwise the first files the process opens (a run's
 *   lock, its journal) would take those numbers, and the messages written to stderr would
 *   land in them.
 * - SIGCHLD goes back to SIG_DFL. A parent that ignores it (Python's
 *   signal(SIGCHLD, SIG_IGN), some daemons) passes that on through exec. The kernel then
 *   reaps the children itself and waitpid loses their exit status (ECHILD). baton
 *   installs no SIGCHLD handler: it waits on pidfds and waitpid.
 * - The umask keeps only its group and other bits. A umask that takes the owner's own
 *   bits away (0200, 0400, 0777) would leave the 0600 files and 0700 directories of a run
 *   unwritable or unreadable by baton itself. What it masks for group and others stays
 *   masked.
 * - The descriptors from 3 up its caller handed it (open, not close-on-exec) are noted
 *   (fd_inherited.h), so that executing itself again leaves them to the new image.
 * - Which stop signals its caller left ignored is noted (stop_signals.h): a SIGHUP
 *   ignored at start (nohup) stays ignored, and is no stop.
 * - After the program executed itself again (bt_exec_self), its name (comm) is set back
 *   from "exe", and the variable that carried it removed (exec_self.h).
 * Idempotent; async-signal-safe calls only, but for getenv and unsetenv (it runs before
 * any thread starts). */
#ifndef BATON_PROC_START_H
#define BATON_PROC_START_H

void bt_proc_start(void);

#endif
