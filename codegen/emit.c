/* Emitters: the semantics of every non-GEMM op, as kernel IR. This file
 * and emit_nn.c are the single source of what an op computes on every
 * backend; the renderers only add loop scaffolding. */
#include <math.h>
#include <string.h>

#include "emit_util.h"
#include "support/util.h"

/* ---- elementwise ------------------------------------------------------------ */

static kx *x0(cg_ctx *c) { return LD(0, IDX0); }
static kx *x1(cg_ctx *c) { return LD(1, IDX0); }

static bool map1(cg_ctx *c, kx *val)
{
    kernel_add_out(c->k, c->n->nsrc, IDX0, val, false);
    return true;
}

#define MAP_BEGIN(c) cg_kernel(c, KK_MAP, NUMEL((c)->n), 0)

static bool emit_add(cg_ctx *c) { MAP_BEGIN(c); return map1(c, ADD(x0(c), x1(c))); }
static bool emit_sub(cg_ctx *c) { MAP_BEGIN(c); return map1(c, SUB(x0(c), x1(c))); }
static bool emit_mul(cg_ctx *c) { MAP_BEGIN(c); return map1(c, MUL(x0(c), x1(c))); }

static bool emit_bias_add(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, ADD(x0(c), LD(1, IMOD(IDX0, I(LAST(c->n))))));
}

static bool emit_scale(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, MUL(x0(c), F(ir_attr_float(c->n, "alpha"))));
}

static kx *sigmoid(cg_ctx *c, kx *x) { return DIV(F(1.0), ADD(F(1.0), UN(KU_EXP, UN(KU_NEG, x)))); }

#define GELU_K0 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_K1 0.044715

static kx *gelu_tanh_inner(cg_ctx *c, kx *x)
{
    return UN(KU_TANH, MUL(F(GELU_K0), ADD(x, MUL(F(GELU_K1), MUL(x, MUL(x, x))))));
}

static bool is_tanh(const ir_node *n) { return ir_attr_sym(n, "approx")[0] == 't'; }

static kx *gelu_of(cg_ctx *c, kx *x)
{
    kx *t = is_tanh(c->n) ? gelu_tanh_inner(c, x) : UN(KU_ERF, MUL(x, F(0.70710678118654752440)));
    return MUL(MUL(F(0.5), x), ADD(F(1.0), t));
}

/* gelu'(x) */
static kx *gelu_grad_of(cg_ctx *c, kx *x)
{
    kx *d;
    if (is_tanh(c->n)) {
        kx *t = gelu_tanh_inner(c, x);
        kx *du = MUL(F(GELU_K0), ADD(F(1.0), MUL(F(3.0 * GELU_K1), MUL(x, x))));
        d = ADD(MUL(F(0.5), ADD(F(1.0), t)), MUL(MUL(F(0.5), x), MUL(SUB(F(1.0), MUL(t, t)), du)));
    } else {
        kx *cdf = MUL(F(0.5), ADD(F(1.0), UN(KU_ERF, MUL(x, F(0.70710678118654752440)))));
        kx *pdf = MUL(F(0.3989422804014327), UN(KU_EXP, MUL(F(-0.5), MUL(x, x))));
        d = ADD(cdf, MUL(x, pdf));
    }
    return d;
}

static bool emit_gelu(cg_ctx *c) { MAP_BEGIN(c); return map1(c, gelu_of(c, x0(c))); }
static bool emit_gelu_back(cg_ctx *c) { MAP_BEGIN(c); return map1(c, MUL(x0(c), gelu_grad_of(c, x1(c)))); }

/* Operand `arg` at element i plus the bias b[i % n] (operand `bias`), in
 * the order the unfused linear's bias kernel adds them. */
static kx *plus_bias(cg_ctx *c, int arg, int bias)
{
    return ADD(LD(arg, IDX0), LD(bias, IMOD(IDX0, I(LAST(c->n)))));
}

static bool emit_bias_gelu(cg_ctx *c) { MAP_BEGIN(c); return map1(c, gelu_of(c, plus_bias(c, 0, 1))); }

