#include "plan_precision.h"

/* fp16 keeps 5 exponent bits: finite values from 6e-8 (subnormal; 6.1e-5 the smallest
 * normal) to 65504, so gradients that sit below 1e-5 (most activation gradients of a
 * language model) flush to zero unless the loss is scaled up first. bf16 keeps float32's
 * 8 exponent bits (1.2e-38 .. 3.4e38) and gives up mantissa instead: no scaling. */
static void fp16_text(FILE *f, const Baton__Precision *p, const char *from, int init) {
    static const Baton__LossScale defaults = BATON__LOSS_SCALE__INIT;
    const Baton__LossScale *ls = p->loss_scale ? p->loss_scale : &defaults;
    fprintf(f,
            "precision   fp16 GEMM inputs (range 6e-8 .. 65504, normal from 6.1e-5), fp32 master "
            "weights: needs dynamic loss scaling\n");
    if (from != NULL)
        fprintf(f,
                "            loss scale carried from stage \"%s\" (the one it ended with; initial "
                "%g is "
                "not used)",
                from, ls->initial);
    else if (init)
        fprintf(f,
                "            loss scale %g, or the one init's checkpoint ended with where an "
                "fp16 stage saved it",
                ls->initial);
    else
        fprintf(f, "            loss scale %g", ls->initial);
    fprintf(f,
            ", x%g after %u clean steps, x%g (not below %g) and the step skipped on Inf/NaN "
            "gradients on any rank (bf16 has fp32's exponent range and needs none)\n",
            ls->growth_factor, ls->growth_interval, ls->backoff_factor, ls->min);
}

static int is_fp16(const Baton__Precision *p) {
    return p && p->type == BATON__PRECISION__TYPE__FP16;
}

int plan_scale_carried(const Baton__Precision *before, const Baton__Precision *p, int reset) {
    return is_fp16(before) && is_fp16(p) && !reset;
}

void plan_precision_json(bt_buf *b, const Baton__Precision *p, const char *carried_from, int init) {
    static const Baton__LossScale defaults = BATON__LOSS_SCALE__INIT;
    if (!is_fp16(p)) {
        bt_buf_printf(b, "\"loss_scale\": null, ");
        return;
    }
    const Baton__LossScale *ls = p->loss_scale ? p->loss_scale : &defaults;
    const char *source = carried_from ? "carried" : init ? "init" : "initial";
    bt_buf_printf(b, "\"loss_scale\": {\"source\": \"%s\", \"carried_from\": ", source);
    if (carried_from)
        bt_buf_json_string(b, carried_from);
    else
        bt_buf_printf(b, "null");
    bt_buf_printf(b,
                  ", \"initial\": %.15g, \"growth_factor\": %.15g, \"growth_interval\": %u, "
                  "\"backoff_factor\": %.15g, \"min\": %.15g}, ",
                  ls->initial, ls->growth_factor, ls->growth_interval, ls->backoff_factor, ls->min);
}

void plan_precision_text(FILE *f, const Baton__Precision *p, const char *carried_from, int init) {
    if (p == NULL) return;
    switch (p->type) {
    case BATON__PRECISION__TYPE__FP16:
        fp16_text(f, p, carried_from, init);
        break;
    case BATON__PRECISION__TYPE__BF16:
        fprintf(f, "precision   bf16 GEMM inputs (fp32's exponent range, 8 significant bits), "
                   "fp32 master weights: no loss scaling needed\n");
        break;
    default:
        break;
    }
}

double plan_peak_flops(const Baton__Gpu *gpu, Baton__Precision__Type prec) {
    if (gpu == NULL) return 0;
    double bf16 = gpu->peak_tflops_bf16 * 1e12;
    if (prec == BATON__PRECISION__TYPE__FP8)
        return gpu->peak_tflops_fp8 > 0 ? gpu->peak_tflops_fp8 * 1e12 : 2 * bf16;
    if (prec == BATON__PRECISION__TYPE__FP32)
        return gpu->peak_tflops_fp32 > 0 ? gpu->peak_tflops_fp32 * 1e12 : bf16 / 2;
    return bf16;
}
