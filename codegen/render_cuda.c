/* The CUDA renderer: kernel IR -> one CUDA C++ translation unit for NVRTC
 * (runtime/backend/nvrtc.c compiles it to a cubin; the GPU runtime launches it).
 *
 * The expressions come from the shared renderer (render_expr.c); this file
 * adds only the scaffolding of each loop shape (docs/cuda.md):
 *
 *   MAP          a grid-stride loop over the elements; where every output
 *                is written at element i, the arguments read or written at
 *                i move in 16-byte vectors (cg_cuda_map_vec: 4 floats,
 *                8 bf16/f16), each thread taking whole vectors, when their
 *                addresses are aligned (tested at run time: a misaligned
 *                view takes the scalar loop), then a scalar tail;
 *   ROW          one block per row; each reduction is a strided loop per
 *                thread, then warp shuffles and shared memory in a fixed
 *                tree; a row limit (causal mask) bounds the loops and
 *                zeroes the masked tail; per-row outputs written once;
 *   ROW, 1 row   (a reduction of a long vector: the loss mean, the gradient
 *                norm) many blocks each reduce a fixed slice into a module
 *                array of partials; the last block to finish (an atomic
 *                ticket) adds them in block order and writes the outputs;
 *   COL          32 columns per block (coalesced loads), row groups
 *                combined in shared memory in group order;
 *   SCATTER_ADD  every block zeroes a slice of the output; the last block
 *                to finish then walks the rows in order with one thread
 *                per column (distinct columns never collide).
 *
 * No float atomics anywhere: every sum has an order fixed by the kernel's
 * shape, so a kernel gives the same bits on every run. The launch
 * geometry (cg_cuda_launch_dims) is a function of the kernel alone. */
#include <string.h>

#include "codegen/attn.h"
#include "codegen/render_expr.h"
#include "support/util.h"

extern const char tgc_philox_src[];

#define MAP_BLOCK 256
#define MAP_MAX_GRID 8192   /* the grid-stride loop covers the rest */
#define MAP_BLOCKS_PER_SM 8 /* 2048 threads: an SM's most resident threads on sm_80 and sm_90 */
#define VEC_BYTES 16        /* the widest load of one thread (ld.global.v4.u32) */
#define VEC_MAX_LANES 8
#define ROW_MAX_BLOCK 512   /* 128 registers a thread: long expressions never spill */
#define ROW_MAX_GRID 65535  /* rows beyond it are strided */
#define RED_BLOCK 512       /* one-row reductions */
#define RED_MAX_GRID 1024   /* partials of a one-row reduction */
#define RED_PER_THREAD 8    /* elements a thread takes before another block is added */
#define COL_TILE 32         /* columns per block: one warp across them */
#define COL_MAX_GROUPS 16   /* row groups per block */
#define SCATTER_MAX_GRID 4096

/* ---- launch geometry --------------------------------------------------------- */

typedef enum row_mode { ROW_BLOCKS, ROW_SPLIT, ROW_ONE_BLOCK } row_mode;

static bool refs_acc(const kx *e)
{
    if (!e) return false;
    return e->kind == KX_ACC || refs_acc(e->a) || refs_acc(e->b) || refs_acc(e->c);
}

/* A one-row reduction is split over many blocks when its reductions are
 * independent of each other and it has no element outputs (every output is
 * a function of the reductions): then the blocks need no common barrier. */
static row_mode row_mode_of(const kernel *k)
{
    if (k->n > 1) return ROW_BLOCKS;
    for (int j = 0; j < k->nacc; j++)
        if (refs_acc(k->acc[j])) return ROW_ONE_BLOCK;
    for (int o = 0; o < k->nout; o++)
        if (!k->out[o].per_row) return ROW_ONE_BLOCK;
    return k->nacc ? ROW_SPLIT : ROW_ONE_BLOCK;
}