static bool emit_bias_gelu_back(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, MUL(x0(c), gelu_grad_of(c, plus_bias(c, 1, 2))));
}

static kx *dsilu(cg_ctx *c, kx *x)
{
    kx *s = sigmoid(c, x);
    return MUL(s, ADD(F(1.0), MUL(x, SUB(F(1.0), s))));
}

static bool emit_silu(cg_ctx *c) { MAP_BEGIN(c); return map1(c, MUL(x0(c), sigmoid(c, x0(c)))); }
static bool emit_silu_back(cg_ctx *c) { MAP_BEGIN(c); return map1(c, MUL(x0(c), dsilu(c, x1(c)))); }

static bool emit_swiglu(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, MUL(MUL(x0(c), sigmoid(c, x0(c))), x1(c)));
}

static bool emit_swiglu_dgate(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, MUL(MUL(x0(c), LD(2, IDX0)), dsilu(c, x1(c))));
}

/* The dropout key is fixed by autodiff; a forward-only graph derives it
 * from the node name the same way. */
int64_t cg_dropout_key(const ir_node *n)
{
    int64_t key = ir_attr_int(n, "key");
    if (key) return key;
    uint64_t h = hash_bytes(n->name, strlen(n->name), HASH_SEED) & 0x7fffffffu;
    return h ? (int64_t)h : 1;
}

#define TP_RANK kx_rt(B, KRT_TP_RANK)
#define TP_SIZE kx_rt(B, KRT_TP_SIZE)

/* The index in the whole (unsplit) tensor of local element i of a value
 * split along dim d over the TP group: masks and initial values depend on
 * it alone, so every partition draws the same numbers. */
static kx *global_index(cg_ctx *c, const ir_node *n, kx *i)
{
    int d = n->shard.dim;
    if (d < 0) return i;
    int64_t inner = 1;
    for (int k = d + 1; k < n->shape.rank; k++) inner *= n->shape.dim[k];
    int64_t block = n->shape.dim[d] * inner; /* this rank's part of one outer row */
    kx *outer = IDIV(i, I(block)), *rest = IMOD(i, I(block));
    return ADD(MUL(outer, MUL(I(block), TP_SIZE)), ADD(MUL(TP_RANK, I(block)), rest));
}

/* x times the keep factor of element i of this node (x itself for p = 0). */
static kx *dropped(cg_ctx *c, kx *x)
{
    double p = ir_attr_float(c->n, "p");
    if (p == 0.0) return x;
    return MUL(x, kx_keep(B, global_index(c, c->n, IDX0), p, cg_dropout_key(c->n)));
}

static bool emit_dropout(cg_ctx *c) { MAP_BEGIN(c); return map1(c, dropped(c, x0(c))); }

/* residual + dropout(x + b): the residual first, as add(%residual, %dropout)
 * computes it (either order gives the same float sum). */
static bool emit_bias_dropout_add(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, ADD(LD(2, IDX0), dropped(c, plus_bias(c, 0, 1))));
}

/* tp_scatter: this rank's block of the last dim. */
static bool emit_tp_scatter(cg_ctx *c)
{
    int64_t nl = LAST(c->n), n = nl * ir_attr_int(c->n, "size");
    MAP_BEGIN(c);
    kx *row = IDIV(IDX0, I(nl)), *col = IMOD(IDX0, I(nl));
    return map1(c, LD(0, ADD(MUL(row, I(n)), ADD(MUL(TP_RANK, I(nl)), col))));
}

/* sp_split: this rank's block of dim 0 (contiguous). */
static bool emit_sp_split(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, LD(0, ADD(MUL(TP_RANK, I(NUMEL(c->n))), IDX0)));
}

/* tp_gather: all-gather the blocks (rank-major) into the workspace, then
 * interleave them along the last dim. */
