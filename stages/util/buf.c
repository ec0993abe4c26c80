#include "buf.h"

#include "utf8.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

void bt_buf_init(bt_buf *b) {
    memset(b, 0, sizeof *b);
}

void bt_buf_free(bt_buf *b) {
    free(b->data);
    bt_buf_init(b);
}

static int buf_reserve(bt_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void bt_buf_append(bt_buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) != 0) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void bt_buf_printf(bt_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n) != 0) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void bt_buf_json_string(bt_buf *b, const char *s) {
    bt_buf_append(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = bt_utf8_seq(p + i, n - i);
        if (k == 0) {
            bt_buf_printf(b, "\\ufffd"); /* JSON is Unicode: a byte that is not, replaced */
            i++;
            continue;
        }
        if (p[i] == '"' || p[i] == '\\') {
            char esc[2] = {'\\', (char)p[i]};
            bt_buf_append(b, esc, 2);
        } else if (p[i] < 0x20) {
            bt_buf_printf(b, "\\u%04x", p[i]);
        } else {
            bt_buf_append(b, (const char *)p + i, k);
        }
        i += k;
    }
    bt_buf_append(b, "\"", 1);
}

void bt_buf_text(bt_buf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = bt_utf8_seq(p + i, n - i);
        const char *named = k == 0         ? NULL
                            : p[i] == '\n' ? "\\n"
                            : p[i] == '\t' ? "\\t"
                            : p[i] == '\r' ? "\\r"
                                           : NULL;
        if (named)
            bt_buf_printf(b, "%s", named);
        else if (k == 0 || bt_is_control(p[i]))
            bt_buf_printf(b, "\\x%02x", p[i]);
        else
            bt_buf_append(b, (const char *)p + i, k);
        i += k ? k : 1;
    }
}

const char *bt_buf_text_of(bt_buf *b, const char *s) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
    bt_buf_text(b, s);
    return bt_buf_str(b);
}

const char *bt_buf_str(const bt_buf *b) {
    return b->data ? b->data : "";
}

char *bt_str_concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s != NULL) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

int bt_grow(void *pv, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need && c <= SIZE_MAX / 2)
        c *= 2;
    if (c < need || c > SIZE_MAX / size) return BT_ENOMEM;
    void *v;
    memcpy(&v, pv, sizeof v);
    void *p = realloc(v, c * size);
    if (p == NULL) return BT_ENOMEM;
    memcpy(pv, &p, sizeof p);
    *cap = c;
    return 0;
}
