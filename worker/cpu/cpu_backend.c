/* The CPU backend's table and its memory functions. Device memory is host memory:
 * to_host and from_host are copies, sync has nothing to wait for and no error to
 * report. The operations live in cpu_elementwise.c, cpu_norm.c, cpu_matmul.c,
 * cpu_attention.c, cpu_loss.c, cpu_optim.c and cpu_moe.c. */
#include "cpu_backend.h"

#include <stdlib.h>
#include <string.h>

#include <stdint.h>

#include "cpu_ops.h"

static void *cpu_alloc(backend *be, size_t bytes) {
    (void)be;
    /* 64-byte alignment suits every SIMD width and the BLAS packing routines. */
    if (bytes > SIZE_MAX - 63) return NULL; /* rounding up would wrap to a tiny block */
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (p) memset(p, 0, rounded ? rounded : 64);
    return p;
}

static void cpu_free(backend *be, void *ptr) {
    (void)be;
    free(ptr);
}

static void cpu_copy(backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}

static int cpu_sync(backend *be) {
    (void)be;
    return 0;
}

void cpu_backend_init(backend *be) {
    memset(be, 0, sizeof *be);
    be->name = "cpu";
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->to_host = cpu_copy;
    be->from_host = cpu_copy;
    be->sync = cpu_sync;
    be->matmul_scratch_floats = cpu_matmul_scratch_floats;
    be->attention_scratch_floats = cpu_attention_scratch_floats;
    be->zero = cpu_zero;
    be->add = cpu_add;
    be->scale = cpu_scale;
    be->copy2d = cpu_copy2d;
    be->sumsq = cpu_sumsq;
    be->sumsq_segs = cpu_sumsq_segs;
    be->copy = cpu_copy_floats;
    be->pack_bf16 = cpu_pack_bf16;
    be->unpack_bf16 = cpu_unpack_bf16;
    be->adamw = cpu_adamw;
    be->host_memory = 1;
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
    be->rmsnorm_forward = cpu_rmsnorm_forward;
    be->rmsnorm_backward = cpu_rmsnorm_backward;
    be->matmul_forward = cpu_matmul_forward;
    be->matmul_backward = cpu_matmul_backward;
    be->rope_forward = cpu_rope_forward;
    be->rope_backward = cpu_rope_backward;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
    be->attention_part_scratch_floats = cpu_attention_part_scratch_floats;
    be->attention_part_forward = cpu_attention_part_forward;
    be->attention_merge = cpu_attention_merge;
    be->attention_delta = cpu_attention_delta;
    be->attention_part_backward = cpu_attention_part_backward;
    be->swiglu_forward = cpu_swiglu_forward;
    be->swiglu_backward = cpu_swiglu_backward;
    be->crossentropy_forward = cpu_crossentropy_forward;
    be->crossentropy_backward = cpu_crossentropy_backward;
    be->vocab_embedding_forward = cpu_vocab_embedding_forward;
    be->vocab_embedding_backward = cpu_vocab_embedding_backward;
    be->vocab_ce_partial = cpu_vocab_ce_partial;
    be->vocab_ce_combine = cpu_vocab_ce_combine;
    be->vocab_ce_backward = cpu_vocab_ce_backward;
    be->moe_route = cpu_moe_route;
    be->moe_assign = cpu_moe_assign;
    be->moe_score_mean = cpu_moe_score_mean;
    be->gather_rows = cpu_gather_rows;
    be->moe_combine = cpu_moe_combine;
    be->moe_combine_backward = cpu_moe_combine_backward;
    be->moe_router_backward = cpu_moe_router_backward;
}
