/* Shell words for commands that messages show (shquote.h). */
#include "shquote.h"

#include <string.h>

#include "utf8.h"

int bt_shell_plain(const char *s) {
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "_./:=@%+,-";
    return s[0] != '\0' && strspn(s, ok) == strlen(s);
}

void bt_buf_shell_quote(bt_buf *b, const char *s) {
    bt_buf_append(b, "'", 1);
    for (const char *q; (q = strchr(s, '\'')) != NULL; s = q + 1) {
        bt_buf_append(b, s, (size_t)(q - s));
        bt_buf_append(b, "'\\''", 4);
    }
    bt_buf_append(b, s, strlen(s));
    bt_buf_append(b, "'", 1);
}

/* s in $'...' (bash's ANSI-C quoting): every byte as it is but for the escaped ones. */
static void shell_ansi_c(bt_buf *b, const char *s) {
    bt_buf_append(b, "$'", 2);
    for (; *s; s++) {
        unsigned char u = (unsigned char)*s;
        if (u == '\n' || u == '\t' || u == '\r')
            bt_buf_printf(b, "\\%c", u == '\n' ? 'n' : u == '\t' ? 't' : 'r');
        else if (u == '\\' || u == '\'')
            bt_buf_printf(b, "\\%c", u);
        else if (bt_is_control(u))
            bt_buf_printf(b, "\\x%02x", u);
        else
            bt_buf_append(b, s, 1);
    }
    bt_buf_append(b, "'", 1);
}

void bt_buf_shell_word(bt_buf *b, const char *s) {
    if (bt_shell_plain(s))
        bt_buf_append(b, s, strlen(s));
    else if (bt_has_control(s))
        shell_ansi_c(b, s);
    else
        bt_buf_shell_quote(b, s);
}

const char *bt_shell_word_of(bt_buf *b, const char *s) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
    bt_buf_shell_word(b, s);
    return bt_buf_str(b);
}

const char *bt_shell_shown(bt_buf *out, const char *line) {
    const char *q = strchr(line, '\'') ? "\"" : "'";
    out->len = 0;
    if (out->data) out->data[0] = '\0';
    bt_buf_printf(out, "%s%s%s", q, line, q);
    return bt_buf_str(out);
}

const char *bt_shell_cmd(bt_buf *out, const char *head, const char *word) {
    bt_buf line;
    bt_buf_init(&line);
    bt_buf_printf(&line, "%s ", head);
    bt_buf_shell_word(&line, word);
    bt_shell_shown(out, line.oom ? "" : bt_buf_str(&line));
    bt_buf_free(&line);
    return bt_buf_str(out);
}
