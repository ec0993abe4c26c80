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

/* Exit statuses of the command-line programs (documented in the README). */
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
} bt_diag;

void bt_diag_init(bt_diag *d);
void bt_diag_set(bt_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int bt_diag_isset(const bt_diag *d);

#endif
