/* The last line each rank of an attempt wrote to stderr, kept to quote in the attempt's
 * failure where no Fatal explains it: a worker that failed before its control channel
 * opened (a fork refused under `ulimit -u`, a wrapper's own error) says why only there. */
#ifndef BATON_RUN_WORDS_H
#define BATON_RUN_WORDS_H

#include <stddef.h>

/* A quoted line is cut to this many bytes (on a UTF-8 character's boundary), "..." after. */
#define RUN_WORDS_MAX 240

typedef struct run_words {
    char (*line)[RUN_WORDS_MAX + 4]; /* per rank: its last non-blank line, "" for none */
    int n;                           /* ranks; 0 when the table could not be allocated */
} run_words;

/* A table for nranks ranks, every line empty. Out of memory: an empty table (nothing is
 * kept, nothing quoted). */
void run_words_init(run_words *w, int nranks);
/* Keeps line (len bytes, no newline) as rank's last, unless it is blank; control characters
 * become '?'. */
void run_words_note(run_words *w, int rank, const char *line, size_t len);
/* Appends "; rank R's last line on stderr: LINE" to why (cap bytes, NUL-terminated) where
 * the rank wrote one. */
void run_words_quote(const run_words *w, int rank, char *why, size_t cap);
void run_words_free(run_words *w);

#endif
