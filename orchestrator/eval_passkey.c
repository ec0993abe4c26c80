/* Passkey retrieval (worker/data/passkey.h) for `baton eval --passkey`: a document
 * counts as retrieved when the model's greedy (argmax) prediction of each of the 5 answer
 * digits, given the document up to that digit, is the digit. */
#include "eval_passkey.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passkey.h"

uint32_t eval_passkey_max_length(const indexed_dataset *ds, uint64_t max_docs) {
    uint32_t n = 0;
    for (uint64_t s = 0; s < ds->n_sequences && s < max_docs; s++)
        if (indexed_seq_length(ds, s) > n) n = indexed_seq_length(ds, s);
    return n;
}

uint32_t eval_passkey_read_length(uint32_t length) {
    if (length < PASSKEY_DIGITS + 3 || passkey_answer_offset(length) < 1) return 0;
    return (uint32_t)(passkey_answer_offset(length) + PASSKEY_DIGITS - 1);
}

/* The argmax of row; *finite cleared when a logit is NaN or infinite. */
static int32_t eval_argmax(const float *row, int V, int *finite) {
    int32_t best = 0;
    for (int v = 0; v < V; v++) {
        if (!isfinite(row[v])) *finite = 0;
        if (row[v] > row[best]) best = v;
    }
    return best;
}

/* The words before the answer at the end of every passkey document (passkey.h). */
#define PASSKEY_ASKED "The pass key is "

/* Whether a document's tokens end as passkey_generate's do: the asked words, five digits
 * at `at`, then "." (the EOS after it). */
static int eval_is_passkey_doc(const int32_t *tokens, uint64_t at) {
    size_t n = strlen(PASSKEY_ASKED);
    if (at < n) return 0;
    for (size_t i = 0; i < n; i++)
        if (tokens[at - n + i] != (unsigned char)PASSKEY_ASKED[i]) return 0;
    for (int j = 0; j < PASSKEY_DIGITS; j++)
        if (tokens[at + (uint64_t)j] < '0' || tokens[at + (uint64_t)j] > '9') return 0;
    return tokens[at + PASSKEY_DIGITS] == '.';
}

/* Whether document s is retrieved; tokens has room for its length. */
static int eval_passkey_doc(trainer *t, const indexed_dataset *ds, uint64_t s, int32_t *tokens,
                            int *hit, int *digits, int32_t *pred, int *finite, bt_diag *diag) {
    uint32_t len = indexed_seq_length(ds, s);
    uint64_t at = passkey_answer_offset(len);
    *hit = 0, *digits = 0;
    int T = (int)eval_passkey_read_length(len); /* predicts through the last digit */
    if (T == 0) return 0;
    int rc = indexed_read(ds, s, 0, len, tokens, diag);
    if (rc == 0 && !eval_is_passkey_doc(tokens, at)) {
        bt_diag_set(diag,
                    "document %llu is not a passkey document (it does not end with \"%s"
                    "NNNNN.\"): make the data with 'baton data passkey'",
                    (unsigned long long)s, PASSKEY_ASKED);
        return BT_EINVAL;
    }
    rc = rc ? rc : model_forward(&t->m, tokens, NULL, 1, T, NULL);
    if (rc != 0) return rc;
    int V = t->m.cfg.vocab;
    for (int j = 0; j < PASSKEY_DIGITS; j++) {
        const float *row = t->m.acts.logits + (size_t)(at - 1 + (uint64_t)j) * (size_t)V;
        pred[j] = eval_argmax(row, V, finite);
        *digits += pred[j] == tokens[at + (uint64_t)j];
    }
    *hit = *digits == PASSKEY_DIGITS;
    return 0;
}

int eval_passkey(trainer *t, const indexed_dataset *ds, uint64_t max_docs, eval_passkey_result *r,
                 int32_t *pred, bt_diag *diag) {
    uint32_t maxlen = eval_passkey_max_length(ds, max_docs);
    int32_t *tokens = malloc((maxlen ? maxlen : 1) * sizeof *tokens);
    uint64_t n = 0, hits = 0, digit_hits = 0, nonfinite = 0;
    int rc = tokens ? 0 : BT_ENOMEM;
    for (uint64_t s = 0; rc == 0 && s < ds->n_sequences && s < max_docs; s++, n++) {
        int hit = 0, digits = 0, finite = 1;
        int32_t mine[PASSKEY_DIGITS] = {-1, -1, -1, -1, -1};
        rc = eval_passkey_doc(t, ds, s, tokens, &hit, &digits, mine, &finite, diag);
        if (pred) memcpy(pred + s * PASSKEY_DIGITS, mine, sizeof mine);
        hits += (uint64_t)hit, digit_hits += (uint64_t)digits, nonfinite += !finite;
    }
    free(tokens);
    r->docs = n;
    r->nonfinite_docs = nonfinite;
    r->accuracy = n ? (double)hits / (double)n : 0;
    r->digit_accuracy = n ? (double)digit_hits / (double)(n * PASSKEY_DIGITS) : 0;
    return rc;
}
