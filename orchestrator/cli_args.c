/* Checks the `baton` subcommands share on their arguments (cli.h). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "units.h"
#include "util/err.h"

int cli_once(const char *cmd, const char *opt, const char *prev, const char *v) {
    if (prev == NULL) return 0;
    fprintf(stderr, "baton %s: %s given twice ('%s' and '%s'); give it once\n", cmd, opt, prev, v);
    return -1;
}

int cli_twice(const char *cmd, const char *opt) {
    fprintf(stderr, "baton %s: %s given twice; give it once\n", cmd, opt);
    return BT_EXIT_USAGE;
}

void cli_bad_dir_arg(const char *cmd, const char *dir, const char *arg) {
    if (arg[0] == '-')
        fprintf(stderr, "baton %s: unknown option '%s'\n", cmd, arg);
    else
        fprintf(stderr, "baton %s: one run directory at a time (got '%s' and '%s')\n", cmd, dir,
                arg);
}

int cli_no_value(const char *cmd, const char *opt) {
    fprintf(stderr, "baton %s: %s needs a value\n", cmd, opt);
    return -1;
}

void cli_error(const char *cmd, const bt_diag *d, int rc) {
    if (bt_diag_isset(d) && d->placed)
        fprintf(stderr, "%s\n", d->msg);
    else
        fprintf(stderr, "baton %s: %s\n", cmd, bt_diag_isset(d) ? d->msg : bt_strerror(rc));
}

void cli_warning(const char *cmd, const bt_diag *d, const char *more) {
    if (d->placed > 0)
        fprintf(stderr, "%.*s: warning: %s%s\n", d->placed, d->msg, d->msg + d->placed + 2, more);
    else
        fprintf(stderr, "baton %s: warning: %s%s\n", cmd, d->msg, more);
}

void cli_option_like(const char *cmd, const char *opt, const char *v, int path) {
    fprintf(stderr, "baton %s: %s needs a value; '%s' looks like an option ", cmd, opt, v);
    if (path)
        fprintf(stderr, "(write ./%s for a file of that name)\n", v);
    else
        fprintf(stderr, "(write %s=%s if you mean it)\n", opt, v);
}

/* Whether the last component of path is "." or "..". */
static int cli_dot_dir(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strcmp(base, ".") == 0 || strcmp(base, "..") == 0;
}

int cli_output_prefix(const char *cmd, const char *output, const char *example) {
    size_t n = strlen(output);
    struct stat st;
    if (n == 0) {
        fprintf(stderr, "baton %s: --output '': name the output's path prefix, such as %s\n", cmd,
                example);
        return -1;
    }
    int dir = output[n - 1] == '/' || cli_dot_dir(output);
    if (!dir && stat(output, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr,
                "baton %s: --output '%s' is a directory; give a path prefix, the start of the "
                "files' names, such as '%s/%s'\n",
                cmd, output, output, strrchr(example, '/') + 1);
        return -1;
    }
    if (!dir) return 0;
    fprintf(stderr, "baton %s: --output '%s' must be a path prefix such as %s, not a directory\n",
            cmd, output, example);
    return -1;
}

int cli_count(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    uint64_t v;
    if (units_parse_uint(s, hi, &v) != 0 || v < lo) return -1;
    *out = v;
    return 0;
}

/* Seconds as a duration is written: 1ms, 30s, 100000s. */
static void cli_print_seconds(double s) {
    if (s > 0 && s < 1)
        fprintf(stderr, "%gms", s * 1e3);
    else
        fprintf(stderr, "%.0fs", s);
}

int cli_duration(const char *cmd, const char *opt, const char *s, double lo, double hi,
                 double *out) {
    double v;
    int rc = units_parse_duration(s, &v);
    if (rc == 0 && v >= lo && v <= hi) {
        *out = v;
        return 0;
    }
    fprintf(stderr, "baton %s: %s '%s': ", cmd, opt, s);
    if (rc == 0 || rc == BT_ERANGE) {
        fprintf(stderr, "out of range, from ");
        cli_print_seconds(lo);
        fprintf(stderr, " to ");
        cli_print_seconds(hi);
        fprintf(stderr, "\n");
    } else {
        fprintf(stderr, "expected %s\n", UNITS_DURATION_FORMS);
    }
    return -1;
}

int cli_rate(const char *cmd, const char *opt, const char *s, uint64_t *out) {
    double v;
    if (cli_count(s, 0, INT64_MAX, out) == 0) return 0;
    int rc = units_parse_bandwidth(s, &v);
    if (rc == 0 && (v == 0 || (v >= 1 && v < 9e18))) {
        *out = (uint64_t)v;
        return 0;
    }
    if (rc == 0 && v > 0 && v < 1) /* it would be 0: no limit at all */
        fprintf(stderr, "baton %s: %s '%s': below 1 byte per second (0 is no limit)\n", cmd, opt,
                s);
    else
        fprintf(stderr, "baton %s: %s '%s': expected %s\n", cmd, opt, s, CLI_RATE_FORMS);
    return -1;
}
