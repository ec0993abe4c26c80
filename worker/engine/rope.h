/* Rotary position embedding tables, for plain RoPE and the context-extension scalings,
 * defined as Hugging Face transformers' modeling_rope_utils defines them so models
 * exported later agree position by position. hd is the head dimension; there are
 * hd/2 frequencies, frequency i pairing head elements i and i + hd/2 (rotate-half).
 *
 *   none    inv_freq[i] = theta^(-2i/hd)
 *   linear  inv_freq / factor (position interpolation: positions / factor)
 *   ntk     static NTK-aware: theta' = theta * factor^(hd / (hd - 2)), then as none
 *   llama3  Meta's rule with L = original_max_position: wavelength w = 2 pi / inv_freq;
 *           w < L / high_freq_factor: unchanged; w > L / low_freq_factor: / factor;
 *           between: (1 - s) inv_freq / factor + s inv_freq with
 *           s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
 *   yarn    NTK-by-parts: d(r) = hd ln(L / (2 pi r)) / (2 ln theta); low = max(floor(
 *           d(beta_fast)), 0), high = min(ceil(d(beta_slow)), hd - 1) (no floor and
 *           ceil when truncate is 0; high += 0.001 if equal); ramp[i] = clamp((i - low)
 *           / (high - low), 0, 1); inv_freq = inv/factor * ramp + inv * (1 - ramp); and
 *           cos and sin are both multiplied by the attention factor mscale = attn_factor
 *           if given, else 0.1 ln(factor) + 1 (1 when factor <= 1), so attention logits
 *           scale by mscale^2, exactly as Hugging Face applies it.
 *
 * factor is taken as given (newer transformers may derive YaRN's factor from
 * max_position_embeddings / original_max_position_embeddings; a recipe states both).
 * Everything is computed in double and the tables rounded to float once; Hugging Face
 * computes inv_freq in float32, so the two agree to float32 rounding of the angles. */
#ifndef BATON_ROPE_H
#define BATON_ROPE_H

typedef enum rope_type {
    ROPE_NONE = 0,
    ROPE_LINEAR = 1,
    ROPE_NTK = 2,
    ROPE_LLAMA3 = 3,
    ROPE_YARN = 4,
} rope_type;

typedef struct rope_config {
    rope_type type;
    double theta;                 /* base, e.g. 10000 */
    double factor;                /* >= 1 for every scaling type */
    double original_max_position; /* llama3, yarn: the pretraining context */
    double low_freq_factor;       /* llama3 */
    double high_freq_factor;      /* llama3 */
    double beta_fast, beta_slow;  /* yarn */
    double attn_factor;           /* yarn; 0 = 0.1 ln(factor) + 1 */
    int truncate;                 /* yarn: 1 rounds low down and high up (the default) */
} rope_config;

/* theta 10000, no scaling, Hugging Face's defaults for the optional fields (truncate 1). */
void rope_config_default(rope_config *rc);

/* Returns 0 or BT_EINVAL when a field is out of range for the type (message in
 * msg, which may be NULL). */
int rope_config_check(const rope_config *rc, int hd, char *msg, int msg_len);

/* inv_freq (hd/2) and the factor cos and sin are multiplied by. */
void rope_inv_freq(const rope_config *rc, int hd, double *inv_freq, double *mscale);

/* cos, sin (T, hd/2): row t is position pos0 + t. inv_freq is scratch of hd/2 doubles. */
void rope_tables(const rope_config *rc, int hd, int pos0, int T, float *cos, float *sin,
                 double *inv_freq);

#endif
