/* cpu_blas_defer and cpu_blas_threads_start: OpenBLAS starts no thread as a program
 * whose .preinit_array defers it loads, whatever OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
 * OMP_NUM_THREADS say; the mask comes back whole; and under an address-space limit the
 * threads either all start with their buffers or none does, the process then exiting at
 * once (never a pool thread spinning on its buffer, which hangs a GEMM and the exit).
 *
 * The test runs itself again (execv) for each case, as each needs a fresh process: the
 * parent sets the variables, the child checks. With fewer than 2 CPUs OpenBLAS starts no
 * pool anyway and the first case cannot fail (said). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include <cblas.h>

#include "check.h"
#include "cpu_blas_defer.h"
#include "cpu_blas_mem.h"

static void test_preinit(int argc, char **argv, char **envp) {
    (void)argc, (void)argv, (void)envp;
    cpu_blas_threads_defer();
}
__attribute__((section(".preinit_array"),
               used)) static void (*const test_preinit_fn)(int, char **, char **) = test_preinit;

/* The threads of this process now ("Threads:" of /proc/self/status). */
static int threads_now(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f != NULL) fclose(f);
    return n;
}

static unsigned long long mapped_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    if (f == NULL || fscanf(f, "%llu", &pages) != 1) pages = 0;
    if (f != NULL) fclose(f);
    return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

/* Child "load": one thread at main, the CPU count the parent passed once restored. */
static int child_load(int cpus) {
    CHECK_EQ_U64(threads_now(), 1);
    CHECK_EQ_U64(cpu_blas_threads_restore("test_cpu_blas_defer"), 0);
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK_EQ_U64(CPU_COUNT(&set), cpus);
    return check_status();
}

/* Child "start": 2 threads under an address-space limit of what is mapped now plus
 * `room` MB: all started (2 threads, 0) or none (1 thread, BT_ENOMEM); then exits. */
static int child_start(int room) {
    cpu_blas_threads_restore("test_cpu_blas_defer");
    struct rlimit rl = {mapped_bytes() + ((unsigned long long)room << 20), RLIM_INFINITY};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
    bt_diag d;
    bt_diag_init(&d);
    int rc = cpu_blas_threads_start(2, &d);
    if (rc == 0) CHECK_EQ_U64(threads_now(), 2);
    if (rc != 0) {
        CHECK_EQ_U64(rc, BT_ENOMEM);
        CHECK_EQ_U64(threads_now(), 1);
        CHECK(strstr(d.msg, "for OpenBLAS's 2 thread(s) (a 128 MB GEMM buffer each") != NULL);
        CHECK(strstr(d.msg, "(the address-space limit, ulimit -v, is ") != NULL);
    }
    return check_status() != 0 ? 1 : rc == 0 ? 0 : 3;
}

/* Runs this program again with `var`=`val` set (var NULL: none) and `mode` `arg`; its exit
 * status, or -1 where it did not exit within 10 s (killed). */
static int run_child(const char *var, const char *val, const char *mode, int arg) {
    char a[16];
    snprintf(a, sizeof a, "%d", arg);
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("OPENBLAS_NUM_THREADS"), unsetenv("GOTO_NUM_THREADS"), unsetenv("OMP_NUM_THREADS");
        if (var != NULL) setenv(var, val, 1);
        execl("/proc/self/exe", "test_cpu_blas_defer", mode, a, (char *)NULL);
        _exit(127);
    }
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 1000; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* A variable set to 2 starts no pool as the library loads. */
static void test_load(void) {
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    if (CPU_COUNT(&set) < 2) printf("test_load: 1 CPU: OpenBLAS starts no pool anyway\n");
    const char *vars[] = {NULL, "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        int rc = run_child(vars[i], "2", "load", CPU_COUNT(&set));
        if (rc != 0)
            fprintf(stderr, "with %s=2: child exited %d\n", vars[i] ? vars[i] : "none", rc);
        CHECK_EQ_U64(rc, 0);
    }
}

/* From no room to room for both threads (2 x 128 MB, a stack and some slack), 2 MB at a
 * time: never a hang (the first one ends the sweep). */
static void test_start(void) {
    int fit = 0, refused = 0;
    for (int room = 0; room <= 320; room += 2) {
        int rc = run_child(NULL, NULL, "start", room);
        if (rc != 0 && rc != 3) fprintf(stderr, "room %d MB: child exited %d\n", room, rc);
        CHECK(rc == 0 || rc == 3);
        fit += rc == 0, refused += rc == 3;
        if (rc == -1) break;
    }
    CHECK(fit > 0 && refused > 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "load") == 0) return child_load(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "start") == 0) return child_start(atoi(argv[2]));
    test_load();
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer reserves terabytes of shadow: no address-space limit leaves it room */
    printf("test_start: SKIPPED under AddressSanitizer (it needs an unlimited address space)\n");
    (void)test_start;
#else
    test_start();
#endif
    return check_status();
}
