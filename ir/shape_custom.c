/* Shape rules of the custom-op placeholders (ops.def, "custom ops with a
 * user-written backward"; docs/autodiff.md):
 *
 *   %c  = custom_out(%y, %x0, ..., %xk)   forward: %y; gradient: the body
 *   %ct = cotangent(%c)                   the gradient flowing into %c
 *   %d  = custom_grad(%dx, %c) index=i    %dx is the gradient of %x<i>
 *
 * Each has the type of its first operand; cotangent and custom_grad check
 * that they refer to a custom_out, and custom_grad that %dx has the type of
 * the operand it is the gradient of. */
#include <stdarg.h>
#include <stdio.h>

#include "ir_internal.h"

#define TYPE_BUF IR_TYPE_BUF
#define ty ir_shape_ty
#define fail ir_shape_fail

static void same_as(ir_node *n, const ir_node *x)
{
    n->dtype = x->dtype;
    n->shape = x->shape;
}

static bool need_custom_out(const ir_node *n, const ir_node *c, char *err, size_t errlen)
{
    if (c->op == IR_OP_CUSTOM_OUT) return true;
    return fail(err, errlen, "%s: %%%s is a %s, not a custom_out", ir_op_name(n->op), c->name ? c->name : "?",
                ir_op_name(c->op));
}

bool shape_custom_out(ir_node *n, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    if (!ir_dtype_is_float(n->src[0]->dtype))
        return fail(err, errlen, "custom_out: the result must be floating point, got %s", ty(n->src[0], b));
    same_as(n, n->src[0]);
    return true;
}

bool shape_cotangent(ir_node *n, char *err, size_t errlen)
{
    if (!need_custom_out(n, n->src[0], err, errlen)) return false;
    same_as(n, n->src[0]);
    return true;
}

bool shape_custom_grad(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dx = n->src[0], *c = n->src[1];
    char bd[TYPE_BUF], bx[TYPE_BUF];
    if (!need_custom_out(n, c, err, errlen)) return false;
    int64_t i = ir_attr_int(n, "index");
    if (i < 0 || i >= c->nsrc - 1)
        return fail(err, errlen, "custom_grad: index %lld out of range: %%%s has %d differentiable operand%s",
                    (long long)i, c->name ? c->name : "?", c->nsrc - 1, c->nsrc == 2 ? "" : "s");
    const ir_node *x = c->src[1 + i];
    if (dx->dtype != x->dtype || !ir_shape_eq(&dx->shape, &x->shape))
        return fail(err, errlen, "custom_grad: gradient %s does not match operand %lld of %%%s, %s",
                    ty(dx, bd), (long long)i, c->name ? c->name : "?", ty(x, bx));
    same_as(n, dx);
    return true;
}
