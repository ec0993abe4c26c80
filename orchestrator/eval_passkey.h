/* Passkey-retrieval accuracy of a model over a dataset of passkey documents (one per
 * sequence, `baton data passkey`). */
#ifndef BATON_EVAL_PASSKEY_H
#define BATON_EVAL_PASSKEY_H

#include <stdint.h>

#include "indexed.h"
#include "train.h"

/* The longest of the first max_docs documents. */
uint32_t eval_passkey_max_length(const indexed_dataset *ds, uint64_t max_docs);
/* How many tokens of a document of that length the model reads (positions 0 to the
 * result - 1): through the last answer digit; 0 for one too short to hold an answer. */
uint32_t eval_passkey_read_length(uint32_t length);
typedef struct eval_passkey_result {
    double accuracy;         /* fraction of the documents retrieved (all 5 digits right) */
    double digit_accuracy;   /* fraction of all answer digits right */
    uint64_t docs;           /* documents evaluated */
    uint64_t nonfinite_docs; /* of them, those with a NaN or an infinite logit where a digit
                              * is predicted (the accuracy then means nothing) */
} eval_passkey_result;

/* The passkey accuracy over the first max_docs documents: a document is retrieved when
 * the model predicts its 5 answer digits (argmax given the document up to each digit, one
 * process); t must take sequences of the longest document. pred (may be NULL) gets the 5
 * predicted tokens of every document evaluated. */
int eval_passkey(trainer *t, const indexed_dataset *ds, uint64_t max_docs, eval_passkey_result *r,
                 int32_t *pred, bt_diag *diag);

#endif
