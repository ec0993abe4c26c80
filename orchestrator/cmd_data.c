/* baton data prepare | passkey | inspect: token datasets in the Megatron-LM indexed
 * format (worker/data/indexed.h), tokenized by the built-in byte-level tokenizer
 * (worker/data/tokenizer.h: token = byte, EOS = 257 after every document).
 *
 *   prepare  text files, directories, tar/zip archives -> PREFIX_train (+ PREFIX_valid)
 *   passkey  synthetic passkey-retrieval documents -> PREFIX
 *   inspect  counts, dtype and a document preview of PREFIX
 *
 * Exit status: 0 done, 1 failed (out of memory, cannot write the output), 2 bad
 * usage or bad input (missing, unreadable or corrupt). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "util/buf.h"
#include "util/cleanup.h"
#include "util/clock.h"
#include "corpus.h"
#include "indexed.h"
#include "passkey.h"
#include "tokenizer.h"

#define PREP_CHUNK         65536
#define PASSKEY_MAX_LENGTH (1u << 28) /* tokens per passkey document */

static int data_exit(int rc) {
    if (rc == BT_OK) return BT_EXIT_OK;
    return rc == BT_ENOMEM || rc == BT_EIO ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
}

/* The value after option argv[*i], advancing *i; NULL (reported) when missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *cmd) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "baton data %s: %s needs a value\n", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* A dataset prefix as given on the command line: a path naming one of the pair's files
 * ("data/x.bin", "data/x.idx") stands for its prefix ("data/x"), so that a path completed
 * by the shell works. The caller frees it; NULL when out of memory. */
char *cli_data_prefix(const char *arg) {
    size_t n = strlen(arg);
    if (n > 4 && (strcmp(arg + n - 4, ".bin") == 0 || strcmp(arg + n - 4, ".idx") == 0) &&
        arg[n - 5] != '/')
        n -= 4;
    return strndup(arg, n);
}

/* Creates the directories above the file prefix, like mkdir -p. *made is the length of
 * the first directory it created (0: none), the ones below it having been created too:
 * remove_parents takes exactly those away again when the command fails. */
static int make_parents(const char *prefix, size_t *made, bt_diag *diag) {
    char *p = strdup(prefix);
    *made = 0;
    if (p == NULL) return BT_ENOMEM;
    int rc = BT_OK;
    for (char *s = strchr(p + 1, '/'); s != NULL && rc == BT_OK; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(p, 0777) == 0) {
            if (*made == 0) *made = (size_t)(s - p);
        } else if (errno != EEXIST) {
            bt_diag_set(diag, "output '%s': cannot create directory '%s': %s", prefix, p,
                        strerror(errno));
            rc = BT_EIO;
        }
        *s = '/';
    }
    free(p);
    return rc;
}

/* Removes, deepest first, the directories above prefix that make_parents created (made:
 * its *made). rmdir leaves a directory something else has written into since. */
static void remove_parents(const char *prefix, size_t made) {
    char *p = made ? strdup(prefix) : NULL;
    if (p == NULL) return;
    for (char *s = strrchr(p, '/'); s != NULL && (size_t)(s - p) >= made; s = strrchr(p, '/')) {
        *s = '\0';
        rmdir(p);
    }
    free(p);
}

/* The plural ending for a count of n: "1 file", "2 files". */
static const char *plural(uint64_t n) {
    return n == 1 ? "" : "s";
}

/* ---- prepare ----------------------------------------------------------------- */

static void prepare_usage(FILE *f) {
    fprintf(f, "usage: baton data prepare --input PATH... --output PREFIX [--valid-fraction F]\n"
               "                          [--split-on-percent] [--progress] [--verbose]\n\n"
               "Tokenizes text into Megatron-LM indexed datasets with the byte-level tokenizer\n"
               "(token = byte value 0..255; every document ends with EOS = 257; vocab 259;\n"
               "stored as uint16). Writes PREFIX_train.bin/.idx and, when F > 0,\n"
               "PREFIX_valid.bin/.idx; use those prefixes as data.train / data.valid.\n\n"
               "  --input PATH...     text files, directories (recursive, sorted by name;\n"
               "                      symbolic links inside are not followed) and archives\n"
               "                      (tar, tar.gz, tar.zst, tar.xz, zip, ...: each regular\n"
               "                      member is a file). Files whose first 8 KiB hold a NUL\n"
               "                      byte are binary and skipped. Repeatable.\n"
               "  --output PREFIX     output path prefix; missing directories are created\n"
               "  --valid-fraction F  share of documents for validation, 0 <= F < 1\n"
               "                      (default 0.01); document i is a validation document\n"
               "                      when floor((i+1)F) > floor(iF), i.e. evenly spread;\n"
               "                      at 0 an earlier PREFIX_valid.bin/.idx is removed\n"
               "  --split-on-percent  fortune(6) files: every entry between lines holding\n"
               "                      only '%%' is a document (default: one file, one document)\n"
               "  --progress          show progress on stderr even when it is not a terminal\n"
               "  --verbose           name every skipped file\n"
               "  --help              show this help\n\n"
               "Example: baton data prepare --input /usr/share/games/fortunes --split-on-percent\n"
               "         --output data/fortunes\n\n"
               "Exit status: 0 written, 1 cannot write the output, 2 bad usage or bad input.\n");
}

