/* Shape and FLOP rules of the fused ops (ops.def, "fused ops"), which the
 * fuse pass makes from the patterns they replace (docs/fusion.md):
 *
 *   %y  = bias_gelu(%x, %b)                 gelu(x + b)
 *   %dx = bias_gelu_back(%dy, %x, %b)       dy * gelu'(x + b)
 *   %y  = bias_dropout_add(%x, %b, %r)      r + dropout(x + b)
 *
 * b is [n] on x [..., n]; every other operand has x's type, and so has the
 * result. */
#include <stdarg.h>
#include <stdio.h>

#include "ir_internal.h"

#define TYPE_BUF IR_TYPE_BUF
#define ty ir_shape_ty
#define fail ir_shape_fail

/* x is a float tensor of rank >= 1 and b its bias [n]. */
static bool need_bias(const ir_node *n, const ir_node *x, const ir_node *b, char *err, size_t errlen)
{
    char bx[TYPE_BUF], bb[TYPE_BUF];
    if (!ir_dtype_is_float(x->dtype) || x->shape.rank < 1)
        return fail(err, errlen, "%s: input must be a floating-point tensor of rank 1 or more, got %s",
                    ir_op_name(n->op), ty(x, bx));
    if (b->shape.rank != 1 || b->shape.dim[0] != x->shape.dim[x->shape.rank - 1] || b->dtype != x->dtype)
        return fail(err, errlen, "%s: bias %s does not match the last dimension of %s", ir_op_name(n->op),
                    ty(b, bb), ty(x, bx));
    return true;
}

/* y has x's type (the gradient, or the residual). */
static bool need_same(const ir_node *n, const ir_node *x, const ir_node *y, const char *what, char *err,
                      size_t errlen)
{
    char bx[TYPE_BUF], by[TYPE_BUF];
    if (y->dtype == x->dtype && ir_shape_eq(&y->shape, &x->shape)) return true;
    return fail(err, errlen, "%s: %s %s differs from the input %s", ir_op_name(n->op), what, ty(y, by), ty(x, bx));
}

static bool result_of(ir_node *n, const ir_node *x)
{
    n->dtype = x->dtype;
    n->shape = x->shape;
    return true;
}

bool shape_bias_act(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0], *b = n->src[1];
    return need_bias(n, x, b, err, errlen) && result_of(n, x);
}

bool shape_bias_gelu_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dy = n->src[0], *x = n->src[1], *b = n->src[2];
    return need_bias(n, x, b, err, errlen) && need_same(n, x, dy, "gradient", err, errlen) && result_of(n, x);
}

bool shape_bias_dropout_add(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0], *b = n->src[1], *r = n->src[2];
    double p = ir_attr_float(n, "p");
    if (!(p >= 0.0 && p < 1.0)) return fail(err, errlen, "bias_dropout_add: p must be in [0, 1), got %g", p);
    return need_bias(n, x, b, err, errlen) && need_same(n, x, r, "residual", err, errlen) && result_of(n, x);
}

/* The sum of what the replaced ops count: gelu 8 and the bias add 1 per
 * element; bias, mask and residual add 1 each. */
int64_t flops_bias_gelu(const ir_node *n) { return 9 * ir_shape_numel(&n->shape); }
int64_t flops_bias_dropout_add(const ir_node *n) { return 3 * ir_shape_numel(&n->shape); }

/* ---- the fused LM head + cross-entropy (the lmhead pass) -------------------------- */

/* x [..., h] float, w [V, h] of x's dtype, labels [...] (x's shape without
 * its last dim) of an integer type. */
