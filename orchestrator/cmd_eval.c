/* baton eval CKPT|RUN_DIR --data PREFIX --seq-len T --num-seqs N [--json]: the mean
 * next-token loss (one process, in the checkpoint's precision) of
 * a checkpoint's model over the first N windows of T+1 consecutive tokens of a dataset as
 * the loader cuts them (loader.h): window i is tokens [iT, iT+T+1) of its documents
 * concatenated, its first T tokens the input and its last T the targets; the windows a
 * run's closing validation reads (loader_get_window). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_gone.h"
#include "cli.h"
#include "cpu_threads.h"
#include "eval_passkey.h"
#include "indexed.h"
#include "loader.h"
#include "recipe.h"
#include "train.h"
#include "train_ckpt.h"

#define EVAL_BATCH 8

typedef struct eval_args {
    const char *ckpt, *data, *passkey;
    char *data_own, *passkey_own; /* the prefixes data and passkey point to, owned */
    uint64_t seq_len, num_seqs;   /* num_seqs: clamped to the windows the data holds */
    uint64_t asked;               /* --num-seqs as given */
    int json;
} eval_args;

static void eval_usage(FILE *f) {
    fprintf(f, "usage: baton eval CKPT|RUN_DIR --data PREFIX --seq-len T --num-seqs N [--json]\n"
               "       baton eval CKPT|RUN_DIR --passkey PREFIX [--num-seqs N] [--json]\n\n"
               "Mean next-token loss of the checkpoint's model (whatever layout saved it; in\n"
               "its precision, fp8 with its delayed scaling) over the first N windows\n"
               "of T+1 consecutive tokens of the dataset PREFIX\n"
               "(.bin/.idx, 'baton data prepare'): window i is tokens [iT, iT+T+1) of the\n"
               "documents concatenated (consecutive windows share one token), the windows a\n"
               "run's closing validation reads at seq_len T, so its 'valid loss' over N\n"
               "windows is reproduced. N beyond what PREFIX holds: all it holds. RUN_DIR\n"
               "means its newest complete checkpoint.\n\n"
               "  --json   print {\"loss\": ..., \"tokens\": ..., \"windows\": ...,\n"
               "           \"precision\": ...}; a loss that is not finite is null (exit 1)\n\n"
               "T and N may carry K or M (2^10, 2^20) as in recipes: --seq-len 8K.\n"
               "The forward keeps no activations for a backward and no T x T attention\n"
               "matrix: memory grows with T, not T^2.\n\n"
               "With --passkey: the passkey-retrieval accuracy over the (first N) documents of\n"
               "PREFIX ('baton data passkey'), each evaluated whole (no --seq-len: the longest\n"
               "document sets the length): a document counts when the greedy prediction of\n"
               "each of its 5 answer digits is right; --json prints {\"passkey_accuracy\": ...,\n"
               "\"digit_accuracy\": ..., \"docs\": ..., \"length\": ..., \"predicted\": [...]},\n"
               "predicted holding the 5 predicted answer tokens of each document in turn\n"
               "(docs x 5 token ids; -1 for a document too short to hold an answer). A logit\n"
               "that is not finite makes both accuracies null (no line without --json) and\n"
               "names the first NaN/Inf weight, as a loss that is not finite does (exit 1).\n\n"
               "Exit status: 0 done, 1 failed (also: a loss or a logit that is not finite),\n"
               "2 bad usage or input.\n");
}

/* The options that take a value, each given once. */
enum { EVAL_DATA, EVAL_PASSKEY, EVAL_SEQ_LEN, EVAL_NUM_SEQS, EVAL_OPTIONS };
static const char *const eval_options[EVAL_OPTIONS] = {"--data", "--passkey", "--seq-len",
                                                       "--num-seqs"};

/* Option o's index in eval_options; EVAL_OPTIONS when it is none of them. */
static int eval_option_index(const char *o) {
    int k = 0;
    while (k < EVAL_OPTIONS && strcmp(o, eval_options[k]) != 0)
        k++;
    return k;
}