typedef struct prep_opts {
    const char **inputs;
    int n_inputs;
    const char *output;
    double valid_fraction;
    int split_on_percent, progress, verbose;
} prep_opts;

/* The sink: tokenizes each document into the train or valid writer. */
typedef struct prep {
    indexed_writer w[2]; /* train, valid */
    int open[2], finished[2];
    size_t made; /* make_parents' record of the directories it created */
    double valid_fraction;
    uint64_t doc; /* ordinal of the next document */
    int cur;      /* writer of the current document, -1 between documents */
    uint64_t docs[2], tokens[2];
    int stale_removed; /* files of an earlier PREFIX_valid pair removed (prep_drop_stale) */
    int32_t *tok;      /* PREP_CHUNK tokens */
    bt_diag *diag;
    int progress, tty, progress_shown;
    double last_progress;
} prep;

static int prep_doc_data(void *ctx, const uint8_t *bytes, size_t n) {
    prep *p = ctx;
    if (bt_cleanup_check(p->diag) != 0) return BT_EIO; /* a signal: fail, prep_abort cleans */
    if (p->cur < 0) {
        double f = p->valid_fraction, i = (double)p->doc;
        p->cur = floor((i + 1) * f) > floor(i * f) ? 1 : 0;
    }
    while (n > 0) {
        size_t k = n < PREP_CHUNK ? n : PREP_CHUNK;
        tok_encode(bytes, k, p->tok);
        int rc = indexed_writer_append(&p->w[p->cur], p->tok, k, p->diag);
        if (rc != BT_OK) return rc;
        p->tokens[p->cur] += k;
        bytes += k;
        n -= k;
    }
    return BT_OK;
}

static int prep_doc_end(void *ctx) {
    prep *p = ctx;
    int32_t eos = TOK_EOS;
    int rc = indexed_writer_append(&p->w[p->cur], &eos, 1, p->diag);
    rc = rc ? rc : indexed_writer_end_document(&p->w[p->cur], p->diag);
    p->tokens[p->cur]++;
    p->docs[p->cur]++;
    p->doc++;
    p->cur = -1;
    return rc;
}

static void prep_progress(void *ctx, uint64_t done, uint64_t total) {
    prep *p = ctx;
    double t = bt_clock_now();
    if (!p->progress || t - p->last_progress < 0.25) return;
    p->last_progress = t;
    p->progress_shown = 1;
    /* On a terminal one line is redrawn (\r, then erase to the end of the line). */
    fprintf(stderr, "%sprepare: %.1f / %.1f MiB (%.0f%%), %llu document%s%s", p->tty ? "\r" : "",
            (double)done / 1048576.0, (double)total / 1048576.0,
            total ? 100.0 * (double)done / (double)total : 100.0, (unsigned long long)p->doc,
            plural(p->doc), p->tty ? "\033[K" : "\n");
}

static void prep_on_skip(void *ctx, const char *path, const char *member, const char *why) {
    (void)ctx;
    if (member != NULL)
        fprintf(stderr, "skipped %s: member '%s': %s\n", path, member, why);
    else
        fprintf(stderr, "skipped %s: %s\n", path, why);
}

static void prep_on_warning(void *ctx, const char *path, const char *what) {
    (void)ctx;
    fprintf(stderr, "baton data prepare: warning: input '%s': %s\n", path, what);
}

static const char *const prep_suffix[2] = {"_train", "_valid"};

static int prep_open(prep *p, const prep_opts *o, bt_diag *diag) {
    int rc = make_parents(o->output, &p->made, diag);
    for (int k = 0; k < 2 && rc == BT_OK; k++) {
        if (k == 1 && o->valid_fraction <= 0) break;
        char *prefix = bt_str_concat(o->output, prep_suffix[k]);
        rc = prefix
                 ? indexed_writer_open(&p->w[k], prefix, indexed_dtype_for_vocab(TOK_VOCAB), diag)
                 : BT_ENOMEM;
        p->open[k] = rc == BT_OK;
        free(prefix);
    }
    return rc;
}

