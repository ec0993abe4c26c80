/* moe.h's layer through the backend table (moe_dev.h). Forward: copy x, router GEMM,
 * route, assign, (aux: score means), one copy of the counts to the host, gather the kept
 * pairs' rows in expert order (under ep: exchange them with the experts' owners), each
 * expert's GEMM chain on its row blocks (one SwiGLU over all of them), (ep: the outputs
 * back), the shared experts, then the weighted un-permutation. Backward runs the same
 * pieces in reverse. */
#include "moe_dev.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* The largest matmul scratch of the layer's GEMMs: the router's (float32) and the
 * experts' (in prec) over up to rows rows. */
static size_t gemm_floats(backend *be, const moe_config *c, int N, int rows, backend_prec prec) {
    int C = c->dim, F = c->ffn_dim, E = c->n_experts;
    size_t a = be->matmul_scratch_floats(be, N, C, E, BACKEND_PREC_FP32);
    size_t b = be->matmul_scratch_floats(be, rows, C, 2 * F, prec);
    size_t d = be->matmul_scratch_floats(be, rows, F, C, prec);
    size_t mx = a > b ? a : b;
    mx = mx > d ? mx : d;
    /* under fp8 the first and last layers' experts may run in bf16 (model.h) */
    if (prec == BACKEND_PREC_FP8) {
        size_t h = gemm_floats(be, c, N, rows, BACKEND_PREC_BF16);
        mx = mx > h ? mx : h;
    }
    return mx;
}

/* Carves s's buffer from base (or, with base NULL, only counts it). */
static size_t scratch_carve(moe_dev_scratch *s, const moe_config *c, int max_tokens, float *base) {
    size_t N = (size_t)max_tokens, C = (size_t)c->dim;
    size_t NK = N * (size_t)c->top_k, E = (size_t)c->n_experts, o = 0;
#define TAKE(field, n) (s->field = base ? base + o : NULL, o += (n))
    TAKE(dout, NK * C);
    TAKE(dxg, NK * C);
    TAKE(tmp, N * C);
    TAKE(dl, N * E);
    TAKE(dgate, NK);
#undef TAKE
    return o;
}

/* The same for the buffers of the rows the experts here see, rows of them. */
static size_t scratch_rows_carve(moe_dev_scratch *s, const moe_config *c, size_t rows,
                                 float *base) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, o = 0;
    size_t ep_rows = s->ep_size > 1 ? rows : 0;
    /* counting (base NULL) leaves the views alone: they may be in use */
#define TAKE(field, n) ((base ? (void)(s->field = base + o) : (void)0), o += (n))
    TAKE(dhs, rows * F);
    TAKE(dh13, rows * 2 * F);
    TAKE(outr, ep_rows * C);
    TAKE(dr, ep_rows * C);
    TAKE(dxr, ep_rows * C);
    TAKE(gemm, gemm_floats(s->be, c, s->max_tokens, (int)rows, s->prec));
#undef TAKE
    return o;
}

/* Done with p, which queued work may still read: freed by moe_dev_scratch_release, between
 * steps, rather than now (on a GPU a free waits for the whole device, collectives queued on
 * other streams included); freed now only if the list cannot grow. */
static void retire(moe_dev_scratch *s, void *p) {
    if (s->n_retired == s->cap_retired) {
        int cap = s->cap_retired ? 2 * s->cap_retired : 8;
        void **r = realloc(s->retired, (size_t)cap * sizeof *r);
        if (r == NULL) {
            s->be->free(s->be, p);
            return;
        }
        s->retired = r, s->cap_retired = cap;
    }
    s->retired[s->n_retired++] = p;
}

void moe_dev_scratch_release(moe_dev_scratch *s) {
    for (int i = 0; i < s->n_retired; i++)
        s->be->free(s->be, s->retired[i]);
    s->n_retired = 0;
}

/* s's row buffers (and bf16 staging, if any) for rows rows, the old ones retired. */
static int scratch_rows_alloc(moe_dev_scratch *s, const moe_config *c, size_t rows) {
    backend *be = s->be;
    float *b = be->alloc(be, scratch_rows_carve(s, c, rows, NULL) * sizeof(float));
    uint16_t *x16 = NULL;
    size_t NK = (size_t)s->max_tokens * c->top_k;
    if (b != NULL && s->x16 != NULL) x16 = be->alloc(be, (NK + rows) * c->dim * sizeof *x16);
    if (b == NULL || (s->x16 != NULL && x16 == NULL)) {
        if (b) be->free(be, b);
        return BT_ENOMEM;
    }
    if (s->rbuf) retire(s, s->rbuf);
    if (x16) retire(s, s->x16), s->x16 = x16;
    s->rbuf = b, s->rx_cap = rows;
    scratch_rows_carve(s, c, rows, b);
    return 0;
}

