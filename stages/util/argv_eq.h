/* "--opt=value" on a command line: the GNU spelling of "--opt value", which torchrun and
 * Megatron users type by habit. Before a command parses its arguments, every "--OPT=VALUE"
 * whose OPT is one of its value-taking options is written as the two arguments "--OPT"
 * "VALUE" (split at the first '=': "--set=a.b=1" is "--set" "a.b=1"), so the parser sees
 * one spelling and its checks (a value given twice ...) hold for both. A flag given a
 * value ("--json=1") is refused. Anything else is left as it is: an option the command
 * does not know keeps its '=' (its error quotes it as typed; baton submit hands such
 * options to sbatch), and nothing after "--" is touched. */
#ifndef BATON_ARGV_EQ_H
#define BATON_ARGV_EQ_H

typedef struct bt_argv_opts {
    const char *const *values; /* the options that take one value, NULL-terminated */
    const char *const *flags;  /* the options that take none, NULL-terminated (or NULL) */
    int operands_end;          /* the first operand ends the options (baton launch: CMD ARGS
                                * follow, which are another program's) */
} bt_argv_opts;

/* The rewritten command line: argv[argc] is NULL; the strings are the caller's, but for
 * the option names split off, which it owns until bt_argv_free. */
typedef struct bt_argv {
    int argc;
    char **argv;
    char **names; /* the "--OPT" strings made, to free */
    int n_names;
} bt_argv;

/* Rewrites argv[first..argc-1] (argv[0..first-1] are copied as they are) into *out.
 * Returns 0; -1 when a flag was given a value (*bad is that argument, as given), -2 when
 * out of memory; *out is empty (bt_argv_free does nothing) unless 0 is returned. */
int bt_argv_split_eq(const bt_argv_opts *o, int argc, char **argv, int first, bt_argv *out,
                     const char **bad);

void bt_argv_free(bt_argv *a);

#endif