/* Before the renames, the earlier prepare's indexes (train's and valid's) go: a crash
 * between renames then leaves a .bin without its .idx, which every reader refuses, never
 * a new .bin under an old .idx or a new train set beside an old valid one. */
static int prep_drop_old_indexes(const char *output, bt_diag *diag) {
    for (int k = 0; k < 2; k++) {
        bt_buf name;
        bt_buf_init(&name);
        bt_buf_printf(&name, "%s%s.idx", output, prep_suffix[k]);
        int rc = name.oom ? BT_ENOMEM : BT_OK;
        if (rc == BT_OK && unlink(bt_buf_str(&name)) != 0 && errno != ENOENT) {
            bt_diag_set(diag, "%s: cannot replace: %s", bt_buf_str(&name), strerror(errno));
            rc = BT_EIO;
        }
        bt_buf_free(&name);
        if (rc != BT_OK) return rc;
    }
    return BT_OK;
}

/* Completes both writers (indexes written, all four files synced under their .partial
 * names), then publishes them: until then an earlier prepare's output of the same prefix
 * stays whole, so a failure (a full disk, a size limit, a signal) keeps it. */
static int prep_finish(prep *p, const char *output, bt_diag *diag) {
    int rc = BT_OK;
    for (int k = 0; k < 2 && rc == BT_OK; k++)
        if (p->open[k]) rc = indexed_writer_complete(&p->w[k], diag);
    for (int k = 0; k < 2 && rc == BT_OK; k++)
        if (p->open[k]) rc = indexed_writer_check_targets(&p->w[k], diag);
    rc = rc ? rc : bt_cleanup_check(diag);
    rc = rc ? rc : prep_drop_old_indexes(output, diag);
    for (int k = 0; k < 2 && rc == BT_OK; k++) {
        if (!p->open[k]) continue;
        rc = indexed_writer_publish(&p->w[k], diag);
        p->open[k] = 0;
        p->finished[k] = rc == BT_OK;
    }
    return rc;
}

/* Takes away what a failed prepare wrote: the writers' partial files, a train pair
 * already published when the valid one then could not be (half an output is no output;
 * only a failing rename gets there), and the directories it created. */
static void prep_abort(prep *p, const char *output) {
    static const char *const ext[2] = {".bin", ".idx"};
    for (int k = 0; k < 2; k++) {
        if (p->open[k]) indexed_writer_abort(&p->w[k]);
        p->open[k] = 0;
        for (int e = 0; e < 2 && p->finished[k]; e++) {
            bt_buf name;
            bt_buf_init(&name);
            bt_buf_printf(&name, "%s%s%s", output, prep_suffix[k], ext[e]);
            if (!name.oom) unlink(bt_buf_str(&name));
            bt_buf_free(&name);
        }
        p->finished[k] = 0;
    }
    remove_parents(output, p->made);
}

/* With no validation set written (fraction 0), the PREFIX_valid pair of an earlier prepare
 * would pass for this train set's: removed, once the new train set is in place. Returns
 * how many of its files were removed; one that cannot be is a warning. */
static int prep_drop_stale_valid(const char *output) {
    static const char *const ext[2] = {".bin", ".idx"};
    int removed = 0;
    for (int e = 0; e < 2; e++) {
        bt_buf name;
        bt_buf_init(&name);
        bt_buf_printf(&name, "%s%s%s", output, prep_suffix[1], ext[e]);
        if (!name.oom && unlink(bt_buf_str(&name)) == 0)
            removed++;
        else if (!name.oom && errno != ENOENT)
            fprintf(
                stderr,
                "baton data prepare: warning: cannot remove %s, left by an earlier prepare: %s\n",
                bt_buf_str(&name), strerror(errno));
        bt_buf_free(&name);
    }
    return removed;
}

