#include "utf8.h"

#include <string.h>

size_t bt_utf8_seq(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
    if (len == 0 || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    /* the second byte's range rules out overlong forms, surrogates and > U+10FFFF */
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

int bt_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = bt_utf8_seq(p + i, n - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

int bt_has_control(const char *s) {
    for (; *s; s++)
        if (bt_is_control((unsigned char)*s)) return 1;
    return 0;
}

size_t bt_utf8_first_unprintable(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = bt_utf8_seq(p + i, n - i);
        if (k == 0 || bt_is_control(p[i])) return i;
        i += k;
    }
    return n;
}

void bt_utf8_cut_middle(const char *s, size_t max, char *out, size_t cap) {
    static const char gap[] = " ... ";
    size_t n = strlen(s), g = sizeof gap - 1;
    if (cap == 0) return;
    if (max > cap - 1) max = cap - 1;
    if (n <= max || max <= g + 2) {
        size_t k = n < max ? n : max;
        while (k > 0 && k < n && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        memcpy(out, s, k);
        out[k] = '\0';
        return;
    }
    size_t head = (max - g) * 2 / 5, tail = n - (max - g - head);
    while (head > 0 && ((unsigned char)s[head] & 0xC0) == 0x80)
        head--;
    while (tail < n && ((unsigned char)s[tail] & 0xC0) == 0x80)
        tail++;
    memcpy(out, s, head);
    memcpy(out + head, gap, g);
    memcpy(out + head + g, s + tail, n - tail);
    out[head + g + n - tail] = '\0';
}
