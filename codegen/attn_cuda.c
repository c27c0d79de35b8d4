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
 * accumulators under 32 registers a thread: ptxas has no reason to spill.
 *
 * Under 16-bit storage (bf16 / f16 q, k, v, dO) the kernels are the
 * tensor-core ones further down (render_tc): the same three programs and
 * grids, the products as warp-level mma.sync. */
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
    "            ks[jj][c] = jj < nk ? TA_LD_K(TA_XK(kvh * TA_SK + j0 + jj) + c) : (TA_T)0;\n"    \
    "        }\n"                                                                                   \
    "        for (int e = t; e < TA_BK * TA_DV; e += TA_NT) {\n"                                    \
    "            const int jj = e / TA_DV, c = e % TA_DV;\n"                                        \
    "            vs[jj][c] = jj < nk ? TA_LD_V(TA_XV(kvh * TA_SK + j0 + jj) + c) : (TA_T)0;\n"   \
    "        }\n"

/* Loads query tile i0 (nq rows) of head row bh: q, dO, lse, D. */
#define LOAD_QSIDE                                                                                  \
    "        for (int e = t; e < TA_BQ * TA_D; e += TA_NT) {\n"                                     \
    "            const int ii = e / TA_D, c = e % TA_D;\n"                                          \
    "            qs[ii][c] = ii < nq ? TA_LD_Q(TA_XQ(bh * TA_SQ + i0 + ii) + c) : (TA_T)0;\n"     \
    "        }\n"                                                                                   \
    "        for (int e = t; e < TA_BQ * TA_DV; e += TA_NT) {\n"                                    \
    "            const int ii = e / TA_DV, c = e % TA_DV;\n"                                        \
    "            dos[ii][c] = ii < nq ? TA_LD_DY(TA_XO(bh * TA_SQ + i0 + ii) + c) : (TA_T)0;\n"  \
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
    "        qs[ii][c] = ii < nq ? TA_LD_Q(TA_XQ(bh * TA_SQ + i0 + ii) + c) : (TA_T)0;\n"
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
    "            TA_ST_O(TA_XO(bh * TA_SQ + i0 + ii) + c, l > 0 ? acc[u] / l : (TA_T)0);\n"
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
    "        if (e < TA_BK * TA_D && jj < nk) TA_ST_DK(TA_XK(kvh * TA_SK + j0 + jj) + c, dk[u]);\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int u = 0; u < TA_NV; u++) {\n"
    "        const int e = t + u * TA_NT, jj = e / TA_DV, c = e % TA_DV;\n"
    "        if (e < TA_BK * TA_DV && jj < nk) TA_ST_DV(TA_XV(kvh * TA_SK + j0 + jj) + c, dv[u]);\n"
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
    "        if (e < TA_BQ * TA_D && ii < nq) TA_ST_DQ(TA_XQ(bh * TA_SQ + i0 + ii) + c, dq[u]);\n"
    "    }\n";

/* ---- tensor cores: 16-bit storage ------------------------------------------ */

/* The tensor-core kernels (bf16 / f16 storage, fp32 math): the products
 * QK^T, PV, dO V^T, dS K (and, transposed, K Q^T, V dO^T, P^T dO, dS^T Q)
 * as warp-level mma.sync.m16n8k16 with fp32 accumulators (tgc_mma_16816_*,
 * the prelude's), the online softmax, masks and dropout in fp32 registers.
 * Each of the 4 warps owns 16 rows of the block's tile (query rows; key
 * rows in dK/dV); the tiles are 16-bit bit patterns in static shared
 * memory, the head dims padded with zeros to a multiple of 16. A warp's
 * fragments follow the PTX ISA's layouts: with gr = lane / 4 and
 * tq = lane % 4, A (16 x 16, row-major) register r holds row gr + 8 (r & 1),
 * columns 2 tq + 8 (r >> 1) and the next; B (16 x 8) register r rows (k)
 * 2 tq + 8 r and the next of column gr; C (16 x 8, fp32) element u row
 * gr + 8 (u >> 1), column 2 tq + (u & 1). Two C tiles side by side are, once
 * rounded to 16 bits, an A fragment: P and dS go from the scores' registers
 * to the next product without shared memory. */
