#include "run_words.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

void run_words_init(run_words *w, int nranks) {
    w->n = 0;
    w->line = nranks > 0 ? calloc((size_t)nranks, sizeof *w->line) : NULL;
    if (w->line) w->n = nranks;
}

void run_words_note(run_words *w, int rank, const char *line, size_t len) {
    if (rank < 0 || rank >= w->n) return;
    size_t b = 0;
    while (b < len && (line[b] == ' ' || line[b] == '\t' || line[b] == '\r'))
        b++;
    if (b == len) return; /* blank: the line before it says more */
    char *out = w->line[rank];
    size_t n = len < RUN_WORDS_MAX ? len : RUN_WORDS_MAX;
    if (n < len) /* cut on a character's boundary: no continuation byte first after it */
        while (n > 0 && ((unsigned char)line[n] & 0xC0) == 0x80)
            n--;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        out[i] = bt_is_control(ch) ? '?' : (char)ch;
    }
    strcpy(out + n, n < len ? "..." : "");
}

void run_words_quote(const run_words *w, int rank, char *why, size_t cap) {
    if (rank < 0 || rank >= w->n || w->line[rank][0] == '\0') return;
    size_t l = strnlen(why, cap);
    if (l + 1 >= cap) return;
    snprintf(why + l, cap - l, "; rank %d's last line on stderr: %s", rank, w->line[rank]);
}

void run_words_free(run_words *w) {
    free(w->line);
    w->line = NULL, w->n = 0;
}
