/* SIGTERM as a stop request: the handler only notes the signal (and who sent it) for the
 * training loop, which reads it between steps. */
#ifndef BATON_WORKER_SIGNAL_H
#define BATON_WORKER_SIGNAL_H

/* Installs the handler with sigaction (SA_RESTART, SA_SIGINFO) and unblocks SIGTERM, which
 * a launcher may have left blocked. Returns 0 or BT_EIO. */
int worker_signal_install(void);
/* Whether SIGTERM arrived since worker_signal_install. */
int worker_signal_stop_requested(void);
/* The signal that arrived (SIGTERM; 0: none) and, in *sender, the pid of the process that
 * sent it (kill, sigqueue, tgkill), or 0 where the kernel does not say (its own signal). */
int worker_signal_first(int *sender);

#endif