#define TC_WARPS 4
#define TC_ROWS 16 /* rows of a tile a warp owns */
#define TC_MAX_D 128

static int64_t pad16(int64_t x) { return (x + 15) / 16 * 16; }

bool cg_attn_tensor_cores(const kernel *k)
{
    const kattn *A = &k->attn;
    if (k->ctype != IR_F32 || pad16(A->d) > TC_MAX_D || pad16(A->dv) > TC_MAX_D) return false;
    ir_dtype t = k->args[A->q].dtype;
    if (t != IR_BF16 && t != IR_F16) return false;
    if (k->args[A->k].dtype != t || k->args[A->v].dtype != t) return false;
    return A->dy < 0 || k->args[A->dy].dtype == t;
}

void cg_attn_tc_tiles(const kernel *k, int *bq, int *bk)
{
    const kattn *A = &k->attn;
    bool wide = pad16(A->d) > 64 || pad16(A->dv) > 64;
    int rows = TC_WARPS * TC_ROWS;
    /* Shared memory (2 bytes an element, rows padded by 8): forward q, k, v
     * tiles; dK/dV k, v of the block's 64 keys and q, dO of 16 or 32
     * queries; dQ q, dO of 64 queries and k, v of 16 or 64 keys. At d = 128
     * that is 35, 44 and 44 KiB; the registers (scores of a warp's 16 rows
     * against the tile, accumulators of its rows) stay under 200. */
    if (A->pass == KATT_FWD) {
        *bq = rows;
        *bk = wide ? 32 : 64;
    } else if (A->pass == KATT_DKV) {
        *bq = wide ? 16 : 32;
        *bk = rows;
    } else {
        *bq = rows;
        *bk = wide ? 16 : 64;
    }
}

/* The warp-level product, once per 16-bit kind. On sm_80 and later one
 * mma.sync; before it (no bf16 tensor cores) the same product from the
 * same fragments through warp shuffles, each lane gathering the rows of A
 * and the columns of B of its four results. */
static void mma_fn(strbuf *sb, const char *kind)
{
    sb_printf(sb,
              "TGC_FN void tgc_mma_16816_%s(float *c, const uint32_t *a, const uint32_t *b)\n{\n"
              "#if __CUDA_ARCH__ >= 800\n"
              "    asm(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, \"\n"
              "        \"{%%8, %%9}, {%%0, %%1, %%2, %%3};\"\n"
              "        : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
              "        : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
              "#else\n"
              "    const int lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;\n"
              "    for (int q = 0; q < 4; q++) {\n"
              "        uint32_t x[4], y[2][2];\n"
              "        for (int r = 0; r < 4; r++) x[r] = __shfl_sync(0xffffffffu, a[r], gr * 4 + q);\n"
              "        for (int n = 0; n < 2; n++)\n"
              "            for (int r = 0; r < 2; r++) y[n][r] = __shfl_sync(0xffffffffu, b[r], (2 * tq + n) * 4 + q);\n"
              "        for (int u = 0; u < 4; u++) {\n"
              "            const uint32_t *yn = y[u & 1];\n"
              "            const uint32_t lo = x[u >> 1], hi = x[(u >> 1) + 2];\n"
              "            c[u] += tgc_ld_%s((uint16_t)lo) * tgc_ld_%s((uint16_t)yn[0])\n"
              "                  + tgc_ld_%s((uint16_t)(lo >> 16)) * tgc_ld_%s((uint16_t)(yn[0] >> 16))\n"
              "                  + tgc_ld_%s((uint16_t)hi) * tgc_ld_%s((uint16_t)yn[1])\n"
              "                  + tgc_ld_%s((uint16_t)(hi >> 16)) * tgc_ld_%s((uint16_t)(yn[1] >> 16));\n"
              "        }\n"
              "    }\n"
              "#endif\n}\n",
              kind, kind, kind, kind, kind, kind, kind, kind, kind, kind, kind);
}

