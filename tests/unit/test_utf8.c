/* UTF-8 validity (stages/util/utf8.h) and the escaping of names for JSON and text
 * (bt_buf_json_string, bt_buf_text): whatever bytes a name holds, the JSON is valid UTF-8
 * and a line of text holds no control character. */
#include <string.h>

#include "check.h"
#include "util/buf.h"
#include "util/utf8.h"

static void test_seq(void) {
    CHECK(bt_utf8_valid("plain ascii", 11));
    CHECK(bt_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9)); /* é € 😀 */
    CHECK(!bt_utf8_valid("\xff", 1));
    CHECK(!bt_utf8_valid("\xc3", 1));             /* cut short */
    CHECK(!bt_utf8_valid("\xc0\xaf", 2));         /* overlong '/' */
    CHECK(!bt_utf8_valid("\xe0\x80\xaf", 3));     /* overlong, three bytes */
    CHECK(!bt_utf8_valid("\xed\xa0\x80", 3));     /* a surrogate */
    CHECK(!bt_utf8_valid("\xf4\x90\x80\x80", 4)); /* beyond U+10FFFF */
    CHECK(!bt_utf8_valid("\x80", 1));             /* a stray continuation byte */
    CHECK_EQ_U64(bt_utf8_first_unprintable("abc"), 3);
    CHECK_EQ_U64(bt_utf8_first_unprintable("ab\ncd"), 2);
    CHECK_EQ_U64(bt_utf8_first_unprintable("\xc3\xa9x\x7f"), 3);
    CHECK_EQ_U64(bt_utf8_first_unprintable("\xc3\xa9\xff"), 2);
    /* control characters: below 0x20 and DEL; a byte beyond ASCII is none */
    CHECK(!bt_has_control("") && !bt_has_control("a b/\xc3\xa9\xff~"));
    CHECK(bt_has_control("a\tb") && bt_has_control("\x1f") && bt_has_control("x\x7f"));
    CHECK(bt_is_control('\n') && bt_is_control(0x7f) && !bt_is_control(' ') &&
          !bt_is_control(0x80));
}

static void test_escape(void) {
    bt_buf b;
    bt_buf_init(&b);
    bt_buf_json_string(&b, "a\"b\\c\n\x01\xc3\xa9\xff!");
    CHECK(strcmp(bt_buf_str(&b), "\"a\\\"b\\\\c\\u000a\\u0001\xc3\xa9\\ufffd!\"") == 0);
    CHECK(bt_utf8_valid(bt_buf_str(&b), b.len));
    CHECK(strcmp(bt_buf_text_of(&b, "we\"ird\\name\n\t\r\x01\x7f\xc3\xa9\xfe"),
                 "we\"ird\\name\\n\\t\\r\\x01\\x7f\xc3\xa9\\xfe") == 0);
    CHECK(strcmp(bt_buf_text_of(&b, ""), "") == 0);
    bt_buf_free(&b);
}

/* A long message keeps its start and its end (an errno's words), max bytes in all, cut on
 * characters' boundaries. */
static void test_cut_middle(void) {
    char out[64];
    bt_utf8_cut_middle("short", 20, out, sizeof out);
    CHECK(strcmp(out, "short") == 0);
    const char *m = "checkpoint x: cannot write tensor w: No space left on device";
    bt_utf8_cut_middle(m, 50, out, sizeof out);
    CHECK_EQ_U64(strlen(out), 50);
    CHECK(strncmp(out, "checkpoint x", 12) == 0);
    CHECK(strstr(out, " ... ") != NULL);
    CHECK(strcmp(out + strlen(out) - 23, "No space left on device") == 0);
    /* é is two bytes: no cut inside one, the result still well-formed */
    const char *e = "Ã©Ã©Ã©Ã©Ã©Ã©Ã©Ã©Ã©Ã©"
                    "Ã©Ã©Ã©Ã©Ã©Ã©";
    for (size_t max = 8; max < 32; max++) {
        bt_utf8_cut_middle(e, max, out, sizeof out);
        CHECK(strlen(out) <= max);
        CHECK(bt_utf8_valid(out, strlen(out)));
    }
    bt_utf8_cut_middle(m, 1000, out, 16); /* the buffer bounds it too */
    CHECK(strlen(out) <= 15 && bt_utf8_valid(out, strlen(out)));
}

int main(void) {
    test_seq();
    test_escape();
    test_cut_middle();
    return check_status();
}
