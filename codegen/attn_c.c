/* The attention kernels as C (KK_ATTN; attn.h): what the cpu and sim
 * backends run. Flash-attention style, nothing s_q x s_k is stored:
 *
 *   forward  OpenMP over (batch, head, query tile); the query tile stays in
 *            a stack tile while key/value tiles stream past, each row
 *            keeping a running max m and sum l (the online softmax); out =
 *            acc / l and lse = m + log l.
 *   dK, dV   over (batch, kv head, key tile): every query row of the group's
 *            n / g heads that can see the tile, P recomputed from lse,
 *            dV += keep P dO, dK += scale P (keep dO.v - D) q.
 *   dQ       over (batch, head, query tile): dQ += scale P (keep dO.v - D) k.
 *
 * D_i = dO_i . O_i comes from a ROW kernel before them (emit_attn.c). Every
 * sum runs in a fixed order (no atomics), so runs are bit-identical. The
 * loops over the head dimension have compile-time bounds and run over
 * contiguous stack rows: the compiler vectorises them. Causal tiles that
 * are masked whole are never visited. */
#include <string.h>

#include "codegen/attn.h"
#include "support/util.h"

#define STACK_BUDGET (192 * 1024) /* bytes of stack tiles a CPU thread holds */

/* C: stack bytes of the tiles of a thread (q, acc/dO/dQ rows; k, v and
 * the dK, dV tiles; the per-row key vectors). */
static int64_t c_stack(int64_t t, const kattn *A, int64_t q, int64_t k)
{
    return t * (3 * q * (A->d + A->dv) + 2 * k * (A->d + A->dv) + 4 * k + 4 * q);
}

/* CUDA: static shared memory in bytes of a tile choice (attn_cuda.c's
 * arrays; rows padded by one element against bank conflicts), and the
 * accumulator registers a thread keeps (128 threads). */
