/* Shell words for a command line a message shows for a person to copy ("continue with
 * 'baton resume RUN_DIR'"), and for the batch script's: each quoted where it needs it,
 * so a path with a space, a quote or a newline copies back as the one argument it is.
 *
 * The convention of every such message: the command's words quoted where they need it
 * (bt_buf_shell_word), and a command shown in quotes shown in '...' where no word needed
 * any (baton resume /runs/a, as ever), else in "..." (baton resume '/runs/a b'), so that
 * what is between them runs as it is. */
#ifndef BATON_SHQUOTE_H
#define BATON_SHQUOTE_H

#include "buf.h"

/* Whether s reads back as itself, one word, unquoted: not empty, and only ASCII letters,
 * digits and _ . / : = @ % + , - (a byte beyond ASCII is quoted too: what a terminal's
 * copy and the shell's locale make of it is not certain). */
int bt_shell_plain(const char *s);
/* s appended in single quotes, a quote within as '\'', whatever it holds. */
void bt_buf_shell_quote(bt_buf *b, const char *s);
/* s appended as one shell word: as it is where bt_shell_plain, else in single quotes
 * (bt_buf_shell_quote), or, where it holds a control character (a newline, a tab), in
 * $'...' with \n, \t, \r, \\, \' and \xNN for the rest, so that the line stays one line
 * (bash, zsh and ksh read it). */
void bt_buf_shell_word(bt_buf *b, const char *s);
/* b emptied, then bt_buf_shell_word(b, s): the word, valid until b changes. */
const char *bt_shell_word_of(bt_buf *b, const char *s);
/* line (the command's words, each made by bt_buf_shell_word or plain) as a message shows
 * it in quotes: into out, emptied first, in '...' where line holds no quote, else in
 * "...". Valid until out changes. */
const char *bt_shell_shown(bt_buf *out, const char *line);
/* The common case, "HEAD WORD" shown so (head: plain words, such as "baton resume"). */
const char *bt_shell_cmd(bt_buf *out, const char *head, const char *word);

#endif