static bool emit_tp_gather(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int64_t nl = LAST(x), t = ir_attr_int(n, "size"), rows = NUMEL(x) / nl;
    ir_dtype st = ir_storage_dtype(c->g, x); /* the blocks travel as stored */
    int64_t ws = cg_ws_reserve(c, NUMEL(n) * ir_dtype_size(st));
    cg_comm_instr(c, CG_ALL_GATHER, NUMEL(x), (cg_bind){CG_BIND_NODE, x->id, 0}, (cg_bind){CG_BIND_WS, -1, ws});
    cg_kernel_bare(c, KK_MAP, NUMEL(n), 0);
    int a = cg_arg_ws_at(c, st, NUMEL(n), ws);
    int out = cg_arg_node(c, n, NUMEL(n), true);
    kx *row = IDIV(IDX0, I(nl * t)), *j = IMOD(IDX0, I(nl * t));
    kx *src = ADD(MUL(IDIV(j, I(nl)), I(rows * nl)), ADD(MUL(row, I(nl)), IMOD(j, I(nl))));
    kernel_add_out(c->k, out, IDX0, LD(a, src), false);
    return true;
}

/* The seed of the backward pass (d loss / d loss = 1, the node autodiff
 * flags `seed`) is the loss scale: 1, or fp16's dynamic scale; the
 * optimizer divides it out again. */
static bool is_loss_seed(const cg_ctx *c) { return (c->n->flags & IR_NF_SEED) && ir_attr_float(c->n, "value") == 1.0; }

static bool emit_full(cg_ctx *c)
{
    MAP_BEGIN(c);
    if (is_loss_seed(c)) return map1(c, kx_rt(B, KRT_LOSS_SCALE));
    return map1(c, F(ir_attr_float(c->n, "value")));
}

static bool emit_arange(cg_ctx *c)
{
    const ir_node *n = c->n;
    int axis = (int)ir_attr_int(n, "axis");
    int64_t stride = 1;
    for (int i = axis + 1; i < n->shape.rank; i++) stride *= n->shape.dim[i];
    MAP_BEGIN(c);
    kx *v = IMOD(IDIV(IDX0, I(stride)), I(n->shape.dim[axis]));
    return map1(c, ir_attr_bool(n, "pos_offset") ? ADD(v, kx_rt(B, KRT_POS)) : v);
}

static bool emit_broadcast(cg_ctx *c)
{
    MAP_BEGIN(c);
    return map1(c, MUL(LD(0, I(0)), F(ir_attr_float(c->n, "alpha"))));
}

/* ---- data movement ------------------------------------------------------------- */

static void strides_of(const ir_shape *s, int64_t *st)
{
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= 0; i--) { st[i] = acc; acc *= s->dim[i]; }
}

static bool emit_permute(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int np;
    const int64_t *perm = ir_attr_ints(n, "perm", &np);
    int64_t ost[IR_MAX_RANK], ist[IR_MAX_RANK];
    strides_of(&n->shape, ost);
    strides_of(&x->shape, ist);
    MAP_BEGIN(c);
    kx *src = I(0);
    for (int k = 0; k < np; k++) {
        kx *coord = IMOD(IDIV(IDX0, I(ost[k])), I(n->shape.dim[k]));
        src = ADD(src, MUL(coord, I(ist[perm[k]])));
    }
    return map1(c, LD(0, src));
}

/* A copy for a reshape that cannot alias its operand (a gradient that must
 * land in the gradient buffer). */
static bool emit_copy(cg_ctx *c) { MAP_BEGIN(c); return map1(c, x0(c)); }

static int64_t inner_of(const ir_shape *s, int axis)
{
    int64_t inner = 1;
    for (int i = axis + 1; i < s->rank; i++) inner *= s->dim[i];
    return inner;
}

static bool emit_slice(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int axis = (int)ir_attr_int(n, "axis");
    int64_t start = ir_attr_int(n, "start"), len = ir_attr_int(n, "len");
    int64_t inner = inner_of(&x->shape, axis), dim = x->shape.dim[axis];
    MAP_BEGIN(c);
    kx *o = IDIV(IDX0, I(len * inner)), *rest = IMOD(IDX0, I(len * inner));
    kx *src = ADD(MUL(o, I(dim * inner)), ADD(I(start * inner), rest));
    return map1(c, LD(0, src));
}