static unsigned clamp_grid(int64_t want, int64_t max)
{
    return (unsigned)(want < 1 ? 1 : want > max ? max : want);
}

/* Threads of a row block: a power of two from 32 that gives each thread
 * about four columns. */
static unsigned row_block(int64_t cols)
{
    unsigned b = 32;
    while (b < ROW_MAX_BLOCK && (int64_t)b * 4 < cols) b *= 2;
    return b;
}

static unsigned col_groups(int64_t rows)
{
    unsigned g = 1;
    while (g < COL_MAX_GROUPS && (int64_t)g < rows) g *= 2;
    return g;
}

static unsigned scatter_block(int64_t cols)
{
    int64_t b = (cols + 31) / 32 * 32;
    return (unsigned)(b < 32 ? 32 : b > 1024 ? 1024 : b);
}

/* ---- vectorised MAP kernels ------------------------------------------------------ */

static bool is_i(const kx *e) { return e && e->kind == KX_IDX && e->arg == 0; }

/* Marks the arguments e loads at index i. */
static void loads_at_i(const kx *e, bool *vec)
{
    if (!e) return;
    if (e->kind == KX_LOAD && is_i(e->a)) vec[e->arg] = true;
    loads_at_i(e->a, vec);
    loads_at_i(e->b, vec);
    loads_at_i(e->c, vec);
}

int cg_cuda_map_vec(const kernel *k, bool vec[KMAX_ARGS])
{
    memset(vec, 0, KMAX_ARGS * sizeof *vec);
    if (k->kind != KK_MAP || k->map_lo || k->nout < 1) return 0;
    for (int o = 0; o < k->nout; o++) {
        if (!is_i(k->out[o].idx) || vec[k->out[o].arg]) { memset(vec, 0, KMAX_ARGS * sizeof *vec); return 0; }
        vec[k->out[o].arg] = true;
    }
    for (int o = 0; o < k->nout; o++) loads_at_i(k->out[o].val, vec);
    int narrow = VEC_BYTES;
    for (int a = 0; a < k->nargs; a++) {
        if (!vec[a]) continue;
        if (k->args[a].numel < k->n) { memset(vec, 0, KMAX_ARGS * sizeof *vec); return 0; }
        int sz = ir_dtype_size(k->args[a].dtype);
        if (sz < narrow) narrow = sz;
    }
    int lanes = VEC_BYTES / narrow;
    if (lanes > VEC_MAX_LANES) lanes = VEC_MAX_LANES;
    if (k->n < lanes) { memset(vec, 0, KMAX_ARGS * sizeof *vec); return 0; }
    return lanes;
}

/* The alignment (bytes) argument a needs for its vectors of `lanes`. */
static int vec_align(const kernel *k, int a, int lanes)
{
    int b = lanes * ir_dtype_size(k->args[a].dtype);
    return b < VEC_BYTES ? b : VEC_BYTES;
}

