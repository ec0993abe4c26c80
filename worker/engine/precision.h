/* Numeric formats the GPUs compute in, emulated exactly on the CPU.
 *
 * bf16: round-to-nearest-even to 8 significant bits (1 sign, 8 exponent, 7 mantissa);
 * values are kept in float32 storage after rounding. NaN stays NaN (quiet), Inf stays Inf.
 * fp8: the OCP 8-bit formats. E4M3 (bias 7, max 448, no Inf, NaN = S.1111.111,
 * subnormals down to 2^-9) and E5M2 (bias 15, max 57344, Inf and NaN as in IEEE,
 * subnormals down to 2^-16). Quantization is saturating: finite values beyond the max
 * clamp to +-max, and so do +-Inf (the saturating casts GPUs use for training); NaN
 * maps to NaN, keeping its sign: S.1111.111 in E4M3, the quiet S.11111.10 in E5M2.
 * Rounding is round-to-nearest-even.
 * fp16: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa; bias 15, max 65504,
 * smallest normal 2^-14 ~ 6.1e-5, subnormals down to 2^-24 ~ 6e-8), round-to-nearest-
 * even as a GPU's float->half conversion does: finite values from 65520 up round to Inf
 * (not saturating), subnormals are rounded exactly (2^-25 ties to 0), NaN stays a quiet
 * NaN with its sign and the top payload bits (as x86's F16C conversion does). Its exponent
 * range is far narrower than bf16's (which is float32's), which is why fp16 training needs
 * loss scaling (train_scaler.h) and bf16 does not.
 *
 * Delayed scaling (per tensor, Transformer Engine's recipe): the scale used at step t
 * comes from the amax history of earlier steps: amax = max(history);
 * scale = (fmt_max / amax) / 2^margin; scale stays unchanged if amax is 0 or not finite,
 * and a scale that would overflow float32 (amax below about 1e-36) becomes FLT_MAX, as in
 * Transformer Engine.
 * A tensor is quantized as q = fp8(x * scale) and dequantized as q / scale. */
#ifndef BATON_PRECISION_H
#define BATON_PRECISION_H

#include <stddef.h>
#include <stdint.h>

typedef enum prec_fp8_format { PREC_E4M3 = 0, PREC_E5M2 = 1 } prec_fp8_format;

#define PREC_E4M3_MAX 448.0f
#define PREC_E5M2_MAX 57344.0f
#define PREC_FP16_MAX 65504.0f

float prec_bf16_round(float x);
uint16_t prec_bf16_bits(float x); /* the rounded value's 16-bit pattern */
/* dst[i] = prec_bf16_bits(src[i]), i < n. */
void prec_bf16_bits_array(uint16_t *dst, const float *src, size_t n);
/* dst equal to src (in place) or not overlapping it, as for the _array functions below. */
void prec_bf16_round_array(float *dst, const float *src, size_t n);

uint16_t prec_fp16_bits(float x);      /* the binary16 pattern, RNE */
float prec_fp16_from_bits(uint16_t h); /* exact */
float prec_fp16_round(float x);        /* prec_fp16_from_bits(prec_fp16_bits(x)) */
void prec_fp16_round_array(float *dst, const float *src, size_t n);

uint8_t prec_fp8_encode(float x, prec_fp8_format fmt); /* saturating, RNE */
float prec_fp8_decode(uint8_t bits, prec_fp8_format fmt);
float prec_fp8_max(prec_fp8_format fmt); /* PREC_E4M3_MAX or PREC_E5M2_MAX */

/* dst[i] = decode(encode(src[i] * scale)) / scale; returns max |src[i]| (the amax that
 * feeds the history), ignoring NaN. dst may equal src; otherwise they do not overlap. */
float prec_fp8_qdq_array(float *dst, const float *src, size_t n, float scale, prec_fp8_format fmt);

/* Per-tensor delayed-scaling state. The caller owns history (len floats). */
typedef struct prec_fp8_meta {
    float scale;
    float *history;
    uint32_t len;
    uint32_t pos; /* next slot to write */
    prec_fp8_format fmt;
    uint32_t margin;
} prec_fp8_meta;

void prec_fp8_meta_init(prec_fp8_meta *m, float *history, uint32_t len, prec_fp8_format fmt,
                        uint32_t margin);
/* Records this step's amax and recomputes the scale for the next step. */
void prec_fp8_meta_update(prec_fp8_meta *m, float amax);
/* The state of a tensor that is now k times smaller than when its history was recorded:
 * every amax divided by k, the scale multiplied by it (clamped to FLT_MAX, as the update
 * clamps). */
void prec_fp8_meta_rescale(prec_fp8_meta *m, float k);

#endif