int moe_dev_scratch_init(moe_dev_scratch *s, backend *be, const moe_config *c, int max_tokens,
                         int ep_size, backend_prec prec) {
    memset(s, 0, sizeof *s);
    if (moe_config_check(c) != 0 || max_tokens < 1 || ep_size < 1 ||
        (size_t)max_tokens * c->top_k * ep_size > INT32_MAX)
        return BT_EINVAL;
    s->be = be, s->ep_size = ep_size, s->prec = prec, s->max_tokens = max_tokens;
    s->gp = (backend_gemm){.prec = prec};
    for (int k = 0; k < BACKEND_FP8_SLOTS; k++) /* fp8 without records: scales of 1 */
        s->gp.scale[k] = 1.0f;
    size_t n = scratch_carve(s, c, max_tokens, NULL);
    s->fbuf = be->alloc(be, n * sizeof(float));
    if (s->fbuf == NULL) return BT_ENOMEM;
    scratch_carve(s, c, max_tokens, s->fbuf);
    /* N K rows: all the experts can see without ep, what they see on average with it */
    return scratch_rows_alloc(s, c, (size_t)max_tokens * c->top_k);
}

int moe_dev_scratch_set_bf16(moe_dev_scratch *s, const moe_config *c, int max_tokens) {
    if (s->ep_size < 2 || (s->prec != BACKEND_PREC_BF16 && s->prec != BACKEND_PREC_FP8) ||
        s->be->pack_bf16 == NULL || s->x16)
        return 0;
    size_t NK = (size_t)max_tokens * c->top_k, rows = NK + s->rx_cap;
    s->x16 = s->be->alloc(s->be, rows * (size_t)c->dim * sizeof *s->x16);
    s->cnt16 = calloc(2 * (size_t)s->ep_size, sizeof *s->cnt16);
    return s->x16 && s->cnt16 ? 0 : BT_ENOMEM;
}

void moe_dev_scratch_free(moe_dev_scratch *s) {
    moe_dev_scratch_release(s);
    free(s->retired);
    if (s->x16) s->be->free(s->be, s->x16);
    if (s->rbuf) s->be->free(s->be, s->rbuf);
    free(s->cnt16);
    if (s->fbuf) s->be->free(s->be, s->fbuf);
    free(s->sp_topk);
    free(s->sp_count);
    free(s->sp_limit);
    memset(s, 0, sizeof *s);
}

int moe_dev_scratch_set_split(moe_dev_scratch *s, const moe_config *c, comm *cp, comm *tp, int T,
                              int max_tokens) {
    int P = cp ? comm_size(cp) : 1, Q = tp ? comm_size(tp) : 1;
    if (P < 2 && Q < 2) return 0;
    size_t whole = (size_t)max_tokens * (size_t)Q; /* the cp rank's rows */
    if (s->split || (P > 1 && (T < 2 || T % 2 != 0 || whole < (size_t)T)) ||
        whole * c->top_k * (size_t)P > INT32_MAX)
        return BT_EINVAL; /* the whole sequences' pairs must count in an int */
    /* without cp the rows' order is the tokens' whatever the sequences: one "sequence" */
    size_t E = (size_t)c->n_experts, B = P > 1 ? whole / (size_t)T : 1;
    s->sp_topk = malloc((size_t)max_tokens * c->top_k * sizeof *s->sp_topk);
    s->sp_count = malloc((size_t)P * Q * 2 * B * E * sizeof *s->sp_count);
    s->sp_limit = malloc(2 * E * sizeof *s->sp_limit);
    if (s->sp_topk == NULL || s->sp_count == NULL || s->sp_limit == NULL) return BT_ENOMEM;
    s->split = 1, s->cp = P > 1 ? cp : NULL, s->tp = Q > 1 ? tp : NULL, s->sp_T = T;
    return 0;
}

/* Carves m's buffers (or only counts them); returns the floats, *ni the 4-byte integers. */
static size_t cache_carve(moe_dev_cache *m, const moe_config *c, size_t *ni) {
    size_t N = (size_t)m->max_tokens, C = (size_t)c->dim, F = (size_t)c->ffn_dim;
    size_t E = (size_t)c->n_experts, K = (size_t)c->top_k, S = (size_t)c->n_shared;
    float *f = m->fbuf;
    int32_t *i = m->ibuf;
    size_t fo = 0, io = 0;
#define TAKE_F(field, n) (m->field = f ? f + fo : NULL, fo += (n))
#define TAKE_I(field, n) (m->field = i ? i + io : NULL, io += (n))
    TAKE_F(x, N * C);
    TAKE_F(scores, N * E);
    TAKE_F(ssum, N);
    TAKE_F(gate, N * K);
    TAKE_F(xg, N * K * C);
    TAKE_F(out, N * K * C);
    TAKE_F(sh13, S * N * 2 * F);
    TAKE_F(shs, S * N * F);
    TAKE_I(topk, N * K);
    TAKE_I(row, N * K);
    TAKE_I(tok, N * K);
    TAKE_I(slot, N * K);
    TAKE_I(counts, 3 * E + 1);
    m->pmean = i ? (float *)(i + io) : NULL, io += E;
    TAKE_I(limit, 2 * E);
#undef TAKE_F
#undef TAKE_I
    *ni = io;
    return fo;
}

