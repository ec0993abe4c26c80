/* LD_PRELOAD'ed into `baton run` by check-supervise.sh's spec-oom case: in baton itself
 * (not its workers), the BATON_TEST_STRDUP_NTH'th strdup (default the first) of the
 * string BATON_TEST_STRDUP_FAIL returns NULL with errno ENOMEM, as out of memory would;
 * every other copy is made as usual. */
#define _GNU_SOURCE /* RTLD_NEXT, program_invocation_short_name */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* By the program's name (argv[0]; /proc/self/exe would be valgrind's under valgrind). */
static int is_baton(void) {
    return strcmp(program_invocation_short_name, "baton") == 0;
}

char *strdup(const char *s) {
    static char *(*real)(const char *);
    static int seen;
    if (real == NULL) real = (char *(*)(const char *))dlsym(RTLD_NEXT, "strdup");
    const char *fail = getenv("BATON_TEST_STRDUP_FAIL"), *nth = getenv("BATON_TEST_STRDUP_NTH");
    if (fail != NULL && strcmp(s, fail) == 0 && is_baton() &&
        ++seen == (nth != NULL ? atoi(nth) : 1)) {
        errno = ENOMEM;
        return NULL;
    }
    return real(s);
}
