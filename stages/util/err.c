#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

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

/* head (at most a bt_diag's size) and then fmt formatted, into out (cap bytes): whole where
 * it fits, else its start and its end with the middle cut (bt_utf8_cut_middle), so the
 * cause a message ends with (an errno's words after a long path) stays. Formatted into a
 * 16 KiB buffer on the stack, or one from the heap where the message is longer (out of
 * memory: its first 16 KiB). */
static void diag_vformat(char *out, size_t cap, const char *head, const char *fmt, va_list ap) {
    char tmp[16384], *text = tmp, *big = NULL;
    size_t h = strlen(head);
    memcpy(tmp, head, h);
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(tmp + h, sizeof tmp - h, fmt, ap);
    if (n < 0) {
        tmp[h] = '\0';
    } else if (h + (size_t)n >= sizeof tmp && (big = malloc(h + (size_t)n + 1)) != NULL) {
        memcpy(big, head, h);
        vsnprintf(big + h, (size_t)n + 1, fmt, again);
        text = big;
    }
    va_end(again);
    bt_utf8_cut_middle(text, cap - 1, out, cap);
    free(big);
}

static void diag_format(char *out, size_t cap, const char *head, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    diag_vformat(out, cap, head, fmt, ap);
    va_end(ap);
}

void bt_diag_set(bt_diag *d, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    diag_vformat(d->msg, sizeof d->msg, "", fmt, ap);
    va_end(ap);
    d->err = 0;
    d->placed = 0;
}

void bt_diag_set_placed(bt_diag *d, const char *file, long line, long col, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    char place[1024];
    int n = snprintf(place, sizeof place, "%s:%ld:%ld: ", file, line, col);
    if (n < 0 || (size_t)n >= sizeof place) n = 0, place[0] = '\0'; /* no room: no place */
    va_list ap;
    va_start(ap, fmt);
    diag_vformat(d->msg, sizeof d->msg, place, fmt, ap);
    va_end(ap);
    d->err = 0;
    /* the place is placed only where the cut left it whole at the start */
    d->placed = n > 2 && strncmp(d->msg, place, (size_t)n) == 0 ? n - 2 : 0;
}

void bt_diag_set_errno(bt_diag *d, int err, const char *fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    va_list ap;
    va_start(ap, fmt);
    diag_vformat(d->msg, sizeof d->msg, "", fmt, ap);
    va_end(ap);
    d->err = err;
    d->placed = 0;
}

void bt_diag_forward(bt_diag *d, const bt_diag *from, const char *prefix_fmt, ...) {
    if (d == NULL || d->msg[0] != '\0') return;
    char prefix[sizeof d->msg];
    va_list ap;
    va_start(ap, prefix_fmt);
    diag_vformat(prefix, sizeof prefix, "", prefix_fmt, ap);
    va_end(ap);
    diag_format(d->msg, sizeof d->msg, prefix, ": %s", from->msg);
    d->err = from->err;
    d->placed = 0;
}

int bt_diag_isset(const bt_diag *d) {
    return d != NULL && d->msg[0] != '\0';
}
