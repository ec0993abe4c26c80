/* A growable byte buffer for composing text (reports, JSON, messages), and the growth of
 * any array. */
#ifndef BATON_BUF_H
#define BATON_BUF_H

#include <stddef.h>

typedef struct bt_buf {
    char *data; /* always NUL-terminated once anything was appended */
    size_t len;
    size_t cap;
    int oom; /* set when an allocation failed; later appends are ignored */
} bt_buf;

void bt_buf_init(bt_buf *b);
void bt_buf_free(bt_buf *b);
void bt_buf_printf(bt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bt_buf_append(bt_buf *b, const char *s, size_t n);
/* Appends s as a JSON string literal, quotes included; a byte that is not well-formed
 * UTF-8 becomes U+FFFD, so the JSON stays valid whatever s holds. */
void bt_buf_json_string(bt_buf *b, const char *s);
/* Appends s for a line of text: a newline, tab and carriage return as \n, \t and \r, any
 * other control character, DEL and a byte that is not well-formed UTF-8 as \xNN; the rest
 * as it is, a backslash too (a name reads as it is: `x\y`, not `x\\y`; a literal "\n" in
 * a name then reads as its newline would, which --json tells apart). */
void bt_buf_text(bt_buf *b, const char *s);
/* b emptied, then bt_buf_text(b, s): the escaped text, valid until b changes. */
const char *bt_buf_text_of(bt_buf *b, const char *s);
const char *bt_buf_str(const bt_buf *b);

/* A new malloc'd string a followed by b (e.g. a path prefix and a suffix), or NULL when
 * out of memory. */
char *bt_str_concat(const char *a, const char *b);

/* Room in the array *pv (a pointer to any object pointer: elements of size bytes, *cap of
 * them) for need elements, by doubling (16 at first): 0, or BT_ENOMEM with *pv and *cap
 * unchanged. */
int bt_grow(void *pv, size_t *cap, size_t need, size_t size);

#endif
