/* The attention kernels as CUDA C++ for NVRTC (KK_ATTN; attn.h): the
 * algorithm of attn_c.c with one block of CG_ATTN_THREADS threads per
 * tile and fp32 math (f64 in a float64 model):
 *
 *   forward  block (query tile, head, batch): the query tile and each
 *            key/value tile in shared memory; the scores of the tile pair
 *            spread over the threads; one warp per query row for the online
 *            softmax (warp butterflies, fixed order); each thread keeps a
 *            fixed slice of the [BQ, dv] accumulator in registers.
 *   dK, dV   block (key tile, kv head, batch): walks the query tiles of the
 *            group's heads that can see it; P and dS of the tile pair in
 *            shared memory; dK and dV slices in registers.
 *   dQ       block (query tile, head, batch): walks the visible key tiles.
 *
 * No atomics and no float reductions across blocks: every sum has a fixed
 * order, so a kernel gives the same bits on every run. Tiles are sized
 * (cg_attn_tiles) so that static shared memory stays under 48 KiB and the
 * accumulators under 32 registers a thread: ptxas has no reason to spill. */
#include "codegen/attn.h"
#include "support/util.h"

void cg_attn_launch_dims(const kernel *k, unsigned grid[3], unsigned block[3])
{
    const kattn *A = &k->attn;
    int bq, bk;
    cg_attn_tiles(k, CG_LANG_CUDA, &bq, &bk);
    bool kv = A->pass == KATT_DKV;
    int64_t rows = kv ? A->sk : A->sq, tile = kv ? bk : bq;
    grid[0] = (unsigned)((rows + tile - 1) / tile);
    grid[1] = (unsigned)(kv ? A->g : A->n);
    grid[2] = (unsigned)A->b;
    block[0] = CG_ATTN_THREADS;
    block[1] = block[2] = 1;
}

/* Shared by the three kernels: thread ids, the causal offset. */
static const char head_cu[] =
    "    const int t = threadIdx.x, lane = t & 31, w = t >> 5;\n"
    "    const int64_t off = TA_OFF;\n"
    "    (void)off;\n"
    "    (void)lane;\n"
    "    (void)w;\n";

/* Loads key/value tile j0 (nk rows, zeros past them) of kv head row kvh. */
#define LOAD_KV                                                                                     \
    "        for (int e = t; e < TA_BK * TA_D; e += TA_NT) {\n"                                     \
    "            const int jj = e / TA_D, c = e % TA_D;\n"                                          \
    "            ks[jj][c] = jj < nk ? TA_LD_K((kvh * TA_SK + j0 + jj) * TA_D + c) : (TA_T)0;\n"    \
    "        }\n"                                                                                   \
    "        for (int e = t; e < TA_BK * TA_DV; e += TA_NT) {\n"                                    \
    "            const int jj = e / TA_DV, c = e % TA_DV;\n"                                        \
    "            vs[jj][c] = jj < nk ? TA_LD_V((kvh * TA_SK + j0 + jj) * TA_DV + c) : (TA_T)0;\n"   \
    "        }\n"

/* Loads query tile i0 (nq rows) of head row bh: q, dO, lse, D. */
#define LOAD_QSIDE                                                                                  \
    "        for (int e = t; e < TA_BQ * TA_D; e += TA_NT) {\n"                                     \
    "            const int ii = e / TA_D, c = e % TA_D;\n"                                          \
    "            qs[ii][c] = ii < nq ? TA_LD_Q((bh * TA_SQ + i0 + ii) * TA_D + c) : (TA_T)0;\n"     \
    "        }\n"                                                                                   \
    "        for (int e = t; e < TA_BQ * TA_DV; e += TA_NT) {\n"                                    \
    "            const int ii = e / TA_DV, c = e % TA_DV;\n"                                        \
    "            dos[ii][c] = ii < nq ? TA_LD_DY((bh * TA_SQ + i0 + ii) * TA_DV + c) : (TA_T)0;\n"  \
    "        }\n"                                                                                   \
    "        for (int ii = t; ii < TA_BQ; ii += TA_NT) {\n"                                         \
    "            lse_s[ii] = ii < nq ? TA_LD_LSE(bh * TA_SQ + i0 + ii) : (TA_T)0;\n"                \
    "            dd_s[ii] = ii < nq ? TA_LD_DD(bh * TA_SQ + i0 + ii) : (TA_T)0;\n"                  \
    "        }\n"

