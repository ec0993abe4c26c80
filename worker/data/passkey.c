#include "passkey.h"

#include <stdio.h>
#include <string.h>

#include "splitmix.h"

#define KEY_LINE "\nThe pass key is %05u. Remember it. %05u is the pass key.\n"
#define QUESTION "\nWhat is the pass key? The pass key is %05u."
/* Byte lengths of the two lines with the key's 5 digits filled in. */
#define KEY_LINE_LEN (sizeof KEY_LINE - 1 - 2 * (sizeof "%05u" - 1) + 2 * PASSKEY_DIGITS)
#define QUESTION_LEN (sizeof QUESTION - 1 - (sizeof "%05u" - 1) + PASSKEY_DIGITS)

uint64_t passkey_answer_offset(uint32_t length) {
    return (uint64_t)length - 2 - PASSKEY_DIGITS;
}

uint32_t passkey_min_length(void) {
    return (uint32_t)(KEY_LINE_LEN + QUESTION_LEN + 1);
}

/* The length of the filler sentence starting at cycle offset `at`, with its ". ". */
static size_t sentence_len(const char *filler, size_t at) {
    return (size_t)(strchr(filler + at, '.') - (filler + at)) + 2;
}

/* Fills buf (when not NULL) with n bytes: whole filler sentences, then spaces.
 * Returns the number of sentence boundaries (the start and the end of each whole
 * sentence); when k is below that, *offset receives the k-th boundary. */
static uint64_t filler_write(char *buf, uint64_t n, uint64_t k, uint64_t *offset) {
    static const char filler[] = PASSKEY_FILLER;
    uint64_t pos = 0, count = 0;
    size_t at = 0; /* offset inside the filler cycle */
    for (;; count++) {
        if (count == k) *offset = pos;
        size_t len = sentence_len(filler, at);
        if (pos + len > n) break;
        if (buf != NULL) memcpy(buf + pos, filler + at, len);
        pos += len;
        at = (at + len) % (sizeof filler - 1);
    }
    if (buf != NULL) memset(buf + pos, ' ', n - pos);
    return count + 1;
}

int passkey_generate(uint64_t seed, uint64_t doc_index, uint32_t length, char *buf,
                     passkey_info *info, bt_diag *diag) {
    if (length < passkey_min_length()) {
        bt_diag_set(diag,
                    "passkey: a document of %u tokens cannot hold the key line and the "
                    "question; the length must be at least %u",
                    length, passkey_min_length());
        return BT_EINVAL;
    }
    uint64_t rng = splitmix64_mix(seed) ^ splitmix64_mix(doc_index + SPLITMIX64_GAMMA);
    unsigned key = 10000 + (unsigned)splitmix64_below(&rng, 90000);
    uint64_t fill = length - 1 - KEY_LINE_LEN - QUESTION_LEN, at = 0;
    /* Count the boundaries, lay the filler out after room for the key line, then move
     * the part before the drawn boundary to the front. */
    char *text = buf + KEY_LINE_LEN;
    uint64_t bounds = filler_write(NULL, fill, UINT64_MAX, &at);
    filler_write(text, fill, splitmix64_below(&rng, bounds), &at);
    memmove(buf, text, at);
    char line[KEY_LINE_LEN + QUESTION_LEN + 1];
    snprintf(line, sizeof line, KEY_LINE, key, key);
    memcpy(buf + at, line, KEY_LINE_LEN);
    snprintf(line, sizeof line, QUESTION, key);
    memcpy(buf + KEY_LINE_LEN + fill, line, QUESTION_LEN);
    if (info != NULL) {
        info->key = key;
        info->key_line_offset = at;
        info->depth = fill > 0 ? (double)at / (double)fill : 0.0;
        info->answer_offset = passkey_answer_offset(length);
    }
    return BT_OK;
}