static bool lm_head_operands(const ir_node *n, const ir_node *x, const ir_node *w, const ir_node *t,
                             const ir_node *b, char *err, size_t errlen)
{
    char bx[TYPE_BUF], bw[TYPE_BUF], bt[TYPE_BUF], bb[TYPE_BUF];
    const char *op = ir_op_name(n->op);
    if (!ir_dtype_is_float(x->dtype) || x->shape.rank < 2)
        return fail(err, errlen, "%s: input must be a floating-point tensor of rank 2 or more, got %s", op, ty(x, bx));
    int r = x->shape.rank;
    if (w->dtype != x->dtype || w->shape.rank != 2 || w->shape.dim[1] != x->shape.dim[r - 1])
        return fail(err, errlen, "%s: weight %s is not [vocab, %lld] of the input's dtype (input %s)", op, ty(w, bw),
                    (long long)x->shape.dim[r - 1], ty(x, bx));
    bool ok = !ir_dtype_is_float(t->dtype) && t->shape.rank == r - 1;
    for (int i = 0; ok && i < r - 1; i++) ok = t->shape.dim[i] == x->shape.dim[i];
    if (!ok)
        return fail(err, errlen, "%s: labels %s do not match the input %s (expected integers of the input's shape "
                    "without its last dimension)", op, ty(t, bt), ty(x, bx));
    if (b && (b->dtype != x->dtype || b->shape.rank != 1 || b->shape.dim[0] != w->shape.dim[0]))
        return fail(err, errlen, "%s: bias %s is not [%lld] of the input's dtype", op, ty(b, bb),
                    (long long)w->shape.dim[0]);
    if (ir_attr_int(n, "chunk") < 0)
        return fail(err, errlen, "%s: chunk must be 0 (the rule) or positive, got %lld", op,
                    (long long)ir_attr_int(n, "chunk"));
    return true;
}

bool shape_lm_head_ce(ir_node *n, char *err, size_t errlen)
{
    if (!lm_head_operands(n, n->src[0], n->src[1], n->src[2], n->nsrc > 3 ? n->src[3] : NULL, err, errlen))
        return false;
    n->dtype = n->src[0]->dtype;
    n->shape = (ir_shape){.rank = 0};
    return true;
}

/* (dy, x, w, labels, f[, b]): dy a scalar of the loss's type, f the lm_head_ce it differentiates. */
bool shape_lm_head_ce_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dy = n->src[0], *f = n->src[4];
    char b1[TYPE_BUF];
    const ir_node *b = n->nsrc > 5 ? n->src[5] : NULL;
    if (!lm_head_operands(n, n->src[1], n->src[2], n->src[3], b, err, errlen)) return false;
    if (f->op != IR_OP_LM_HEAD_CE || f->src[0] != n->src[1] || f->src[1] != n->src[2] || f->src[2] != n->src[3] ||
        (f->nsrc > 3 ? f->src[3] : NULL) != b)
        return fail(err, errlen, "lm_head_ce_back: operand 5 must be the lm_head_ce of operands 2-4 (and 6), got %s",
                    ir_op_name(f->op));
    if (dy->shape.rank != 0 || dy->dtype != f->dtype)
        return fail(err, errlen, "lm_head_ce_back: d loss %s must be a scalar of the loss's dtype", ty(dy, b1));
    n->dtype = n->src[1]->dtype;
    n->shape = n->src[1]->shape;
    return true;
}

int64_t flops_lm_head_ce(const ir_node *n)
{
    const ir_node *x = n->src[0], *w = n->src[1];
    double rows = (double)ir_shape_numel(&x->shape) / (double)w->shape.dim[1], v = (double)w->shape.dim[0];
    double f = 2.0 * rows * v * (double)w->shape.dim[1] + 4.0 * rows * v; /* the head's GEMM, then cross_entropy's */
    return f > 9e18 ? INT64_MAX : (int64_t)f;
}

/* The logits recomputed, then dx and dw: three GEMMs of the head's size,
 * and cross_entropy_back's 4 per logit. */
int64_t flops_lm_head_ce_back(const ir_node *n)
{
    const ir_node *x = n->src[1], *w = n->src[2];
    double rows = (double)ir_shape_numel(&x->shape) / (double)w->shape.dim[1], v = (double)w->shape.dim[0];
    double f = 6.0 * rows * v * (double)w->shape.dim[1] + 4.0 * rows * v;
    return f > 9e18 ? INT64_MAX : (int64_t)f;
}