/* dS (and, for dK/dV, keep * P) of every pair of the tiles, 0 where masked. */
#define PAIRS(PS0, PS1)                                                                                 \
    "        for (int e = t; e < TA_BQ * TA_BK; e += TA_NT) {\n"                                    \
    "            const int ii = e / TA_BK, jj = e % TA_BK;\n"                                       \
    "            const int64_t i = i0 + ii, j = j0 + jj;\n"                                         \
    "            TA_T ds = 0;\n"                                                                    \
    PS0                                                                                             \
    "            if (ii < nq && jj < nk && (!TA_CAUSAL || j < i + off)) {\n"                        \
    "                TA_T dot = 0, dp = 0;\n"                                                       \
    "                _Pragma(\"unroll 4\") for (int c = 0; c < TA_D; c++) dot += qs[ii][c] * ks[jj][c];\n" \
    "                _Pragma(\"unroll 4\") for (int c = 0; c < TA_DV; c++) dp += dos[ii][c] * vs[jj][c];\n" \
    "                const TA_T z = TA_MASKED(b, j) ? (TA_T)-10000.0 : TA_SCALE * dot;\n"           \
    "                const TA_T p = TA_EXP(z - lse_s[ii]);\n"                                       \
    "                const TA_T keep = TA_DROP ? TA_KEEP(TA_GROW(bh * TA_SQ + i) + j) : (TA_T)1;\n" \
    PS1                                                                                             \
    "                ds = TA_SCALE * (p * (keep * dp - dd_s[ii]));\n"                               \
    "            }\n"                                                                               \
    "            dss[ii][jj] = ds;\n"                                                               \
    "        }\n"

static const char fwd_cu[] =
    "    __shared__ TA_T qs[TA_BQ][TA_D + 1], ks[TA_BK][TA_D + 1], vs[TA_BK][TA_DV + 1], s[TA_BQ][TA_BK];\n"
    "    __shared__ TA_T m_s[TA_BQ], l_s[TA_BQ], c_s[TA_BQ];\n"
    "    const int64_t b = blockIdx.z, h = blockIdx.y, bh = b * TA_N + h, kvh = b * TA_G + h / TA_R;\n"
    "    const int64_t i0 = (int64_t)blockIdx.x * TA_BQ;\n"
    "    const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "    (void)b;\n"
    "    for (int e = t; e < TA_BQ * TA_D; e += TA_NT) {\n"
    "        const int ii = e / TA_D, c = e % TA_D;\n"
    "        qs[ii][c] = ii < nq ? TA_LD_Q((bh * TA_SQ + i0 + ii) * TA_D + c) : (TA_T)0;\n"
    "    }\n"
    "    for (int ii = t; ii < TA_BQ; ii += TA_NT) {\n"
    "        m_s[ii] = -INFINITY;\n"
    "        l_s[ii] = 0;\n"
    "    }\n"
    "    TA_T acc[TA_NE];\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NE; u++) acc[u] = 0;\n"
    "    int64_t kend = TA_SK;\n"
    "    if (TA_CAUSAL) {\n"
    "        kend = i0 + nq - 1 + off;\n"
    "        kend = kend < 0 ? 0 : kend > TA_SK ? TA_SK : kend;\n"
    "    }\n"
    "    for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "        const int nk = kend - j0 < TA_BK ? (int)(kend - j0) : TA_BK;\n"
    "        __syncthreads();\n"
    LOAD_KV
    "        __syncthreads();\n"
    "        for (int e = t; e < TA_BQ * TA_BK; e += TA_NT) {\n"
    "            const int ii = e / TA_BK, jj = e % TA_BK;\n"
    "            const int64_t i = i0 + ii, j = j0 + jj;\n"
    "            TA_T z = -INFINITY;\n"
    "            if (ii < nq && jj < nk && (!TA_CAUSAL || j < i + off)) {\n"
    "                TA_T dot = 0;\n"
    "                _Pragma(\"unroll 4\") for (int c = 0; c < TA_D; c++) dot += qs[ii][c] * ks[jj][c];\n"
    "                z = TA_MASKED(b, j) ? (TA_T)-10000.0 : TA_SCALE * dot;\n"
    "            }\n"
    "            s[ii][jj] = z;\n"
    "        }\n"
    "        __syncthreads();\n"
    "        for (int ii = w; ii < TA_BQ; ii += TA_NT / 32) {\n"
    "            TA_T mx = -INFINITY;\n"
    "            for (int jj = lane; jj < TA_BK; jj += 32) mx = tgc_max(mx, s[ii][jj]);\n"
    "            for (int o = 16; o > 0; o >>= 1) mx = tgc_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));\n"
    "            const TA_T mo = m_s[ii], mn = tgc_max(mo, mx);\n"
    "            const int64_t gb = TA_GROW(bh * TA_SQ + i0 + ii) + j0;\n"
    "            (void)gb;\n"
    "            TA_T sum = 0;\n"
    "            for (int jj = lane; jj < TA_BK; jj += 32) {\n"
    "                const TA_T z = s[ii][jj];\n"
    "                TA_T pv = z == -INFINITY ? (TA_T)0 : TA_EXP(z - mn);\n"
    "                sum += pv;\n"
    "                if (TA_DROP && pv != 0) pv *= TA_KEEP(gb + jj);\n"
    "                s[ii][jj] = pv;\n"
    "            }\n"
    "            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);\n"
    "            if (lane == 0) {\n"
    "                const TA_T corr = mo == -INFINITY ? (TA_T)0 : TA_EXPRAW(mo - mn);\n"
    "                c_s[ii] = corr;\n"
    "                l_s[ii] = l_s[ii] * corr + sum;\n"
    "                m_s[ii] = mn;\n"
    "            }\n"
    "        }\n"
    "        __syncthreads();\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < TA_NE; u++) {\n"
    "            const int e = t + u * TA_NT, ii = e / TA_DV, c = e % TA_DV;\n"
    "            if (e < TA_BQ * TA_DV) {\n"
    "                TA_T a = acc[u] * c_s[ii];\n"
    "                for (int jj = 0; jj < nk; jj++) a += s[ii][jj] * vs[jj][c];\n"
    "                acc[u] = a;\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    __syncthreads();\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NE; u++) {\n"
    "        const int e = t + u * TA_NT, ii = e / TA_DV, c = e % TA_DV;\n"
    "        if (e < TA_BQ * TA_DV && ii < nq) {\n"
    "            const TA_T l = l_s[ii];\n"
    "            TA_ST_O((bh * TA_SQ + i0 + ii) * TA_DV + c, l > 0 ? acc[u] / l : (TA_T)0);\n"
    "        }\n"
    "    }\n"
    "    for (int ii = t; ii < nq; ii += TA_NT) {\n"
    "        const TA_T l = l_s[ii];\n"
    "        TA_ST_LSE(bh * TA_SQ + i0 + ii, l > 0 ? m_s[ii] + TA_LOG(l) : -INFINITY);\n"
    "    }\n";