/* Option k's value v into a; -1 (reported) for a repeated one or a bad count. given[k]:
 * option k's earlier value. */
static int eval_option(eval_args *a, int k, const char *v, const char **given) {
    const char *o = eval_options[k];
    if (cli_once("eval", o, given[k], v) != 0) return -1;
    given[k] = v;
    if (k == EVAL_DATA || k == EVAL_PASSKEY) {
        *(k == EVAL_DATA ? &a->data : &a->passkey) = v;
        return 0;
    }
    uint64_t *count = k == EVAL_SEQ_LEN ? &a->seq_len : &a->num_seqs;
    if (cli_count(v, 1, UINT64_MAX, count) == 0) return 0;
    fprintf(stderr,
            "baton eval: %s '%s': need an integer from 1 to %llu (K and M: 2^10 and 2^20, as "
            "in 8K)\n",
            o, v, (unsigned long long)UINT64_MAX);
    return -1;
}

/* What the command line lacks for either mode, NULL when it is complete. */
static const char *eval_missing(const eval_args *a) {
    if (a->ckpt == NULL) return "no checkpoint: give CKPT or RUN_DIR";
    if (a->data && a->passkey)
        return "--data and --passkey are two modes (the loss, the passkey accuracy); give one";
    if (a->passkey && a->seq_len)
        return "--passkey takes no --seq-len: each document is evaluated whole, the longest "
               "setting the length";
    if (a->passkey) return NULL;
    if (a->data == NULL)
        return "missing --data PREFIX (with --seq-len T and --num-seqs N), or --passkey PREFIX";
    if (a->seq_len == 0) return "--data needs --seq-len T (the windows' length)";
    if (a->num_seqs == 0) return "--data needs --num-seqs N (how many windows)";
    return NULL;
}

static int eval_parse(int argc, char **argv, eval_args *a) {
    const char *given[EVAL_OPTIONS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            eval_usage(stdout);
            return 1;
        } else if (strcmp(o, "--json") == 0) {
            if (a->json) return cli_twice("eval", "--json"), -1;
            a->json = 1;
            continue;
        } else if (o[0] != '-' && a->ckpt == NULL) {
            a->ckpt = o;
            continue;
        }
        int k = eval_option_index(o);
        if (k == EVAL_OPTIONS && o[0] == '-') {
            fprintf(stderr, "baton eval: unknown option '%s'\n", o);
            return -1;
        } else if (k == EVAL_OPTIONS) {
            fprintf(stderr, "baton eval: one checkpoint at a time (got '%s' and '%s')\n", a->ckpt,
                    o);
            return -1;
        } else if (v == NULL) {
            return cli_no_value("eval", o);
        } else if (eval_option(a, k, v, given) != 0) {
            return -1;
        }
        i++;
    }
    const char *missing = eval_missing(a);
    if (missing != NULL) {
        fprintf(stderr, "baton eval: %s\n", missing);
        eval_usage(stderr);
        return -1;
    }
    if (a->seq_len > (1u << 20)) {
        fprintf(stderr, "baton eval: --seq-len %llu is above the limit of 1M (1048576)\n",
                (unsigned long long)a->seq_len);
        return -1;
    }
    /* PREFIX.bin and PREFIX.idx name PREFIX, as for baton data */
    if ((a->data && (a->data = a->data_own = cli_data_prefix(a->data)) == NULL) ||
        (a->passkey && (a->passkey = a->passkey_own = cli_data_prefix(a->passkey)) == NULL)) {
        fprintf(stderr, "baton eval: out of memory\n");
        return -1;
    }
    return 0;
}

/* The StageSpec of a one-process fp32 forward over batches of b windows of T tokens. */
typedef struct eval_spec {
    Baton__StageSpec spec;
    Baton__Stage stage;
    Baton__Parallel par;
    Baton__Precision prec;
    Baton__Optimizer opt;
    Baton__Data data;
} eval_spec;

