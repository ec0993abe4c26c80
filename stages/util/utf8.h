/* UTF-8 validity, for names and text that baton prints or writes as JSON. */
#ifndef BATON_UTF8_H
#define BATON_UTF8_H

#include <stddef.h>

/* Bytes in the well-formed UTF-8 sequence at s (n bytes available): 1 to 4; 0 when it is
 * not one (a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, or
 * cut short by n). */
size_t bt_utf8_seq(const unsigned char *s, size_t n);
/* Whether s[0..n) is well-formed UTF-8. */
int bt_utf8_valid(const char *s, size_t n);
/* Whether byte c is a control character (U+0000-U+001F, U+007F: a newline, a tab, an
 * escape), which breaks or rewrites the line that shows it. */
static inline int bt_is_control(unsigned char c) {
    return c < 0x20 || c == 0x7F;
}
/* Whether s holds a control character (bt_is_control). */
int bt_has_control(const char *s);
/* The offset of the first byte of s that is not well-formed UTF-8 or is a control
 * character (bt_is_control); strlen(s) when there is none. */
size_t bt_utf8_first_unprintable(const char *s);
/* s into out (cap bytes, NUL-terminated) whole where it is at most max bytes; else its
 * first two fifths and its end, " ... " between, max bytes in all, cut on characters'
 * boundaries: a message's end (an errno's words) stays. */
void bt_utf8_cut_middle(const char *s, size_t max, char *out, size_t cap);

#endif
