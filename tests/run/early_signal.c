/* LD_PRELOAD'ed into `baton run` by check-run.sh's early-signal case: a SIGTERM that comes
 * while the shared libraries initialize, before main (here from this library's
 * initializer, which runs after the executable's .preinit_array and before main). Acts once,
 * only with BATON_TEST_EARLY_SIGNAL set: both variables are dropped first, so neither
 * baton's re-exec of itself nor the workers it starts see them. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void early_signal(void) {
    if (getenv("BATON_TEST_EARLY_SIGNAL") == NULL) return;
    unsetenv("BATON_TEST_EARLY_SIGNAL");
    unsetenv("LD_PRELOAD");
    kill(getpid(), SIGTERM);
}
