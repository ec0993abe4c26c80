#include "tokenizer.h"

#include <stdio.h>
#include <string.h>

size_t tok_encode(const uint8_t *bytes, size_t n, int32_t *tokens) {
    for (size_t i = 0; i < n; i++)
        tokens[i] = bytes[i];
    return n;
}

/* The text for one token into item (at least 16 bytes). */
static void tok_render_one(int32_t t, char *item, size_t cap) {
    if (t == '\n' || t == '\t' || (t >= 0x20 && t < 0x7f)) {
        item[0] = (char)t;
        item[1] = '\0';
    } else if (t >= 0 && t < 256) {
        snprintf(item, cap, "\\x%02x", (unsigned)t);
    } else if (t == TOK_BOS) {
        snprintf(item, cap, "<bos>");
    } else if (t == TOK_EOS) {
        snprintf(item, cap, "<eos>");
    } else if (t == TOK_PAD) {
        snprintf(item, cap, "<pad>");
    } else {
        snprintf(item, cap, "<tok:%ld>", (long)t);
    }
}

size_t tok_render(const int32_t *tokens, size_t n, char *out, size_t cap) {
    if (cap == 0) return 0;
    size_t len = 0, i = 0;
    out[0] = '\0';
    for (; i < n; i++) {
        char item[32];
        tok_render_one(tokens[i], item, sizeof item);
        size_t k = strlen(item);
        if (len + k + 1 > cap) break;
        memcpy(out + len, item, k + 1);
        len += k;
    }
    return i;
}
