/* Passkey documents (exact length, the key hidden once and asked for at the end,
 * seeded depth) and the byte tokenizer's rendering. */
#include "check.h"
#include "passkey.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdlib.h>

static void test_layout(void) {
    enum { LEN = 2000, DOCS = 300 };
    char *buf = malloc(LEN);
    bt_diag d;
    bt_diag_init(&d);
    double depth_sum = 0;
    int keys_differ = 0;
    unsigned first_key = 0;
    for (uint64_t i = 0; i < DOCS; i++) {
        passkey_info info;
        memset(buf, 0, LEN);
        CHECK(passkey_generate(9, i, LEN, buf, &info, &d) == BT_OK);
        CHECK(buf[LEN - 1] == 0); /* exactly LEN - 1 bytes written */
        buf[LEN - 1] = '\0';
        CHECK_EQ_U64(strlen(buf), LEN - 1);
        CHECK(info.key >= 10000 && info.key <= 99999);
        char key[6], line[128], question[128];
        snprintf(key, sizeof key, "%05u", info.key);
        snprintf(line, sizeof line, "\nThe pass key is %s. Remember it. %s is the pass key.\n", key,
                 key);
        snprintf(question, sizeof question, "\nWhat is the pass key? The pass key is %s.", key);
        CHECK(strncmp(buf + info.key_line_offset, line, strlen(line)) == 0);
        CHECK(strstr(buf + info.key_line_offset + 1, line) == NULL); /* hidden once */
        CHECK(strcmp(buf + LEN - 1 - strlen(question), question) == 0);
        CHECK_EQ_U64(info.answer_offset, LEN - 7);
        CHECK_EQ_U64(passkey_answer_offset(LEN), LEN - 7);
        CHECK(memcmp(buf + info.answer_offset, key, 5) == 0);
        /* the key line sits at a sentence boundary of the filler */
        CHECK(info.key_line_offset == 0 || buf[info.key_line_offset - 1] == ' ');
        CHECK(info.key_line_offset == 0 || buf[info.key_line_offset - 2] == '.');
        depth_sum += info.depth;
        if (i == 0) first_key = info.key;
        keys_differ |= info.key != first_key;
    }
    CHECK(keys_differ);
    CHECK_REL(depth_sum / DOCS, 0.5, 0.1); /* depths spread over the document */
    CHECK_STR_CONTAINS(buf, "The grass is green. The sky is blue. The sun is yellow.");
    free(buf);
}

static void test_determinism(void) {
    char a[500], b[500], c[500];
    passkey_info ia, ib, ic;
    CHECK(passkey_generate(1, 17, 500, a, &ia, NULL) == BT_OK);
    CHECK(passkey_generate(1, 17, 500, b, &ib, NULL) == BT_OK);
    CHECK(passkey_generate(2, 17, 500, c, &ic, NULL) == BT_OK);
    CHECK(memcmp(a, b, 499) == 0 && ia.key == ib.key);
    CHECK(ia.key != ic.key || ia.key_line_offset != ic.key_line_offset);
}

static void test_lengths(void) {
    uint32_t min = passkey_min_length();
    CHECK_EQ_U64(min, 106); /* 60-byte key line + 45-byte question + EOS */
    char buf[200];
    bt_diag d;
    bt_diag_init(&d);
    passkey_info info;
    CHECK(passkey_generate(1, 0, min, buf, &info, &d) == BT_OK);
    CHECK_EQ_U64(info.key_line_offset, 0);
    CHECK(passkey_generate(1, 0, min - 1, buf, &info, &d) == BT_EINVAL);
    CHECK_STR_CONTAINS(d.msg, "the length must be at least 106");
    for (uint32_t len = min; len < 200; len++) { /* every length is exact */
        memset(buf, 0, sizeof buf);
        CHECK(passkey_generate(3, len, len, buf, NULL, NULL) == BT_OK);
        CHECK(buf[len - 2] == '.' && buf[len - 1] == 0);
    }
}

static void test_tokenizer(void) {
    const uint8_t text[] = {'H', 'i', '\n', 0xc3, 0xa9};
    int32_t tok[8];
    CHECK_EQ_U64(tok_encode(text, 5, tok), 5);
    CHECK(tok[0] == 'H' && tok[3] == 0xc3 && tok[4] == 0xa9);
    tok[5] = TOK_EOS;
    tok[6] = TOK_PAD;
    tok[7] = 1000;
    char out[128];
    CHECK_EQ_U64(tok_render(tok, 8, out, sizeof out), 8);
    CHECK(strcmp(out, "Hi\n\\xc3\\xa9<eos><pad><tok:1000>") == 0);
    CHECK_EQ_U64(tok_render(tok, 8, out, 7), 3); /* "\\xc3" would not fit: stop before it */
    CHECK(strcmp(out, "Hi\n") == 0);
    CHECK(TOK_BOS == 256 && TOK_EOS == 257 && TOK_PAD == 258 && TOK_VOCAB == 259);
}

int main(void) {
    test_layout();
    test_determinism();
    test_lengths();
    test_tokenizer();
    return check_status();
}