void cg_cuda_launch_dims_for(const kernel *k, int sms, unsigned grid[3], unsigned block[3], unsigned *dyn_shmem)
{
    grid[1] = grid[2] = block[1] = block[2] = 1;
    *dyn_shmem = 0; /* shared arrays are static */
    switch (k->kind) {
    case KK_MAP: {
        /* Threads take whole vectors: the grid covers n / lanes of them,
         * and no more blocks than the device holds at once (the grid-stride
         * loop covers the rest). */
        bool vec[KMAX_ARGS];
        int lanes = cg_cuda_map_vec(k, vec);
        int64_t work = lanes ? (k->n + lanes - 1) / lanes : k->n;
        block[0] = MAP_BLOCK;
        grid[0] = clamp_grid((work + MAP_BLOCK - 1) / MAP_BLOCK,
                             sms > 0 ? (int64_t)sms * MAP_BLOCKS_PER_SM : MAP_MAX_GRID);
        return;
    }
    case KK_ROW:
        switch (row_mode_of(k)) {
        case ROW_BLOCKS:
            block[0] = row_block(k->cols);
            grid[0] = clamp_grid(k->n, ROW_MAX_GRID);
            return;
        case ROW_SPLIT: {
            const int64_t per_block = (int64_t)RED_BLOCK * RED_PER_THREAD;
            block[0] = RED_BLOCK;
            grid[0] = clamp_grid((k->cols + per_block - 1) / per_block, RED_MAX_GRID);
            return;
        }
        case ROW_ONE_BLOCK:
            block[0] = RED_BLOCK;
            grid[0] = 1;
            return;
        }
        return;
    case KK_COL:
        block[0] = COL_TILE * col_groups(k->n);
        grid[0] = clamp_grid((k->cols + COL_TILE - 1) / COL_TILE, INT32_MAX);
        return;
    case KK_ATTN: cg_attn_launch_dims(k, grid, block); return;
    case KK_SCATTER_ADD: {
        const kout *o = &k->out[0];
        block[0] = scatter_block(k->cols);
        int64_t per = (int64_t)block[0] * 4;
        grid[0] = clamp_grid((k->args[o->arg].numel + per - 1) / per, SCATTER_MAX_GRID);
        return;
    }
    }
}

void cg_cuda_launch_dims(const kernel *k, unsigned grid[3], unsigned block[3], unsigned *dyn_shmem)
{
    cg_cuda_launch_dims_for(k, 0, grid, block, dyn_shmem);
}

/* ---- the prelude --------------------------------------------------------------- */

/* NVRTC compiles without system headers: the fixed-width types, the
 * literal macros and INFINITY are defined here; the math functions are
 * NVRTC's built-ins. Unused helpers are marked so that NVRTC (which warns
 * about unreferenced static functions) stays silent. */
static void prelude(strbuf *sb)
{
    sb_puts(sb, "/* Generated by tgc: the CUDA kernels of one plan (compiled by NVRTC). */\n"
                "typedef signed char int8_t;\ntypedef unsigned char uint8_t;\ntypedef unsigned short uint16_t;\n"
                "typedef int int32_t;\n"
                "typedef unsigned int uint32_t;\ntypedef long long int64_t;\ntypedef unsigned long long uint64_t;\n"
                "#define INT64_C(x) x##LL\n#define UINT64_C(x) x##ULL\n"
                "#define INFINITY __int_as_float(0x7f800000)\n"
                "#define TGC_FN static __device__ __forceinline__ __attribute__((unused))\n\n");
    cg_rx_rt_struct(sb);
    /* Mixed precision: the 16-bit conversions of the C prelude, the same
     * integer code (bit for bit the same values on both targets). */
    sb_puts(sb, "TGC_FN uint32_t tgc_f2u(float x) { return __float_as_uint(x); }\n"
                "TGC_FN float tgc_u2f(uint32_t u) { return __uint_as_float(u); }\n");
    cg_rx_half_prelude(sb, "TGC_FN");
    cg_cuda_vec_prelude(sb);
    /* The attention kernels' warp-level mma.sync product (attn_cuda.c). */
    cg_attn_cuda_prelude(sb);
    /* Block reductions: a butterfly in each warp (every lane ends with the
     * same bits, addition being commutative), the warp results through
     * shared memory, a butterfly over them in warp 0. The tree is fixed by
     * the block size, so the result is the same on every run. sh holds 33
     * values; the last barrier lets the caller reuse it at once. */
    sb_puts(sb, "TGC_FN float tgc_clamp_lof(float x, float lo) { return x < lo ? lo : x; }\n"
                "TGC_FN double tgc_clamp_lo(double x, double lo) { return x < lo ? lo : x; }\n");
    sb_puts(sb, "TGC_FN float tgc_max(float a, float b) { return fmaxf(a, b); }\n"
                "TGC_FN double tgc_max(double a, double b) { return fmax(a, b); }\n"
                "struct tgc_add { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };\n"
                "struct tgc_fmax {\n"
                "    template <typename T> __device__ T operator()(T a, T b) const { return tgc_max(a, b); }\n};\n"
                "template <typename T, typename Op>\n"
                "static __device__ __forceinline__ T tgc_block_reduce(T v, T id, Op op, T *sh)\n{\n"
                "    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n"
                "    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
                "    if (lane == 0) sh[w] = v;\n    __syncthreads();\n    if (w == 0) {\n"
                "        v = lane < (int)(blockDim.x >> 5) ? sh[lane] : id;\n"
                "        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
                "        if (lane == 0) sh[32] = v;\n    }\n    __syncthreads();\n    v = sh[32];\n"
                "    __syncthreads();\n    return v;\n}\n\n");
    sb_puts(sb, "#define TGC_PHILOX_FN TGC_FN\n#define TGC_PHILOX_NO_INCLUDES\n");
    sb_puts(sb, tgc_philox_src);
}