void cg_attn_cuda_prelude(strbuf *sb)
{
    mma_fn(sb, "bf16");
    mma_fn(sb, "f16");
    sb_puts(sb, "\n");
}

/* Fragments from shared tiles of 16-bit patterns (X[row][col]):
 * TC_LDA   the A fragment of rows r0.., columns k0.. of X;
 * TC_LDBT  the B fragment B[k][n] = X[n0 + n][k0 + k] (a row-major X
 *          multiplied transposed: q k^T);
 * TC_LDBN  the B fragment B[k][n] = X[k0 + k][n0 + n] (p v);
 * TC_PACK  the A fragment of 16-bit roundings of C tiles c[2 kc], c[2 kc + 1]. */
static const char tc_macros[] =
    "#define TC_PK(lo, hi) ((uint32_t)(lo) | ((uint32_t)(hi) << 16))\n"
    "#define TC_LDA(f, X, r0, k0) do {\\\n"
    "    f[0] = TC_PK(X[(r0) + gr][(k0) + 2 * tq], X[(r0) + gr][(k0) + 2 * tq + 1]);\\\n"
    "    f[1] = TC_PK(X[(r0) + gr + 8][(k0) + 2 * tq], X[(r0) + gr + 8][(k0) + 2 * tq + 1]);\\\n"
    "    f[2] = TC_PK(X[(r0) + gr][(k0) + 2 * tq + 8], X[(r0) + gr][(k0) + 2 * tq + 9]);\\\n"
    "    f[3] = TC_PK(X[(r0) + gr + 8][(k0) + 2 * tq + 8], X[(r0) + gr + 8][(k0) + 2 * tq + 9]);\\\n"
    "} while (0)\n"
    "#define TC_LDBT(f, X, n0, k0) do {\\\n"
    "    f[0] = TC_PK(X[(n0) + gr][(k0) + 2 * tq], X[(n0) + gr][(k0) + 2 * tq + 1]);\\\n"
    "    f[1] = TC_PK(X[(n0) + gr][(k0) + 2 * tq + 8], X[(n0) + gr][(k0) + 2 * tq + 9]);\\\n"
    "} while (0)\n"
    "#define TC_LDBN(f, X, k0, n0) do {\\\n"
    "    f[0] = TC_PK(X[(k0) + 2 * tq][(n0) + gr], X[(k0) + 2 * tq + 1][(n0) + gr]);\\\n"
    "    f[1] = TC_PK(X[(k0) + 2 * tq + 8][(n0) + gr], X[(k0) + 2 * tq + 9][(n0) + gr]);\\\n"
    "} while (0)\n"
    "#define TC_PACK(f, c, kc) do {\\\n"
    "    f[0] = TC_PK(TC_ST(c[2 * (kc)][0]), TC_ST(c[2 * (kc)][1]));\\\n"
    "    f[1] = TC_PK(TC_ST(c[2 * (kc)][2]), TC_ST(c[2 * (kc)][3]));\\\n"
    "    f[2] = TC_PK(TC_ST(c[2 * (kc) + 1][0]), TC_ST(c[2 * (kc) + 1][1]));\\\n"
    "    f[3] = TC_PK(TC_ST(c[2 * (kc) + 1][2]), TC_ST(c[2 * (kc) + 1][3]));\\\n"
    "} while (0)\n"
    /* tile X[ROWS][W] <- rows base.. (n valid, zeros past them and past the width D) of src */
    "#define TC_TILE(X, ROWS, W, D, src, XR, base, n) do {\\\n"
    "    for (int e = t; e < (ROWS) * (W); e += TA_NT) {\\\n"
    "        const int rr = e / (W), cc = e % (W);\\\n"
    "        X[rr][cc] = rr < (n) && cc < (D) ? src[XR((base) + rr) + cc] : (uint16_t)0;\\\n"
    "    }\\\n"
    "} while (0)\n"
    /* the product of A fragments of X (rows r0..) and B^T fragments of Y against acc[NT][4], over K */
    "#define TC_MM_T(acc, NT, X, r0, Y, K) do {\\\n"
    "    _Pragma(\"unroll\") for (int kc = 0; kc < (K) / 16; kc++) {\\\n"
    "        uint32_t fa[4];\\\n"
    "        TC_LDA(fa, X, r0, kc * 16);\\\n"
    "        _Pragma(\"unroll\") for (int nt = 0; nt < (NT); nt++) {\\\n"
    "            uint32_t fb[2];\\\n"
    "            TC_LDBT(fb, Y, nt * 8, kc * 16);\\\n"
    "            TC_MMA(acc[nt], fa, fb);\\\n"
    "        }\\\n"
    "    }\\\n"
    "} while (0)\n"
    /* acc[NT][4] += (rounded C tiles c, KC chunks of 16 columns) Y[k][n] */
    "#define TC_MM_PN(acc, NT, c, KC, Y) do {\\\n"
    "    _Pragma(\"unroll\") for (int kc = 0; kc < (KC); kc++) {\\\n"
    "        uint32_t fa[4];\\\n"
    "        TC_PACK(fa, c, kc);\\\n"
    "        _Pragma(\"unroll\") for (int nt = 0; nt < (NT); nt++) {\\\n"
    "            uint32_t fb[2];\\\n"
    "            TC_LDBN(fb, Y, kc * 16, nt * 8);\\\n"
    "            TC_MMA(acc[nt], fa, fb);\\\n"
    "        }\\\n"
    "    }\\\n"
    "} while (0)\n"
    /* the row (u >> 1) and column (u & 1) of C element u of tile nt */
    "#define TC_ROW(u) (gr + 8 * ((u) >> 1))\n"
    "#define TC_COL(nt, u) ((nt) * 8 + 2 * tq + ((u) & 1))\n";

