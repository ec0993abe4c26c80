/* SIGTERM -> a flag (worker_signal.h). The flag is the process's only global state: a
 * signal handler has nowhere else to put what it saw. */
#include "worker_signal.h"

#include <signal.h>
#include <string.h>

#include "util/err.h"

static volatile sig_atomic_t worker_sigterm_seen;

static void worker_on_sigterm(int sig) {
    (void)sig;
    worker_sigterm_seen = 1;
}

int worker_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = worker_on_sigterm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigprocmask(SIG_UNBLOCK, &term, NULL) != 0)
        return BT_EIO;
    return 0;
}

int worker_signal_stop_requested(void) {
    return worker_sigterm_seen != 0;
}