static void prep_summary(const prep *p, const corpus *c, const prep_opts *o) {
    const corpus_stats *s = &c->stats;
    uint64_t docs = p->docs[0] + p->docs[1], tokens = p->tokens[0] + p->tokens[1];
    printf("prepared %llu document%s, %llu token%s, from %llu file%s (%llu archive%s) of %s\n",
           (unsigned long long)docs, plural(docs), (unsigned long long)tokens, plural(tokens),
           (unsigned long long)s->files, plural(s->files), (unsigned long long)s->archives,
           plural(s->archives), o->split_on_percent ? "fortune entries" : "text");
    for (int k = 0; k < (o->valid_fraction > 0 ? 2 : 1); k++)
        printf("  %s: %s_%s.bin/.idx  %llu document%s, %llu token%s\n", k ? "valid" : "train",
               o->output, k ? "valid" : "train", (unsigned long long)p->docs[k], plural(p->docs[k]),
               (unsigned long long)p->tokens[k], plural(p->tokens[k]));
    if (o->valid_fraction <= 0 && p->stale_removed)
        printf("  valid: none at fraction 0; removed %s_valid.bin/.idx, an earlier prepare's\n",
               o->output);
    printf("  tokenizer: bytes 0..255, EOS %d after each document, vocab %d; dtype %s\n", TOK_EOS,
           TOK_VOCAB, indexed_dtype_name(indexed_dtype_for_vocab(TOK_VOCAB)));
    if (s->skipped_binary + s->skipped_packed + s->skipped_links + s->skipped_other > 0)
        printf("  skipped: %llu binary file%s, %llu compressed or archive member%s, %llu "
               "link%s, %llu other (--verbose names them)\n",
               (unsigned long long)s->skipped_binary, plural(s->skipped_binary),
               (unsigned long long)s->skipped_packed, plural(s->skipped_packed),
               (unsigned long long)s->skipped_links, plural(s->skipped_links),
               (unsigned long long)s->skipped_other);
    if (o->valid_fraction > 0 && p->docs[1] == 0)
        fprintf(stderr,
                "baton data prepare: warning: the validation set is empty: %llu document%s at "
                "fraction %g\n",
                (unsigned long long)p->doc, plural(p->doc), o->valid_fraction);
}

static int prepare_run(const prep_opts *o, bt_diag *diag) {
    corpus c;
    corpus_init(&c);
    c.split_on_percent = o->split_on_percent;
    if (o->verbose) c.on_skip = prep_on_skip;
    c.on_warning = prep_on_warning;
    prep *p = calloc(1, sizeof *p);
    int rc = BT_ENOMEM;
    if (p == NULL || (p->tok = malloc(PREP_CHUNK * sizeof *p->tok)) == NULL) goto done;
    p->valid_fraction = o->valid_fraction;
    p->cur = -1;
    p->diag = diag;
    p->tty = isatty(STDERR_FILENO);
    p->progress = o->progress || p->tty;
    rc = BT_OK;
    for (int i = 0; i < o->n_inputs && rc == BT_OK; i++)
        rc = corpus_add(&c, o->inputs[i], diag);
    rc = rc ? rc : prep_open(p, o, diag);
    corpus_sink sink = {prep_doc_data, prep_doc_end, prep_progress, p};
    rc = rc ? rc : corpus_read(&c, &sink, diag);
    if (p->progress_shown)
        fprintf(stderr, "%sprepare: %.1f MiB read, %llu document%s%s\n", p->tty ? "\r" : "",
                (double)c.stats.bytes_read / 1048576.0, (unsigned long long)p->doc, plural(p->doc),
                p->tty ? "\033[K" : "");
    if (rc == BT_OK && p->doc == 0) {
        bt_diag_set(diag,
                    "no documents found in the inputs (%llu file%s read; %llu skipped as "
                    "binary, %llu as compressed or archive members): nothing to write",
                    (unsigned long long)c.stats.files, plural(c.stats.files),
                    (unsigned long long)c.stats.skipped_binary,
                    (unsigned long long)c.stats.skipped_packed);
        rc = BT_EINVAL;
    }
    rc = rc ? rc : prep_finish(p, o->output, diag);
    if (rc == BT_OK && o->valid_fraction <= 0) p->stale_removed = prep_drop_stale_valid(o->output);
    if (rc == BT_OK) prep_summary(p, &c, o);
done:
    if (rc == BT_ENOMEM) bt_diag_set(diag, "out of memory");
    if (p != NULL) {
        if (rc != BT_OK) prep_abort(p, o->output);
        free(p->tok);
    }
    free(p);
    corpus_free(&c);
    return rc;
}

static int prepare_is_flag(const char *a) {
    return strcmp(a, "--split-on-percent") == 0 || strcmp(a, "--progress") == 0 ||
           strcmp(a, "--verbose") == 0;
}

/* Flag a set in o; -1 after saying so when it was set already; 0 when not a flag. */
static int prepare_flag(const char *a, prep_opts *o) {
    int *f = strcmp(a, "--split-on-percent") == 0 ? &o->split_on_percent
             : strcmp(a, "--progress") == 0       ? &o->progress
             : strcmp(a, "--verbose") == 0        ? &o->verbose
                                                  : NULL;
    if (f == NULL) return 0;
    if (*f) return cli_twice("data prepare", a), -1;
    *f = 1;
    return 0;
}