static bool emit_pad(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int axis = (int)ir_attr_int(n, "axis");
    int64_t start = ir_attr_int(n, "start"), total = ir_attr_int(n, "total");
    int64_t inner = inner_of(&x->shape, axis), len = x->shape.dim[axis];
    MAP_BEGIN(c);
    kx *o = IDIV(IDX0, I(total * inner)), *a = IMOD(IDIV(IDX0, I(inner)), I(total));
    kx *in = IMOD(IDX0, I(inner));
    kx *ok = AND(LE(I(start), a), LT(a, I(start + len)));
    kx *src = ADD(MUL(o, I(len * inner)), ADD(MUL(SUB(a, I(start)), I(inner)), in));
    return map1(c, SEL(ok, LD(0, src), F(0.0)));
}

/* Result slice a along axis (of g * r) reads slice a / r of x (g). */
static bool emit_repeat_interleave(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int axis = (int)ir_attr_int(n, "axis");
    int64_t r = ir_attr_int(n, "repeats"), inner = inner_of(&x->shape, axis), g = x->shape.dim[axis];
    MAP_BEGIN(c);
    kx *o = IDIV(IDX0, I(g * r * inner)), *a = IMOD(IDIV(IDX0, I(inner)), I(g * r));
    kx *src = ADD(MUL(o, I(g * inner)), ADD(MUL(IDIV(a, I(r)), I(inner)), IMOD(IDX0, I(inner))));
    return map1(c, LD(0, src));
}

/* Result slice a along axis (of g) sums slices [a r, a r + r) of dy: r
 * loads, one kernel over the result. */
static bool emit_repeat_interleave_back(cg_ctx *c)
{
    const ir_node *n = c->n;
    int axis = (int)ir_attr_int(n, "axis");
    int64_t r = ir_attr_int(n, "repeats"), inner = inner_of(&n->shape, axis), g = n->shape.dim[axis];
    MAP_BEGIN(c);
    kx *o = IDIV(IDX0, I(g * inner)), *a = IMOD(IDIV(IDX0, I(inner)), I(g));
    kx *base = ADD(MUL(o, I(g * r * inner)), ADD(MUL(a, I(r * inner)), IMOD(IDX0, I(inner))));
    kx *sum = LD(0, base);
    for (int64_t j = 1; j < r; j++) sum = ADD(sum, LD(0, ADD(base, I(j * inner))));
    return map1(c, sum);
}

/* x's positions [0, len) along axis go to [rt.pos, rt.pos + len) of the
 * cache (the node's buffer, `total` positions); the rest stays as earlier
 * runs left it. */
static bool emit_kv_cache(cg_ctx *c)
{
    const ir_node *n = c->n, *x = n->src[0];
    int axis = (int)ir_attr_int(n, "axis");
    int64_t inner = inner_of(&x->shape, axis), len = x->shape.dim[axis], total = n->shape.dim[axis];
    cg_kernel(c, KK_MAP, NUMEL(x), 0);
    kx *o = IDIV(IDX0, I(len * inner)), *a = IMOD(IDIV(IDX0, I(inner)), I(len));
    kx *at = ADD(MUL(o, I(total * inner)), ADD(MUL(ADD(a, kx_rt(B, KRT_POS)), I(inner)), IMOD(IDX0, I(inner))));
    kernel_add_out(c->k, 1, at, x0(c), false);
    return true;
}

static bool emit_concat(cg_ctx *c)
{
    const ir_node *n = c->n;
    int axis = (int)ir_attr_int(n, "axis");
    int64_t inner = inner_of(&n->shape, axis), total = n->shape.dim[axis];
    MAP_BEGIN(c);
    kx *o = IDIV(IDX0, I(total * inner)), *a = IMOD(IDIV(IDX0, I(inner)), I(total));
    kx *in = IMOD(IDX0, I(inner));
    int64_t off = 0;
    kx *val = F(0.0);
    /* Build the select chain from the last operand backwards. */
    int64_t offs[64];
    for (int j = 0; j < n->nsrc; j++) { offs[j] = off; off += n->src[j]->shape.dim[axis]; }
    for (int j = n->nsrc - 1; j >= 0; j--) {
        int64_t len = n->src[j]->shape.dim[axis];
        kx *src = ADD(MUL(o, I(len * inner)), ADD(MUL(SUB(a, I(offs[j])), I(inner)), in));
        val = j == n->nsrc - 1 ? LD(j, src) : SEL(LT(a, I(offs[j] + len)), LD(j, src), val);
    }
    return map1(c, val);
}