/* The cache's buffers of the rows its experts see (rows of them) from base, or counted. */
static size_t cache_rows_carve(moe_dev_cache *m, const moe_config *c, size_t rows, float *base) {
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, o = 0;
    /* counting (base NULL) leaves the views alone: they may be in use */
#define TAKE(field, n) ((base ? (void)(m->field = base + o) : (void)0), o += (n))
    TAKE(xr, m->ep ? rows * C : 0);
    TAKE(h13, rows * 2 * F);
    TAKE(hs, rows * F);
#undef TAKE
    return o;
}

static int cache_rows_alloc(moe_dev_cache *m, const moe_config *c, size_t rows) {
    size_t n = cache_rows_carve(m, c, rows, NULL), old = cache_rows_carve(m, c, m->rx_cap, NULL);
    float *b = m->be->alloc(m->be, n * sizeof(float));
    if (b == NULL) return BT_ENOMEM;
    if (m->rbuf) retire(m->scratch, m->rbuf), m->bytes -= old * sizeof(float);
    m->rbuf = b, m->rx_cap = rows, m->bytes += n * sizeof(float);
    cache_rows_carve(m, c, rows, b);
    return 0;
}

/* Room for rows rows at the experts here, in the cache and the scratch: grown (to a
 * quarter more, at most what every rank's tokens can bring: N ep min(K, local experts))
 * when a forward receives more than they had. */
static size_t rows_most(const moe_dev_cache *m, const moe_config *c) {
    int El = moe_local_experts(c), per = c->top_k < El ? c->top_k : El;
    return (size_t)m->max_tokens * (size_t)per * m->ep_size;
}

static int reserve_rows(moe_dev_cache *m, const moe_config *c, size_t rows) {
    moe_dev_scratch *s = m->scratch;
    size_t most = rows_most(m, c), want = rows + rows / 4;
    want = want < most ? want : most;
    int rc = rows > s->rx_cap ? scratch_rows_alloc(s, c, want) : 0;
    if (rc == 0 && rows > m->rx_cap) rc = cache_rows_alloc(m, c, want);
    if (rows > s->rx_most) s->rx_most = rows;
    return rc;
}

/* The expert-parallel share of c fits the group; without a group, all experts. */
static int ep_share_ok(const moe_config *c, comm *ep) {
    if (ep == NULL) return c->n_local == 0;
    int size = comm_size(ep), El = moe_local_experts(c);
    return c->n_experts % size == 0 && El * size == c->n_experts &&
           c->expert0 == comm_rank(ep) * El;
}

static int cache_host_alloc(moe_dev_cache *m, const moe_config *c) {
    size_t E = (size_t)c->n_experts, P = (size_t)m->ep_size;
    m->host = calloc(4 * E + 1, sizeof *m->host);
    m->cnt_recv = calloc(E, sizeof *m->cnt_recv);
    m->scount = calloc(P, sizeof *m->scount);
    m->rcount = calloc(P, sizeof *m->rcount);
    m->blk_e = calloc(E, sizeof *m->blk_e);
    m->blk_m = calloc(E, sizeof *m->blk_m);
    return m->host && m->cnt_recv && m->scount && m->rcount && m->blk_e && m->blk_m ? 0 : BT_ENOMEM;
}

int moe_dev_cache_init(moe_dev_cache *m, backend *be, const moe_config *c, int max_tokens,
                       moe_dev_scratch *s, comm *ep) {
    memset(m, 0, sizeof *m);
    if (moe_config_check(c) != 0 || max_tokens < 1 || s == NULL || !ep_share_ok(c, ep) ||
        s->ep_size != (ep ? comm_size(ep) : 1))
        return BT_EINVAL;
    m->be = be, m->scratch = s, m->max_tokens = max_tokens;
    m->ep = ep, m->ep_size = s->ep_size;
    size_t ni, nf = cache_carve(m, c, &ni);
    m->fbuf = be->alloc(be, nf * sizeof(float));
    m->ibuf = be->alloc(be, ni * sizeof(int32_t));
    m->bytes = nf * sizeof(float) + ni * sizeof(int32_t);
    if (m->fbuf == NULL || m->ibuf == NULL || cache_host_alloc(m, c) != 0) {
        moe_dev_cache_free(m);
        return BT_ENOMEM;
    }
    cache_carve(m, c, &ni);
    if (cache_rows_alloc(m, c, s->rx_cap) != 0) {
        moe_dev_cache_free(m);
        return BT_ENOMEM;
    }
    return 0;
}

