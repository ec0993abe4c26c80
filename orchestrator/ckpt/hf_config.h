/* A Hugging Face LlamaForCausalLM config.json from baton's model config and back.
 *
 * Field by field: dim hidden_size, ffn_dim intermediate_size, n_layers
 * num_hidden_layers, n_heads num_attention_heads, n_kv_heads num_key_value_heads,
 * vocab_size vocab_size, norm_eps rms_norm_eps, rope.theta rope_theta (head_dim =
 * hidden_size / num_attention_heads, hidden_act silu, no biases, untied head).
 *
 * RoPE scaling as transformers' modeling_rope_utils names it (rope.h defines baton's
 * the same way):
 *   none    rope_scaling null
 *   linear  {"rope_type": "linear", "factor"}
 *   llama3  {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
 *            "original_max_position_embeddings"}
 *   yarn    {"rope_type": "yarn", "factor", "original_max_position_embeddings",
 *            "beta_fast", "beta_slow", "attention_factor"} and "truncate": false when
 *           rope.scaling.truncate is false (absent means true); attention_factor is written
 *           even when baton derives it (0.1 ln(factor) + 1), because newer transformers
 *           derive it from max_position_embeddings / original_max_position_embeddings
 *           instead; max_position_embeddings is set to original * factor so both agree
 *   ntk     transformers has no static NTK scaling ("dynamic" rescales with the
 *           sequence length), so it is folded into the base: rope_theta =
 *           theta * factor^(hd / (hd - 2)) and rope_scaling null, which is the same
 *           frequencies exactly; an import reads it back as plain RoPE with that base.
 * On import, "type" is accepted for "rope_type" (older transformers) and "default" is
 * none; transformers 5's "rope_parameters" is read as rope_scaling (a missing rope_type
 * there is "default"), and a rope_theta inside either block as the base (one that
 * differs from the top-level rope_theta is refused: versions read different ones);
 * "dynamic", "longrope" and DeepSeek's mscale fields are refused, as is any other
 * key transformers does not read for the type (named in the message), a partial_rotary_factor
 * other than 1 (top level or in the block), a null rope_theta or YaRN "truncate" (no
 * default is assumed for an explicit null), per-layer-type RoPE and both blocks at once.
 * A linear
 * scaling keeps max_position_embeddings / factor as its original_max_position, which
 * export multiplies back.
 * max_position_embeddings is the context the model was extended to: original * factor
 * for a scaling that names its original context (llama3 and yarn always do; linear and
 * ntk may), else HF's default 2048 unless --max-position says. */
#ifndef BATON_HF_CONFIG_H
#define BATON_HF_CONFIG_H

#include <stdint.h>

#include "recipe.pb-c.h"
#include "util/buf.h"
#include "util/err.h"

/* HF's LlamaConfig default, used when nothing says how long a context the model saw. */
#define HF_DEFAULT_MAX_POSITION 2048

/* A model config with its own storage (model.rope points at rope, rope.scaling at
 * scaling when there is one): do not copy it by value. */
typedef struct hf_model {
    Baton__Model model;
    Baton__Rope rope;
    Baton__RopeScaling scaling;
    int tied;              /* tie_word_embeddings: lm_head is embed_tokens */
    uint64_t max_position; /* max_position_embeddings */
} hf_model;

/* max_position_embeddings for m: max_position when not 0 (--max-position); else seq_len,
 * the context the checkpoint records (an import's max_position_embeddings, a trained
 * stage's seq_len), when it is longer than a RoPE scaling's original context (transformers
 * asks that the original be below it); else the context the scaled RoPE was extended to
 * (recipe_rope_extent, for any scaling that gives the original: original_max_position *
 * factor, for llama3 twice that, which matches Llama 3.1's 131072 for 8192 and factor 8
 * but not Llama 3.2's 131072 for factor 32: transformers reads no context from a llama3
 * factor); else HF_DEFAULT_MAX_POSITION with *known = 0 (nothing in the model says how
 * long a context it saw). seq_len 0: unknown (a checkpoint saved before it was kept). */
uint64_t hf_config_max_position(const Baton__Model *m, uint64_t max_position, uint64_t seq_len,
                                int *known);
/* config.json for m into out, max_position_embeddings from hf_config_max_position (with
 * no seq_len: give the checkpoint's resolved as max_position).
 * torch_dtype: "float32" or "bfloat16". BT_EUNSUPPORTED for an MoE model and for a RoPE
 * scaling with no Hugging Face equivalent. */
int hf_config_write(const Baton__Model *m, uint64_t max_position, const char *torch_dtype,
                    bt_buf *out, bt_diag *diag);
/* Parses config.json text (path for messages) into *out. BT_EINVAL / BT_EUNSUPPORTED
 * with diag naming the file and key. */
int hf_config_read(const char *text, size_t len, const char *path, hf_model *out, bt_diag *diag);

#endif