/* The vectors of the MAP kernels: N elements of T moved as one (16 bytes:
 * ld.global.v4 / st.global.v4), aligned as their size up to 16 bytes. */
void cg_cuda_vec_prelude(strbuf *sb)
{
    sb_puts(sb, "template <typename T, int N> struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) tgc_vec {\n"
                "    T v[N];\n};\n\n");
}

/* ---- kernels ------------------------------------------------------------------- */

static void signature(cg_rx *r, const cg_bind *binds, unsigned block)
{
    const kernel *k = r->k;
    const char *restr = cg_rx_args_alias(binds, k->nargs) ? "" : "__restrict__ ";
    /* At least one block per SM: without the second bound ptxas aims at
     * full occupancy of small blocks (32 registers for 64 threads on
     * sm_80) and spills the longer expressions. */
    sb_printf(r->sb, "\n/* %s */\nextern \"C\" __global__ void __launch_bounds__(%u, 1) %s(", k->comment, block,
              k->name);
    for (int a = 0; a < k->nargs; a++) {
        const karg *g = &k->args[a];
        sb_printf(r->sb, "%s%s *%sa%d, ", g->output ? "" : "const ", cg_rx_ctype(g->dtype), restr, a);
    }
    /* The run-time scalars from their device copy (runtime/exec.h rt_dev):
     * a captured CUDA graph replays its launches' arguments as they were,
     * so nothing that changes per step may be one. */
    sb_puts(r->sb, "const tgc_rt *__restrict__ tgc_rtp)\n{\n    const tgc_rt rt = *tgc_rtp;\n    (void)rt;\n");
}

/* The vector loop of a MAP kernel: each thread takes whole vectors of
 * `lanes` elements while every vector argument is aligned, loads them,
 * computes the lanes (each with its own i, as the scalar loop), and stores
 * the outputs' vectors; the elements from n rounded down to lanes (all of
 * them where an argument is misaligned) are left to the scalar loop that
 * follows, which starts at tgc_nv * lanes. */