static const char *const tc_undefs[] = {
    "TC_PK", "TC_LDA", "TC_LDBT", "TC_LDBN", "TC_PACK", "TC_TILE", "TC_MM_T", "TC_MM_PN", "TC_ROW", "TC_COL",
    "TC_MMA", "TC_ST", "TC_DP", "TC_DVP", "TC_Q", "TC_K", "TC_V", "TC_DY",
};

static const char tc_head[] =
    "    const int t = threadIdx.x, lane = t & 31, w = t >> 5, gr = lane >> 2, tq = lane & 3;\n"
    "    const int r0 = w * 16;\n"
    "    const int64_t off = TA_OFF;\n"
    "    (void)off;\n";

static const char tc_fwd[] =
    "    __shared__ uint16_t qs[TA_BQ][TC_DP + 8], ks[TA_BK][TC_DP + 8], vs[TA_BK][TC_DVP + 8];\n"
    "    const int64_t b = blockIdx.z, h = blockIdx.y, bh = b * TA_N + h, kvh = b * TA_G + h / TA_R;\n"
    "    const int64_t i0 = (int64_t)blockIdx.x * TA_BQ;\n"
    "    const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "    (void)b;\n"
    "    TC_TILE(qs, TA_BQ, TC_DP, TA_D, TC_Q, TA_XQ, bh * TA_SQ + i0, nq);\n"
    "    float o[TC_DVP / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};\n"
    "    #pragma unroll\n"
    "    for (int nt = 0; nt < TC_DVP / 8; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0;\n"
    "    int64_t kend = TA_SK;\n"
    "    if (TA_CAUSAL) {\n"
    "        kend = i0 + nq - 1 + off;\n"
    "        kend = kend < 0 ? 0 : kend > TA_SK ? TA_SK : kend;\n"
    "    }\n"
    "    for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "        const int nk = kend - j0 < TA_BK ? (int)(kend - j0) : TA_BK;\n"
    "        __syncthreads();\n"
    "        TC_TILE(ks, TA_BK, TC_DP, TA_D, TC_K, TA_XK, kvh * TA_SK + j0, nk);\n"
    "        TC_TILE(vs, TA_BK, TC_DVP, TA_DV, TC_V, TA_XV, kvh * TA_SK + j0, nk);\n"
    "        __syncthreads();\n"
    "        float s[TA_BK / 8][4];\n"
    "        #pragma unroll\n"
    "        for (int nt = 0; nt < TA_BK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0;\n"
    "        TC_MM_T(s, TA_BK / 8, qs, r0, ks, TC_DP);\n"
    "        float mx[2] = {-INFINITY, -INFINITY};\n"
    "        #pragma unroll\n"
    "        for (int nt = 0; nt < TA_BK / 8; nt++) {\n"
    "            #pragma unroll\n"
    "            for (int u = 0; u < 4; u++) {\n"
    "                const int ii = r0 + TC_ROW(u), jj = TC_COL(nt, u);\n"
    "                const int64_t i = i0 + ii, j = j0 + jj;\n"
    "                float z = -INFINITY;\n"
    "                if (ii < nq && jj < nk && (!TA_CAUSAL || j < i + off))\n"
    "                    z = TA_MASKED(b, j) ? -10000.0f : TA_SCALE * s[nt][u];\n"
    "                s[nt][u] = z;\n"
    "                mx[u >> 1] = tgc_max(mx[u >> 1], z);\n"
    "            }\n"
    "        }\n"
    "        float mn[2], corr[2], sum[2] = {0, 0};\n"
    "        #pragma unroll\n"
    "        for (int hf = 0; hf < 2; hf++) {\n"
    "            mx[hf] = tgc_max(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));\n"
    "            mx[hf] = tgc_max(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));\n"
    "            mn[hf] = tgc_max(m[hf], mx[hf]);\n"
    "            corr[hf] = m[hf] == -INFINITY ? 0.0f : TA_EXPRAW(m[hf] - mn[hf]);\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int nt = 0; nt < TA_BK / 8; nt++) {\n"
    "            #pragma unroll\n"
    "            for (int u = 0; u < 4; u++) {\n"
    "                const float z = s[nt][u];\n"
    "                float pv = z == -INFINITY ? 0.0f : TA_EXP(z - mn[u >> 1]);\n"
    "                sum[u >> 1] += pv;\n"
    "                if (TA_DROP && pv != 0) pv *= TA_KEEP(TA_GROW(bh * TA_SQ + i0 + r0 + TC_ROW(u)) + j0 + TC_COL(nt, u));\n"
    "                s[nt][u] = pv;\n"
    "            }\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int hf = 0; hf < 2; hf++) {\n"
    "            sum[hf] += __shfl_xor_sync(0xffffffffu, sum[hf], 1);\n"
    "            sum[hf] += __shfl_xor_sync(0xffffffffu, sum[hf], 2);\n"
    "            l[hf] = l[hf] * corr[hf] + sum[hf];\n"
    "            m[hf] = mn[hf];\n"
    "        }\n"
    "        #pragma unroll\n"
    "        for (int nt = 0; nt < TC_DVP / 8; nt++) {\n"
    "            #pragma unroll\n"
    "            for (int u = 0; u < 4; u++) o[nt][u] *= corr[u >> 1];\n"
    "        }\n"
    "        TC_MM_PN(o, TC_DVP / 8, s, TA_BK / 16, vs);\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int nt = 0; nt < TC_DVP / 8; nt++) {\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < 4; u++) {\n"
    "            const int ii = r0 + TC_ROW(u), c = TC_COL(nt, u);\n"
    "            const float lr = l[u >> 1];\n"
    "            if (ii < nq && c < TA_DV) TA_ST_O(TA_XO(bh * TA_SQ + i0 + ii) + c, lr > 0 ? o[nt][u] / lr : 0.0f);\n"
    "        }\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int hf = 0; hf < 2; hf++) {\n"
    "        const int ii = r0 + gr + 8 * hf;\n"
    "        if (tq == 0 && ii < nq) TA_ST_LSE(bh * TA_SQ + i0 + ii, l[hf] > 0 ? m[hf] + TA_LOG(l[hf]) : -INFINITY);\n"
    "    }\n";

