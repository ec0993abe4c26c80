/* Passkey-retrieval accuracy of a model over a dataset of passkey documents (one per
 * sequence, `baton data passkey`). */
#ifndef BATON_EVAL_PASSKEY_H
#define BATON_EVAL_PASSKEY_H

#include <stdint.h>

#include "indexed.h"
#include "train.h"

/* The longest of the first max_docs documents. */
uint32_t eval_passkey_max_length(const indexed_dataset *ds, uint64_t max_docs);
/* Fraction of the first max_docs documents whose 5 answer digits the model predicts
 * (argmax given the document up to each digit, one process), and the fraction of all
 * answer digits predicted; t must take sequences of the longest document. pred (may be
 * NULL) gets the 5 predicted tokens of every document evaluated. */
int eval_passkey(trainer *t, const indexed_dataset *ds, uint64_t max_docs, double *accuracy,
                 double *digit_accuracy, int32_t *pred, uint64_t *docs, bt_diag *diag);

#endif