/* Whether --valid-fraction's value v, parsed in range, is a nonzero number that a double
 * cannot hold (strtod's ERANGE: 0 or a subnormal), which would count as 0 and remove an
 * earlier validation set. Reported. */
static int fraction_underflows(const char *v) {
    errno = 0;
    double f = strtod(v, NULL);
    if (errno != ERANGE || !(fabs(f) < DBL_MIN)) return 0;
    fprintf(stderr,
            "baton data prepare: --valid-fraction '%s' is nonzero but too small for a "
            "double (under %g), which would take it as 0 or nearly: give 0 for no "
            "validation set, or a larger fraction\n",
            v, DBL_MIN);
    return 1;
}

/* Parses prepare's options into o; returns -1 after printing the problem, 1 for help. */
static int prepare_parse(int argc, char **argv, prep_opts *o) {
    o->valid_fraction = 0.01;
    const char *fraction = NULL; /* --valid-fraction as given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (strcmp(a, "--input") == 0) {
            int start = i;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                o->inputs[o->n_inputs++] = argv[++i];
            if (i == start) {
                fprintf(stderr, "baton data prepare: --input needs at least one path\n");
                return -1;
            }
        } else if (strcmp(a, "--output") == 0) {
            if ((v = opt_value(argc, argv, &i, "prepare")) == NULL ||
                cli_once("data prepare", a, o->output, v) != 0)
                return -1;
            o->output = v;
        } else if (strcmp(a, "--valid-fraction") == 0) {
            if ((v = opt_value(argc, argv, &i, "prepare")) == NULL ||
                cli_once("data prepare", a, fraction, v) != 0)
                return -1;
            fraction = v;
            char *end;
            o->valid_fraction = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(o->valid_fraction >= 0 && o->valid_fraction < 1)) {
                fprintf(stderr,
                        "baton data prepare: --valid-fraction '%s': need a number in "
                        "[0, 1)\n",
                        v);
                return -1;
            }
        } else if (prepare_flag(a, o) != 0) {
            return -1;
        } else if (!prepare_is_flag(a)) {
            fprintf(stderr, "baton data prepare: unknown argument '%s'\n", a);
            return -1;
        }
    }
    if (fraction != NULL && fraction_underflows(fraction)) return -1;
    return 0;
}

static int data_prepare(int argc, char **argv) {
    prep_opts o = {0};
    o.inputs = calloc((size_t)argc, sizeof *o.inputs);
    if (o.inputs == NULL) return BT_EXIT_FAILURE;
    int pr = prepare_parse(argc, argv, &o), status = BT_EXIT_USAGE;
    if (pr == 1) {
        prepare_usage(stdout);
        status = BT_EXIT_OK;
    } else if (pr == 0 && (o.n_inputs == 0 || o.output == NULL)) {
        fprintf(stderr, "baton data prepare: %s required\n\n",
                o.n_inputs > 0 ? "--output is"
                : o.output     ? "--input is"
                               : "--input and --output are");
        prepare_usage(stderr);
    } else if (pr == 0 && cli_output_prefix("data prepare", o.output, "data/fortunes") == 0) {
        bt_diag diag;
        bt_diag_init(&diag);
        bt_cleanup_install();
        int rc = prepare_run(&o, &diag);
        if (rc != BT_OK)
            fprintf(stderr, "baton data prepare: %s\n", diag.msg[0] ? diag.msg : bt_strerror(rc));
        status = bt_cleanup_exit(data_exit(rc));
    }
    free(o.inputs);
    return status;
}

/* ---- passkey ----------------------------------------------------------------- */

static void passkey_usage(FILE *f) {
    fprintf(f,
            "usage: baton data passkey --output PREFIX --n-docs N --length TOKENS [--seed S]\n\n"
            "Writes N synthetic passkey-retrieval documents of exactly TOKENS tokens each\n"
            "(EOS included) to PREFIX.bin/.idx: filler sentences (\"The grass is green.\n"
            "The sky is blue. ...\" repeated), the line \"The pass key is NNNNN. Remember\n"
            "it. NNNNN is the pass key.\" at a seeded random depth, and at the end \"What is\n"
            "the pass key? The pass key is NNNNN.\". The answer's 5 digits are always\n"
            "tokens [TOKENS-7, TOKENS-2) of a document, followed by '.' and EOS. Keys and\n"
            "depths follow from --seed.\n\n"
            "  --output PREFIX  output path prefix (missing directories are created; a\n"
            "                   trailing .bin or .idx is dropped)\n"
            "  --n-docs N       number of documents, >= 1\n"
            "  --length TOKENS  tokens per document, %u to %u\n"
            "                   (N and TOKENS take K and M: 2^10 and 2^20, as in 4K)\n"
            "  --seed S         seed (default 1234)\n"
            "  --help           show this help\n\n"
            "Exit status: 0 written, 1 cannot write the output, 2 bad usage.\n",
            passkey_min_length(), PASSKEY_MAX_LENGTH);
}

static int passkey_write(const char *prefix, uint64_t n_docs, uint32_t length, uint64_t seed,
                         bt_diag *diag) {
    indexed_writer w;
    char *text = malloc(length);
    int32_t *tok = malloc((size_t)length * sizeof *tok);
    size_t made = 0;
    int rc = text && tok ? make_parents(prefix, &made, diag) : BT_ENOMEM;
    rc = rc ? rc : indexed_writer_open(&w, prefix, indexed_dtype_for_vocab(TOK_VOCAB), diag);
    int opened = rc == BT_OK;
    passkey_info info = {0}, first = {0};
    for (uint64_t d = 0; rc == BT_OK && d < n_docs; d++) {
        rc = bt_cleanup_check(diag);
        rc = rc ? rc : passkey_generate(seed, d, length, text, &info, diag);
        first = d == 0 ? info : first;
        tok_encode((const uint8_t *)text, length - 1, tok);
        tok[length - 1] = TOK_EOS;
        rc = rc ? rc : indexed_writer_append(&w, tok, length, diag);
        rc = rc ? rc : indexed_writer_end_document(&w, diag);
    }
    if (opened && rc == BT_OK)
        rc = indexed_writer_finish(&w, diag);
    else if (opened)
        indexed_writer_abort(&w);
    if (rc != BT_OK) remove_parents(prefix, made);
    if (rc == BT_OK)
        printf("wrote %llu passkey document%s of %u tokens to %s.bin/.idx (seed %llu)\n"
               "  answer: the 5 digits at tokens [%llu, %llu), then '.' and EOS\n"
               "  document 0: key %05u, key line at token %llu (depth %.2f)\n",
               (unsigned long long)n_docs, plural(n_docs), length, prefix, (unsigned long long)seed,
               (unsigned long long)passkey_answer_offset(length),
               (unsigned long long)passkey_answer_offset(length) + PASSKEY_DIGITS, first.key,
               (unsigned long long)first.key_line_offset, first.depth);
    if (rc == BT_ENOMEM) bt_diag_set(diag, "out of memory for documents of %u tokens", length);
    free(text);
    free(tok);
    return rc;
}

/* passkey's options: each given once; given[k] is option k's value as written. */
enum { PK_OUTPUT, PK_N_DOCS, PK_LENGTH, PK_SEED, PK_OPTIONS };

/* A count option's value (K/M suffixes as in recipes) into *out, within [lo, hi]; reports
 * and returns -1. */
static int opt_count(const char *name, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (cli_count(v, lo, hi, out) == 0) return 0;
    fprintf(stderr,
            "baton data passkey: %s '%s': need an integer in [%llu, %llu] (K, M: 2^10, 2^20)\n",
            name, v, (unsigned long long)lo, (unsigned long long)hi);
    return -1;
}

static const char *const pk_names[PK_OPTIONS] = {"--output", "--n-docs", "--length", "--seed"};

static int passkey_option_index(const char *a) {
    for (int k = 0; k < PK_OPTIONS; k++)
        if (strcmp(a, pk_names[k]) == 0) return k;
    return -1;
}

/* Option k's value v: refused when given before, or when a count out of its range. */
static int passkey_take(int k, const char *v, const char **given, uint64_t *n) {
    const uint64_t lo[PK_OPTIONS] = {0, 1, passkey_min_length(), 0};
    const uint64_t hi[PK_OPTIONS] = {0, UINT32_MAX, PASSKEY_MAX_LENGTH, UINT64_MAX};
    if (cli_once("data passkey", pk_names[k], given[k], v) != 0) return -1;
    given[k] = v;
    return k == PK_OUTPUT ? 0 : opt_count(pk_names[k], v, lo[k], hi[k], &n[k]);
}

static int data_passkey(int argc, char **argv) {
    const char *given[PK_OPTIONS] = {0};
    uint64_t n[PK_OPTIONS] = {[PK_SEED] = 1234};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int k = passkey_option_index(a);
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            passkey_usage(stdout);
            return BT_EXIT_OK;
        } else if (k < 0) {
            fprintf(stderr, "baton data passkey: unknown argument '%s'\n", a);
            return BT_EXIT_USAGE;
        } else if ((v = opt_value(argc, argv, &i, "passkey")) == NULL ||
                   passkey_take(k, v, given, n) != 0) {
            return BT_EXIT_USAGE;
        }
    }
    const char *output = given[PK_OUTPUT];
    uint64_t n_docs = n[PK_N_DOCS], length = n[PK_LENGTH], seed = n[PK_SEED];
    if (output == NULL || n_docs == 0 || length == 0) {
        fprintf(stderr, "baton data passkey: --output, --n-docs and --length are required\n\n");
        passkey_usage(stderr);
        return BT_EXIT_USAGE;
    }
    if (cli_output_prefix("data passkey", output, "data/passkey") != 0) return BT_EXIT_USAGE;
    bt_diag diag;
    bt_diag_init(&diag);
    char *prefix = cli_data_prefix(output);
    bt_cleanup_install();
    int rc = prefix ? passkey_write(prefix, n_docs, (uint32_t)length, seed, &diag) : BT_ENOMEM;
    if (rc != BT_OK)
        fprintf(stderr, "baton data passkey: %s\n", diag.msg[0] ? diag.msg : bt_strerror(rc));
    free(prefix);
    return bt_cleanup_exit(data_exit(rc));
}