static const char dkv_cu[] =
    "    __shared__ TA_T ks[TA_BK][TA_D + 1], vs[TA_BK][TA_DV + 1], qs[TA_BQ][TA_D + 1], dos[TA_BQ][TA_DV + 1];\n"
    "    __shared__ TA_T ps[TA_BQ][TA_BK], dss[TA_BQ][TA_BK], lse_s[TA_BQ], dd_s[TA_BQ];\n"
    "    const int64_t b = blockIdx.z, hk = blockIdx.y, kvh = b * TA_G + hk;\n"
    "    const int64_t j0 = (int64_t)blockIdx.x * TA_BK;\n"
    "    const int nk = TA_SK - j0 < TA_BK ? (int)(TA_SK - j0) : TA_BK;\n"
    "    (void)b;\n"
    LOAD_KV
    "    TA_T dk[TA_NK], dv[TA_NV];\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NK; u++) dk[u] = 0;\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NV; u++) dv[u] = 0;\n"
    "    /* The first query that sees key j0: earlier ones are masked whole. */\n"
    "    int64_t ist = TA_CAUSAL ? j0 - off + 1 : 0;\n"
    "    if (ist < 0) ist = 0;\n"
    "    for (int64_t hr = 0; hr < TA_R; hr++) {\n"
    "      const int64_t bh = b * TA_N + hk * TA_R + hr;\n"
    "      for (int64_t i0 = ist; i0 < TA_SQ; i0 += TA_BQ) {\n"
    "        const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "        __syncthreads();\n"
    LOAD_QSIDE
    "        __syncthreads();\n"
    PAIRS("            ps[ii][jj] = 0;\n", "                ps[ii][jj] = p * keep;\n")
    "        __syncthreads();\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < TA_NK; u++) {\n"
    "            const int e = t + u * TA_NT, jj = e / TA_D, c = e % TA_D;\n"
    "            if (e < TA_BK * TA_D) {\n"
    "                TA_T a = dk[u];\n"
    "                for (int ii = 0; ii < nq; ii++) a += dss[ii][jj] * qs[ii][c];\n"
    "                dk[u] = a;\n"
    "            }\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < TA_NV; u++) {\n"
    "            const int e = t + u * TA_NT, jj = e / TA_DV, c = e % TA_DV;\n"
    "            if (e < TA_BK * TA_DV) {\n"
    "                TA_T a = dv[u];\n"
    "                for (int ii = 0; ii < nq; ii++) a += ps[ii][jj] * dos[ii][c];\n"
    "                dv[u] = a;\n"
    "            }\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NK; u++) {\n"
    "        const int e = t + u * TA_NT, jj = e / TA_D, c = e % TA_D;\n"
    "        if (e < TA_BK * TA_D && jj < nk) TA_ST_DK((kvh * TA_SK + j0 + jj) * TA_D + c, dk[u]);\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NV; u++) {\n"
    "        const int e = t + u * TA_NT, jj = e / TA_DV, c = e % TA_DV;\n"
    "        if (e < TA_BK * TA_DV && jj < nk) TA_ST_DV((kvh * TA_SK + j0 + jj) * TA_DV + c, dv[u]);\n"
    "    }\n";