/* The cache floats of record i of a kept (even: a w13 (2F, C), odd: a w2 (C, F)). */
static size_t kept_floats(backend *be, const moe_config *c, const backend_gemm *wg, int i) {
    return i % 2 ? be->matmul_wcache_floats(be, c->ffn_dim, c->dim, wg[i].prec)
                 : be->matmul_wcache_floats(be, c->dim, 2 * c->ffn_dim, wg[i].prec);
}

int moe_dev_kept_init(moe_dev_kept *k, backend *be, const moe_config *c, backend_gemm *wg,
                      int keep) {
    memset(k, 0, sizeof *k);
    int El = moe_local_experts(c), n = 2 * (El + c->n_shared);
    k->be = be, k->wg = wg, k->n_wg = n, k->n_local = El;
    if (!keep || be->matmul_wcache_floats == NULL) return 0;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += kept_floats(be, c, wg, i);
    if (total == 0) return 0;
    k->mem = be->alloc(be, total * sizeof(float));
    if (k->mem == NULL) return BT_ENOMEM;
    float *at = k->mem;
    for (int i = 0; i < n; i++) {
        wg[i].wcache = at, wg[i].wcache_forms = 0;
        at += kept_floats(be, c, wg, i);
    }
    k->floats = total;
    return 0;
}

void moe_dev_kept_free(moe_dev_kept *k) {
    if (k->mem) k->be->free(k->be, k->mem);
    for (int i = 0; k->mem && i < k->n_wg; i++)
        k->wg[i].wcache = NULL, k->wg[i].wcache_forms = 0;
    memset(k, 0, sizeof *k);
}

void moe_dev_kept_clear(moe_dev_kept *k) {
    for (int i = 0; i < k->n_wg; i++)
        k->wg[i].wcache_forms = 0;
}

void moe_dev_cache_free(moe_dev_cache *m) {
    if (m->rbuf) m->be->free(m->be, m->rbuf);
    if (m->fbuf) m->be->free(m->be, m->fbuf);
    if (m->ibuf) m->be->free(m->be, m->ibuf);
    free(m->host);
    free(m->cnt_recv);
    free(m->scount);
    free(m->rcount);
    free(m->blk_e);
    free(m->blk_m);
    memset(m, 0, sizeof *m);
}

/* The experts' GEMM precision (NULL: float32); the router's is always float32. */
static backend_gemm *moe_prec(moe_dev_cache *m) {
    return m->scratch->prec == BACKEND_PREC_FP32 ? NULL : &m->scratch->gp;
}

enum { MOE_W13 = 0, MOE_W2 = 1 };

/* The GEMM record of local expert e's weight `which` (with its kept conversions). */
static backend_gemm *expert_gemm(moe_dev_cache *m, int e, int which) {
    return m->kept != NULL && m->kept->wg != NULL ? &m->kept->wg[2 * e + which] : moe_prec(m);
}

/* The same for shared expert s. */
static backend_gemm *shared_gemm(moe_dev_cache *m, int s, int which) {
    moe_dev_kept *k = m->kept;
    return k != NULL && k->wg != NULL ? &k->wg[2 * (k->n_local + s) + which] : moe_prec(m);
}

static int capacity_of(const moe_config *c, int N) {
    if (c->capacity_factor <= 0.0) return 0;
    return (int)ceil(c->capacity_factor * (double)N * c->top_k / c->n_experts);
}

/* The load figures and aux loss from the host copy of counts and pmean; BT_EIO when the
 * counts cannot be moe_assign's (a failed device). */
static int read_stats(const moe_config *c, int N, const moe_dev_cache *m, moe_stats *st) {
    int E = c->n_experts, K = c->top_k;
    const int32_t *routed = m->host, *kept = m->host + E, *offset = m->host + 2 * E;
    /* The aux loss's f_e over its n_aux tokens; P_e is this rank's share of theirs. */
    const int32_t *aux_routed = m->n_aux != N ? m->scratch->sp_limit + E : routed;
    double share = (double)N / m->n_aux;
    float pmean[MOE_MAX_EXPERTS];
    memcpy(pmean, m->host + 3 * E + 1, (size_t)E * sizeof(float));
    memset(st, 0, sizeof *st);
    st->n_tokens = N, st->capacity = capacity_of(c, m->n_aux);
    long total = 0;
    double aux = 0.0;
    if (offset[0] != 0) return BT_EIO;
    for (int e = 0; e < E; e++) {
        if (kept[e] < 0 || kept[e] > routed[e] || offset[e + 1] != offset[e] + kept[e])
            return BT_EIO;
        st->routed[e] = routed[e], st->kept[e] = kept[e];
        st->dropped += routed[e] - kept[e];
        total += routed[e];
        aux += (float)((double)aux_routed[e] / ((double)m->n_aux * K)) * (double)pmean[e] * share;
    }
    if (total != (long)N * K) return BT_EIO;
    st->aux_loss = c->aux_loss_coef == 0.0 ? 0.0 : c->aux_loss_coef * E * aux;
    return 0;
}

