/* SIGTERM and SIGINT as a stop request: the handler only notes the signal (and who sent
 * it) for the training loop, which reads it between steps. */
#ifndef BATON_WORKER_SIGNAL_H
#define BATON_WORKER_SIGNAL_H

/* Installs the handler for SIGTERM and SIGINT with sigaction (SA_RESTART, SA_SIGINFO) and
 * unblocks them, which a launcher may have left blocked; SIGINT's handler replaces an
 * inherited SIG_IGN (a rank runs in its own process group, where no terminal's Ctrl-C
 * reaches it). Returns 0 or BT_EIO. */
int worker_signal_install(void);
/* Whether SIGTERM or SIGINT arrived since worker_signal_install. */
int worker_signal_stop_requested(void);
/* The first of them that arrived (0: none) and, in *sender, the pid of the process that
 * sent it (kill, sigqueue, tgkill), or 0 where the kernel does not say (its own signal). */
int worker_signal_first(int *sender);

#endif