/* P and dS of a warp's C tiles s (scores) and dp (dO . v), query row QI,
 * key row KJ (local to the tiles), in place: keep P into s, dS into dp. */
#define TC_PDS(NT, QI, KJ)                                                                             \
    "        #pragma unroll\n"                                                                          \
    "        for (int nt = 0; nt < " NT "; nt++) {\n"                                                     \
    "            #pragma unroll\n"                                                                      \
    "            for (int u = 0; u < 4; u++) {\n"                                                       \
    "                const int ii = " QI ", jj = " KJ ";\n"                                             \
    "                const int64_t i = i0 + ii, j = j0 + jj;\n"                                         \
    "                float p = 0, ds = 0;\n"                                                            \
    "                if (ii < nq && jj < nk && (!TA_CAUSAL || j < i + off)) {\n"                        \
    "                    const float z = TA_MASKED(b, j) ? -10000.0f : TA_SCALE * s[nt][u];\n"          \
    "                    p = TA_EXP(z - lse_s[ii]);\n"                                                  \
    "                    const float keep = TA_DROP ? TA_KEEP(TA_GROW(bh * TA_SQ + i) + j) : 1.0f;\n"   \
    "                    ds = TA_SCALE * (p * (keep * dp[nt][u] - dd_s[ii]));\n"                        \
    "                    p *= keep;\n"                                                                  \
    "                }\n"                                                                               \
    "                s[nt][u] = p;\n"                                                                   \
    "                dp[nt][u] = ds;\n"                                                                 \
    "            }\n"                                                                                   \
    "        }\n"

