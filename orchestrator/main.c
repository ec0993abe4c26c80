/* baton: runs LLM training recipes as workflows of stages. This file only dispatches
 * to the subcommands; each lives in its own cmd_*.c. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "baton_version.h" /* BATON_VERSION (cmake/baton_version.cmake) */
#include "cli.h"
#include "cpu_blas_core.h"
#include "cpu_blas_defer.h"
#include "run/supervise.h"
#include "util/err.h"
#include "util/out_file.h"
#include "util/proc_start.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    int groups; /* its first argument names one of its own commands (baton ckpt verify) */
} command;

static const command commands[] = {
    {"run", cmd_run, "run every stage of a recipe, supervised, restarting after failures", 0},
    {"resume", cmd_resume, "continue a stopped or interrupted run from its run directory", 0},
    {"submit", cmd_submit, "write a Slurm batch script for a recipe and submit it with sbatch", 0},
    {"status", cmd_status, "a run's stages, steps, losses, restarts and checkpoints", 0},
    {"stop", cmd_stop, "ask the baton run working in a run directory to stop (SIGTERM)", 0},
    {"plan", cmd_plan, "check a recipe and show layout, memory, communication and step time", 0},
    {"spec", cmd_spec, "resolve one stage of a recipe into the StageSpec a worker runs", 0},
    {"data", cmd_data, "prepare token datasets (Megatron indexed format) from text, tar or zip", 1},
    {"launch", cmd_launch, "start N PMIx processes (local embedded PMIx server)", 0},
    {"ckpt", cmd_ckpt, "inspect, verify, reshard, export, pack and move checkpoints", 1},
    {"eval", cmd_eval, "a checkpoint's mean next-token loss on a dataset, or passkey accuracy", 0},
};

static void usage(FILE *f) {
    fprintf(f, "usage: baton [--help] [--version] COMMAND [ARGS]\n\n"
               "baton runs LLM training recipes as workflows of stages.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'baton COMMAND --help' for a command's options.\n"
               "Run 'baton help COMMAND' for the same (baton help ckpt verify).\n"
               "An option's value follows it, --opt VALUE, or joins it, --opt=VALUE;\n"
               "'--' ends the options (launch: CMD follows; submit: sbatch's options).\n"
               "Exit status: 0 success, 1 failure, 2 bad usage or invalid input (some\n"
               "commands add their own codes; see 'baton COMMAND --help').\n");
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0) return &commands[i];
    return NULL;
}

static int is_help(const char *a) {
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

/* `baton help [COMMAND [SUBCOMMAND]]`: the top-level help, or COMMAND's own (its --help);
 * a subcommand of data and ckpt as `baton ckpt verify --help`. A --help after them asks
 * for the same (baton help run --help). */
static int help(int argc, char **argv) {
    while (argc > 2 && is_help(argv[argc - 1]))
        argc--;
    if (argc < 3) {
        usage(stdout);
        return BT_EXIT_OK;
    }
    const command *c = find_command(argv[2]);
    int most = c != NULL && c->groups ? 4 : 3;
    if (c == NULL || argc > most) {
        fprintf(stderr, "baton help: %s '%s'\n\n",
                c ? "one command at a time, not" : "unknown command", c ? argv[most] : argv[2]);
        usage(stderr);
        return BT_EXIT_USAGE;
    }
    char *sub[] = {argv[2], argc > 3 ? argv[3] : (char *)"--help", (char *)"--help", NULL};
    return c->run(argc - 1, sub);
}

/* run and resume: a SIGINT, SIGTERM or SIGHUP that comes while the libraries initialize,
 * the re-exec in main (cpu_blas_core_ensure) and the recipe's checks take their tens of
 * milliseconds waits for the supervisor's signalfd (a stop, exit 75) instead of killing
 * us (exit 143). An ELF executable's .preinit_array runs before any shared library's
 * initializer (OpenBLAS's starts a thread, which inherits the mask), so this is the
 * earliest code of ours; the mask and a pending signal survive the execv. What stays open
 * is the dynamic loader mapping and relocating the libraries before it: no code of the
 * program runs then, only a parent that blocks the signals could cover it. glibc passes
 * argc, argv and envp. The same spot keeps OpenBLAS from starting its thread pool as it
 * loads: under an address-space limit the pool spins forever and its fork handler then
 * hangs the launch (cpu_blas_defer.h), whatever OPENBLAS_NUM_THREADS says: only `baton
 * eval` multiplies, and it starts its threads itself. */
#ifdef __GLIBC__ /* others may call it without arguments (musl does) */
static void main_block_signals(int argc, char **argv, char **envp) {
    (void)envp;
    bt_proc_start();          /* fds 0-2, SIGCHLD, the umask: before any library opens a file */
    cpu_blas_threads_defer(); /* before OpenBLAS starts its threads (cpu_blas_defer.h) */
    if (argc >= 2 && argv != NULL && argv[1] != NULL &&
        (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "resume") == 0))
        run_signals_block();
}
__attribute__((section(".preinit_array"),
               used)) static void (*const main_preinit)(int, char **, char **) = main_block_signals;
#endif

static int main_dispatch(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return BT_EXIT_USAGE;
    }
    if (is_help(argv[1]) && argc > 2) return help(argc, argv); /* baton --help run */
    if (is_help(argv[1])) {
        usage(stdout);
        return BT_EXIT_OK;
    }
    if (strcmp(argv[1], "help") == 0) return help(argc, argv);
    if (strcmp(argv[1], "--version") == 0) {
        printf("baton %s\n", BATON_VERSION);
        return BT_EXIT_OK;
    }
    const command *c = find_command(argv[1]);
    if (c != NULL) {
        bt_argv a;
        int rc = cli_split_eq(argc, argv, &a);
        if (rc != 0) return rc;
        rc = c->run(a.argc - 1, a.argv + 1);
        bt_argv_free(&a);
        return rc;
    }
    fprintf(stderr, "baton: unknown %s '%s'\n\n", argv[1][0] == '-' ? "option" : "command",
            argv[1]);
    usage(stderr);
    return BT_EXIT_USAGE;
}

/* run and resume print their progress on stdout; what they report is the run (its
 * status, kept in the run directory with its logs), so output lost there is said, and
 * the exit status stays the run's. */
static int main_stdout_is_log(int argc, char **argv) {
    return argc >= 2 && (strcmp(argv[1], "run") == 0 || strcmp(argv[1], "resume") == 0);
}

int main(int argc, char **argv) {
    bt_proc_start();                   /* done already under glibc (main_block_signals) */
    cpu_blas_threads_restore("baton"); /* the CPUs cpu_blas_threads_defer took away */
    /* run and resume: a file past the file-size limit (ulimit -f: metrics.jsonl, an event
     * file, a log) is a write that fails with EFBIG and is said, not a death by signal that
     * takes the workers with it; they inherit the choice. The commands that write one
     * output keep their documented death by SIGXFSZ, after removing it (util/cleanup.h). */
    if (main_stdout_is_log(argc, argv)) signal(SIGXFSZ, SIG_IGN);
    /* `baton eval` multiplies on the CPU, and the workers inherit the choice */
    cpu_blas_core_ensure(argv);
    int rc = main_dispatch(argc, argv);
    /* output lost (a full disk, a closed stdout) is a failure, as coreutils have it */
    if (bt_stdout_check("baton") != 0 && rc == BT_EXIT_OK && !main_stdout_is_log(argc, argv))
        rc = BT_EXIT_FAILURE;
    return rc;
}
