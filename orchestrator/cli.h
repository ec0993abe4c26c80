/* The `baton` command-line programs: one function per subcommand, each taking the
 * arguments after the subcommand name and returning a process exit status
 * (BT_EXIT_*). */
#ifndef BATON_CLI_H
#define BATON_CLI_H

#include <stdint.h>

#include "util/argv_eq.h"
#include "util/err.h"

int cmd_plan(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_spec(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_stop(int argc, char **argv);

/* baton's whole command line (argv[1] the command) with every "--opt=value" of the
 * command's own options written as "--opt" "value" (util/argv_eq.h) into *out, to free
 * with bt_argv_free. 0, or the exit status after saying what is wrong (a flag given a
 * value: "baton CMD: --json takes no value (got '--json=1')"). */
int cli_split_eq(int argc, char **argv, bt_argv *out);

/* A dataset prefix as given on a command line: "data/x.bin" or "data/x.idx" stands for
 * "data/x" (a path the shell completed). The caller frees it; NULL when out of memory. */
char *cli_data_prefix(const char *arg);

/* An option that takes one value refused when given again: prev is its earlier value (NULL:
 * none yet, 0 returned). Otherwise prints "baton CMD: OPT given twice ('PREV' and 'V'); give
 * it once" and returns -1 (the caller exits 2). */
int cli_once(const char *cmd, const char *opt, const char *prev, const char *v);

/* A flag given twice: prints "baton CMD: OPT given twice; give it once" and returns
 * BT_EXIT_USAGE. */
int cli_twice(const char *cmd, const char *opt);

/* An argument a one-run-directory command cannot take: prints "baton CMD: unknown option
 * 'ARG'" (ARG starts with '-') or "baton CMD: one run directory at a time (got 'DIR' and
 * 'ARG')". The caller prints its usage and exits 2. */
void cli_bad_dir_arg(const char *cmd, const char *dir, const char *arg);

/* An option's value missing (OPT is the last argument): prints "baton CMD: OPT needs a
 * value" and returns -1. */
int cli_no_value(const char *cmd, const char *opt);

/* The error d of command CMD ("plan", "ckpt import") on stderr (bt_strerror(rc) when d has
 * no message). One placed in a file (d->placed: "FILE:LINE:COL: ...", a recipe's) is
 * printed as it is, as a compiler prints one, for editors and CI to find the place at the
 * start of the line; any other is printed after "baton CMD: ", as every command's own
 * messages are. */
void cli_error(const char *cmd, const bt_diag *d, int rc);

/* cli_error's d said as a warning, then more: "FILE:LINE:COL: warning: ..." or "baton CMD:
 * warning: ...". */
void cli_warning(const char *cmd, const bt_diag *d, const char *more);

/* An option's value that looks like an option (util/argv_eq.h), refused: prints "baton
 * CMD: OPT needs a value; 'V' looks like an option", with how to mean it: "./V" when OPT
 * takes a path, else "OPT=V". */
void cli_option_like(const char *cmd, const char *opt, const char *v, int path);

/* An --output path prefix (PREFIX.bin, PREFIX_train.idx ...): not empty and not a directory
 * (a trailing '/', a last component "." or "..", which would make hidden files such as
 * "dir/.bin", or an existing directory, which would put "dir.bin" beside it). Otherwise
 * says so ("baton CMD: --output 'OUT' ...", suggesting EXAMPLE, e.g. data/fortunes, or
 * OUT/fortunes) and returns -1. */
int cli_output_prefix(const char *cmd, const char *output, const char *example);

/* A count as recipes write it (units.h: 8, 128K, 1M; K/M/G/T are powers of two) in
 * [lo, hi]; -1 (nothing printed) when it is not one. */
int cli_count(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* A duration as recipes write it (units.h: 250ms, 30s, 5m, 1h, 2d; a plain number is
 * seconds) in [lo, hi] seconds; -1 after "baton CMD: OPT 'S': expected a duration ...". */
int cli_duration(const char *cmd, const char *opt, const char *s, double lo, double hi,
                 double *out);

/* Bytes per second: a count as recipes write one (500K, 100M: K/M/G/T are powers of two,
 * as in curl's --limit-rate) or a rate (100MB/s: MB powers of ten, MiB/s of two; 1Gb/s
 * bits), fractions of a byte dropped; -1 after "baton CMD: OPT 'S': expected
 * CLI_RATE_FORMS", or after saying it is below 1 byte per second but not 0 (4b/s, 0.5),
 * which would be 0, for the caller no limit. */
#define CLI_RATE_FORMS                                                                             \
    "bytes per second such as 500K or 100M (K/M/G/T are powers of two, 1K = 1024, as for "         \
    "counts in recipes), or a rate such as 100MB/s or 50MiB/s (MB powers of ten, MiB of two)"
int cli_rate(const char *cmd, const char *opt, const char *s, uint64_t *out);

#endif