static int64_t cuda_shared(const kattn *A, int64_t t, int64_t q, int64_t k)
{
    if (A->pass == KATT_FWD) return t * (q * (A->d + 1) + k * (A->d + 1) + k * (A->dv + 1) + q * k + 3 * q);
    return t * (k * (A->d + 1) + k * (A->dv + 1) + q * (A->d + 1) + q * (A->dv + 1) + 2 * q * k + 2 * q);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

#define CUDA_SHARED_BUDGET (44 * 1024) /* static shared memory stays under 48 KiB */
#define CUDA_ACC_REGS 32                /* accumulators per thread: no spills */

void cg_attn_tiles(const kernel *k, cg_lang lang, int *bq, int *bk)
{
    const kattn *A = &k->attn;
    int64_t t = k->ctype == IR_F64 ? 8 : 4;
    if (lang == CG_LANG_CUDA) {
        if (cg_attn_tensor_cores(k)) {
            cg_attn_tc_tiles(k, bq, bk);
            return;
        }
        int64_t q = A->pass == KATT_FWD ? 64 : 32, kk = 32, nt = CG_ATTN_THREADS;
        if (A->pass == KATT_FWD) {
            while (q > 4 && ceil_div(q * A->dv, nt) > CUDA_ACC_REGS) q /= 2;
        } else {
            while (kk > 4 && ceil_div(kk * A->d, nt) + ceil_div(kk * A->dv, nt) > CUDA_ACC_REGS) kk /= 2;
            while (q > 4 && ceil_div(q * A->d, nt) > CUDA_ACC_REGS) q /= 2;
        }
        while (q > 8 && q / 2 >= A->sq) q /= 2;
        while (kk > 8 && kk / 2 >= A->sk) kk /= 2;
        while (cuda_shared(A, t, q, kk) > CUDA_SHARED_BUDGET && (q > 4 || kk > 4)) {
            if (kk > 4 && (kk >= q || q <= 4)) kk /= 2;
            else q /= 2;
        }
        *bq = (int)q;
        *bk = (int)kk;
        return;
    }
    int64_t q = 32, kk = 64;
    while (kk > 8 && c_stack(t, A, q, kk) > STACK_BUDGET) kk /= 2;
    while (q > 4 && c_stack(t, A, q, kk) > STACK_BUDGET) q /= 2;
    /* Short sequences: no tile larger than the sequence (rounded up to 4). */
    while (q > 4 && q / 2 >= A->sq) q /= 2;
    while (kk > 8 && kk / 2 >= A->sk) kk /= 2;
    *bq = (int)q;
    *bk = (int)kk;
}

/* ---- the defines both renderings share ------------------------------------- */

static const char *const undef_names[] = {
    "TA_T", "TA_B", "TA_N", "TA_G", "TA_R", "TA_SQ", "TA_SK", "TA_D", "TA_DV", "TA_BQ", "TA_BK", "TA_WORK",
    "TA_CAUSAL", "TA_DROP", "TA_SCALE", "TA_OFF", "TA_EXP", "TA_EXPRAW", "TA_LOG", "TA_MASKED", "TA_GROW",
    "TA_KEEP", "TA_LD_Q", "TA_LD_K", "TA_LD_V", "TA_LD_DY", "TA_LD_LSE", "TA_LD_DD", "TA_ST_O", "TA_ST_LSE",
    "TA_ST_DQ", "TA_ST_DK", "TA_ST_DV", "TA_XQ", "TA_XK", "TA_XV", "TA_XO",
};

static void def_i(strbuf *sb, const char *name, int64_t v)
{
    sb_printf(sb, "#define %s INT64_C(%lld)\n", name, (long long)v);
}

/* A load of argument a at index i, converted to the compute type. 16-bit
 * arguments (uint16_t bit patterns) go through the preludes' converters. */
static void def_load(cg_rx *r, const char *name, int a)
{
    if (a < 0) return;
    sb_printf(r->sb, "#define %s(i) ((TA_T)%s(a%d[i]))\n", name, cg_rx_load_fn(&r->k->args[a]), a);
}

/* A store: rounded to nearest even into a 16-bit argument. */
static void def_store(cg_rx *r, const char *name, int a)
{
    if (a < 0) return;
    sb_printf(r->sb, "#define %s(i, v) (a%d[i] = %s(v))\n", name, a, cg_rx_store_fn(&r->k->args[a]));
}

void cg_attn_defines(cg_rx *r)
{
    const kernel *k = r->k;
    const kattn *A = &k->attn;
    strbuf *sb = r->sb;
    const char *rt = r->lang == CG_LANG_CUDA ? "rt." : "rt->";
    int bq, bk;
    cg_attn_tiles(k, r->lang, &bq, &bk);
    sb_printf(sb, "#define TA_T %s\n", r->T);
    def_i(sb, "TA_B", A->b);
    def_i(sb, "TA_N", A->n);
    def_i(sb, "TA_G", A->g);
    def_i(sb, "TA_R", A->n / A->g);
    def_i(sb, "TA_SQ", A->sq);
    def_i(sb, "TA_SK", A->sk);
    def_i(sb, "TA_D", A->d);
    def_i(sb, "TA_DV", A->dv);
    sb_printf(sb, "#define TA_BQ %d\n#define TA_BK %d\n", bq, bk);
    def_i(sb, "TA_WORK", A->b * A->n * A->sq * A->sk * (A->d + A->dv));
    sb_printf(sb, "#define TA_CAUSAL %d\n#define TA_DROP %d\n", A->causal ? 1 : 0, A->p > 0 ? 1 : 0);
    sb_puts(sb, "#define TA_SCALE ");
    cg_rx_float(r, A->scale);
    /* Query i sees keys j < i + TA_OFF (softmax's row limit). */
    if (A->pos_offset) sb_printf(sb, "\n#define TA_OFF (INT64_C(1) + (int64_t)%spos)\n", rt);
    else sb_printf(sb, "\n#define TA_OFF INT64_C(%lld)\n", (long long)(1 + A->sk - A->sq));
    /* The clamped exp of the generated code (render_expr.c), and the plain one. */
    sb_printf(sb, "#define TA_EXP(x) exp%s(tgc_clamp_lo%s((x), (TA_T)%s))\n", r->fs, r->fs,
              r->fs[0] ? "-87.0" : "-700.0");
    sb_printf(sb, "#define TA_EXPRAW(x) exp%s(x)\n#define TA_LOG(x) log%s(x)\n", r->fs, r->fs);
    if (A->mask >= 0) sb_printf(sb, "#define TA_MASKED(b, j) (a%d[(b) * TA_SK + (j)] == 0)\n", A->mask);
    else sb_puts(sb, "#define TA_MASKED(b, j) 0\n");
    /* The global index of probability (row, 0); rows are local [b, n, s_q]. */
    if (A->shard_block)
        sb_printf(sb, "#define TA_GROW(row) (((row) * TA_SK / INT64_C(%lld)) * INT64_C(%lld) * %stp_size + "
                      "%stp_rank * INT64_C(%lld) + (row) * TA_SK %% INT64_C(%lld))\n",
                  (long long)A->shard_block, (long long)A->shard_block, rt, rt, (long long)A->shard_block,
                  (long long)A->shard_block);
    else
        sb_puts(sb, "#define TA_GROW(row) ((row) * TA_SK)\n");
    /* Dropout's keep factor, as render_expr.c's keep() writes it. */
    if (A->p > 0) {
        sb_printf(sb, "#define TA_KEEP(e) (%seval ? (TA_T)1 : (rng_dropout_keep(rng_dropout_bits((uint64_t)%sseed, "
                      "(uint64_t)%sstep, ", rt, rt, rt);
        cg_rx_key(r, A->key);
        sb_printf(sb, ", (e)), %.9gf) ? ", A->p);
        cg_rx_float(r, 1.0 / (1.0 - A->p));
        sb_puts(sb, " : (TA_T)0))\n");
    } else {
        sb_puts(sb, "#define TA_KEEP(e) ((TA_T)1)\n");
    }
    /* The element offset of row r of q, k, v (their gradients alike) and
     * the output (dy alike), rows numbered [b, heads, s] as the kernels
     * walk them, in the arguments' layout. */
    static const char *const xn[] = {"TA_XQ", "TA_XK", "TA_XV"}, *const sq[] = {"TA_SQ", "TA_SK", "TA_SK"},
                             *const hd[] = {"TA_N", "TA_G", "TA_G"}, *const wd[] = {"TA_D", "TA_D", "TA_DV"};
    for (int i = 0; i < 3; i++) {
        if (A->layout == IR_ATTN_BNSD)
            sb_printf(sb, "#define %s(r) ((r) * %s)\n", xn[i], wd[i]);
        else
            sb_printf(sb, "#define %s(r) ((((r) %% %s) * (TA_B * %s) + (r) / %s) * %s%s)\n", xn[i], sq[i], hd[i], sq[i],
                      A->layout == IR_ATTN_PACKED ? "(3 * TA_D)" : wd[i],
                      A->layout != IR_ATTN_PACKED ? "" : i == 0 ? " + 0" : i == 1 ? " + TA_D" : " + 2 * TA_D");
    }
    if (A->out_sbnd) sb_puts(sb, "#define TA_XO(r) ((((r) % TA_SQ) * (TA_B * TA_N) + (r) / TA_SQ) * TA_DV)\n");
    else sb_puts(sb, "#define TA_XO(r) ((r) * TA_DV)\n");
    def_load(r, "TA_LD_Q", A->q);
    def_load(r, "TA_LD_K", A->k);
    def_load(r, "TA_LD_V", A->v);
    def_load(r, "TA_LD_DY", A->dy);
    def_load(r, "TA_LD_LSE", A->lse);
    def_load(r, "TA_LD_DD", A->dd);
    def_store(r, "TA_ST_O", A->out);
    if (A->pass == KATT_FWD) def_store(r, "TA_ST_LSE", A->lse);
    def_store(r, "TA_ST_DQ", A->dq);
    def_store(r, "TA_ST_DK", A->dk);
    def_store(r, "TA_ST_DV", A->dvo);
}

void cg_attn_undefs(cg_rx *r)
{
    for (size_t i = 0; i < ARRAY_LEN(undef_names); i++) sb_printf(r->sb, "#undef %s\n", undef_names[i]);
}

/* ---- C ----------------------------------------------------------------------- */

/* Key/value tile j0 (nk rows) of kv head row kvh, transposed ([e][jj], the
 * columns past nk zero) so that the scores of a query row against the whole
 * tile are one vector loop per head-dim element. */
#define LOAD_KV_T()                                                                                   \
    "                for (int64_t jj = 0; jj < TA_BK; jj++) {\n"                                      \
    "                    const int64_t kr = kvh * TA_SK + j0 + jj;\n"                                 \
    "                    const int in = jj < nk;\n"                                                   \
    "                    for (int64_t e = 0; e < TA_D; e++) {\n"                                      \
    "                        const TA_T x = in ? TA_LD_K(TA_XK(kr) + e) : (TA_T)0;\n"                 \
    "                        kt[e][jj] = x;\n"                                                        \
    "                    }\n"                                                                         \
    "                    for (int64_t e = 0; e < TA_DV; e++) vt[e][jj] = in ? TA_LD_V(TA_XV(kr) + e) : (TA_T)0;\n" \
    "                }\n"

/* The scores of query row ii against the tile: s[jj] = q . k_jj for every
 * jj < TA_BK (a vector loop over keys per head-dim element). */
#define SCORES(S, QROW)                                                                               \
    "                    for (int64_t jj = 0; jj < TA_BK; jj++) " S "[jj] = 0;\n"                     \
    "                    for (int64_t e = 0; e < TA_D; e++) {\n"                                      \
    "                        const TA_T x = " QROW "[e];\n"                                           \
    "                        #pragma omp simd\n"                                                      \
    "                        for (int64_t jj = 0; jj < TA_BK; jj++) " S "[jj] += x * kt[e][jj];\n"    \
    "                    }\n"

/* The scores of the four query rows ii0 .. ii0 + 3 against the tile at
 * once, S4[r][jj] = QROWS[ii0 + r] . KT[.][jj]: per TA_VW keys, four vector
 * accumulators stay in registers over the head dimension and every KT load
 * serves four rows (a row at a time, SCORES loads and stores its sums at
 * every element). Each sum adds the same products in the same order as
 * SCORES: the results are the same bits. */
#define SCORES4(S4, QROWS, KT, DIM)                                                                    \
    "                    for (int64_t jv = 0; jv < TA_BK; jv += TA_VW) {\n"                                \
    "                        TA_T c0[TA_VW], c1[TA_VW], c2[TA_VW], c3[TA_VW];\n"                           \
    "                        for (int64_t l = 0; l < TA_VW; l++) c0[l] = c1[l] = c2[l] = c3[l] = 0;\n"     \
    "                        for (int64_t e = 0; e < " DIM "; e++) {\n"                                    \
    "                            const TA_T x0 = " QROWS "[ii0][e], x1 = " QROWS "[ii0 + 1][e];\n"         \
    "                            const TA_T x2 = " QROWS "[ii0 + 2][e], x3 = " QROWS "[ii0 + 3][e];\n"     \
    "                            #pragma omp simd\n"                                                      \
    "                            for (int64_t l = 0; l < TA_VW; l++) {\n"                                 \
    "                                const TA_T kv = " KT "[e][jv + l];\n"                                \
    "                                c0[l] += x0 * kv;\n"                                                 \
    "                                c1[l] += x1 * kv;\n"                                                 \
    "                                c2[l] += x2 * kv;\n"                                                 \
    "                                c3[l] += x3 * kv;\n"                                                 \
    "                            }\n"                                                                     \
    "                        }\n"                                                                         \
    "                        for (int64_t l = 0; l < TA_VW; l++) {\n"                                     \
    "                            " S4 "[0][jv + l] = c0[l];\n"                                            \
    "                            " S4 "[1][jv + l] = c1[l];\n"                                            \
    "                            " S4 "[2][jv + l] = c2[l];\n"                                            \
    "                            " S4 "[3][jv + l] = c3[l];\n"                                            \
    "                        }\n"                                                                         \
    "                    }\n"

/* The row loop of a tile, four query rows at a time: a block whose last row
 * sees a key of the tile (causal limits grow with the row) takes SCORES4,
 * other rows SCORES one by one; then BODY row by row (ii, nv, s = s4[r]). */
#define ROWS_BEGIN                                                                                    \
    "                for (int64_t ii0 = 0; ii0 < nq; ii0 += 4) {\n"                                    \
    "                    TA_T s4[4][TA_BK];\n"                                                         \
    "                    const int blocked = ii0 + 4 <= nq && lim[ii0 + 3] > j0;\n"                    \
    "                    if (blocked) {\n"                                                             \
    SCORES4("s4", "qs", "kt", "TA_D")                                                                   \
    "                    }\n"                                                                          \
    "                    for (int64_t r = 0; r < 4 && ii0 + r < nq; r++) {\n"                          \
    "                    const int64_t ii = ii0 + r;\n"                                                \
    "                    const int64_t nv = lim[ii] - j0 < nk ? lim[ii] - j0 : nk;\n"                  \
    "                    if (nv <= 0) continue;\n"                                                     \
    "                    TA_T *const s = s4[r];\n"                                                     \
    "                    if (!blocked) {\n"                                                            \
    SCORES("s", "qs[ii]")                                                                               \
    "                    }\n"
/* The backward's: dP = dO . v as well, dp4 beside s4. */
#define ROWS_BEGIN_BWD                                                                                \
    "                for (int64_t ii0 = 0; ii0 < nq; ii0 += 4) {\n"                                    \
    "                    TA_T s4[4][TA_BK], dp4[4][TA_BK], pk4[4][TA_BK], ds4[4][TA_BK];\n"            \
    "                    int vis[4] = {0, 0, 0, 0};\n"                                                 \
    "                    const int blocked = ii0 + 4 <= nq && lim[ii0 + 3] > j0;\n"                    \
    "                    if (blocked) {\n"                                                             \
    SCORES4("s4", "qs", "kt", "TA_D")                                                                   \
    SCORES4("dp4", "dos", "vt", "TA_DV")                                                                \
    "                    }\n"                                                                          \
    "                    for (int64_t r = 0; r < 4 && ii0 + r < nq; r++) {\n"                          \
    "                    const int64_t ii = ii0 + r;\n"                                                \
    "                    const int64_t nv = lim[ii] - j0 < nk ? lim[ii] - j0 : nk;\n"                  \
    "                    if (nv <= 0) continue;\n"                                                     \
    "                    TA_T *const s = s4[r], *const dp = dp4[r], *const pk = pk4[r], *const ds = ds4[r];\n" \
    "                    vis[r] = 1;\n"                                                                \
    "                    if (!blocked) {\n"                                                            \
    SCORES("s", "qs[ii]")                                                                               \
    "                    for (int64_t jj = 0; jj < TA_BK; jj++) dp[jj] = 0;\n"                         \
    "                    for (int64_t e = 0; e < TA_DV; e++) {\n"                                      \
    "                        const TA_T x = dos[ii][e];\n"                                             \
    "                        #pragma omp simd\n"                                                       \
    "                        for (int64_t jj = 0; jj < TA_BK; jj++) dp[jj] += x * vt[e][jj];\n"        \
    "                    }\n"                                                                          \
    "                    }\n"
#define ROWS_END                                                                                      \
    "                    }\n"                                                                          \
    "                }\n"

static const char fwd_c[] =
    "    const int64_t off = TA_OFF;\n"
    "    (void)off;\n"
    "    const int64_t nqt = (TA_SQ + TA_BQ - 1) / TA_BQ;\n"
    "    #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (TA_WORK >= 65536)\n"
    "    for (int64_t bh = 0; bh < TA_B * TA_N; bh++)\n"
    "        for (int64_t qt = 0; qt < nqt; qt++) {\n"
    "            const int64_t b = bh / TA_N, h = bh % TA_N, kvh = b * TA_G + h / TA_R;\n"
    "            const int64_t i0 = qt * TA_BQ, nq = TA_SQ - i0 < TA_BQ ? TA_SQ - i0 : TA_BQ;\n"
    "            TA_T qs[TA_BQ][TA_D], acc[TA_BQ][TA_DV], m[TA_BQ], l[TA_BQ];\n"
    "            TA_T kt[TA_D][TA_BK], vs[TA_BK][TA_DV];\n"
    "            int64_t lim[TA_BQ], kend = 0;\n"
    "            (void)b;\n"
    "            for (int64_t ii = 0; ii < nq; ii++) {\n"
    "                const int64_t row = bh * TA_SQ + i0 + ii;\n"
    "                for (int64_t e = 0; e < TA_D; e++) qs[ii][e] = TA_LD_Q(TA_XQ(row) + e);\n"
    "                for (int64_t e = 0; e < TA_DV; e++) acc[ii][e] = 0;\n"
    "                m[ii] = -INFINITY;\n"
    "                l[ii] = 0;\n"
    "                const int64_t li = TA_CAUSAL ? i0 + ii + off : TA_SK;\n"
    "                lim[ii] = li < 0 ? 0 : li > TA_SK ? TA_SK : li;\n"
    "                if (lim[ii] > kend) kend = lim[ii];\n"
    "            }\n"
    "            for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "                const int64_t nk = kend - j0 < TA_BK ? kend - j0 : TA_BK;\n"
    "                for (int64_t jj = 0; jj < TA_BK; jj++) {\n"
    "                    const int64_t kr = kvh * TA_SK + j0 + jj;\n"
    "                    const int in = jj < nk;\n"
    "                    for (int64_t e = 0; e < TA_D; e++) kt[e][jj] = in ? TA_LD_K(TA_XK(kr) + e) : (TA_T)0;\n"
    "                    for (int64_t e = 0; e < TA_DV; e++) vs[jj][e] = in ? TA_LD_V(TA_XV(kr) + e) : (TA_T)0;\n"
    "                }\n"
    ROWS_BEGIN
    /* The scaled, masked scores, then their max: two vector loops (one loop
     * carrying the max through a compare-select ran an element at a time).
     * A max is the same value in any order. */
    "                    TA_T mx = m[ii];\n"
    "                    #pragma omp simd\n"
    "                    for (int64_t jj = 0; jj < nv; jj++)\n"
    "                        s[jj] = TA_MASKED(b, j0 + jj) ? (TA_T)-10000.0 : TA_SCALE * s[jj];\n"
    "                    #pragma omp simd reduction(max:mx)\n"
    "                    for (int64_t jj = 0; jj < nv; jj++) {\n"
    "                        const TA_T z = s[jj];\n"
    "                        mx = z <= mx ? mx : z;\n"
    "                    }\n"
    "                    const TA_T corr = m[ii] == -INFINITY ? (TA_T)0 : TA_EXPRAW(m[ii] - mx);\n"
    "                    TA_T sum = 0;\n"
    "                    #pragma omp simd reduction(+:sum)\n"
    "                    for (int64_t jj = 0; jj < nv; jj++) {\n"
    "                        const TA_T pv = TA_EXP(s[jj] - mx);\n"
    "                        sum += pv;\n"
    "                        s[jj] = pv;\n"
    "                    }\n"
    "                    for (int64_t jj = nv; jj < TA_BK; jj++) s[jj] = 0;\n"
    "                    if (TA_DROP) {\n"
    "                        const int64_t gb = TA_GROW(bh * TA_SQ + i0 + ii) + j0;\n"
    "                        for (int64_t jj = 0; jj < nv; jj++) s[jj] *= TA_KEEP(gb + jj);\n"
    "                    }\n"
    "                    l[ii] = l[ii] * corr + sum;\n"
    "                    m[ii] = mx;\n"
    "                    #pragma omp simd\n"
    "                    for (int64_t e = 0; e < TA_DV; e++) acc[ii][e] *= corr;\n"
    "                    for (int64_t jj = 0; jj < nv; jj++) {\n"
    "                        const TA_T pv = s[jj];\n"
    "                        #pragma omp simd\n"
    "                        for (int64_t e = 0; e < TA_DV; e++) acc[ii][e] += pv * vs[jj][e];\n"
    "                    }\n"
    ROWS_END
    "            }\n"
    "            for (int64_t ii = 0; ii < nq; ii++) {\n"
    "                const int64_t row = bh * TA_SQ + i0 + ii;\n"
    "                const TA_T inv = l[ii] > 0 ? (TA_T)1 / l[ii] : (TA_T)0;\n"
    "                for (int64_t e = 0; e < TA_DV; e++) TA_ST_O(TA_XO(row) + e, acc[ii][e] * inv);\n"
    "                TA_ST_LSE(row, l[ii] > 0 ? m[ii] + TA_LOG(l[ii]) : -INFINITY);\n"
    "            }\n"
    "        }\n";

/* The step of query row ii against the tile both backward kernels share,
 * after ROWS_BEGIN_BWD's scores s and dP = dO . v (dp): for the nv visible
 * keys P from lse, keep * P (pk) and dS = scale P (keep dP - D) (ds); zero
 * past them. */
#define BWD_ROW                                                                                      \
    "                    const int64_t gb = TA_DROP ? TA_GROW(bh * TA_SQ + i0 + ii) + j0 : 0;\n"     \
    "                    (void)gb;\n"                                                                \
    "                    for (int64_t jj = 0; jj < nv; jj++) {\n"                                    \
    "                        const TA_T z = TA_MASKED(b, j0 + jj) ? (TA_T)-10000.0 : TA_SCALE * s[jj];\n" \
    "                        const TA_T p = TA_EXP(z - lse[ii]);\n"                                  \
    "                        const TA_T keep = TA_DROP ? TA_KEEP(gb + jj) : (TA_T)1;\n"              \
    "                        pk[jj] = p * keep;\n"                                                   \
    "                        ds[jj] = TA_SCALE * (p * (keep * dp[jj] - dd[ii]));\n"                  \
    "                    }\n"                                                                        \
    "                    for (int64_t jj = nv; jj < TA_BK; jj++) pk[jj] = ds[jj] = 0;\n"

/* Loads the query-side rows ii < nq of a tile starting at query i0 of
 * head row bh: q, dO, lse, D and the causal limit. */
#define BWD_LOAD_Q                                                                                   \
    "                for (int64_t ii = 0; ii < nq; ii++) {\n"                                        \
    "                    const int64_t row = bh * TA_SQ + i0 + ii;\n"                                \
    "                    for (int64_t e = 0; e < TA_D; e++) qs[ii][e] = TA_LD_Q(TA_XQ(row) + e);\n"  \
    "                    for (int64_t e = 0; e < TA_DV; e++) dos[ii][e] = TA_LD_DY(TA_XO(row) + e);\n" \
    "                    lse[ii] = TA_LD_LSE(row);\n"                                                \
    "                    dd[ii] = TA_LD_DD(row);\n"                                                  \
    "                    const int64_t li = TA_CAUSAL ? i0 + ii + off : TA_SK;\n"                    \
    "                    lim[ii] = li < 0 ? 0 : li > TA_SK ? TA_SK : li;\n"                          \
    "                }\n"

static const char dkv_c[] =
    "    const int64_t off = TA_OFF;\n"
    "    (void)off;\n"
    "    const int64_t nkt = (TA_SK + TA_BK - 1) / TA_BK;\n"
    "    #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (TA_WORK >= 65536)\n"
    "    for (int64_t bg = 0; bg < TA_B * TA_G; bg++)\n"
    "        for (int64_t kt0 = 0; kt0 < nkt; kt0++) {\n"
    "            const int64_t b = bg / TA_G, hk = bg % TA_G, kvh = bg;\n"
    "            const int64_t j0 = kt0 * TA_BK, nk = TA_SK - j0 < TA_BK ? TA_SK - j0 : TA_BK;\n"
    "            TA_T kt[TA_D][TA_BK], vt[TA_DV][TA_BK], dkt[TA_D][TA_BK], dvt[TA_DV][TA_BK];\n"
    "            TA_T qs[TA_BQ][TA_D], dos[TA_BQ][TA_DV], lse[TA_BQ], dd[TA_BQ];\n"
    "            int64_t lim[TA_BQ];\n"
    "            {\n"
    LOAD_KV_T()
    "            }\n"
    "            for (int64_t e = 0; e < TA_D; e++) for (int64_t jj = 0; jj < TA_BK; jj++) dkt[e][jj] = 0;\n"
    "            for (int64_t e = 0; e < TA_DV; e++) for (int64_t jj = 0; jj < TA_BK; jj++) dvt[e][jj] = 0;\n"
    "            /* The first query that sees key j0: earlier ones are masked whole. */\n"
    "            int64_t ist = TA_CAUSAL ? j0 - off + 1 : 0;\n"
    "            if (ist < 0) ist = 0;\n"
    "            for (int64_t hr = 0; hr < TA_R; hr++) {\n"
    "                const int64_t bh = b * TA_N + hk * TA_R + hr;\n"
    "                for (int64_t i0 = ist; i0 < TA_SQ; i0 += TA_BQ) {\n"
    "                const int64_t nq = TA_SQ - i0 < TA_BQ ? TA_SQ - i0 : TA_BQ;\n"
    BWD_LOAD_Q
    ROWS_BEGIN_BWD
    BWD_ROW
    "                    }\n"
    /* dV += keep P dO and dK += dS q for the block's visible rows: four at
     * once, each tile element read and written once per block, the rows'
     * products added in row order as a row at a time would (the same bits). */
    "                    if (vis[0] + vis[1] + vis[2] + vis[3] == 4) {\n"
    "                        for (int64_t e = 0; e < TA_DV; e++) {\n"
    "                            const TA_T x0 = dos[ii0][e], x1 = dos[ii0 + 1][e], x2 = dos[ii0 + 2][e], x3 = dos[ii0 + 3][e];\n"
    "                            #pragma omp simd\n"
    "                            for (int64_t jj = 0; jj < TA_BK; jj++) {\n"
    "                                TA_T t = dvt[e][jj];\n"
    "                                t += pk4[0][jj] * x0;\n"
    "                                t += pk4[1][jj] * x1;\n"
    "                                t += pk4[2][jj] * x2;\n"
    "                                t += pk4[3][jj] * x3;\n"
    "                                dvt[e][jj] = t;\n"
    "                            }\n"
    "                        }\n"
    "                        for (int64_t e = 0; e < TA_D; e++) {\n"
    "                            const TA_T x0 = qs[ii0][e], x1 = qs[ii0 + 1][e], x2 = qs[ii0 + 2][e], x3 = qs[ii0 + 3][e];\n"
    "                            #pragma omp simd\n"
    "                            for (int64_t jj = 0; jj < TA_BK; jj++) {\n"
    "                                TA_T t = dkt[e][jj];\n"
    "                                t += ds4[0][jj] * x0;\n"
    "                                t += ds4[1][jj] * x1;\n"
    "                                t += ds4[2][jj] * x2;\n"
    "                                t += ds4[3][jj] * x3;\n"
    "                                dkt[e][jj] = t;\n"
    "                            }\n"
    "                        }\n"
    "                    } else {\n"
    "                        for (int64_t r = 0; r < 4; r++) {\n"
    "                            if (!vis[r]) continue;\n"
    "                            const int64_t ii = ii0 + r;\n"
    "                            for (int64_t e = 0; e < TA_DV; e++) {\n"
    "                                const TA_T x = dos[ii][e];\n"
    "                                #pragma omp simd\n"
    "                                for (int64_t jj = 0; jj < TA_BK; jj++) dvt[e][jj] += pk4[r][jj] * x;\n"
    "                            }\n"
    "                            for (int64_t e = 0; e < TA_D; e++) {\n"
    "                                const TA_T x = qs[ii][e];\n"
    "                                #pragma omp simd\n"
    "                                for (int64_t jj = 0; jj < TA_BK; jj++) dkt[e][jj] += ds4[r][jj] * x;\n"
    "                            }\n"
    "                        }\n"
    "                    }\n"
    "                }\n"
    "                }\n"
    "            }\n"
    "            for (int64_t jj = 0; jj < nk; jj++) {\n"
    "                const int64_t kr = bg * TA_SK + j0 + jj;\n"
    "                for (int64_t e = 0; e < TA_D; e++) TA_ST_DK(TA_XK(kr) + e, dkt[e][jj]);\n"
    "                for (int64_t e = 0; e < TA_DV; e++) TA_ST_DV(TA_XV(kr) + e, dvt[e][jj]);\n"
    "            }\n"
    "        }\n";

static const char dq_c[] =
    "    const int64_t off = TA_OFF;\n"
    "    (void)off;\n"
    "    const int64_t nqt = (TA_SQ + TA_BQ - 1) / TA_BQ;\n"
    "    #pragma omp parallel for collapse(2) schedule(dynamic, 1) if (TA_WORK >= 65536)\n"
    "    for (int64_t bh = 0; bh < TA_B * TA_N; bh++)\n"
    "        for (int64_t qt = 0; qt < nqt; qt++) {\n"
    "            const int64_t b = bh / TA_N, h = bh % TA_N, kvh = b * TA_G + h / TA_R;\n"
    "            const int64_t i0 = qt * TA_BQ, nq = TA_SQ - i0 < TA_BQ ? TA_SQ - i0 : TA_BQ;\n"
    "            TA_T qs[TA_BQ][TA_D], dos[TA_BQ][TA_DV], dqs[TA_BQ][TA_D], lse[TA_BQ], dd[TA_BQ];\n"
    "            TA_T kt[TA_D][TA_BK], vt[TA_DV][TA_BK], ks[TA_BK][TA_D];\n"
    "            int64_t lim[TA_BQ], kend = 0;\n"
    BWD_LOAD_Q
    "                for (int64_t ii = 0; ii < nq; ii++) {\n"
    "                    for (int64_t e = 0; e < TA_D; e++) dqs[ii][e] = 0;\n"
    "                    if (lim[ii] > kend) kend = lim[ii];\n"
    "                }\n"
    "            for (int64_t j0 = 0; j0 < kend; j0 += TA_BK) {\n"
    "                const int64_t nk = kend - j0 < TA_BK ? kend - j0 : TA_BK;\n"
    LOAD_KV_T()
    "                for (int64_t jj = 0; jj < TA_BK; jj++)\n"
    "                    for (int64_t e = 0; e < TA_D; e++) ks[jj][e] = kt[e][jj];\n"
    ROWS_BEGIN_BWD
    BWD_ROW
    /* dQ += dS k as vector loops over the head dimension (a reduction
     * over keys per element, which is what the compiler made of the
     * transposed form, runs its adds one at a time): the tile's sum per
     * element first, keys in order, then added, as before. */
    "                    TA_T a[TA_D];\n"
    "                    for (int64_t e = 0; e < TA_D; e++) a[e] = 0;\n"
    "                    for (int64_t jj = 0; jj < TA_BK; jj++) {\n"
    "                        const TA_T x = ds[jj];\n"
    "                        #pragma omp simd\n"
    "                        for (int64_t e = 0; e < TA_D; e++) a[e] += x * ks[jj][e];\n"
    "                    }\n"
    "                    for (int64_t e = 0; e < TA_D; e++) dqs[ii][e] += a[e];\n"
    ROWS_END
    "            }\n"
    "            for (int64_t ii = 0; ii < nq; ii++) {\n"
    "                const int64_t row = bh * TA_SQ + i0 + ii;\n"
    "                for (int64_t e = 0; e < TA_D; e++) TA_ST_DQ(TA_XQ(row) + e, dqs[ii][e]);\n"
    "            }\n"
    "        }\n";

void cg_attn_render_c(cg_rx *r)
{
    const kattn *A = &r->k->attn;
    cg_attn_defines(r);
    int bq, bk;
    cg_attn_tiles(r->k, r->lang, &bq, &bk);
    sb_printf(r->sb, "#define TA_VW %d\n", bk < 16 ? bk : 16); /* SCORES4's keys per accumulator */
    sb_puts(r->sb, A->pass == KATT_FWD ? fwd_c : A->pass == KATT_DKV ? dkv_c : dq_c);
    sb_puts(r->sb, "#undef TA_VW\n");
    cg_attn_undefs(r);
}