/* Without ep the experts' rows are the grouped rows: one block per expert. */
static void local_blocks(const moe_config *c, moe_dev_cache *m) {
    const int32_t *kept = m->host + c->n_experts;
    m->nblk = c->n_experts;
    for (int e = 0; e < c->n_experts; e++)
        m->blk_e[e] = e, m->blk_m[e] = kept[e];
}

/* Whether the rows to this layer's experts may travel in bf16: the scratch has the staging
 * and the experts' products round them to bf16 anyway (not fp8's: its amaxes and
 * quantization take the float32 values). */
static int rows_bf16(const moe_dev_cache *m) {
    const moe_dev_scratch *s = m->scratch;
    backend_prec p = m->kept != NULL && m->kept->wg != NULL ? m->kept->wg[0].prec : s->prec;
    return s->x16 != NULL && p == BACKEND_PREC_BF16;
}

/* Rows to the experts' owners: send (grouped rows, scount floats to each peer) into recv
 * (rcount from each), in bf16 where rows_bf16. */
static int ep_to_owners(moe_dev_cache *m, const float *send, float *recv) {
    moe_dev_scratch *s = m->scratch;
    if (!rows_bf16(m))
        return comm_alltoallv(m->ep, send, m->scount, recv, m->rcount, COMM_F32, NULL) ? BT_EIO : 0;
    int P = m->ep_size;
    size_t out = 0, in = 0;
    for (int r = 0; r < P; r++) {
        s->cnt16[r] = m->scount[r] * sizeof *s->x16, out += m->scount[r];
        s->cnt16[P + r] = m->rcount[r] * sizeof *s->x16, in += m->rcount[r];
    }
    uint16_t *rx = s->x16 + out; /* the rows received follow the rows sent */
    m->be->pack_bf16(m->be, s->x16, send, out);
    if (comm_alltoallv(m->ep, s->x16, s->cnt16, rx, s->cnt16 + P, COMM_BYTE, NULL) != 0)
        return BT_EIO;
    m->be->unpack_bf16(m->be, recv, rx, in);
    return 0;
}

/* Under ep: the counts to the owners, the grouped rows after them (into xr); the blocks
 * are (source, local expert) in that order. */
static int ep_dispatch(const moe_config *c, moe_dev_cache *m) {
    int E = c->n_experts, El = moe_local_experts(c), P = m->ep_size;
    const int32_t *kept = m->host + E, *offset = m->host + 2 * E;
    int send[MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++)
        send[e] = kept[e];
    if (comm_alltoall(m->ep, send, m->cnt_recv, (size_t)El * sizeof(int), COMM_BYTE, NULL) != 0)
        return BT_EIO;
    size_t C = (size_t)c->dim, total = 0;
    m->nblk = 0;
    for (int r = 0; r < P; r++) {
        m->scount[r] = (size_t)(offset[(r + 1) * El] - offset[r * El]) * C;
        size_t rows = 0;
        for (int e = 0; e < El; e++) {
            int M = m->cnt_recv[r * El + e];
            if (M < 0) return BT_EIO;
            m->blk_e[m->nblk] = e, m->blk_m[m->nblk++] = M;
            rows += (size_t)M;
        }
        m->rcount[r] = rows * C;
        total += rows;
    }
    if (total > rows_most(m, c)) return BT_ERANGE; /* inconsistent counts: a failed peer */
    int rc = reserve_rows(m, c, total);
    return rc ? rc : ep_to_owners(m, m->xg, m->xr);
}

/* Each block's expert over its rows of xe into eout (rows in block order). */
static void experts_forward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                            const float *xe, float *eout) {
    backend *be = m->be;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, r = 0;
    float *gs = m->scratch->gemm;
    for (int b = 0; b < m->nblk; r += (size_t)m->blk_m[b++])
        if (m->blk_m[b] > 0)
            be->matmul_forward(be, m->h13 + r * 2 * F, xe + r * C,
                               w->w13 + (size_t)m->blk_e[b] * 2 * F * C, m->blk_m[b], (int)C,
                               (int)(2 * F), expert_gemm(m, m->blk_e[b], MOE_W13), gs);
    if (r > 0) be->swiglu_forward(be, m->hs, m->h13, (int)r, (int)F);
    r = 0;
    for (int b = 0; b < m->nblk; r += (size_t)m->blk_m[b++])
        if (m->blk_m[b] > 0)
            be->matmul_forward(be, eout + r * C, m->hs + r * F, w->w2 + (size_t)m->blk_e[b] * C * F,
                               m->blk_m[b], (int)F, (int)C, expert_gemm(m, m->blk_e[b], MOE_W2),
                               gs);
}

