/* Kernel IR: what every non-GEMM op of the graph lowers to, before a
 * renderer turns it into C (CPU) or CUDA C (GPU).
 *
 * A kernel is one of four loop shapes over buffers (its arguments):
 *
 *   MAP          for i < n:               out_k[idx_k(i)] = val_k(i)
 *   ROW          for r < rows:            acc_j = reduce_{c < cols} e_j(r, c, acc_<j)
 *                                         out_k[idx_k(r, c)] = val_k(r, c, acc) for c < cols
 *                                         (or once per row when the output is per-row)
 *   COL          for c < cols:            out[c] = sum_{r < rows} val(r, c)
 *   SCATTER_ADD  out = 0; for r < rows:   out[idx(r, c)] += val(r, c) for c < cols
 *
 * and one kind that is not a loop shape: ATTN, fused attention (kattn
 * below), whose renderings attn_c.c and attn_cuda.c write whole.
 *
 * Values are expression trees (kx) over loop indices, loads from
 * arguments at computed indices, reduction results, run-time scalars
 * (step, learning rate, ...), math, comparisons and the dropout keep
 * factor. Expressions are typed: float (the kernel's compute type, f32 or
 * f64) or int (int64). Indices are int expressions, so gathers,
 * broadcasts, strided copies, causal masks and padding masks are all loads
 * at computed indices: the op semantics live in the emitters (emit.c), the
 * loop scaffolding in the renderers, and nothing else.
 */
#ifndef TGC_KIR_H
#define TGC_KIR_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "support/arena.h"

typedef enum kx_kind {
    KX_CONST,  /* f or i */
    KX_IDX,    /* loop index: 0 = i (MAP) or r (ROW/COL/SCATTER), 1 = c */
    KX_LOAD,   /* arg[a] */
    KX_ACC,    /* ROW reduction result `arg` */
    KX_RT,     /* run-time scalar `arg` (KRT_*) */
    KX_UN,     /* op(a) */
    KX_BIN,    /* op(a, b) */
    KX_SEL,    /* a ? b : c (a is int) */
    KX_KEEP,   /* dropout keep factor at element index a: 0 or 1/(1-p) */
} kx_kind;

typedef enum kx_type { KT_F, KT_I } kx_type;

typedef enum kx_unop {
    KU_NEG, KU_EXP, KU_LOG, KU_SQRT, KU_RSQRT, KU_TANH, KU_ERF, KU_RECIP, KU_ABS,
    KU_SIN, KU_COS, KU_TOF /* int -> float */, KU_TOI /* float -> int */, KU_NOT,
} kx_unop;

typedef enum kx_binop {
    KB_ADD, KB_SUB, KB_MUL, KB_DIV, KB_MAX, KB_MIN, KB_POW,
    KB_IDIV, KB_IMOD, KB_LT, KB_LE, KB_EQ, KB_NE, KB_AND, KB_OR,
} kx_binop;

/* Run-time scalars every kernel can read (tgc_rt in the generated code). */
typedef enum kx_rt_slot {
    KRT_STEP,   /* int: the training step, from 0 */
    KRT_SEED,   /* int: the run's seed */
    KRT_LR,     /* float: the learning rate of this step */
    KRT_WD,     /* float: the weight decay of this step */
    KRT_TP_RANK, /* int: this rank's position in its tensor-parallel group */
    KRT_TP_SIZE, /* int: the tensor-parallel degree t */
    KRT_OPT_STEP, /* int: optimizer steps taken (skipped fp16 steps excluded) */
    KRT_LOSS_SCALE, /* float: the loss scale (1 but with --fp16) */
    KRT_SHARD_LO, /* int: the distributed optimizer: the first element of this rank's shard of the flat buffers */
    KRT_SHARD_HI, /* int: ... and one past its last */
    KRT_EVAL,     /* int: 1 in an evaluation's forward (dropout keeps everything), 0 in training */
    KRT_POS,      /* int: a KV-cached decoding run: the position of its first token (kv_cache, pos_offset) */
    KRT_COUNT
} kx_rt_slot;

typedef struct kx {
    kx_kind kind;
    kx_type type;
    int op;      /* kx_unop / kx_binop */
    int arg;     /* argument, index, accumulator or rt slot */
    double f;    /* CONST float; KEEP: p */
    int64_t i;   /* CONST int; KEEP: the dropout key */
    struct kx *a, *b, *c;
} kx;

typedef enum kk_kind { KK_MAP, KK_ROW, KK_COL, KK_SCATTER_ADD, KK_ATTN } kk_kind;
typedef enum kred { KRED_SUM, KRED_MAX } kred;

#define KMAX_ARGS 16
#define KMAX_ACC 8
#define KMAX_OUT 4

