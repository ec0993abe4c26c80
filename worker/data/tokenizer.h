/* The built-in byte-level tokenizer.
 *
 * Token ids 0..255 are the bytes of the text, unchanged (so any encoding, UTF-8
 * included, round-trips exactly). Special tokens sit above the bytes:
 *
 *   TOK_BOS = 256  beginning of sequence (reserved; `baton data` does not insert it)
 *   TOK_EOS = 257  end of document: appended to every document
 *   TOK_PAD = 258  padding (never written to a dataset)
 *
 * so the vocabulary has TOK_VOCAB = 259 entries and datasets are stored as uint16. */
#ifndef BATON_TOKENIZER_H
#define BATON_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

enum {
    TOK_BOS = 256,
    TOK_EOS = 257,
    TOK_PAD = 258,
    TOK_VOCAB = 259,
};

/* tokens[i] = bytes[i] for i < n. Returns n. */
size_t tok_encode(const uint8_t *bytes, size_t n, int32_t *tokens);

/* Writes a printable rendering of tokens into out (always NUL-terminated when cap >
 * 0): printable ASCII and newlines as they are, other bytes as \xHH, specials as
 * <bos>/<eos>/<pad>, anything else as <tok:N>. Stops early rather than split an
 * item; returns the number of tokens rendered. */
size_t tok_render(const int32_t *tokens, size_t n, char *out, size_t cap);

#endif