static void render_map_vec(cg_rx *r, const bool *vec, int lanes)
{
    const kernel *k = r->k;
    sb_puts(r->sb, "    const bool tgc_al = ");
    const char *sep = "";
    for (int a = 0; a < k->nargs; a++)
        if (vec[a]) {
            sb_printf(r->sb, "%s((unsigned long long)a%d & %du) == 0", sep, a, vec_align(k, a, lanes) - 1);
            sep = " && ";
        }
    sb_printf(r->sb, ";\n    const int64_t tgc_nv = tgc_al ? INT64_C(%lld) : 0;\n", (long long)(k->n / lanes));
    sb_puts(r->sb, "    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < tgc_nv; "
                   "q += (int64_t)gridDim.x * blockDim.x) {\n");
    sb_printf(r->sb, "        const int64_t i0 = q * %d;\n", lanes);
    bool read[KMAX_ARGS] = {0};
    for (int o = 0; o < k->nout; o++) loads_at_i(k->out[o].val, read);
    for (int a = 0; a < k->nargs; a++)
        if (vec[a] && read[a])
            sb_printf(r->sb, "        const tgc_vec<%s, %d> tgc_v%d = *(const tgc_vec<%s, %d> *)(a%d + i0);\n",
                      cg_rx_ctype(k->args[a].dtype), lanes, a, cg_rx_ctype(k->args[a].dtype), lanes, a);
    for (int o = 0; o < k->nout; o++)
        sb_printf(r->sb, "        tgc_vec<%s, %d> tgc_w%d;\n", cg_rx_ctype(k->args[k->out[o].arg].dtype), lanes, o);
    r->vec_arg = vec;
    for (int u = 0; u < lanes; u++) {
        r->vec_lane = u;
        sb_printf(r->sb, "        {\n            const int64_t i = i0 + %d;\n            (void)i;\n", u);
        for (int o = 0; o < k->nout; o++) {
            sb_printf(r->sb, "            const %s v%d = ", cg_rx_value_type(r, &k->args[k->out[o].arg]), o);
            cg_rx_expr(r, k->out[o].val);
            sb_puts(r->sb, ";\n");
        }
        for (int o = 0; o < k->nout; o++)
            sb_printf(r->sb, "            tgc_w%d.v[%d] = %s(v%d);\n", o, u, cg_rx_store_fn(&k->args[k->out[o].arg]), o);
        sb_puts(r->sb, "        }\n");
    }
    r->vec_arg = NULL;
    for (int o = 0; o < k->nout; o++)
        sb_printf(r->sb, "        *(tgc_vec<%s, %d> *)(a%d + i0) = tgc_w%d;\n",
                  cg_rx_ctype(k->args[k->out[o].arg].dtype), lanes, k->out[o].arg, o);
    sb_puts(r->sb, "    }\n");
}

static void render_map(cg_rx *r)
{
    const kernel *k = r->k;
    cg_rx_map_accs(r);
    bool vec[KMAX_ARGS];
    int lanes = cg_cuda_map_vec(k, vec);
    if (lanes) {
        render_map_vec(r, vec, lanes);
        sb_printf(r->sb, "    for (int64_t i = tgc_nv * %d + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
                         "i < INT64_C(%lld); i += (int64_t)gridDim.x * blockDim.x) {\n", lanes, (long long)k->n);
    } else if (k->map_lo) { /* a run-time range */
        sb_puts(r->sb, "    const int64_t hi = ");
        cg_rx_expr(r, k->map_hi);
        sb_puts(r->sb, ";\n    for (int64_t i = ");
        cg_rx_expr(r, k->map_lo);
        sb_puts(r->sb, " + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += (int64_t)gridDim.x * blockDim.x) {\n");
    } else {
        sb_printf(r->sb, "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < INT64_C(%lld); "
                         "i += (int64_t)gridDim.x * blockDim.x) {\n", (long long)k->n);
    }
    cg_rx_outputs(r, false, "        ");
    sb_puts(r->sb, "    }\n");
}

static bool any_elem_out(const kernel *k)
{
    for (int o = 0; o < k->nout; o++)
        if (!k->out[o].per_row) return true;
    return false;
}

static bool any_row_out(const kernel *k)
{
    for (int o = 0; o < k->nout; o++)
        if (k->out[o].per_row) return true;
    return false;
}

static void row_limit(cg_rx *r, const char *ind)
{
    sb_printf(r->sb, "%sconst int64_t lim = ", ind);
    if (r->k->row_limit) cg_rx_expr(r, r->k->row_limit);
    else sb_printf(r->sb, "INT64_C(%lld)", (long long)r->k->cols);
    sb_puts(r->sb, ";\n");
    /* NVRTC warns about an unused variable (a row of per-row outputs only). */
    if (!r->k->nacc && !any_elem_out(r->k)) sb_printf(r->sb, "%s(void)lim;\n", ind);
}

