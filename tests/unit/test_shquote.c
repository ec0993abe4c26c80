/* Shell words for the commands messages show (stages/util/shquote.h): a word that needs no
 * quotes as it is, any other in quotes that /bin/sh (or bash, for $'...') reads back as
 * the one word it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/shquote.h"

static const char *word_of(bt_buf *b, const char *s) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
    bt_buf_shell_word(b, s);
    return bt_buf_str(b);
}

static void test_words(void) {
    bt_buf b;
    bt_buf_init(&b);
    CHECK(strcmp(word_of(&b, "/runs/a-1_b.c:d=e@f%g+h,i"), "/runs/a-1_b.c:d=e@f%g+h,i") == 0);
    CHECK(strcmp(word_of(&b, ""), "''") == 0);
    CHECK(strcmp(word_of(&b, "/tmp/x y"), "'/tmp/x y'") == 0);
    CHECK(strcmp(word_of(&b, "it's"), "'it'\\''s'") == 0);
    CHECK(strcmp(word_of(&b, "a\"b$c`d\\e*~"), "'a\"b$c`d\\e*~'") == 0);
    CHECK(strcmp(word_of(&b, "runs/\xc3\xa9"), "'runs/\xc3\xa9'") == 0); /* é: quoted */
    CHECK(strcmp(word_of(&b, "n\nl\tt'q\\\x01"), "$'n\\nl\\tt\\'q\\\\\\x01'") == 0);
    bt_buf_free(&b);
}

static void test_shown(void) {
    bt_buf b;
    bt_buf_init(&b);
    CHECK(strcmp(bt_shell_cmd(&b, "baton resume", "/runs/a"), "'baton resume /runs/a'") == 0);
    CHECK(strcmp(bt_shell_cmd(&b, "baton resume", "/runs/a b"), "\"baton resume '/runs/a b'\"") ==
          0);
    CHECK(strcmp(bt_shell_cmd(&b, "baton resume", "/r/\"x"), "\"baton resume '/r/\"x'\"") == 0);
    bt_buf_free(&b);
}

/* Each word, quoted, given to sh (bash where it is in $'...') as printf's argument comes
 * back as it was. */
static void test_round_trip(void) {
    const char *words[] = {
        "/tmp/x y", "it's",   "a\"b$c`d\\e*~ $(true)", "\xc3\xa9\xe6\x97\xa5", "-x",
        "",         "\\'\\'", "n\nl\tt'q\\\x01"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        bt_buf cmd, w;
        bt_buf_init(&cmd), bt_buf_init(&w);
        bt_buf_printf(&w, "printf %%s ");
        bt_buf_shell_word(&w, words[i]);
        bt_buf_printf(&cmd, "%s -c ", strstr(bt_buf_str(&w), "$'") ? "bash" : "sh");
        bt_buf_shell_quote(&cmd, bt_buf_str(&w)); /* the script, one word for popen's sh */
        FILE *p = popen(bt_buf_str(&cmd), "r");
        char got[256] = "";
        size_t n = p ? fread(got, 1, sizeof got - 1, p) : 0;
        got[n] = '\0';
        CHECK(p != NULL && pclose(p) == 0);
        if (strcmp(got, words[i]) != 0) fprintf(stderr, "word %zu: got [%s]\n", i, got);
        CHECK(strcmp(got, words[i]) == 0);
        bt_buf_free(&cmd), bt_buf_free(&w);
    }
}

int main(void) {
    test_words();
    test_shown();
    test_round_trip();
    return check_status();
}