/* The checkpoint's own precision (an fp8 one with its delayed-scaling state), so that the
 * numbers are its stage's validation's. */
static const char *eval_precision_name(const Baton__Manifest *m) {
    Baton__Precision__Type t = m->precision ? m->precision->type : BATON__PRECISION__TYPE__FP32;
    return t == BATON__PRECISION__TYPE__BF16   ? "bf16"
           : t == BATON__PRECISION__TYPE__FP16 ? "fp16"
           : t == BATON__PRECISION__TYPE__FP8  ? "fp8"
                                               : "fp32";
}

static void eval_make_spec(eval_spec *e, const Baton__Manifest *m, const eval_args *a, uint32_t b) {
    baton__stage_spec__init(&e->spec), baton__stage__init(&e->stage);
    baton__parallel__init(&e->par), baton__precision__init(&e->prec);
    baton__optimizer__init(&e->opt), baton__data__init(&e->data);
    e->par.tp = e->par.pp = e->par.cp = e->par.dp = e->par.ep = 1;
    if (m->precision) e->prec = *m->precision; /* fp8: its format, history and margin */
    e->stage.name = "eval", e->stage.steps = 1, e->stage.seq_len = a->seq_len;
    e->stage.global_batch = e->stage.micro_batch = b;
    e->stage.parallel = &e->par, e->stage.precision = &e->prec, e->stage.optimizer = &e->opt;
    e->data.train = (char *)a->data;
    e->spec.recipe_name = m->recipe_name, e->spec.model = m->model;
    e->spec.stage = &e->stage, e->spec.data = &e->data;
}

/* PREFIX cut into windows of T+1 tokens; *n_io clamped to the windows it holds (none: an
 * error naming what it holds). */
static int eval_open(loader *ld, const eval_args *a, uint32_t vocab, uint64_t *n_io,
                     bt_diag *diag) {
    loader_source src = {.prefix = a->data, .weight = 1};
    loader_config lc = {.seq_len = (uint32_t)a->seq_len, .vocab_size = vocab, .allow_empty = 1};
    int rc = loader_open(ld, &src, 1, &lc, diag);
    if (rc != 0) return rc;
    uint64_t have = ld->src[0].n_windows;
    if (have == 0) {
        bt_diag_set(diag, "%s.bin: %llu tokens hold no window of --seq-len %llu + 1", a->data,
                    (unsigned long long)ld->src[0].ds.n_tokens, (unsigned long long)a->seq_len);
        loader_close(ld);
        return BT_EINVAL;
    }
    if (*n_io > have) *n_io = have;
    return 0;
}

typedef struct eval_result {
    int32_t *pred; /* passkey: 5 predicted tokens per document */
    double loss;
    eval_passkey_result pk;
    uint32_t length;
    const char *precision; /* the forward's number format (eval_precision_name) */
    /* A loss (passkey: a logit) that is not finite: the first weight that is not either
     * ("": all are) */
    char bad_tensor[64];
    uint64_t bad_index; /* its first such element */
    float bad_value;
    char dir[CKPT_PATH_MAX]; /* the checkpoint read ("" before one was found) */
} eval_result;

/* The first parameter tensor holding a NaN or an Inf, into res (bad_tensor "" when none);
 * run once the loss or a logit came out non-finite, so a finite evaluation pays nothing. */
static int eval_find_nonfinite(trainer *t, eval_result *res) {
    res->bad_tensor[0] = '\0';
    float *host = NULL;
    size_t cap = 0;
    for (int i = 0; i < model_n_tensors(&t->m); i++) {
        model_tensor ti;
        if (model_tensor_info(&t->m, i, &ti) != 0 || ti.data == NULL) continue;
        if (ti.count > cap) {
            free(host);
            cap = ti.count;
            if ((host = malloc(cap * sizeof *host)) == NULL) return BT_ENOMEM;
        }
        t->be.to_host(&t->be, host, ti.data, ti.count * sizeof *host);
        for (size_t j = 0; j < ti.count; j++)
            if (!isfinite(host[j])) {
                snprintf(res->bad_tensor, sizeof res->bad_tensor, "%s", ti.name);
                res->bad_index = j, res->bad_value = host[j];
                free(host);
                return 0;
            }
    }
    free(host);
    return 0;
}