/* acc<j> of a row: this thread's columns from `first` in steps of
 * `stride`, in order, then the block tree. */
static void row_reduce(cg_rx *r, int j, const char *acct, const char *first, const char *stride, const char *ind)
{
    bool mx = r->k->red[j] == KRED_MAX;
    sb_printf(r->sb, "%s%s p%d = %s;\n", ind, acct, j, mx ? "-INFINITY" : "0");
    sb_printf(r->sb, "%sfor (int64_t c = %s; c < lim; c += %s) ", ind, first, stride);
    if (mx) sb_printf(r->sb, "p%d = tgc_max(p%d, (%s)", j, j, acct);
    else sb_printf(r->sb, "p%d += (", j);
    cg_rx_expr(r, r->k->acc[j]);
    sb_puts(r->sb, ");\n");
}

static void block_tree(cg_rx *r, const char *acct, const char *dst, const char *src, bool mx, const char *ind)
{
    sb_printf(r->sb, "%sconst %s %s = tgc_block_reduce<%s>(%s, %s, tgc_%s(), tgc_sh);\n", ind, acct, dst, acct, src,
              mx ? "-INFINITY" : "0", mx ? "fmax" : "add");
}

/* One block per row (rows strided over the grid), or the one block of a
 * one-row reduction that cannot be split. */
static void render_row_blocks(cg_rx *r, unsigned block, bool alias)
{
    const kernel *k = r->k;
    const char *acct = k->n == 1 ? "double" : r->T; /* as the C renderer */
    if (k->nacc) sb_printf(r->sb, "    __shared__ %s tgc_sh[33];\n", acct);
    sb_printf(r->sb, "    for (int64_t r = blockIdx.x; r < INT64_C(%lld); r += gridDim.x) {\n", (long long)k->n);
    row_limit(r, "        ");
    char stride[16], dst[16], src[16];
    snprintf(stride, sizeof stride, "%u", block);
    for (int j = 0; j < k->nacc; j++) {
        row_reduce(r, j, acct, "threadIdx.x", stride, "        ");
        snprintf(dst, sizeof dst, "acc%d", j);
        snprintf(src, sizeof src, "p%d", j);
        block_tree(r, acct, dst, src, k->red[j] == KRED_MAX, "        ");
    }
    if (any_elem_out(k)) {
        sb_printf(r->sb, "        for (int64_t c = threadIdx.x; c < lim; c += %u) {\n", block);
        cg_rx_outputs(r, false, "            ");
        sb_puts(r->sb, "        }\n");
        if (k->row_limit) {
            /* The masked tail: zeros, as the C renderer writes. */
            sb_printf(r->sb, "        for (int64_t c = lim + threadIdx.x; c < INT64_C(%lld); c += %u) {\n",
                      (long long)k->cols, block);
            for (int o = 0; o < k->nout; o++)
                if (!k->out[o].per_row) {
                    sb_printf(r->sb, "            a%d[", k->out[o].arg);
                    cg_rx_expr(r, k->out[o].idx);
                    sb_puts(r->sb, "] = 0;\n");
                }
            sb_puts(r->sb, "        }\n");
        }
    }
    if (any_row_out(k)) {
        /* With aliased arguments a per-row output may be what other
         * threads still read for their element outputs: C writes it after
         * the whole row, so it waits for the row here too. */
        if (alias && any_elem_out(k)) sb_puts(r->sb, "        __syncthreads();\n");
        sb_puts(r->sb, "        if (threadIdx.x == 0) {\n");
        cg_rx_outputs(r, true, "            ");
        sb_puts(r->sb, "        }\n");
    }
    sb_puts(r->sb, "    }\n");
}

/* A one-row reduction over many blocks: partials in a module array, the
 * last block (by an atomic ticket) adds them in block order. The ticket
 * counter returns to 0 for the next launch. */