/* ---- inspect ----------------------------------------------------------------- */

static void inspect_usage(FILE *f) {
    fprintf(f, "usage: baton data inspect PREFIX [--doc N] [--max-tokens K]\n\n"
               "Checks the Megatron-LM indexed dataset PREFIX.bin/.idx and shows its dtype,\n"
               "sequence, document and token counts, document lengths, and a preview of one\n"
               "document (bytes as text, <eos> for token 257, \\xHH for other bytes).\n"
               "PREFIX.bin or PREFIX.idx may be given for PREFIX.\n\n"
               "  --doc N         the document to preview (default 0)\n"
               "  --max-tokens K  preview at most K tokens (default 400)\n"
               "  --help          show this help\n\n"
               "Exit status: 0 valid, 1 out of memory, 2 bad usage or a missing or corrupt\n"
               "dataset.\n");
}

static void inspect_counts(const indexed_dataset *ds) {
    uint64_t min = UINT64_MAX, max = 0, eos = 0;
    for (uint64_t d = 0; d < ds->n_documents; d++) {
        uint64_t n = indexed_doc_tokens(ds, d);
        min = n < min ? n : min;
        max = n > max ? n : max;
        uint64_t last = indexed_doc_start(ds, d + 1);
        int32_t t;
        if (last > indexed_doc_start(ds, d) && indexed_seq_length(ds, last - 1) > 0 &&
            indexed_read(ds, last - 1, indexed_seq_length(ds, last - 1) - 1, 1, &t, NULL) == 0)
            eos += t == TOK_EOS;
    }
    printf("  files:       %s (%zu bytes), %s (%zu bytes)\n", ds->idx_path, ds->idx_size,
           ds->bin_path, ds->bin_size);
    printf("  dtype:       %s (code %d, %zu bytes per token)\n", indexed_dtype_name(ds->dtype),
           (int)ds->dtype, ds->itemsize);
    printf("  sequences:   %llu\n  documents:   %llu\n  tokens:      %llu\n",
           (unsigned long long)ds->n_sequences, (unsigned long long)ds->n_documents,
           (unsigned long long)ds->n_tokens);
    if (ds->n_documents > 0)
        printf("  doc tokens:  min %llu, mean %.1f, max %llu\n", (unsigned long long)min,
               (double)ds->n_tokens / (double)ds->n_documents, (unsigned long long)max);
    printf("  ending EOS:  %llu of %llu documents end with token %d\n", (unsigned long long)eos,
           (unsigned long long)ds->n_documents, TOK_EOS);
    printf("  layout:      %s%s\n", ds->contiguous ? "contiguous" : "sequences not back to back",
           ds->has_modes ? ", with sequence modes" : "");
    if (ds->bin_size > ds->bin_end) /* Megatron's reader never looks there either */
        fprintf(stderr,
                "baton data inspect: warning: %s: its last %zu bytes (from byte %zu) belong to no "
                "sequence of the "
                "index; they are never read\n",
                ds->bin_path, ds->bin_size - ds->bin_end, ds->bin_end);
}

