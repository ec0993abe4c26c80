/* Synthetic passkey-retrieval documents (after Mohtashami and Jaggi, "Landmark
 * Attention", 2023) for long-context training and evaluation.
 *
 * A document of `length` tokens (byte tokens, TOK_EOS last) is, in order:
 *
 *   filler   whole sentences cycling through PASSKEY_FILLER, then spaces up to the
 *            exact length;
 *   the key line "\nThe pass key is NNNNN. Remember it. NNNNN is the pass key.\n",
 *            inserted at a sentence boundary of the filler drawn uniformly;
 *   the question "\nWhat is the pass key? The pass key is NNNNN."
 *   TOK_EOS  (added by the dataset writer, not part of the text)
 *
 * NNNNN is a five-digit key in [10000, 99999]. Key and depth come from SplitMix64
 * seeded by (seed, document index), so document i of a set is the same everywhere.
 * For evaluation the answer sits at a fixed place: the 5 digit tokens
 * [length - 7, length - 2) of the document, followed only by "." and the EOS
 * (passkey_answer_offset); a model is asked to predict them from the tokens before. */
#ifndef BATON_PASSKEY_H
#define BATON_PASSKEY_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define PASSKEY_FILLER                                                                             \
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
#define PASSKEY_DIGITS 5

typedef struct passkey_info {
    uint32_t key;             /* the pass key, 10000..99999 */
    uint64_t key_line_offset; /* token offset of the key line's first byte (its "\n") */
    double depth;             /* key_line_offset / filler bytes, in [0, 1] */
    uint64_t answer_offset;   /* token offset of the answer digits: length - 7 */
} passkey_info;

/* Where the answer's 5 digits start in a document of `length` tokens: length - 7. */
uint64_t passkey_answer_offset(uint32_t length);

/* The shortest document: the key line, the question and the EOS, no filler. */
uint32_t passkey_min_length(void);

/* Writes the text of document doc_index (length - 1 bytes, no NUL) into buf, which
 * holds at least length - 1 bytes. BT_EINVAL (with diag) when length is below
 * passkey_min_length(). info may be NULL. */
int passkey_generate(uint64_t seed, uint64_t doc_index, uint32_t length, char *buf,
                     passkey_info *info, bt_diag *diag);

#endif
