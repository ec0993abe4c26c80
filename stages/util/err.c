#include "err.h"

#include <stdarg.h>
#include <stdio.h>

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
}

void bt_diag_set(bt_diag *d, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
}

int bt_diag_isset(const bt_diag *d) {
    return d != NULL && d->msg[0] != '\0';
}
