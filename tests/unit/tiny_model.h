/* The tiny dense model the queue protocol tests run (test_dp_overlap_queues,
 * test_model_zero_queues): 3 layers, dim 32, GQA 4/2 heads, vocabulary 96. */
#ifndef BATON_TEST_TINY_MODEL_H
#define BATON_TEST_TINY_MODEL_H

#include "model.h"

static inline model_config tiny_model_config(void) {
    model_config cfg = {.vocab = 96,
                        .dim = 32,
                        .n_layers = 3,
                        .n_heads = 4,
                        .n_kv_heads = 2,
                        .head_dim = 8,
                        .ffn_dim = 64,
                        .norm_eps = 1e-5f};
    rope_config_default(&cfg.rope);
    return cfg;
}

#endif