static bool emit_embedding(cg_ctx *c)
{
    const ir_node *n = c->n, *w = n->src[1];
    int64_t h = LAST(n), v = w->shape.dim[0];
    MAP_BEGIN(c);
    kx *t = LD(0, IDIV(IDX0, I(h)));
    /* A vocab-split weight holds rows [rank * v, rank * v + v). */
    if (w->shard.dim == 0) t = SUB(t, MUL(TP_RANK, I(v)));
    kx *ok = AND(LE(I(0), t), LT(t, I(v)));
    return map1(c, SEL(ok, LD(1, ADD(MUL(t, I(h)), IMOD(IDX0, I(h)))), F(0.0)));
}

static bool emit_embedding_back(cg_ctx *c)
{
    const ir_node *n = c->n, *t = n->src[0];
    int64_t h = LAST(n), v = n->shape.dim[0];
    /* A 16-bit gradient (mixed precision) is summed in fp32 in the
     * workspace and rounded once into its buffer. */
    bool half = ir_storage_dtype(c->g, n) != n->dtype;
    cg_kernel_bare(c, KK_SCATTER_ADD, NUMEL(t), h);
    int ta = cg_arg_node(c, t, NUMEL(t), false), dy = cg_arg_node(c, n->src[1], NUMEL(n->src[1]), false);
    int out = half ? cg_arg_ws(c, n->dtype, NUMEL(n), true) : cg_arg_node(c, n, NUMEL(n), true);
    int64_t ws = c->p->binds[c->p->nkernels - 1][out].offset;
    kx *tok = LD(ta, IDX0);
    if (n->shard.dim == 0) tok = SUB(tok, MUL(TP_RANK, I(v)));
    kx *ok = AND(LE(I(0), tok), LT(tok, I(v)));
    kx *idx = SEL(ok, ADD(MUL(tok, I(h)), IDX1), IDX1);
    kernel_add_out(c->k, out, idx, SEL(ok, LD(dy, RC(IDX0, h, IDX1)), F(0.0)), false);
    if (half) {
        cg_kernel_bare(c, KK_MAP, NUMEL(n), 0);
        int from = cg_arg_ws_at(c, n->dtype, NUMEL(n), ws), to = cg_arg_node(c, n, NUMEL(n), true);
        kernel_add_out(c->k, to, IDX0, LD(from, IDX0), false);
    }
    return true;
}

static bool emit_rope(cg_ctx *c)
{
    const ir_node *n = c->n;
    int64_t d = n->shape.dim[3], half = d / 2, per_pos = n->shape.dim[1] * n->shape.dim[2] * d;
    double base = ir_attr_float(n, "base");
    bool inverse = ir_attr_bool(n, "inverse");
    MAP_BEGIN(c);
    kx *row = IDIV(IDX0, I(per_pos));
    if (ir_attr_bool(n, "pos_offset")) row = ADD(row, kx_rt(B, KRT_POS));
    kx *j = IMOD(IDX0, I(d)), *pos = UN(KU_TOF, row);
    kx *k = UN(KU_TOF, IMOD(j, I(half)));
    kx *freq = UN(KU_EXP, MUL(k, F(-2.0 * log(base) / (double)d)));
    double factor = ir_attr_float(n, "scaling_factor");
    if (factor != 1.0) {
        /* Llama 3.1 (Megatron's _apply_scaling, HF's rope_type llama3):
         * wavelengths 2 pi / f shorter than L / high keep f, longer than
         * L / low take f / factor, and between them the blend (1 - s) f /
         * factor + s f with s = (L f / (2 pi) - low) / (high - low): one
         * expression, s clamped to [0, 1]. */
        double lo = ir_attr_float(n, "low_freq_factor"), hi = ir_attr_float(n, "high_freq_factor");
        double L = (double)ir_attr_int(n, "original_max_pos");
        const double two_pi = 6.283185307179586476925;
        kx *s = MUL(SUB(MUL(freq, F(L / two_pi)), F(lo)), F(1.0 / (hi - lo)));
        s = MINF(MAXF(s, F(0.0)), F(1.0));
        freq = MUL(freq, ADD(MUL(SUB(F(1.0), s), F(1.0 / factor)), s));
    }
    kx *theta = MUL(pos, freq);
    kx *lo = LT(j, I(half));
    kx *partner = SEL(lo, UN(KU_NEG, LD(0, ADD(IDX0, I(half)))), LD(0, SUB(IDX0, I(half))));
    kx *sn = UN(KU_SIN, theta);
    if (inverse) sn = UN(KU_NEG, sn);
    return map1(c, ADD(MUL(x0(c), UN(KU_COS, theta)), MUL(partner, sn)));
}

