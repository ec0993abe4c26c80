/* RoPE frequency tables; the definitions are in rope.h. */
#include "rope.h"

#include <math.h>
#include <stdio.h>

#include "util/err.h"

#define ROPE_TWO_PI 6.28318530717958647692528676655900577

void rope_config_default(rope_config *rc) {
    *rc = (rope_config){
        .type = ROPE_NONE,
        .theta = 10000.0,
        .factor = 1.0,
        .original_max_position = 0.0,
        .low_freq_factor = 1.0,
        .high_freq_factor = 4.0,
        .beta_fast = 32.0,
        .beta_slow = 1.0,
        .attn_factor = 0.0,
        .truncate = 1,
    };
}

static int fail(char *msg, int msg_len, const char *text) {
    if (msg && msg_len > 0) snprintf(msg, (size_t)msg_len, "%s", text);
    return BT_EINVAL;
}

int rope_config_check(const rope_config *rc, int hd, char *msg, int msg_len) {
    if (hd < 4 || hd % 2)
        return fail(msg, msg_len, "rope: head dimension must be even and at least 4");
    if (!(rc->theta > 1.0)) return fail(msg, msg_len, "rope.theta must be greater than 1");
    if (rc->type == ROPE_NONE) return 0;
    if (!(rc->factor >= 1.0)) return fail(msg, msg_len, "rope.scaling.factor must be at least 1");
    if ((rc->type == ROPE_LLAMA3 || rc->type == ROPE_YARN) && !(rc->original_max_position > 0))
        return fail(msg, msg_len,
                    "rope.scaling.original_max_position must be set (> 0) for llama3 and yarn");
    if (rc->type == ROPE_LLAMA3 && !(rc->high_freq_factor > rc->low_freq_factor))
        return fail(msg, msg_len,
                    "rope.scaling.high_freq_factor must be greater than low_freq_factor");
    if (rc->type == ROPE_YARN && !(rc->beta_fast > 0 && rc->beta_slow > 0))
        return fail(msg, msg_len, "rope.scaling.beta_fast and beta_slow must be positive");
    if (rc->type == ROPE_YARN && rc->attn_factor < 0)
        return fail(msg, msg_len, "rope.scaling.attn_factor must not be negative");
    return 0;
}

static void plain_inv_freq(double theta, int hd, double *inv_freq) {
    for (int i = 0; i < hd / 2; i++)
        inv_freq[i] = 1.0 / pow(theta, (2.0 * i) / hd);
}

static void llama3_adjust(const rope_config *rc, int hd, double *inv_freq) {
    double L = rc->original_max_position;
    double low_wavelen = L / rc->low_freq_factor, high_wavelen = L / rc->high_freq_factor;
    for (int i = 0; i < hd / 2; i++) {
        double f = inv_freq[i], wavelen = ROPE_TWO_PI / f;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
            inv_freq[i] = f / rc->factor;
            continue;
        }
        double s =
            (L / wavelen - rc->low_freq_factor) / (rc->high_freq_factor - rc->low_freq_factor);
        inv_freq[i] = (1.0 - s) * f / rc->factor + s * f;
    }
}

/* The dimension at which a frequency makes `rotations` turns over the original context. */
static double yarn_correction_dim(double rotations, int hd, double theta, double L) {
    return hd * log(L / (rotations * ROPE_TWO_PI)) / (2.0 * log(theta));
}

static void yarn_adjust(const rope_config *rc, int hd, double *inv_freq) {
    double L = rc->original_max_position;
    double low = yarn_correction_dim(rc->beta_fast, hd, rc->theta, L);
    double high = yarn_correction_dim(rc->beta_slow, hd, rc->theta, L);
    if (rc->truncate) low = floor(low), high = ceil(high);
    low = fmax(low, 0.0);
    high = fmin(high, hd - 1.0);
    if (low == high) high += 0.001;
    for (int i = 0; i < hd / 2; i++) {
        double ramp = fmin(fmax((i - low) / (high - low), 0.0), 1.0);
        double extrapolation = 1.0 - ramp;
        inv_freq[i] = inv_freq[i] / rc->factor * ramp + inv_freq[i] * extrapolation;
    }
}

static double yarn_mscale(const rope_config *rc) {
    if (rc->attn_factor > 0) return rc->attn_factor;
    return rc->factor <= 1.0 ? 1.0 : 0.1 * log(rc->factor) + 1.0;
}

void rope_inv_freq(const rope_config *rc, int hd, double *inv_freq, double *mscale) {
    double theta = rc->theta;
    if (rc->type == ROPE_NTK) theta *= pow(rc->factor, (double)hd / (hd - 2));
    plain_inv_freq(theta, hd, inv_freq);
    *mscale = 1.0;
    switch (rc->type) {
    case ROPE_LINEAR:
        for (int i = 0; i < hd / 2; i++)
            inv_freq[i] /= rc->factor;
        break;
    case ROPE_LLAMA3:
        llama3_adjust(rc, hd, inv_freq);
        break;
    case ROPE_YARN:
        yarn_adjust(rc, hd, inv_freq);
        *mscale = yarn_mscale(rc);
        break;
    case ROPE_NONE:
    case ROPE_NTK:
        break;
    }
}

void rope_tables(const rope_config *rc, int hd, int pos0, int T, float *cos_out, float *sin_out,
                 double *inv_freq) {
    double mscale;
    int half = hd / 2;
    rope_inv_freq(rc, hd, inv_freq, &mscale);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos0 + t) * inv_freq[i];
            cos_out[(size_t)t * half + i] = (float)(cos(angle) * mscale);
            sin_out[(size_t)t * half + i] = (float)(sin(angle) * mscale);
        }
}
