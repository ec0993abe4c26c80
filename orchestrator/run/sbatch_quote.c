/* #SBATCH values quoted for sbatch's own directive parser (sbatch_quote.h). */
#include "sbatch_quote.h"

#include <ctype.h>
#include <string.h>

int sbatch_quote_needed(const char *s) {
    if (s[0] == ':') return 1; /* a word that starts with ':' fails the script (hetjob syntax) */
    for (; *s; s++)
        if (isspace((unsigned char)*s) || strchr("\"'\\#", *s)) return 1;
    return 0;
}

void sbatch_quote(bt_buf *b, const char *s, int pattern, char within) {
    int q = within == 0 && sbatch_quote_needed(s);
    char close = within ? within : '"';
    if (q) bt_buf_append(b, "\"", 1);
    for (; *s; s++) {
        if ((q || within) && (*s == close || *s == '\\')) bt_buf_append(b, "\\", 1);
        if (pattern && *s == '%') bt_buf_append(b, "%", 1);
        bt_buf_append(b, s, 1);
    }
    if (q) bt_buf_append(b, "\"", 1);
}

void sbatch_quote_track(const char *text, size_t n, char *within, int *escaped) {
    for (size_t k = 0; k < n; k++) {
        char c = text[k];
        if (*escaped)
            *escaped = 0;
        else if (c == '\\')
            *escaped = 1;
        else if (*within && c == *within)
            *within = 0;
        else if (!*within && (c == '"' || c == '\''))
            *within = c;
    }
}

void sbatch_quote_option(bt_buf *b, const char *word) {
    size_t n = 0; /* the option's own part, kept outside the quotes for the reader */
    if (strncmp(word, "--", 2) == 0 && strchr(word, '='))
        n = (size_t)(strchr(word, '=') - word) + 1;
    else if (word[0] == '-' && word[1] != '-' && word[1] != '\0')
        n = 2;
    char head[256];
    if (n >= sizeof head) n = 0;
    memcpy(head, word, n);
    head[n] = '\0';
    if (sbatch_quote_needed(head)) n = 0, head[0] = '\0';
    bt_buf_append(b, head, n);
    sbatch_quote(b, word + n, 0, 0);
}

int sbatch_quote_is_pattern(const char *line) {
    static const char *const opts[] = {"--output", "--error", "--input", "-o", "-e", "-i"};
    while (*line == ' ' || *line == '\t')
        line++;
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        size_t n = strlen(opts[k]);
        if (strncmp(line, opts[k], n) != 0) continue;
        char c = line[n];
        /* -o FILE, -oFILE, --output=FILE, --output FILE (not --outputs, not -oz for -e) */
        if (n == 2 || c == '=' || c == ' ' || c == '\t' || c == '"' || c == '\'') return 1;
    }
    return 0;
}