/* ---- reductions to a scalar ------------------------------------------------------- */

static bool reduce_all(cg_ctx *c, double scale)
{
    const ir_node *x = c->n->src[0];
    cg_kernel(c, KK_ROW, 1, NUMEL(x));
    int a = kernel_add_acc(c->k, KRED_SUM, LD(0, IDX1));
    kernel_add_out(c->k, 1, I(0), MUL(ACC(a), F(scale)), true);
    return true;
}

static bool emit_sum(cg_ctx *c) { return reduce_all(c, 1.0); }
static bool emit_mean(cg_ctx *c) { return reduce_all(c, 1.0 / (double)NUMEL(c->n->src[0])); }

static bool emit_colsum(cg_ctx *c)
{
    const ir_node *x = c->n->src[0];
    int64_t cols = LAST(x);
    cg_kernel(c, KK_COL, NUMEL(x) / cols, cols);
    kernel_add_out(c->k, 1, IDX1, LD(0, RC(IDX0, cols, IDX1)), false);
    return true;
}

extern bool cg_emit_softmax(cg_ctx *c);
extern bool cg_emit_softmax_back(cg_ctx *c);
extern bool cg_emit_layernorm(cg_ctx *c);
extern bool cg_emit_layernorm_dx(cg_ctx *c);
extern bool cg_emit_layernorm_dw(cg_ctx *c);
extern bool cg_emit_rmsnorm(cg_ctx *c);
extern bool cg_emit_rmsnorm_dx(cg_ctx *c);
extern bool cg_emit_rmsnorm_dw(cg_ctx *c);
extern bool cg_emit_cross_entropy(cg_ctx *c);
extern bool cg_emit_cross_entropy_back(cg_ctx *c);
extern bool cg_emit_global_norm(cg_ctx *c);
extern bool cg_emit_adamw(cg_ctx *c);
extern bool cg_emit_sgd(cg_ctx *c);
extern bool cg_emit_dropout_back(cg_ctx *c);
extern bool cg_emit_vp_max(cg_ctx *c);
extern bool cg_emit_vp_sumexp(cg_ctx *c);
extern bool cg_emit_vp_target(cg_ctx *c);
extern bool cg_emit_vp_cross_entropy(cg_ctx *c);
extern bool cg_emit_vp_cross_entropy_back(cg_ctx *c);
extern bool cg_emit_attention(cg_ctx *c);
extern bool cg_emit_attention_back(cg_ctx *c);
extern bool cg_emit_lm_head_ce(cg_ctx *c);
extern bool cg_emit_lm_head_ce_back(cg_ctx *c);

bool cg_emit_dropout_back(cg_ctx *c) { return emit_dropout(c); }
bool cg_emit_copy(cg_ctx *c) { return emit_copy(c); }

/* The backend's op table: an empty entry is an op this backend cannot run
 * with a generated kernel (GEMMs and views are handled in program.c). */