typedef struct karg {
    ir_dtype dtype; /* of the buffer: bf16/f16 (mixed precision) are loaded into the compute type and stored
                       rounded to nearest even (codegen/render_expr.h) */
    int64_t numel;
    bool output;
} karg;

typedef struct kout {
    int arg;       /* argument written */
    kx *idx;       /* element index (int) */
    kx *val;       /* value (float or int, converted to the arg's dtype) */
    bool per_row;  /* ROW: written once per row, after the reductions */
} kout;

/* KK_ATTN: fused attention, flash-attention style (codegen/emit_attn.c,
 * docs/attention.md "Kernels"). Not a loop shape over expressions: the
 * renderers' attn_c.c / attn_cuda.c write the whole kernel from these
 * parameters. q [b, n, s_q, d]; k [b, g, s_k, d]; v [b, g, s_k, dv]; query
 * head h reads key/value head h / (n / g). */
typedef enum katt_pass {
    KATT_FWD, /* out, lse from q, k, v[, mask] */
    KATT_DKV, /* dk, dv from dy, q, k, v, lse, D[, mask]: one program per (b, kv head, key tile) */
    KATT_DQ,  /* dq from dy, q, k, v, lse, D[, mask]: one program per (b, head, query tile) */
} katt_pass;

typedef struct kattn {
    katt_pass pass;
    int64_t b, n, g, sq, sk, d, dv;
    double scale, p; /* p: dropout on the probabilities (0: none) */
    int64_t key;     /* the dropout key */
    bool causal, pos_offset;
    /* Dropout by global element index of the [b, n_global, s_q, s_k]
     * probabilities: this rank's block of one outer row along the split dim
     * (local index l -> (l / block) * block * t + rank * block + l % block),
     * 0 when unsplit. */
    int64_t shard_block;
    /* How q, k, v (and dq, dk, dv) and the output (and dy) lie in their
     * arguments (the node's layout and out, ir/ops.def): IR_ATTN_BNSD
     * [b, heads, s, d] rows; IR_ATTN_SBND [s, b, heads, d]; IR_ATTN_PACKED
     * one [s, b, n, 3d] argument, q | k | v (then q, k and v are one
     * argument, and dk and dv one too); out_sbnd: the output and dy
     * [s_q, b, n, d]. */
    int layout;
    bool out_sbnd;
    /* Argument indices, -1 where absent. lse and dd (D_i = dO_i . O_i) are
     * per query row [b, n, s_q]. */
    int q, k, v, mask, out, lse, dy, dd, dq, dk, dvo;
} kattn;

typedef struct kernel {
    kk_kind kind;
    const char *name;    /* C identifier, unique in a plan */
    const char *comment; /* what it computes (the IR node), for readers */
    ir_dtype ctype;      /* float compute type: f32 or f64 */
    int nargs;
    karg args[KMAX_ARGS];
    int64_t n;           /* MAP: elements; ROW/COL/SCATTER: rows */
    int64_t cols;        /* ROW/COL/SCATTER: columns */
    int nacc;
    kred red[KMAX_ACC];
    kx *acc[KMAX_ACC];
    int nout;
    kout out[KMAX_OUT];
    /* ROW: when set, row r covers only columns c < row_limit(r): the
     * reductions skip the rest and the element outputs there are 0 (an
     * implicit causal mask costs nothing). */
    kx *row_limit;
    /* MAP: when set, only elements map_lo <= i < map_hi run (a run-time
     * range: the distributed optimizer's shard). */
    kx *map_lo, *map_hi;
    kattn attn; /* KK_ATTN */
} kernel;

/* Expression builders; nodes live in the arena. */
typedef struct kb {
    arena *mem;
    kernel *k;
} kb;

kx *kx_f(kb *b, double v);
kx *kx_i(kb *b, int64_t v);
kx *kx_idx(kb *b, int which);
kx *kx_load(kb *b, int arg, kx *idx);
kx *kx_acc(kb *b, int j);
kx *kx_rt(kb *b, kx_rt_slot which);
kx *kx_un(kb *b, kx_unop op, kx *a);
kx *kx_bin(kb *b, kx_binop op, kx *a, kx *c);
kx *kx_sel(kb *b, kx *cond, kx *a, kx *c);
kx *kx_keep(kb *b, kx *idx, double p, int64_t key);
/* Shorthands. */
#define KADD(b, x, y) kx_bin(b, KB_ADD, x, y)
#define KSUB(b, x, y) kx_bin(b, KB_SUB, x, y)
#define KMUL(b, x, y) kx_bin(b, KB_MUL, x, y)
#define KDIV(b, x, y) kx_bin(b, KB_DIV, x, y)

int kernel_add_arg(kernel *k, ir_dtype t, int64_t numel, bool output);
void kernel_add_out(kernel *k, int arg, kx *idx, kx *val, bool per_row);
int kernel_add_acc(kernel *k, kred red, kx *e);

#endif