#define TC_ZERO(X, NT)                                                                                 \
    "        #pragma unroll\n"                                                                          \
    "        for (int nt = 0; nt < " NT "; nt++) " X "[nt][0] = " X "[nt][1] = " X "[nt][2] = " X "[nt][3] = 0;\n"

/* The query side of a tile: q, dO (16-bit), lse and D (fp32). */
#define TC_LOAD_Q                                                                                      \
    "        TC_TILE(qs, TA_BQ, TC_DP, TA_D, TC_Q, TA_XQ, bh * TA_SQ + i0, nq);\n"                             \
    "        TC_TILE(dos, TA_BQ, TC_DVP, TA_DV, TC_DY, TA_XO, bh * TA_SQ + i0, nq);\n"                         \
    "        for (int ii = t; ii < TA_BQ; ii += TA_NT) {\n"                                             \
    "            lse_s[ii] = ii < nq ? TA_LD_LSE(bh * TA_SQ + i0 + ii) : 0.0f;\n"                       \
    "            dd_s[ii] = ii < nq ? TA_LD_DD(bh * TA_SQ + i0 + ii) : 0.0f;\n"                         \
    "        }\n"

/* dK, dV: the warp owns keys r0..r0+15 of the tile and computes the
 * transposed products: S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO and
 * dK += dS^T Q. */