/* y = the shared experts' sum (0 without any), then the routed experts' weighted rows. */
static void combine_forward(const moe_config *c, const moe_weights *w, int N, moe_dev_cache *m,
                            float *y) {
    backend *be = m->be;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, n = (size_t)N;
    float *gs = m->scratch->gemm;
    if (c->n_shared == 0) be->zero(be, y, n * C);
    for (int s = 0; s < c->n_shared; s++) {
        float *h13 = m->sh13 + s * n * 2 * F, *hs = m->shs + s * n * F;
        be->matmul_forward(be, h13, m->x, w->shared_w13 + s * 2 * F * C, N, (int)C, (int)(2 * F),
                           shared_gemm(m, s, MOE_W13), gs);
        be->swiglu_forward(be, hs, h13, N, (int)F);
        float *o = s == 0 ? y : m->scratch->tmp;
        be->matmul_forward(be, o, hs, w->shared_w2 + s * C * F, N, (int)F, (int)C,
                           shared_gemm(m, s, MOE_W2), gs);
        if (s > 0) be->add(be, y, y, o, n * C);
    }
    be->moe_combine(be, y, m->out, m->gate, m->row, N, c->top_k, (int)C);
}

/* The split's sizes and this rank's place: cp ranks P (this one q), tp ranks Q (this one
 * qt), B sequences of T rows on the cp rank (without cp one of all its N Q rows: their
 * order is the tokens' then). */
typedef struct split_dims {
    int P, q, Q, qt, B, T;
} split_dims;

static split_dims split_dims_of(const moe_dev_scratch *s, int N) {
    split_dims d = {1, 0, 1, 0, 0, 0};
    if (s->cp) d.P = comm_size(s->cp), d.q = comm_rank(s->cp);
    if (s->tp) d.Q = comm_size(s->tp), d.qt = comm_rank(s->tp);
    d.T = d.P > 1 ? s->sp_T : N * d.Q;
    d.B = N * d.Q / d.T;
    return d;
}

/* This rank's pairs per expert in each chunk of the cp rank's rows (sequence b, half h at
 * [(2 b + h) E]; the chunks its rows do not reach stay 0), from the selections read
 * back. Its rows are the cp rank's [qt N, (qt + 1) N). */
static int split_count_local(const moe_config *c, int N, moe_dev_cache *m, const split_dims *d,
                             int32_t *local) {
    moe_dev_scratch *s = m->scratch;
    int E = c->n_experts, K = c->top_k, T = d->T, n0 = d->qt * N;
    size_t per = (size_t)2 * d->B * E;
    m->be->to_host(m->be, s->sp_topk, m->topk, (size_t)N * K * sizeof *s->sp_topk);
    memset(local, 0, per * sizeof *local);
    for (int n = 0; n < N; n++) {
        int r = n0 + n;
        int32_t *cnt = local + (size_t)(2 * (r / T) + (r % T >= T / 2)) * E;
        for (int j = 0; j < K; j++) {
            int e = s->sp_topk[(size_t)n * K + j];
            if (e < 0 || e >= E) { /* a failed device: the peers are told (-1) */
                for (size_t i = 0; i < per; i++)
                    local[i] = -1;
                return BT_EIO;
            }
            cnt[e]++;
        }
    }
    return 0;
}

/* Every rank's chunk counts gathered, over tp (rank (p, t) at block p Q + t) then cp. */
static int split_gather(moe_dev_scratch *s, const split_dims *d, size_t per, int rc) {
    int32_t *all = s->sp_count, *mine = all + (size_t)(d->q * d->Q + d->qt) * per;
    int32_t *cell = all + (size_t)d->q * d->Q * per; /* this cp rank's tp block */
    if (s->tp && comm_allgather(s->tp, mine, cell, per * sizeof(int32_t), COMM_BYTE, NULL) != 0)
        return BT_EIO;
    if (s->cp && comm_allgather(s->cp, cell, all, (size_t)d->Q * per * sizeof(int32_t), COMM_BYTE,
                                NULL) != 0)
        return BT_EIO;
    for (size_t i = 0; rc == 0 && i < per * (size_t)d->P * d->Q; i++)
        if (all[i] < 0) rc = BT_EIO; /* a peer's device failed */
    return rc;
}

