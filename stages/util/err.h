/* Error codes and diagnostics shared by both programs.
 *
 * Library code returns 0 or a negative code from the table below and, where a person
 * will read it, fills a bt_diag with a message that names the input, the place and what
 * would be valid. Only main() turns codes into exit statuses. */
#ifndef BATON_ERR_H
#define BATON_ERR_H

#include <stddef.h>

#define BT_ERRNO_MAP(X)                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ENOENT, -4, "no such file or directory")                                                     \
    X(ERECIPE, -5, "invalid recipe")                                                               \
    X(ERANGE, -6, "value out of range")                                                            \
    X(EUNSUPPORTED, -7, "not supported")                                                           \
    X(EINTERNAL, -8, "internal error")

enum {
    BT_OK = 0,
#define BT_ERR_ENUM(name, code, text) BT_##name = code,
    BT_ERRNO_MAP(BT_ERR_ENUM)
#undef BT_ERR_ENUM
};

/* Exit statuses of the command-line programs (documented in docs/cli.md). */
enum {
    BT_EXIT_OK = 0,
    BT_EXIT_FAILURE = 1, /* the run or command failed */
    BT_EXIT_USAGE = 2,   /* bad command line, recipe or input: retrying will not help */
};

const char *bt_strerror(int code);

/* A human-readable message for the caller to show. The first message set wins, so
 * the innermost (most specific) failure is the one reported. */
typedef struct bt_diag {
    char msg[2048];
    int err;    /* the errno of the failed system call msg names, where one is known; else 0 */
    int placed; /* the length of the place in a file msg starts with, "FILE:LINE:COL" (then
                 * ": "), bt_diag_set_placed's; 0: msg starts with no such place */
} bt_diag;

void bt_diag_init(bt_diag *d);
void bt_diag_set(bt_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* bt_diag_set for a message about a place in a file the user gave (a recipe's key, a JSON
 * file's byte): "FILE:LINE:COL: " and then the message, placed its length without ": ",
 * for a command to print it first, as a compiler does. Every other setter leaves placed 0:
 * only the one who writes the place can tell it from text that looks alike ("--set
 * seed=1:2:3: ..."). */
void bt_diag_set_placed(bt_diag *d, const char *file, long line, long col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* bt_diag_set that also keeps err, the errno behind the message (ENOSPC or EDQUOT: a full
 * disk, which the worker tells baton run by a code, not by strerror's words). */
void bt_diag_set_errno(bt_diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets d to from's message after a prefix ("PREFIX: MESSAGE"), and from's errno, unless d
 * has a message already. */
void bt_diag_forward(bt_diag *d, const bt_diag *from, const char *prefix_fmt, ...)
    __attribute__((format(printf, 3, 4)));
int bt_diag_isset(const bt_diag *d);

#endif