const cg_emit_fn cg_emitters[IR_OP_COUNT] = {
    [IR_OP_FULL] = emit_full,
    [IR_OP_ARANGE] = emit_arange,
    [IR_OP_EMBEDDING] = emit_embedding,
    [IR_OP_LAYERNORM] = cg_emit_layernorm,
    [IR_OP_RMSNORM] = cg_emit_rmsnorm,
    [IR_OP_ADD] = emit_add,
    [IR_OP_SUB] = emit_sub,
    [IR_OP_MUL] = emit_mul,
    [IR_OP_BIAS_ADD] = emit_bias_add,
    [IR_OP_SCALE] = emit_scale,
    [IR_OP_GELU] = emit_gelu,
    [IR_OP_SILU] = emit_silu,
    [IR_OP_SWIGLU] = emit_swiglu,
    [IR_OP_DROPOUT] = emit_dropout,
    [IR_OP_SOFTMAX] = cg_emit_softmax,
    [IR_OP_ROPE] = emit_rope,
    [IR_OP_ATTENTION] = cg_emit_attention,
    [IR_OP_ATTENTION_BACK] = cg_emit_attention_back,
    [IR_OP_PERMUTE] = emit_permute,
    [IR_OP_SLICE] = emit_slice,
    [IR_OP_CONCAT] = emit_concat,
    [IR_OP_REPEAT_INTERLEAVE] = emit_repeat_interleave,
    [IR_OP_REPEAT_INTERLEAVE_BACK] = emit_repeat_interleave_back,
    [IR_OP_CROSS_ENTROPY] = cg_emit_cross_entropy,
    [IR_OP_SUM] = emit_sum,
    [IR_OP_MEAN] = emit_mean,
    [IR_OP_COLSUM] = emit_colsum,
    [IR_OP_EMBEDDING_BACK] = emit_embedding_back,
    [IR_OP_LAYERNORM_DX] = cg_emit_layernorm_dx,
    [IR_OP_LAYERNORM_DW] = cg_emit_layernorm_dw,
    [IR_OP_RMSNORM_DX] = cg_emit_rmsnorm_dx,
    [IR_OP_RMSNORM_DW] = cg_emit_rmsnorm_dw,
    [IR_OP_GELU_BACK] = emit_gelu_back,
    [IR_OP_SILU_BACK] = emit_silu_back,
    [IR_OP_SWIGLU_DGATE] = emit_swiglu_dgate,
    [IR_OP_DROPOUT_BACK] = cg_emit_dropout_back,
    [IR_OP_SOFTMAX_BACK] = cg_emit_softmax_back,
    [IR_OP_PAD] = emit_pad,
    [IR_OP_KV_CACHE] = emit_kv_cache,
    [IR_OP_BROADCAST] = emit_broadcast,
    [IR_OP_CROSS_ENTROPY_BACK] = cg_emit_cross_entropy_back,
    [IR_OP_BIAS_GELU] = emit_bias_gelu,
    [IR_OP_BIAS_GELU_BACK] = emit_bias_gelu_back,
    [IR_OP_BIAS_DROPOUT_ADD] = emit_bias_dropout_add,
    [IR_OP_GLOBAL_NORM] = cg_emit_global_norm,
    [IR_OP_ADAMW] = cg_emit_adamw,
    [IR_OP_SGD] = cg_emit_sgd,
    [IR_OP_TP_SCATTER] = emit_tp_scatter,
    [IR_OP_TP_GATHER] = emit_tp_gather,
    [IR_OP_SP_SPLIT] = emit_sp_split,
    [IR_OP_VP_MAX] = cg_emit_vp_max,
    [IR_OP_VP_SUMEXP] = cg_emit_vp_sumexp,
    [IR_OP_VP_TARGET] = cg_emit_vp_target,
    [IR_OP_VP_CROSS_ENTROPY] = cg_emit_vp_cross_entropy,
    [IR_OP_VP_CROSS_ENTROPY_BACK] = cg_emit_vp_cross_entropy_back,
    [IR_OP_LM_HEAD_CE] = cg_emit_lm_head_ce,
    [IR_OP_LM_HEAD_CE_BACK] = cg_emit_lm_head_ce_back,
};