static const char tc_dkv[] =
    "    __shared__ uint16_t ks[TA_BK][TC_DP + 8], vs[TA_BK][TC_DVP + 8], qs[TA_BQ][TC_DP + 8], dos[TA_BQ][TC_DVP + 8];\n"
    "    __shared__ float lse_s[TA_BQ], dd_s[TA_BQ];\n"
    "    const int64_t b = blockIdx.z, hk = blockIdx.y, kvh = b * TA_G + hk;\n"
    "    const int64_t j0 = (int64_t)blockIdx.x * TA_BK;\n"
    "    const int nk = TA_SK - j0 < TA_BK ? (int)(TA_SK - j0) : TA_BK;\n"
    "    (void)b;\n"
    "    TC_TILE(ks, TA_BK, TC_DP, TA_D, TC_K, TA_XK, kvh * TA_SK + j0, nk);\n"
    "    TC_TILE(vs, TA_BK, TC_DVP, TA_DV, TC_V, TA_XV, kvh * TA_SK + j0, nk);\n"
    "    float dk[TC_DP / 8][4], dv[TC_DVP / 8][4];\n"
    TC_ZERO("dk", "TC_DP / 8")
    TC_ZERO("dv", "TC_DVP / 8")
    "    /* The first query that sees key j0: earlier ones are masked whole. */\n"
    "    int64_t ist = TA_CAUSAL ? j0 - off + 1 : 0;\n"
    "    if (ist < 0) ist = 0;\n"
    "    for (int64_t hr = 0; hr < TA_R; hr++) {\n"
    "      const int64_t bh = b * TA_N + hk * TA_R + hr;\n"
    "      for (int64_t i0 = ist; i0 < TA_SQ; i0 += TA_BQ) {\n"
    "        const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "        __syncthreads();\n"
    TC_LOAD_Q
    "        __syncthreads();\n"
    "        float s[TA_BQ / 8][4], dp[TA_BQ / 8][4];\n"
    TC_ZERO("s", "TA_BQ / 8")
    TC_ZERO("dp", "TA_BQ / 8")
    "        TC_MM_T(s, TA_BQ / 8, ks, r0, qs, TC_DP);\n"
    "        TC_MM_T(dp, TA_BQ / 8, vs, r0, dos, TC_DVP);\n"
    TC_PDS("TA_BQ / 8", "TC_COL(nt, u)", "r0 + TC_ROW(u)")
    "        TC_MM_PN(dv, TC_DVP / 8, s, TA_BQ / 16, dos);\n"
    "        TC_MM_PN(dk, TC_DP / 8, dp, TA_BQ / 16, qs);\n"
    "      }\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int nt = 0; nt < TC_DP / 8; nt++) {\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < 4; u++) {\n"
    "            const int jj = r0 + TC_ROW(u), c = TC_COL(nt, u);\n"
    "            if (jj < nk && c < TA_D) TA_ST_DK(TA_XK(kvh * TA_SK + j0 + jj) + c, dk[nt][u]);\n"
    "        }\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int nt = 0; nt < TC_DVP / 8; nt++) {\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < 4; u++) {\n"
    "            const int jj = r0 + TC_ROW(u), c = TC_COL(nt, u);\n"
    "            if (jj < nk && c < TA_DV) TA_ST_DV(TA_XV(kvh * TA_SK + j0 + jj) + c, dv[nt][u]);\n"
    "        }\n"
    "    }\n";

/* dQ: the warp owns query rows r0..r0+15: S = Q K^T, dP = dO V^T,
 * dQ += dS K. */
