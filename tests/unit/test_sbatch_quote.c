/* #SBATCH values quoted for sbatch (orchestrator/run/sbatch_quote.h): every value written
 * by sbatch_quote or sbatch_quote_option is read back as it was by a reader of #SBATCH
 * lines written here from sbatch's rules (Slurm 22.05: words split at unquoted whitespace,
 * '...' and "..." group and are dropped, a backslash makes the next character literal,
 * inside quotes too, an unquoted '#' ends the line, an unmatched quote or a word that
 * starts with an unquoted ':' fails the script),
 * each rule checked against the test cluster's sbatch (scontrol show job: JobName, Comment,
 * WorkDir, StdOut). slurm.quoting submits such a script to the real sbatch. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sbatch_quote.h"

#define MAX_WORDS 8
/* a failed check with what was found */
#define FAILF(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr), check_failures++)

static void free_words(char **words, int n) {
    for (int i = 0; i < n; i++)
        free(words[i]);
}

/* The words sbatch reads from the text of an #SBATCH line after "#SBATCH" (each malloc'd
 * into words), or -1 where sbatch refuses the script: an unmatched quote ("Unmatched
 * `'`") or a word that starts with ':' ("Unexpected `:`"). */
static int read_line(const char *p, char **words) {
    int n = 0;
    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#' || n == MAX_WORDS) return n;
        if (*p == ':') {
            free_words(words, n);
            return -1;
        }
        char *w = calloc(strlen(p) + 1, 1), q = 0;
        size_t k = 0;
        for (; *p && (q || !isspace((unsigned char)*p)); p++) {
            if (*p == '\\') { /* dropped at the line's end */
                if (p[1]) w[k++] = *++p;
            } else if (q && *p == q) {
                q = 0;
            } else if (!q && (*p == '"' || *p == '\'')) {
                q = *p;
            } else if (!q && *p == '#') {
                break;
            } else {
                w[k++] = *p;
            }
        }
        words[n++] = w;
        if (q) {
            free_words(words, n);
            return -1;
        }
        if (*p == '#') return n;
    }
}

/* prefix followed by s quoted (within: inside that quote, which the line opens before s
 * and closes after it) reads back as the one word prefix s. */
static void check_round_trip(const char *prefix, const char *s, int pattern, char within) {
    bt_buf b;
    bt_buf_init(&b);
    bt_buf_printf(&b, " %s%.1s", prefix, &within);
    sbatch_quote(&b, s, pattern, within);
    bt_buf_printf(&b, "/slurm-%%j.out%.1s   # a comment", &within);
    char *words[MAX_WORDS], want[512];
    int n = read_line(bt_buf_str(&b), words);
    size_t k = (size_t)snprintf(want, sizeof want, "%s", prefix);
    for (const char *c = s; *c && k + 2 < sizeof want; c++) {
        want[k++] = *c;
        if (pattern && *c == '%') want[k++] = '%';
    }
    snprintf(want + k, sizeof want - k, "/slurm-%%j.out");
    CHECK(n == 1);
    if (n == 1 && strcmp(words[0], want) != 0)
        FAILF("%s read back as [%s], not [%s]", bt_buf_str(&b), words[0], want);
    if (n > 0) free_words(words, n);
    bt_buf_free(&b);
}

static const char *const nasty[] = {
    "/runs/plain",
    "/runs/a b",
    "/runs/it's",
    "/runs/say \"hi\"",
    "/runs/$HOME `id`",
    "/runs/back\\slash",
    "/runs/#1 run",
    "/runs/tab\there",
    "/runs/cr\rhere",
    "/runs/'\"'\"",
    "/runs/\\\"\\'\\",
    "/runs/ending\\",
    "/runs/50%",
    "/runs/%j%%x",
    "/runs/:colon",
    "/runs/\xc3\xbcn\xc3\xaf",
    "'",
    "\"",
    "\\",
    "#",
    "/runs/; rm -rf x",
    "/runs/$(echo hi)",
    "/runs/a\\ b",
    "/runs/ lead and trail ",
};

static void check_values(void) {
    for (size_t k = 0; k < sizeof nasty / sizeof nasty[0]; k++) {
        check_round_trip("--output=", nasty[k], 0, 0);
        check_round_trip("--output=", nasty[k], 1, 0); /* '%' doubled: a filename pattern */
        check_round_trip("", nasty[k], 0, 0);
        /* a template that quotes the placeholder itself: --output="@RUN_DIR@/..." */
        check_round_trip("--output=", nasty[k], 1, '"');
        check_round_trip("--output=", nasty[k], 0, '\'');
    }
    check_round_trip("", ":runs", 0, 0); /* a word of its own that starts with ':' */
}