static const char dq_cu[] =
    "    __shared__ TA_T ks[TA_BK][TA_D + 1], vs[TA_BK][TA_DV + 1], qs[TA_BQ][TA_D + 1], dos[TA_BQ][TA_DV + 1];\n"
    "    __shared__ TA_T dss[TA_BQ][TA_BK], lse_s[TA_BQ], dd_s[TA_BQ];\n"
    "    const int64_t b = blockIdx.z, h = blockIdx.y, bh = b * TA_N + h, kvh = b * TA_G + h / TA_R;\n"
    "    const int64_t i0 = (int64_t)blockIdx.x * TA_BQ;\n"
    "    const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "    (void)b;\n"
    LOAD_QSIDE
    "    TA_T dq[TA_NE];\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NE; u++) dq[u] = 0;\n"
    "    int64_t kend = TA_SK;\n"
    "    if (TA_CAUSAL) {\n"
    "        kend = i0 + nq - 1 + off;\n"
    "        kend = kend < 0 ? 0 : kend > TA_SK ? TA_SK : kend;\n"
    "    }\n"
    "    for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "        const int nk = kend - j0 < TA_BK ? (int)(kend - j0) : TA_BK;\n"
    "        __syncthreads();\n"
    LOAD_KV
    "        __syncthreads();\n"
    PAIRS("", "")
    "        __syncthreads();\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < TA_NE; u++) {\n"
    "            const int e = t + u * TA_NT, ii = e / TA_D, c = e % TA_D;\n"
    "            if (e < TA_BQ * TA_D) {\n"
    "                TA_T a = dq[u];\n"
    "                for (int jj = 0; jj < nk; jj++) a += dss[ii][jj] * ks[jj][c];\n"
    "                dq[u] = a;\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NE; u++) {\n"
    "        const int e = t + u * TA_NT, ii = e / TA_D, c = e % TA_D;\n"
    "        if (e < TA_BQ * TA_D && ii < nq) TA_ST_DQ((bh * TA_SQ + i0 + ii) * TA_D + c, dq[u]);\n"
    "    }\n";

void cg_attn_render_cuda(cg_rx *r)
{
    const kernel *k = r->k;
    const kattn *A = &k->attn;
    int bq, bk;
    cg_attn_tiles(k, CG_LANG_CUDA, &bq, &bk);
    int nt = CG_ATTN_THREADS;
    cg_attn_defines(r);
    /* Accumulator elements per thread. */
    int64_t ne = A->pass == KATT_FWD ? ((int64_t)bq * A->dv + nt - 1) / nt : ((int64_t)bq * A->d + nt - 1) / nt;
    sb_printf(r->sb, "#define TA_NT %d\n#define TA_NE %lld\n#define TA_NK %lld\n#define TA_NV %lld\n", nt,
              (long long)ne, (long long)(((int64_t)bk * A->d + nt - 1) / nt),
              (long long)(((int64_t)bk * A->dv + nt - 1) / nt));
    sb_puts(r->sb, head_cu);
    sb_puts(r->sb, A->pass == KATT_FWD ? fwd_cu : A->pass == KATT_DKV ? dkv_cu : dq_cu);
    sb_puts(r->sb, "#undef TA_NT\n#undef TA_NE\n#undef TA_NK\n#undef TA_NV\n");
    cg_attn_undefs(r);
}
