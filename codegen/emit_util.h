/* Shared by the emitters (emit*.c): the per-node codegen context and the
 * shorthands that keep each op's emitter a few lines of math. */
#ifndef TGC_EMIT_UTIL_H
#define TGC_EMIT_UTIL_H
#include "codegen/codegen.h"

typedef struct cg_ctx {
    cg_program *p;
    const ir_graph *g;
    cg_target target;
    const ir_node *n; /* the node being lowered */
    kernel *k;        /* the kernel being built */
    kb b;
    int nk;           /* kernels emitted for this node so far */
    int64_t ws;       /* workspace bytes used by this node so far */
} cg_ctx;

typedef bool (*cg_emit_fn)(cg_ctx *c);
extern const cg_emit_fn cg_emitters[IR_OP_COUNT];

/* Starts a kernel for c->n: arguments 0..nsrc-1 are its operands, nsrc its
 * result. rows/cols as in kir.h. */
kernel *cg_kernel(cg_ctx *c, kk_kind kind, int64_t n, int64_t cols);
/* Starts a kernel with no arguments (the emitter binds them itself). */
kernel *cg_kernel_bare(cg_ctx *c, kk_kind kind, int64_t n, int64_t cols);
int cg_arg_node(cg_ctx *c, const ir_node *x, int64_t numel, bool output);
/* Result `index` of multi-result x (ir/results.def; 0 is x's own value), bound at its offset in x's storage. */
int cg_arg_result(cg_ctx *c, const ir_node *x, int index, bool output);
/* A workspace argument private to this node (sequential execution lets
 * every node reuse the same workspace). */
int cg_arg_ws(cg_ctx *c, ir_dtype t, int64_t numel, bool output);
/* Reads workspace at a byte offset an earlier kernel of this node wrote. */
int cg_arg_ws_at(cg_ctx *c, ir_dtype t, int64_t numel, int64_t at);
int cg_arg_state(cg_ctx *c, int slot, const ir_node *first, int64_t numel);

/* Appends a collective instruction for c->n (16-bit values: maybe staged
 * through fp32 with kernels around it); returns the collective's index in
 * c->p->instrs. */
int cg_comm_instr(cg_ctx *c, cg_comm_kind kind, int64_t count, cg_bind src, cg_bind dst);
/* The same, returning the collective's instruction (valid until the next
 * instruction is pushed) to set its flags: never write
 * `c->p->instrs[cg_comm_instr(...)]`, whose array may be read before the
 * call reallocates it. */
cg_instr *cg_comm_push(cg_ctx *c, cg_comm_kind kind, int64_t count, cg_bind src, cg_bind dst);
/* Appends a GEMM bound by the emitter (program.c, cg_gemm_bound). */
void cg_gemm_bound(cg_ctx *c, cg_gemm g);
/* Reserves workspace bytes for c->n; returns the byte offset. */
int64_t cg_ws_reserve(cg_ctx *c, int64_t bytes);

/* The dropout key of node n: its `key` attribute, or (a forward-only
 * graph) a hash of its name, as autodiff would have fixed it. */
int64_t cg_dropout_key(const ir_node *n);

/* The float type a node computes in. */
ir_dtype cg_ctype(const ir_node *n);

#define NUMEL(x) ir_shape_numel(&(x)->shape)
#define LAST(x) ((x)->shape.dim[(x)->shape.rank - 1])
#define B (&c->b)
#define IDX0 kx_idx(B, 0)
#define IDX1 kx_idx(B, 1)
#define F(v) kx_f(B, v)
#define I(v) kx_i(B, v)
#define LD(arg, idx) kx_load(B, arg, idx)
#define ACC(j) kx_acc(B, j)
#define ADD(x, y) kx_bin(B, KB_ADD, x, y)
#define SUB(x, y) kx_bin(B, KB_SUB, x, y)
#define MUL(x, y) kx_bin(B, KB_MUL, x, y)
#define DIV(x, y) kx_bin(B, KB_DIV, x, y)
#define IDIV(x, y) kx_bin(B, KB_IDIV, x, y)
#define IMOD(x, y) kx_bin(B, KB_IMOD, x, y)
#define MAXF(x, y) kx_bin(B, KB_MAX, x, y)
#define MINF(x, y) kx_bin(B, KB_MIN, x, y)
#define LT(x, y) kx_bin(B, KB_LT, x, y)
#define LE(x, y) kx_bin(B, KB_LE, x, y)
#define EQ(x, y) kx_bin(B, KB_EQ, x, y)
#define NE(x, y) kx_bin(B, KB_NE, x, y)
#define AND(x, y) kx_bin(B, KB_AND, x, y)
#define SEL(p, x, y) kx_sel(B, p, x, y)
#define UN(op, x) kx_un(B, op, x)
/* row-major element r * cols + col */
#define RC(r, cols, col) ADD(MUL(r, I(cols)), col)

#endif