/* The quoting state of a line, as sbatch_quote_track follows it. */
static void check_track(void) {
    struct {
        const char *text;
        char within;
        int escaped;
    } cases[] = {{"#SBATCH --output=", 0, 0},    {"#SBATCH --output=\"", '"', 0},
                 {"#SBATCH -o '", '\'', 0},      {"#SBATCH -o \"a'b", '"', 0},
                 {"#SBATCH -o \"a\\\"", '"', 0}, {"#SBATCH -o \\\"", 0, 0},
                 {"#SBATCH -o a\\", 0, 1},       {"#SBATCH -o \"x\"y'z'", 0, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char within = 0;
        int escaped = 0;
        sbatch_quote_track(cases[k].text, strlen(cases[k].text), &within, &escaped);
        if (within != cases[k].within || escaped != cases[k].escaped)
            FAILF("[%s]: within %d escaped %d", cases[k].text, within, escaped);
    }
}

static const char *quoted(bt_buf *b, const char *s, int pattern) {
    b->len = 0;
    sbatch_quote(b, s, pattern, 0);
    return bt_buf_str(b);
}

/* What the script shows: plain values as they are, others quoted once, whole. */
static void check_forms(void) {
    bt_buf b;
    bt_buf_init(&b);
    CHECK(strcmp(quoted(&b, "/shared/runs/tiny", 0), "/shared/runs/tiny") == 0);
    CHECK(strcmp(quoted(&b, "1:00:00", 0), "1:00:00") == 0);
    CHECK(strcmp(quoted(&b, "my job", 0), "\"my job\"") == 0);
    CHECK(strcmp(quoted(&b, "it's", 0), "\"it's\"") == 0);
    CHECK(strcmp(quoted(&b, "a\"b\\c", 0), "\"a\\\"b\\\\c\"") == 0);
    CHECK(strcmp(quoted(&b, "$x`y`", 0), "$x`y`") == 0); /* the shell never reads it */
    CHECK(strcmp(quoted(&b, "/r/50%", 1), "/r/50%%") == 0);
    CHECK(strcmp(quoted(&b, "/r/50% x", 1), "\"/r/50%% x\"") == 0);
    CHECK(strcmp(quoted(&b, "/r/50%", 0), "/r/50%") == 0);
    CHECK(strcmp(quoted(&b, ":x", 0), "\":x\"") == 0);
    CHECK(strcmp(quoted(&b, "a:x", 0), "a:x") == 0);
    CHECK(!sbatch_quote_needed("") && !sbatch_quote_needed("a-b_c.d/e:f=g,h%i@j+k"));
    CHECK(sbatch_quote_needed("a b") && sbatch_quote_needed("a#b") && sbatch_quote_needed("a'b"));
    CHECK(sbatch_quote_needed("a\\b") && sbatch_quote_needed("a\"b") && sbatch_quote_needed("\t"));
    bt_buf_free(&b);
}

/* An option word: the option as it is, the value quoted; read back as given. */
static void check_option(const char *word, const char *want_text) {
    bt_buf b;
    bt_buf_init(&b);
    sbatch_quote_option(&b, word);
    if (want_text && strcmp(bt_buf_str(&b), want_text) != 0)
        FAILF("option [%s] written [%s], not [%s]", word, bt_buf_str(&b), want_text);
    char *words[MAX_WORDS];
    int n = read_line(bt_buf_str(&b), words);
    CHECK(n == 1);
    if (n == 1 && strcmp(words[0], word) != 0)
        FAILF("option [%s] read back as [%s]", word, words[0]);
    if (n > 0) free_words(words, n);
    bt_buf_free(&b);
}

static void check_options(void) {
    check_option("--requeue", "--requeue");
    check_option("--time=1:00:00", "--time=1:00:00");
    check_option("--comment=a b", "--comment=\"a b\"");
    check_option("--comment=it's \"x\" #1", "--comment=\"it's \\\"x\\\" #1\"");
    check_option("-Jmy job", "-J\"my job\"");
    check_option("-p", "-p");
    check_option("--x'y=z", "\"--x'y=z\""); /* a quote in the option itself: all quoted */
    check_option("--a=b=c d", "--a=\"b=c d\"");
    check_option(":x", "\":x\"");
    for (size_t k = 0; k < sizeof nasty / sizeof nasty[0]; k++) {
        char w[256];
        snprintf(w, sizeof w, "--comment=%s", nasty[k]);
        check_option(w, NULL);
        snprintf(w, sizeof w, "-J%s", nasty[k]);
        check_option(w, NULL);
    }
}

/* The reader itself: what the real sbatch did with such lines. */
static void check_reader(void) {
    char *w[MAX_WORDS];
    int n = read_line(" --job-name=\"my job's \\\"x\\\" #1\"", w);
    CHECK(n == 1 && strcmp(w[0], "--job-name=my job's \"x\" #1") == 0);
    free_words(w, n);
    n = read_line(" --job-name=a\ttab", w); /* sbatch: "Invalid directive ... tab" */
    CHECK(n == 2 && strcmp(w[1], "tab") == 0);
    free_words(w, n);
    CHECK(read_line(" --output=/runs/it's/slurm-%j.out", w) == -1); /* "Unmatched `'`" */
    CHECK(read_line(" --comment :x", w) == -1);                     /* "Unexpected `:`" */
    n = read_line(" --comment \":x\"", w);
    CHECK(n == 2 && strcmp(w[1], ":x") == 0);
    free_words(w, n);
    n = read_line(" --comment=a#b", w);
    CHECK(n == 1 && strcmp(w[0], "--comment=a") == 0);
    free_words(w, n);
}

static void check_pattern_lines(void) {
    CHECK(sbatch_quote_is_pattern(" --output=/r/slurm-%j.out"));
    CHECK(sbatch_quote_is_pattern(" --output /r/x"));
    CHECK(sbatch_quote_is_pattern("\t--error=\"/r/x\""));
    CHECK(sbatch_quote_is_pattern(" --input=x") && sbatch_quote_is_pattern(" -o x"));
    CHECK(sbatch_quote_is_pattern(" -ox") && sbatch_quote_is_pattern(" -e x"));
    CHECK(!sbatch_quote_is_pattern(" --open-mode=append"));
    CHECK(!sbatch_quote_is_pattern(" --chdir=/r/x") && !sbatch_quote_is_pattern(" -D x"));
    CHECK(!sbatch_quote_is_pattern(" --job-name=x") && !sbatch_quote_is_pattern(" --outputs=x"));
    CHECK(!sbatch_quote_is_pattern(" --comment=--output=x"));
}

int main(void) {
    check_reader();
    check_values();
    check_track();
    check_forms();
    check_options();
    check_pattern_lines();
    return check_status();
}