static void render_row_split(cg_rx *r, unsigned grid)
{
    const kernel *k = r->k;
    const char *nm = k->name;
    sb_puts(r->sb, "    __shared__ double tgc_sh[33];\n    __shared__ bool tgc_last;\n    const int64_t r = 0;\n");
    sb_puts(r->sb, "    (void)r;\n");
    row_limit(r, "    ");
    char first[64], stride[64], src[16], dst[16];
    snprintf(first, sizeof first, "(int64_t)blockIdx.x * %d + threadIdx.x", RED_BLOCK);
    snprintf(stride, sizeof stride, "INT64_C(%lld)", (long long)grid * RED_BLOCK);
    for (int j = 0; j < k->nacc; j++) {
        bool mx = k->red[j] == KRED_MAX;
        row_reduce(r, j, "double", first, stride, "    ");
        snprintf(dst, sizeof dst, "b%d", j);
        snprintf(src, sizeof src, "p%d", j);
        block_tree(r, "double", dst, src, mx, "    ");
        sb_printf(r->sb, "    if (threadIdx.x == 0) %s_part[%d * %u + blockIdx.x] = b%d;\n", nm, j, grid, j);
    }
    sb_printf(r->sb, "    if (threadIdx.x == 0) {\n        __threadfence();\n"
                     "        tgc_last = atomicAdd(&%s_ticket, 1u) == %uu;\n    }\n    __syncthreads();\n"
                     "    if (!tgc_last) return;\n    __threadfence();\n", nm, grid - 1);
    for (int j = 0; j < k->nacc; j++) {
        bool mx = k->red[j] == KRED_MAX;
        sb_printf(r->sb, "    double q%d = %s;\n", j, mx ? "-INFINITY" : "0");
        sb_printf(r->sb, "    for (unsigned b = threadIdx.x; b < %uu; b += %d) ", grid, RED_BLOCK);
        if (mx) sb_printf(r->sb, "q%d = tgc_max(q%d, __ldcg(&%s_part[%d * %u + b]));\n", j, j, nm, j, grid);
        else sb_printf(r->sb, "q%d += __ldcg(&%s_part[%d * %u + b]);\n", j, nm, j, grid);
        snprintf(dst, sizeof dst, "acc%d", j);
        snprintf(src, sizeof src, "q%d", j);
        block_tree(r, "double", dst, src, mx, "    ");
    }
    sb_printf(r->sb, "    if (threadIdx.x == 0) {\n");
    cg_rx_outputs(r, true, "        ");
    sb_printf(r->sb, "        %s_ticket = 0;\n    }\n", nm);
}

/* Column sums: a warp across 32 columns (coalesced), `groups` row groups
 * each summing rows g, g + groups, ... in order, then group 0 adds the
 * groups' sums in group order. */
static void render_col(cg_rx *r, unsigned groups)
{
    const kernel *k = r->k;
    const kout *o = &k->out[0];
    if (groups > 1) sb_printf(r->sb, "    __shared__ %s tgc_col[%u][%d];\n", r->T, groups, COL_TILE);
    sb_printf(r->sb, "    const int64_t c = (int64_t)blockIdx.x * %d + (threadIdx.x & %d);\n", COL_TILE, COL_TILE - 1);
    sb_printf(r->sb, "    const unsigned g = threadIdx.x / %d;\n    %s acc = 0;\n", COL_TILE, r->T);
    sb_printf(r->sb, "    if (c < INT64_C(%lld))\n        for (int64_t r = g; r < INT64_C(%lld); r += %u) acc += ",
              (long long)k->cols, (long long)k->n, groups);
    cg_rx_expr(r, o->val);
    sb_puts(r->sb, ";\n");
    if (groups > 1) {
        sb_printf(r->sb, "    tgc_col[g][threadIdx.x & %d] = acc;\n    __syncthreads();\n", COL_TILE - 1);
        sb_printf(r->sb, "    if (g != 0) return;\n"
                         "    for (unsigned j = 1; j < %uu; j++) acc += tgc_col[j][threadIdx.x];\n", groups);
    } else {
        sb_puts(r->sb, "    (void)g;\n");
    }
    sb_printf(r->sb, "    if (c < INT64_C(%lld)) a%d[", (long long)k->cols, o->arg);
    cg_rx_expr(r, o->idx);
    sb_printf(r->sb, "] = %s(acc);\n", cg_rx_store_fn(&k->args[o->arg]));
}

