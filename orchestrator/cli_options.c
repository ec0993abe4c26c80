/* Every `baton` command's options by whether they take a value, for "--opt=value"
 * (util/argv_eq.h): each command's parser then sees "--opt value" only. An option missing
 * here is not lost: its "--opt=value" reaches the parser as typed and is refused there. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "util/err.h"

#define OPTS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define HELP      "--help"

typedef struct cli_options {
    const char *cmd; /* "plan", "ckpt reshard" */
    bt_argv_opts opts;
} cli_options;

static const cli_options cli_table[] = {
    {"run",
     {OPTS("--run-dir", "--nodes", "--gpus-per-node", "--set", "--worker", "--launcher",
           "--listen"),
      OPTS(HELP, "--quiet"), 0, 0}},
    {"resume", {OPTS("--worker", "--launcher", "--listen"), OPTS(HELP, "--quiet"), 0, 0}},
    /* any other option is sbatch's, its '=' kept */
    {"submit",
     {OPTS("--run-dir", "--nodes", "--gpus-per-node", "--set", "--worker", "--template",
           "--launcher", "--listen"), /* refused, in both spellings */
      OPTS(HELP, "--dry-run"), 0, 1}},
    {"status", {OPTS(NULL), OPTS(HELP, "--json"), 0, 0}},
    {"stop", {OPTS(NULL), OPTS(HELP, "--wait"), 0, 0}},
    {"plan", {OPTS("--set", "--nodes", "--gpus-per-node"), OPTS(HELP, "--json"), 0, 0}},
    {"spec", {OPTS("--set", "--nodes", "--gpus-per-node", "--stage", "--out"), OPTS(HELP), 0, 0}},
    /* CMD ARGS are another program's */
    {"launch", {OPTS("-n", "--np", "--nodes", "--timeout", "--kill-grace"), OPTS(HELP), 1, 1}},
    {"eval", {OPTS("--data", "--passkey", "--seq-len", "--num-seqs"), OPTS(HELP, "--json"), 0, 0}},
    {"ckpt inspect", {OPTS(NULL), OPTS(HELP, "--json"), 0, 0}},
    {"ckpt verify", {OPTS(NULL), OPTS(HELP), 0, 0}},
    {"ckpt reshard", {OPTS("--to", "--out"), OPTS(HELP), 0, 0}},
    {"ckpt export", {OPTS("--out", "--format", "--dtype", "--max-position"), OPTS(HELP), 0, 0}},
    {"ckpt import", {OPTS("--out", "--format", "--recipe-name"), OPTS(HELP), 0, 0}},
    {"ckpt pack", {OPTS("--out"), OPTS(HELP), 0, 0}},
    {"ckpt unpack", {OPTS("--into"), OPTS(HELP), 0, 0}},
    {"ckpt push",
     {OPTS("--endpoint", "--max-time", "--stall-time", "--limit-rate"), OPTS(HELP), 0, 0}},
    {"ckpt pull",
     {OPTS("--into", "--endpoint", "--max-time", "--stall-time", "--limit-rate"), OPTS(HELP), 0,
      0}},
    {"data prepare",
     {OPTS("--input", "--output", "--valid-fraction"),
      OPTS(HELP, "--split-on-percent", "--progress", "--verbose"), 0, 0}},
    {"data passkey", {OPTS("--output", "--n-docs", "--length", "--seed"), OPTS(HELP), 0, 0}},
    {"data inspect", {OPTS("--doc", "--max-tokens"), OPTS(HELP), 0, 0}},
};

/* The entry of the command argv[1] (with its subcommand argv[2] for ckpt and data), or
 * NULL; *first: where its own arguments start. */
static const cli_options *cli_options_find(int argc, char **argv, int *first) {
    int sub = strcmp(argv[1], "ckpt") == 0 || strcmp(argv[1], "data") == 0;
    if (sub && argc < 3) return NULL;
    *first = sub ? 3 : 2;
    for (size_t k = 0; k < sizeof cli_table / sizeof cli_table[0]; k++) {
        const char *c = cli_table[k].cmd;
        size_t n = strlen(argv[1]);
        if (strncmp(c, argv[1], n) != 0) continue;
        if (sub ? c[n] == ' ' && strcmp(c + n + 1, argv[2]) == 0 : c[n] == '\0')
            return &cli_table[k];
    }
    return NULL;
}

/* Whether option opt takes a path (a file, a directory or a dataset's path prefix), for
 * the hint on a value that looks like an option. */
static int cli_takes_path(const char *opt) {
    static const char *const paths[] = {"--run-dir", "--worker", "--template",
                                        "--out",     "--output", "--input",
                                        "--into",    "--data",   "--passkey"};
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++)
        if (strcmp(opt, paths[k]) == 0) return 1;
    return 0;
}

int cli_split_eq(int argc, char **argv, bt_argv *out) {
    int first = 0, bad = 0;
    const cli_options *c = argc >= 2 ? cli_options_find(argc, argv, &first) : NULL;
    static const bt_argv_opts none = {0};
    int rc = bt_argv_split_eq(c ? &c->opts : &none, argc, argv, c ? first : argc, out, &bad);
    if (rc == BT_ARGV_FLAG_VALUE)
        fprintf(stderr, "baton %s: %.*s takes no value (got '%s'); see 'baton %s --help'\n", c->cmd,
                (int)strcspn(argv[bad], "="), argv[bad], argv[bad], c->cmd);
    else if (rc == BT_ARGV_OPTION_LIKE)
        cli_option_like(c->cmd, argv[bad], argv[bad + 1], cli_takes_path(argv[bad]));
    else if (rc != 0)
        fprintf(stderr, "baton: out of memory\n");
    return rc == 0 ? 0 : rc == BT_ARGV_NOMEM ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
}