/* A --seq-len, or passkey documents, beyond the context the weights are for (the seq_len
 * the manifest records, or what the model's RoPE scaling extends its original context to,
 * the larger) run, as plan lets a recipe's, with a warning: the loss or the retrieval then
 * measures extrapolation. what names the length (seq_len tokens the model reads). */
static void eval_warn_context(const Baton__Manifest *m, uint64_t seq_len, const char *what,
                              const char *measure) {
    const Baton__RopeScaling *s = m->model->rope ? m->model->rope->scaling : NULL;
    uint64_t scaled = (uint64_t)llround(recipe_rope_extent(s)); /* as plan measures it */
    uint64_t ctx = scaled > m->seq_len ? scaled : m->seq_len;
    if (ctx == 0 || seq_len <= ctx) return; /* a checkpoint too old to record it: unknown */
    char why[160];
    if (ctx == scaled)
        snprintf(why, sizeof why, "its RoPE scaling's original_max_position %llu x factor %g%s",
                 (unsigned long long)s->original_max_position, s->factor,
                 s->type == BATON__ROPE_SCALING__TYPE__LLAMA3 ? " x 2 for llama3" : "");
    else
        snprintf(why, sizeof why, "the seq_len it was trained at");
    fprintf(stderr,
            "baton eval: warning: %s is beyond the context the checkpoint is for, %llu (%s): "
            "%s measures how far the model extrapolates\n",
            what, (unsigned long long)ctx, why, measure);
}

static void eval_warn_seq_len(const Baton__Manifest *m, uint64_t seq_len) {
    char what[64];
    snprintf(what, sizeof what, "--seq-len %llu", (unsigned long long)seq_len);
    eval_warn_context(m, seq_len, what, "the loss");
}

static void eval_warn_passkey(const Baton__Manifest *m, uint32_t length) {
    char what[128];
    uint32_t reads = eval_passkey_read_length(length);
    snprintf(what, sizeof what,
             "the longest passkey document, %u tokens (of which the model reads %u),", length,
             reads);
    eval_warn_context(m, reads, what, "the retrieval");
}

/* Passkey mode: a trainer for the longest document, then the accuracy. */
static int eval_passkey_run(const eval_args *a0, const Baton__Manifest *m, const char *dir,
                            eval_result *res, bt_diag *diag) {
    indexed_dataset ds;
    int rc = indexed_open(&ds, a0->passkey, diag);
    if (rc != 0) return rc;
    uint64_t max_docs = a0->num_seqs ? a0->num_seqs : UINT64_MAX;
    eval_args a = *a0;
    res->length = eval_passkey_max_length(&ds, max_docs);
    if (res->length == 0) {
        bt_diag_set(diag,
                    "%s holds no document to evaluate (%llu sequences, none with a token): make "
                    "passkey documents with 'baton data passkey'",
                    a0->passkey, (unsigned long long)ds.n_sequences);
        indexed_close(&ds);
        return BT_EINVAL;
    }
    eval_warn_passkey(m, res->length);
    a.seq_len = res->length > 1 ? res->length - 1 : 1;
    res->precision = eval_precision_name(m);
    a.data = a0->passkey;
    eval_spec e;
    eval_make_spec(&e, m, &a, 1);
    uint64_t n = ds.n_sequences < max_docs ? ds.n_sequences : max_docs;
    res->pred = calloc(n ? n * 5 : 1, sizeof *res->pred);
    trainer t;
    rc = res->pred ? train_init_forward(&t, &e.spec, diag) : BT_ENOMEM;
    if (rc == 0) {
        rc = train_ckpt_load_params(&t, dir, m, diag);
        if (rc == 0) train_gemms_begin(&t);
        rc = rc ? rc : eval_passkey(&t, &ds, max_docs, &res->pk, res->pred, diag);
        if (rc == 0 && res->pk.nonfinite_docs > 0) rc = eval_find_nonfinite(&t, res);
        train_free(&t);
    }
    indexed_close(&ds);
    return rc;
}