/* The micro-batch's tokens are split over cp (model_cp.h's zigzag chunks) and tp (sequence
 * parallelism: each tp rank a contiguous run of its cp rank's rows): every rank's chunk
 * counts gathered; walking the chunks in the one-process order (sequence b, chunk g of
 * 2 cp, held by cp rank g or 2 cp - 1 - g, its rows in tp rank order), limit[e] = the
 * pairs of e kept on this rank (each piece keeps what the capacity leaves after the pairs
 * before it) and routed[e] = all of e's pairs, both copied into m->limit; the aux loss
 * then counts the whole sequences. */
static int split_limits(const moe_config *c, int N, moe_dev_cache *m) {
    moe_dev_scratch *s = m->scratch;
    split_dims d = split_dims_of(s, N);
    int E = c->n_experts, P = d.P, Q = d.Q;
    size_t per = (size_t)2 * d.B * E;
    int rc = split_count_local(c, N, m, &d, s->sp_count + (size_t)(d.q * Q + d.qt) * per);
    if ((rc = split_gather(s, &d, per, rc)) != 0) return rc;
    int cap = capacity_of(c, N * P * Q);
    int32_t *limit = s->sp_limit, *routed = s->sp_limit + E;
    memset(s->sp_limit, 0, 2 * (size_t)E * sizeof *s->sp_limit);
    for (int i = 0; i < 2 * P * d.B; i++) {
        int b = i / (2 * P), g = i % (2 * P), h = g >= P, r = h ? 2 * P - 1 - g : g;
        for (int t = 0; t < Q; t++) {
            const int32_t *cnt = s->sp_count + (size_t)(r * Q + t) * per + (size_t)(2 * b + h) * E;
            for (int e = 0; e < E; e++) {
                int room = cap == 0 ? cnt[e] : cap - routed[e];
                if (r == d.q && t == d.qt) limit[e] += room < 0 ? 0 : room < cnt[e] ? room : cnt[e];
                routed[e] += cnt[e];
            }
        }
    }
    m->be->from_host(m->be, m->limit, s->sp_limit, 2 * (size_t)E * sizeof *s->sp_limit);
    m->aux_routed = m->limit + E, m->n_aux = N * P * Q;
    return 0;
}

/* Router GEMM, routing, capacity and the counts on the host. */
static int route(const moe_config *c, const moe_weights *w, const float *bias, int N,
                 moe_dev_cache *m, moe_stats *st) {
    backend *be = m->be;
    int C = c->dim, E = c->n_experts, K = c->top_k;
    be->matmul_forward(be, m->scores, m->x, w->router, N, C, E, NULL, m->scratch->gemm);
    be->moe_route(be, m->scores, m->ssum, m->topk, m->gate, bias, N, E, K, c->score, c->norm_topk);
    m->aux_routed = m->counts, m->n_aux = N;
    const int32_t *limit = NULL;
    if (m->scratch->split && (c->capacity_factor > 0.0 || c->aux_loss_coef != 0.0)) {
        moe_dev_scratch *s = m->scratch;
        int Q = s->tp ? comm_size(s->tp) : 1;
        int rc = s->cp == NULL || (size_t)N * Q % (size_t)s->sp_T == 0 ? split_limits(c, N, m)
                                                                       : BT_EINVAL;
        if (rc != 0) return rc;
        limit = c->capacity_factor > 0.0 ? m->limit : NULL;
    }
    be->moe_assign(be, m->row, m->tok, m->slot, m->counts, m->topk, N, K, E, capacity_of(c, N),
                   limit);
    if (c->aux_loss_coef != 0.0)
        be->moe_score_mean(be, m->pmean, m->scores, m->ssum, N, E);
    else
        be->zero(be, m->pmean, (size_t)E);
    be->to_host(be, m->host, m->counts, (4 * (size_t)E + 1) * sizeof(int32_t));
    return read_stats(c, N, m, st);
}

int moe_dev_forward(const moe_config *c, const moe_weights *w, const float *bias, const float *x,
                    float *y, int N, moe_dev_cache *m, moe_stats *stats) {
    if (moe_config_check(c) != 0 || w == NULL || x == NULL || y == NULL || m == NULL ||
        m->fbuf == NULL || N < 1 || N > m->max_tokens || !ep_share_ok(c, m->ep))
        return BT_EINVAL;
    backend *be = m->be;
    moe_stats local;
    m->n = N;
    be->copy(be, m->x, x, (size_t)N * c->dim);
    int rc = route(c, w, bias, N, m, stats ? stats : &local);
    if (rc != 0) return rc;
    be->gather_rows(be, m->xg, m->x, m->tok, m->host[3 * c->n_experts], c->dim);
    if (m->ep == NULL) {
        local_blocks(c, m);
        experts_forward(c, w, m, m->xg, m->out);
    } else {
        if ((rc = ep_dispatch(c, m)) != 0) return rc;
        experts_forward(c, w, m, m->xr, m->scratch->outr);
        if (comm_alltoallv(m->ep, m->scratch->outr, m->rcount, m->out, m->scount, COMM_F32, NULL) !=
            0)
            return BT_EIO;
    }
    combine_forward(c, w, N, m, y);
    return 0;
}