static const char tc_dq[] =
    "    __shared__ uint16_t qs[TA_BQ][TC_DP + 8], dos[TA_BQ][TC_DVP + 8], ks[TA_BK][TC_DP + 8], vs[TA_BK][TC_DVP + 8];\n"
    "    __shared__ float lse_s[TA_BQ], dd_s[TA_BQ];\n"
    "    const int64_t b = blockIdx.z, h = blockIdx.y, bh = b * TA_N + h, kvh = b * TA_G + h / TA_R;\n"
    "    const int64_t i0 = (int64_t)blockIdx.x * TA_BQ;\n"
    "    const int nq = TA_SQ - i0 < TA_BQ ? (int)(TA_SQ - i0) : TA_BQ;\n"
    "    (void)b;\n"
    TC_LOAD_Q
    "    float dq[TC_DP / 8][4];\n"
    TC_ZERO("dq", "TC_DP / 8")
    "    int64_t kend = TA_SK;\n"
    "    if (TA_CAUSAL) {\n"
    "        kend = i0 + nq - 1 + off;\n"
    "        kend = kend < 0 ? 0 : kend > TA_SK ? TA_SK : kend;\n"
    "    }\n"
    "    for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "        const int nk = kend - j0 < TA_BK ? (int)(kend - j0) : TA_BK;\n"
    "        __syncthreads();\n"
    "        TC_TILE(ks, TA_BK, TC_DP, TA_D, TC_K, TA_XK, kvh * TA_SK + j0, nk);\n"
    "        TC_TILE(vs, TA_BK, TC_DVP, TA_DV, TC_V, TA_XV, kvh * TA_SK + j0, nk);\n"
    "        __syncthreads();\n"
    "        float s[TA_BK / 8][4], dp[TA_BK / 8][4];\n"
    TC_ZERO("s", "TA_BK / 8")
    TC_ZERO("dp", "TA_BK / 8")
    "        TC_MM_T(s, TA_BK / 8, qs, r0, ks, TC_DP);\n"
    "        TC_MM_T(dp, TA_BK / 8, dos, r0, vs, TC_DVP);\n"
    TC_PDS("TA_BK / 8", "r0 + TC_ROW(u)", "TC_COL(nt, u)")
    "        TC_MM_PN(dq, TC_DP / 8, dp, TA_BK / 16, ks);\n"
    "    }\n"
    "    #pragma unroll\n"
    "    for (int nt = 0; nt < TC_DP / 8; nt++) {\n"
    "        #pragma unroll\n"
    "        for (int u = 0; u < 4; u++) {\n"
    "            const int ii = r0 + TC_ROW(u), c = TC_COL(nt, u);\n"
    "            if (ii < nq && c < TA_D) TA_ST_DQ(TA_XQ(bh * TA_SQ + i0 + ii) + c, dq[nt][u]);\n"
    "        }\n"
    "    }\n";

static void render_tc(cg_rx *r)
{
    const kernel *k = r->k;
    const kattn *A = &k->attn;
    const char *kind = k->args[A->q].dtype == IR_BF16 ? "bf16" : "f16";
    cg_attn_defines(r);
    sb_printf(r->sb, "#define TA_NT %d\n#define TC_DP %lld\n#define TC_DVP %lld\n", CG_ATTN_THREADS,
              (long long)pad16(A->d), (long long)pad16(A->dv));
    sb_printf(r->sb, "#define TC_MMA tgc_mma_16816_%s\n#define TC_ST tgc_st_%s\n", kind, kind);
    sb_printf(r->sb, "#define TC_Q a%d\n#define TC_K a%d\n#define TC_V a%d\n", A->q, A->k, A->v);
    if (A->dy >= 0) sb_printf(r->sb, "#define TC_DY a%d\n", A->dy);
    sb_puts(r->sb, tc_macros);
    sb_puts(r->sb, tc_head);
    sb_puts(r->sb, A->pass == KATT_FWD ? tc_fwd : A->pass == KATT_DKV ? tc_dkv : tc_dq);
    sb_puts(r->sb, "#undef TA_NT\n");
    for (size_t i = 0; i < ARRAY_LEN(tc_undefs); i++) sb_printf(r->sb, "#undef %s\n", tc_undefs[i]);
    cg_attn_undefs(r);
}

void cg_attn_render_cuda(cg_rx *r)
{
    if (cg_attn_tensor_cores(r->k)) {
        render_tc(r);
        return;
    }
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