static int eval_checkpoint(eval_args *a, eval_result *res, bt_diag *diag) {
    char *dir = res->dir;
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(a->ckpt, dir, sizeof res->dir, &m, diag);
    if (rc == 0) ckpt_gone_fault(dir);
    if (rc == 0) ckpt_manifest_sort_keys(m); /* train_ckpt_load_params looks keys up so */
    if (rc == 0 && m->model == NULL) {
        bt_diag_set(diag, "%s: the manifest has no model configuration", dir);
        rc = BT_EINVAL;
    }
    if (rc != 0 || a->passkey) {
        if (rc == 0) rc = eval_passkey_run(a, m, dir, res, diag);
        if (m) baton__manifest__free_unpacked(m, NULL);
        return rc;
    }
    double *loss = &res->loss;
    res->precision = eval_precision_name(m);
    eval_warn_seq_len(m, a->seq_len);
    eval_spec e;
    loader ld;
    trainer t;
    rc = eval_open(&ld, a, m->model->vocab_size, &a->num_seqs, diag);
    if (rc == 0) loader_close(&ld); /* opened to check and clamp; train_eval reads */
    if (a->num_seqs > UINT32_MAX) a->num_seqs = UINT32_MAX;
    uint32_t n = (uint32_t)a->num_seqs;
    eval_make_spec(&e, m, a, n < EVAL_BATCH ? n : EVAL_BATCH);
    rc = rc ? rc : train_init_forward(&t, &e.spec, diag);
    if (rc == 0) {
        rc = train_ckpt_load_params(&t, dir, m, diag);
        rc = rc ? rc : train_eval(&t, a->data, &n, loss, diag); /* the run's validation */
        if (rc == 0 && !isfinite(*loss)) rc = eval_find_nonfinite(&t, res);
        train_free(&t);
    }
    baton__manifest__free_unpacked(m, NULL);
    return rc;
}

/* The accuracies; with a logit that is not finite they mean nothing: null in the JSON,
 * no line of text (eval_nonfinite_report says why). */
static void eval_passkey_print(const eval_args *a, const eval_result *res) {
    const eval_passkey_result *pk = &res->pk;
    int finite = pk->nonfinite_docs == 0;
    if (a->json) {
        char acc[32] = "null", dig[32] = "null"; /* JSON has no NaN */
        if (finite) snprintf(acc, sizeof acc, "%.6g", pk->accuracy);
        if (finite) snprintf(dig, sizeof dig, "%.6g", pk->digit_accuracy);
        printf("{\"passkey_accuracy\": %s, \"digit_accuracy\": %s, \"docs\": %llu, "
               "\"length\": %u, \"predicted\": [",
               acc, dig, (unsigned long long)pk->docs, res->length);
        for (uint64_t i = 0; i < pk->docs * 5; i++)
            printf("%s%d", i ? ", " : "", res->pred[i]);
        printf("]}\n");
    } else if (finite) {
        printf("passkey retrieval %.1f%% (digits %.1f%%) over %llu document%s of up to %u "
               "tokens of %s\n",
               100 * pk->accuracy, 100 * pk->digit_accuracy, (unsigned long long)pk->docs,
               pk->docs == 1 ? "" : "s", res->length, a->passkey);
    }
}

/* x as %g, a NaN as "nan" whatever its sign bit (printf writes "-nan" for some). */
static const char *eval_num(char *buf, size_t cap, double x) {
    if (isnan(x))
        snprintf(buf, cap, "nan");
    else
        snprintf(buf, cap, "%g", x);
    return buf;
}

/* Why the loss (what: "loss is not finite (nan)") or the logits are not finite, on
 * stderr: the first weight that is not, or, all being finite, the forward's overflow. */
