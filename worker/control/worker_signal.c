/* SIGTERM, SIGINT -> the first one's number and sender (worker_signal.h). These are the
 * process's only global state: a signal handler has nowhere else to put what it saw. */
#include "worker_signal.h"

#include <signal.h>
#include <string.h>

#include "util/err.h"

/* The sender is written before the signal's number, which says both are there. */
static volatile sig_atomic_t worker_sig_first;
static volatile sig_atomic_t worker_sig_sender;

static void worker_on_stop_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (worker_sig_first != 0) return;
    int user = si != NULL &&
               (si->si_code == SI_USER || si->si_code == SI_QUEUE || si->si_code == SI_TKILL);
    worker_sig_sender = user ? (sig_atomic_t)si->si_pid : 0;
    worker_sig_first = sig;
}

int worker_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = worker_on_stop_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sa.sa_mask = stop; /* one handler at a time: the first signal is the one noted */
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigprocmask(SIG_UNBLOCK, &stop, NULL) != 0)
        return BT_EIO;
    return 0;
}

int worker_signal_stop_requested(void) {
    return worker_sig_first != 0;
}

int worker_signal_first(int *sender) {
    int sig = worker_sig_first;
    *sender = sig != 0 ? (int)worker_sig_sender : 0;
    return sig;
}