/* The embedding gradient: zero the whole output (every block a slice),
 * then the last block adds the rows in order, one thread per column. As in
 * C, the sums are not rounded to 16 bits. */
static void render_scatter(cg_rx *r, unsigned grid, unsigned block)
{
    const kernel *k = r->k;
    const kout *o = &k->out[0];
    const char *nm = k->name;
    sb_printf(r->sb, "    __shared__ bool tgc_last;\n"
                     "    for (int64_t e = (int64_t)blockIdx.x * %u + threadIdx.x; e < INT64_C(%lld); "
                     "e += INT64_C(%lld)) a%d[e] = 0;\n", block, (long long)k->args[o->arg].numel, (long long)grid * block, o->arg);
    sb_printf(r->sb, "    __threadfence();\n    __syncthreads();\n"
                     "    if (threadIdx.x == 0) tgc_last = atomicAdd(&%s_ticket, 1u) == %uu;\n    __syncthreads();\n"
                     "    if (!tgc_last) return;\n    __threadfence();\n", nm, grid - 1);
    sb_printf(r->sb, "    for (int64_t c = threadIdx.x; c < INT64_C(%lld); c += %u)\n", (long long)k->cols, block);
    sb_printf(r->sb, "        for (int64_t r = 0; r < INT64_C(%lld); r++) {\n            const int64_t at = ",
              (long long)k->n);
    cg_rx_expr(r, o->idx);
    sb_printf(r->sb, ";\n            a%d[at] = __ldcg(&a%d[at]) + ", o->arg, o->arg);
    cg_rx_expr(r, o->val);
    sb_printf(r->sb, ";\n        }\n    if (threadIdx.x == 0) %s_ticket = 0;\n", nm);
}

static void render_kernel(strbuf *sb, const kernel *k, const cg_bind *binds)
{
    cg_rx r;
    cg_rx_init(&r, sb, k, CG_LANG_CUDA);
    unsigned grid[3], block[3], shmem;
    cg_cuda_launch_dims(k, grid, block, &shmem);
    bool split = k->kind == KK_ROW && row_mode_of(k) == ROW_SPLIT;
    /* Module state of the kernels that finish in their last block: zero
     * when the module loads, and left zero by every launch. */
    if (split || k->kind == KK_SCATTER_ADD) sb_printf(sb, "\n__device__ unsigned int %s_ticket;\n", k->name);
    if (split) sb_printf(sb, "__device__ double %s_part[%d * %u];\n", k->name, k->nacc, grid[0]);
    signature(&r, binds, block[0]);
    switch (k->kind) {
    case KK_MAP: render_map(&r); break;
    case KK_ROW:
        if (split) render_row_split(&r, grid[0]);
        else render_row_blocks(&r, block[0], cg_rx_args_alias(binds, k->nargs));
        break;
    case KK_COL: render_col(&r, block[0] / COL_TILE); break;
    case KK_SCATTER_ADD: render_scatter(&r, grid[0], block[0]); break;
    case KK_ATTN: cg_attn_render_cuda(&r); break;
    }
    sb_puts(sb, "}\n");
}

char *cg_render_cuda(const cg_program *p)
{
    strbuf sb;
    sb_init(&sb);
    prelude(&sb);
    for (int i = 0; i < p->nkernels; i++) render_kernel(&sb, p->kernels[i], p->binds[i]);
    return sb.s;
}
