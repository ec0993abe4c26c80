/* SIGTERM as a stop request: the handler only sets a flag that the training loop reads
 * between steps. */
#ifndef BATON_WORKER_SIGNAL_H
#define BATON_WORKER_SIGNAL_H

/* Installs the handler with sigaction (SA_RESTART) and unblocks SIGTERM, which a
 * launcher may have left blocked. Returns 0 or BT_EIO. */
int worker_signal_install(void);
/* Whether SIGTERM arrived since worker_signal_install. */
int worker_signal_stop_requested(void);

#endif
