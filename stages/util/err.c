#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *bt_strerror(int code) {
    switch (code) {
    case BT_OK:
        return "success";
#define BT_ERR_CASE(name, value, text)                                                             \
    case value:                                                                                    \
        return text;
        BT_ERRNO_MAP(BT_ERR_CASE)
#undef BT_ERR_CASE
    }
    return "unknown error";
}

void bt_diag_init(bt_diag *d) {
    d->msg[0] = '\0';
    d->err = 0;
    d->placed = 0;
}

void bt_diag_set(bt_diag *d, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->err = 0;
    d->placed = 0;
}

void bt_diag_set_placed(bt_diag *d, const char *file, long line, long col, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    int n = snprintf(d->msg, sizeof d->msg, "%s:%ld:%ld: ", file, line, col);
    if (n < 0 || (size_t)n >= sizeof d->msg) n = 0, d->msg[0] = '\0'; /* no room: no place */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg + n, sizeof d->msg - (size_t)n, fmt, ap);
    va_end(ap);
    d->err = 0;
    d->placed = n > 2 ? n - 2 : 0;
}

void bt_diag_set_errno(bt_diag *d, int err, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->err = err;
    d->placed = 0;
}

void bt_diag_forward(bt_diag *d, const bt_diag *from, const char *prefix_fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, prefix_fmt);
    int n = vsnprintf(d->msg, sizeof d->msg, prefix_fmt, ap);
    va_end(ap);
    size_t at = n < 0 ? 0 : (size_t)n < sizeof d->msg ? (size_t)n : sizeof d->msg - 1;
    size_t room = sizeof d->msg - at, len = strlen(from->msg);
    if (room > 2) { /* ": " and as much of from's message as fits, cut short if need be */
        memcpy(d->msg + at, ": ", 2);
        len = len < room - 3 ? len : room - 3;
        memcpy(d->msg + at + 2, from->msg, len);
        d->msg[at + 2 + len] = '\0';
    }
    d->err = from->err;
    d->placed = 0;
}

int bt_diag_isset(const bt_diag *d) {
    return d != NULL && d->msg[0] != '\0';
}
