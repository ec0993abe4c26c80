/* The stop signals (stop_signals.h). */
#include "stop_signals.h"

void bt_stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}