static void eval_nonfinite_report(const eval_args *a, const eval_result *res, const char *what) {
    char v[32];
    if (res->bad_tensor[0])
        fprintf(stderr,
                "baton eval: %s: the checkpoint holds NaN/Inf weights: %s, the first, has %s at "
                "element %llu (%s)\n",
                what, res->bad_tensor, eval_num(v, sizeof v, res->bad_value),
                (unsigned long long)res->bad_index, a->ckpt);
    else
        fprintf(stderr,
                "baton eval: %s though every weight of %s is: the forward overflowed in %s\n", what,
                a->ckpt, res->precision);
}

/* One try of an evaluation (ckpt_gone_try): a0 as parsed, a and res afresh. */
typedef struct eval_try {
    const eval_args *a0;
    eval_args a;
    eval_result res;
} eval_try;

static int eval_try_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    eval_try *t = ctx;
    free(t->res.pred);
    t->res = (eval_result){0}, t->a = *t->a0, t->a.asked = t->a.num_seqs;
    int rc = eval_checkpoint(&t->a, &t->res, diag);
    snprintf(dir, cap, "%s", t->res.dir);
    return rc;
}

/* The evaluation the parsed command line asks for; an exit status. */
static int eval_main(eval_args *a0) {
    bt_diag diag;
    bt_diag_init(&diag);
    eval_try t = {.a0 = a0};
    char dir[sizeof t.res.dir];
    /* OpenBLAS's threads (deferred as it loaded, cpu_blas_defer.h) and their buffers */
    cpu_threads th;
    int rc = cpu_threads_apply(&th, 1, &diag);
    if (rc == 0)
        rc = ckpt_gone_retry("baton eval", a0->ckpt, eval_try_once, &t, dir, sizeof dir, NULL,
                             &diag);
    eval_args a = t.a;
    eval_result res = t.res;
    double loss = res.loss;
    if (rc != 0) {
        free(res.pred);
        cli_error("eval", &diag, rc);
        return rc == BT_EIO || rc == BT_ENOMEM ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
    }
    char what[128], v[32];
    if (a.passkey) {
        eval_passkey_print(&a, &res);
        free(res.pred);
        if (res.pk.nonfinite_docs == 0) return BT_EXIT_OK;
        snprintf(what, sizeof what, "logits are not finite in %llu of %llu passkey documents",
                 (unsigned long long)res.pk.nonfinite_docs, (unsigned long long)res.pk.docs);
        eval_nonfinite_report(&a, &res, what);
        return BT_EXIT_FAILURE;
    }
    uint64_t tokens = a.num_seqs * a.seq_len;
    char num[32] = "null"; /* JSON has no NaN or Infinity */
    if (isfinite(loss)) snprintf(num, sizeof num, "%.9g", loss);
    if (a.json)
        printf("{\"loss\": %s, \"tokens\": %llu, \"windows\": %llu, \"precision\": \"%s\"}\n", num,
               (unsigned long long)tokens, (unsigned long long)a.num_seqs, res.precision);
    else if (isfinite(loss))
        printf("loss %.6f (%.4f bits per token) over %llu window%s of %llu+1 tokens of %s%s, %s\n",
               loss, loss / 0.6931471805599453, (unsigned long long)a.num_seqs,
               a.num_seqs == 1 ? "" : "s", (unsigned long long)a.seq_len, a.data,
               a.num_seqs < a.asked ? " (all it holds)" : "", res.precision);
    if (isfinite(loss)) return BT_EXIT_OK;
    snprintf(what, sizeof what, "loss is not finite (%s)", eval_num(v, sizeof v, loss));
    eval_nonfinite_report(&a, &res, what);
    return BT_EXIT_FAILURE;
}

int cmd_eval(int argc, char **argv) {
    eval_args a = {0};
    int prc = eval_parse(argc, argv, &a);
    if (prc == 0)
        prc = eval_main(&a);
    else
        prc = prc > 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    free(a.data_own), free(a.passkey_own);
    return prc;
}
