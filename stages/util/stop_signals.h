/* The signals that ask baton to stop: SIGINT, SIGTERM and SIGHUP. `baton run` and
 * `baton launch` block them and read them from a signalfd; the recipe's reader unblocks
 * them while a pipe or FIFO may keep it waiting. One set, so that a stop signal added
 * later reaches every one of those. */
#ifndef BATON_STOP_SIGNALS_H
#define BATON_STOP_SIGNALS_H

#include <signal.h>

/* set emptied, then the stop signals added. */
void bt_stop_signals(sigset_t *set);

#endif
