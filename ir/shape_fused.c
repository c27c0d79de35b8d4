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
