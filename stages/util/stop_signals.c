/* The stop signals (stop_signals.h). */
#include "stop_signals.h"

#include <stddef.h>

static int stop_noted;
static sigset_t stop_ignored; /* the stop signals ignored at start */

static const int stop_all[] = {SIGINT, SIGTERM, SIGHUP};

void bt_stop_signals_note(void) {
    if (stop_noted) return;
    stop_noted = 1;
    sigemptyset(&stop_ignored);
    for (unsigned i = 0; i < sizeof stop_all / sizeof stop_all[0]; i++) {
        struct sigaction sa;
        if (sigaction(stop_all[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            sigaddset(&stop_ignored, stop_all[i]);
    }
}

void bt_stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    if (!stop_noted || sigismember(&stop_ignored, SIGHUP) != 1) sigaddset(set, SIGHUP);
}

void bt_stop_signals_child(void) {
    if (!stop_noted) return;
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    if (sigismember(&stop_ignored, SIGINT) == 1) sigaction(SIGINT, &ign, NULL);
    if (sigismember(&stop_ignored, SIGTERM) == 1) sigaction(SIGTERM, &ign, NULL);
}