/* Each block's expert backward from the output gradients de (rows in block order):
 * weight gradients accumulated, input gradients written into dxe. */
static void experts_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                             moe_weights *g, const float *xe, const float *de, float *dxe) {
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, r = 0;
    for (int b = 0; b < m->nblk; r += (size_t)m->blk_m[b++]) {
        size_t e = (size_t)m->blk_e[b];
        if (m->blk_m[b] > 0)
            be->matmul_backward(be, s->dhs + r * F, g->w2 + e * C * F, de + r * C, m->hs + r * F,
                                w->w2 + e * C * F, m->blk_m[b], (int)F, (int)C,
                                expert_gemm(m, (int)e, MOE_W2), s->gemm);
    }
    if (r > 0) be->swiglu_backward(be, s->dh13, s->dhs, m->h13, (int)r, (int)F);
    r = 0;
    for (int b = 0; b < m->nblk; r += (size_t)m->blk_m[b++]) {
        size_t e = (size_t)m->blk_e[b];
        if (m->blk_m[b] > 0)
            be->matmul_backward(be, dxe + r * C, g->w13 + e * 2 * F * C, s->dh13 + r * 2 * F,
                                xe + r * C, w->w13 + e * 2 * F * C, m->blk_m[b], (int)C,
                                (int)(2 * F), expert_gemm(m, (int)e, MOE_W13), s->gemm);
    }
}

/* The routed experts' backward: dxg (grouped rows, C) from the combine's dout. */
static int routed_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                           moe_weights *g) {
    moe_dev_scratch *s = m->scratch;
    if (m->ep == NULL) {
        experts_backward(c, w, m, g, m->xg, s->dout, s->dxg);
        return 0;
    }
    if (ep_to_owners(m, s->dout, s->dr) != 0) return BT_EIO;
    experts_backward(c, w, m, g, m->xr, s->dr, s->dxr);
    return comm_alltoallv(m->ep, s->dxr, m->rcount, s->dxg, m->scount, COMM_F32, NULL) ? BT_EIO : 0;
}

/* dx += every shared expert's input gradient. */
static void shared_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m,
                            const float *dy, float *dx, moe_weights *g) {
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    size_t C = (size_t)c->dim, F = (size_t)c->ffn_dim, n = (size_t)m->n;
    for (int k = 0; k < c->n_shared; k++) {
        be->matmul_backward(be, s->dhs, g->shared_w2 + k * C * F, dy, m->shs + k * n * F,
                            w->shared_w2 + k * C * F, m->n, (int)F, (int)C,
                            shared_gemm(m, k, MOE_W2), s->gemm);
        be->swiglu_backward(be, s->dh13, s->dhs, m->sh13 + k * n * 2 * F, m->n, (int)F);
        be->matmul_backward(be, s->tmp, g->shared_w13 + k * 2 * F * C, s->dh13, m->x,
                            w->shared_w13 + k * 2 * F * C, m->n, (int)C, (int)(2 * F),
                            shared_gemm(m, k, MOE_W13), s->gemm);
        be->add(be, dx, dx, s->tmp, n * C);
    }
}

int moe_dev_backward(const moe_config *c, const moe_weights *w, moe_dev_cache *m, const float *dy,
                     float *dx, moe_weights *grads) {
    if (moe_config_check(c) != 0 || w == NULL || m == NULL || m->n < 1 || dy == NULL ||
        dx == NULL || grads == NULL || !ep_share_ok(c, m->ep))
        return BT_EINVAL;
    backend *be = m->be;
    moe_dev_scratch *s = m->scratch;
    int N = m->n, C = c->dim, E = c->n_experts, K = c->top_k, rows = m->host[3 * E];
    be->zero(be, s->dgate, (size_t)N * K);
    be->moe_combine_backward(be, s->dout, s->dgate, dy, m->out, m->gate, m->tok, m->slot, rows, K,
                             C);
    int rc = routed_backward(c, w, m, grads);
    if (rc != 0) return rc;
    be->zero(be, dx, (size_t)N * C);
    be->moe_combine(be, dx, s->dxg, NULL, m->row, N, K, C);
    shared_backward(c, w, m, dy, dx, grads);
    be->moe_router_backward(be, s->dl, m->scores, m->ssum, m->topk, m->gate, s->dgate,
                            m->aux_routed, N, m->n_aux, E, K, c->score, c->norm_topk,
                            c->aux_loss_coef);
    be->matmul_backward(be, s->tmp, grads->router, s->dl, m->x, w->router, N, C, E, NULL, s->gemm);
    be->add(be, dx, dx, s->tmp, (size_t)N * C);
    return 0;
}
