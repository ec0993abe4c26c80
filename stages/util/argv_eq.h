/* "--opt=value" on a command line: the GNU spelling of "--opt value", which torchrun and
 * Megatron users type by habit. Before a command parses its arguments, every "--OPT=VALUE"
 * whose OPT is one of its value-taking options is written as the two arguments "--OPT"
 * "VALUE" (split at the first '=': "--set=a.b=1" is "--set" "a.b=1"), so the parser sees
 * one spelling and its checks (a value given twice ...) hold for both. A flag given a
 * value ("--json=1") is refused. Anything else is left as it is: an option the command
 * does not know keeps its '=' (its error quotes it as typed; baton submit hands such
 * options to sbatch), and nothing after "--" is touched.
 *
 * Two more rules every command shares:
 *  - "--" ends the options, as getopt has it: it is dropped, and every argument after it
 *    is an operand. The parsers take an argument that starts with '-' for an option, so
 *    such an operand reaches them written "./ARG", the same path (the operands of the
 *    commands that read "--" this way are all paths, and none reads standard input: "-"
 *    is the file ./- too). A command that reads "--" itself (baton launch: CMD follows;
 *    baton submit: sbatch's options follow) keeps it.
 *  - An option that takes a value, followed by an argument that looks like an option
 *    ("--run-dir --quiet": it starts with '-' and is not "-" or a negative number), is
 *    refused: its value is most likely missing. "--run-dir=--quiet" or "./--quiet" says
 *    the value is meant. */
#ifndef BATON_ARGV_EQ_H
#define BATON_ARGV_EQ_H

typedef struct bt_argv_opts {
    const char *const *values; /* the options that take one value, NULL-terminated */
    const char *const *flags;  /* the options that take none, NULL-terminated (or NULL) */
    int operands_end;          /* the first operand ends the options (baton launch: CMD ARGS
                                * follow, which are another program's) */
    int keeps_dashdash;        /* the parser reads "--" itself (launch, submit) */
} bt_argv_opts;

/* The rewritten command line: argv[argc] is NULL; the strings are the caller's, but for
 * the option names split off and the operands written "./ARG", which it owns until
 * bt_argv_free. */
typedef struct bt_argv {
    int argc;
    char **argv;
    char **names; /* the "--OPT" and "./ARG" strings made, to free */
    int n_names;
} bt_argv;

enum {
    BT_ARGV_FLAG_VALUE = -1, /* a flag given a value: argv[*bad] is "--flag=value" */
    BT_ARGV_NOMEM = -2,
    BT_ARGV_OPTION_LIKE = -3, /* argv[*bad] takes a value; argv[*bad + 1] looks like an option */
};

/* Rewrites argv[first..argc-1] (argv[0..first-1] are copied as they are) into *out.
 * Returns 0 or one of the codes above (*bad the index in argv of the argument at fault);
 * *out is empty (bt_argv_free does nothing) unless 0 is returned. */
int bt_argv_split_eq(const bt_argv_opts *o, int argc, char **argv, int first, bt_argv *out,
                     int *bad);

/* Whether s, an option's value, looks like an option: it starts with '-' and is neither
 * "-" (standard input, for some) nor a number ("-1", "-.5": the option's own check says
 * what is wrong with it). */
int bt_argv_option_like(const char *s);

void bt_argv_free(bt_argv *a);

#endif
