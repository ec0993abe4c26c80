/* "--opt=value" written as "--opt" "value" (argv_eq.h). */
#include "argv_eq.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether the name of arg (up to its '=', or all of it: n) is in list. */
static int argv_in(const char *const *list, const char *arg, size_t n) {
    for (size_t k = 0; list != NULL && list[k] != NULL; k++)
        if (strlen(list[k]) == n && strncmp(list[k], arg, n) == 0) return 1;
    return 0;
}

void bt_argv_free(bt_argv *a) {
    for (int k = 0; k < a->n_names; k++)
        free(a->names[k]);
    free(a->names);
    free(a->argv);
    *a = (bt_argv){0};
}

int bt_argv_option_like(const char *s) {
    return s[0] == '-' && s[1] != '\0' && !isdigit((unsigned char)s[1]) && s[1] != '.';
}

/* An operand after "--" into out, written "./ARG" when it starts with '-' ("-" too: no
 * command reads standard input, and the parsers take a lone "-" for an option). */
static int argv_operand(char *arg, bt_argv *out) {
    if (arg[0] != '-') {
        out->argv[out->argc++] = arg;
        return 0;
    }
    size_t n = strlen(arg) + 3;
    char *path = malloc(n);
    if (path == NULL) return BT_ARGV_NOMEM;
    snprintf(path, n, "./%s", arg);
    out->names[out->n_names++] = path;
    out->argv[out->argc++] = path;
    return 0;
}

/* One argument at argv[*i] into out; *opts stays 1 while options may follow, and is -1
 * after a "--" the parser does not read itself (operands only). */
static int argv_one(const bt_argv_opts *o, int argc, char **argv, int *i, bt_argv *out, int *opts,
                    int *bad) {
    char *arg = argv[*i];
    if (*opts == -1) return argv_operand(arg, out);
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    int long_eq = *opts && eq != NULL && strncmp(arg, "--", 2) == 0 && n > 2;
    if (*opts && strcmp(arg, "--") == 0) {
        *opts = o->keeps_dashdash ? 0 : -1;
        if (*opts == -1) return 0; /* dropped */
    }
    *bad = *i;
    if (long_eq && argv_in(o->flags, arg, n)) return BT_ARGV_FLAG_VALUE;
    if (long_eq && argv_in(o->values, arg, n)) {
        char *name = strndup(arg, n);
        if (name == NULL) return BT_ARGV_NOMEM;
        out->names[out->n_names++] = name;
        out->argv[out->argc++] = name;
        out->argv[out->argc++] = (char *)eq + 1;
        return 0;
    }
    out->argv[out->argc++] = arg;
    if (*opts && eq == NULL && argv_in(o->values, arg, n) && *i + 1 < argc) { /* its value */
        if (bt_argv_option_like(argv[*i + 1])) return BT_ARGV_OPTION_LIKE;
        out->argv[out->argc++] = argv[++*i];
    } else if (*opts && o->operands_end && arg[0] != '-') {
        *opts = 0;
    }
    return 0;
}

int bt_argv_split_eq(const bt_argv_opts *o, int argc, char **argv, int first, bt_argv *out,
                     int *bad) {
    *out = (bt_argv){0};
    out->argv = calloc(2 * (size_t)argc + 1, sizeof *out->argv);
    out->names = calloc((size_t)argc + 1, sizeof *out->names);
    int rc = out->argv && out->names ? 0 : BT_ARGV_NOMEM, opts = 1;
    for (int i = 0; rc == 0 && i < argc; i++) {
        if (i < first)
            out->argv[out->argc++] = argv[i];
        else
            rc = argv_one(o, argc, argv, &i, out, &opts, bad);
    }
    if (rc != 0) bt_argv_free(out);
    return rc;
}