static int inspect_preview(const indexed_dataset *ds, uint64_t doc, uint64_t max_tokens,
                           bt_diag *diag) {
    uint64_t total = indexed_doc_tokens(ds, doc), n = total < max_tokens ? total : max_tokens;
    int32_t *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
    char *text = malloc((size_t)n * 12 + 1);
    int rc = tok && text ? BT_OK : BT_ENOMEM;
    uint64_t got = 0;
    for (uint64_t s = indexed_doc_start(ds, doc);
         rc == BT_OK && got < n && s < indexed_doc_start(ds, doc + 1); s++) {
        uint64_t len = indexed_seq_length(ds, s), k = len < n - got ? len : n - got;
        rc = indexed_read(ds, s, 0, k, tok + got, diag);
        got += k;
    }
    if (rc == BT_OK) {
        tok_render(tok, (size_t)n, text, (size_t)n * 12 + 1);
        printf("document %llu (%llu tokens%s):\n%s\n", (unsigned long long)doc,
               (unsigned long long)total, n < total ? ", preview truncated" : "", text);
    }
    free(tok);
    free(text);
    return rc;
}

static int data_inspect(int argc, char **argv) {
    const char *arg = NULL, *v, *given[2] = {NULL, NULL}; /* --doc, --max-tokens */
    uint64_t doc = 0, max_tokens = 400;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k = strcmp(a, "--doc") == 0 ? 0 : 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            inspect_usage(stdout);
            return BT_EXIT_OK;
        } else if (k == 0 || strcmp(a, "--max-tokens") == 0) {
            if ((v = opt_value(argc, argv, &i, "inspect")) == NULL ||
                cli_once("data inspect", a, given[k], v) != 0)
                return BT_EXIT_USAGE;
            given[k] = v;
            if (cli_count(v, 0, UINT32_MAX, k == 0 ? &doc : &max_tokens) != 0) {
                fprintf(stderr, "baton data inspect: %s '%s': need a non-negative integer\n", a, v);
                return BT_EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "baton data inspect: unknown option '%s'\n", a);
            return BT_EXIT_USAGE;
        } else if (arg == NULL) {
            arg = a;
        } else {
            fprintf(stderr, "baton data inspect: one dataset at a time (got '%s' and '%s')\n", arg,
                    a);
            return BT_EXIT_USAGE;
        }
    }
    if (arg == NULL) {
        fprintf(stderr, "baton data inspect: missing PREFIX\n");
        inspect_usage(stderr);
        return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    indexed_dataset ds;
    char *prefix = cli_data_prefix(arg);
    int rc = prefix ? indexed_open(&ds, prefix, &diag) : BT_ENOMEM;
    if (rc == BT_OK) {
        /* the range first: nothing is shown of a command that fails */
        if (doc >= ds.n_documents && ds.n_documents == 0 && given[0] != NULL) {
            bt_diag_set(&diag, "%s: --doc %llu: the dataset has no documents", prefix,
                        (unsigned long long)doc);
            rc = BT_EINVAL;
        } else if (doc >= ds.n_documents && ds.n_documents > 0) {
            bt_diag_set(&diag,
                        "%s: --doc %llu is out of range: the dataset has %llu document%s "
                        "(0-based)",
                        prefix, (unsigned long long)doc, (unsigned long long)ds.n_documents,
                        plural(ds.n_documents));
            rc = BT_EINVAL;
        } else {
            printf("dataset %s (Megatron indexed, version 1)\n", prefix);
            inspect_counts(&ds);
            if (doc < ds.n_documents) rc = inspect_preview(&ds, doc, max_tokens, &diag);
        }
        indexed_close(&ds);
    }
    if (rc != BT_OK)
        fprintf(stderr, "baton data inspect: %s\n", diag.msg[0] ? diag.msg : bt_strerror(rc));
    free(prefix);
    return data_exit(rc);
}

/* ---- dispatch ---------------------------------------------------------------- */

static void data_usage(FILE *f) {
    fprintf(f, "usage: baton data SUBCOMMAND [ARGS]\n\n"
               "Token datasets in the Megatron-LM indexed format (PREFIX.bin + PREFIX.idx).\n\n"
               "subcommands:\n"
               "  prepare  tokenize text files, directories, tar or zip archives\n"
               "  passkey  write synthetic passkey-retrieval documents\n"
               "  inspect  show a dataset's counts, dtype and a document\n\n"
               "Run 'baton data SUBCOMMAND --help' for its options.\n");
}

int cmd_data(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } subs[] = {{"prepare", data_prepare}, {"passkey", data_passkey}, {"inspect", data_inspect}};
    if (argc < 2) {
        data_usage(stderr);
        return BT_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        data_usage(stdout);
        return BT_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0) return subs[i].run(argc - 1, argv + 1);
    fprintf(stderr, "baton data: unknown %s '%s'\n\n", argv[1][0] == '-' ? "option" : "subcommand",
            argv[1]);
    data_usage(stderr);
    return BT_EXIT_USAGE;
}
