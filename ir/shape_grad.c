/* Shape rules of the backward and optimizer ops (see shape.c for the
 * forward ones). Autodiff builds these nodes, so a failure here usually
 * means a gradient rule is wrong; the messages still name both shapes. */
#include <stdarg.h>
#include <stdio.h>

#include "ir_internal.h"

#define TYPE_BUF IR_TYPE_BUF
#define ty ir_shape_ty
#define fail ir_shape_fail

static bool same_type(const ir_node *n, const ir_node *a, const ir_node *b, char *err, size_t errlen)
{
    char ba[TYPE_BUF], bb[TYPE_BUF];
    if (a->dtype == b->dtype && ir_shape_eq(&a->shape, &b->shape)) return true;
    return fail(err, errlen, "%s: operands differ: %s vs %s", ir_op_name(n->op), ty(a, ba), ty(b, bb));
}

bool shape_same3(ir_node *n, char *err, size_t errlen)
{
    if (!same_type(n, n->src[0], n->src[1], err, errlen) || !same_type(n, n->src[0], n->src[2], err, errlen))
        return false;
    n->dtype = n->src[0]->dtype;
    n->shape = n->src[0]->shape;
    return true;
}

bool shape_matmul(ir_node *n, char *err, size_t errlen)
{
    const ir_node *a = n->src[0], *b = n->src[1];
    char ba[TYPE_BUF], bb[TYPE_BUF];
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    if (a->dtype != b->dtype || !ir_dtype_is_float(a->dtype) || a->shape.rank < 1 || b->shape.rank < 1)
        return fail(err, errlen, "matmul: operands %s and %s must be floating point of one dtype", ty(a, ba), ty(b, bb));
    ir_shape s;
    if (ta) {
        bool ok = !tb && a->shape.rank == b->shape.rank;
        for (int i = 0; ok && i < a->shape.rank - 1; i++) ok = a->shape.dim[i] == b->shape.dim[i];
        if (!ok)
            return fail(err, errlen, "matmul: transpose_a contracts the leading dims of %s and %s, which differ",
                        ty(a, ba), ty(b, bb));
        s = (ir_shape){.rank = 2, .dim = {a->shape.dim[a->shape.rank - 1], b->shape.dim[b->shape.rank - 1]}};
    } else {
        int64_t k = a->shape.dim[a->shape.rank - 1];
        if (b->shape.rank != 2 || b->shape.dim[tb ? 1 : 0] != k)
            return fail(err, errlen, "matmul: %s does not fit %s%s", ty(a, ba), ty(b, bb), tb ? "^T" : "");
        s = a->shape;
        s.dim[s.rank - 1] = b->shape.dim[tb ? 0 : 1];
    }
    n->dtype = a->dtype;
    n->shape = s;
    return true;
}

bool shape_colsum(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    if (x->shape.rank < 1 || !ir_dtype_is_float(x->dtype))
        return fail(err, errlen, "colsum: input %s must be a floating-point tensor", ty(x, bx));
    n->dtype = x->dtype;
    n->shape = (ir_shape){.rank = 1, .dim = {x->shape.dim[x->shape.rank - 1]}};
    return true;
}

bool shape_embedding_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *t = n->src[0], *dy = n->src[1];
    char bt[TYPE_BUF], bd[TYPE_BUF];
    bool ok = !ir_dtype_is_float(t->dtype) && ir_dtype_is_float(dy->dtype) && dy->shape.rank == t->shape.rank + 1;
    for (int i = 0; ok && i < t->shape.rank; i++) ok = t->shape.dim[i] == dy->shape.dim[i];
    if (!ok) return fail(err, errlen, "embedding_back: gradient %s does not fit tokens %s", ty(dy, bd), ty(t, bt));
    int64_t v = ir_attr_int(n, "vocab");
    if (v < 1 || v > IR_MAX_NUMEL) return fail(err, errlen, "embedding_back: vocab must be positive, got %lld", (long long)v);
    n->dtype = dy->dtype;
    n->shape = (ir_shape){.rank = 2, .dim = {v, dy->shape.dim[dy->shape.rank - 1]}};
    return true;
}

bool shape_norm_dx(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dy = n->src[0], *x = n->src[1], *w = n->src[2];
    char bx[TYPE_BUF], bw[TYPE_BUF];
    if (!same_type(n, dy, x, err, errlen)) return false;
    if (w->shape.rank != 1 || w->shape.dim[0] != x->shape.dim[x->shape.rank - 1])
        return fail(err, errlen, "%s: weight %s does not fit %s", ir_op_name(n->op), ty(w, bw), ty(x, bx));
    n->dtype = x->dtype;
    n->shape = x->shape;
    return true;
}

bool shape_norm_dw(ir_node *n, char *err, size_t errlen)
{
    if (!same_type(n, n->src[0], n->src[1], err, errlen)) return false;
    return shape_colsum(n, err, errlen);
}

bool shape_pad(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis"), start = ir_attr_int(n, "start"), total = ir_attr_int(n, "total");
    if (axis < 0 || axis >= x->shape.rank || start < 0 || total > IR_MAX_NUMEL || start > total - x->shape.dim[axis])
        return fail(err, errlen, "pad: %s does not fit at [%lld, ...) of %lld along axis %lld", ty(x, bx),
                    (long long)start, (long long)total, (long long)axis);
    n->dtype = x->dtype;
    n->shape = x->shape;
    n->shape.dim[axis] = total;
    return true;
}

bool shape_repeat_interleave_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis"), r = ir_attr_int(n, "repeats");
    if (axis < 0 || axis >= x->shape.rank || r < 1 || x->shape.dim[axis] % r)
        return fail(err, errlen, "repeat_interleave_back: axis %lld of %s is not %lld repeats of its slices",
                    (long long)axis, ty(x, bx), (long long)r);
    n->dtype = x->dtype;
    n->shape = x->shape;
    n->shape.dim[axis] /= r;
    return true;
}

bool shape_broadcast(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int count;
    const int64_t *d = ir_attr_ints(n, "shape", &count);
    if (x->shape.rank != 0) return fail(err, errlen, "broadcast: operand %s must be a scalar", ty(x, bx));
    n->dtype = x->dtype;
    n->shape.rank = count;
    for (int i = 0; i < count; i++) {
        if (d[i] <= 0 || d[i] > IR_MAX_NUMEL) return fail(err, errlen, "broadcast: dimension %d is %lld", i, (long long)d[i]);
        n->shape.dim[i] = d[i];
    }
    return true;
}

bool shape_cross_entropy_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dl = n->src[0], *l = n->src[1];
    char bd[TYPE_BUF];
    if (dl->shape.rank != 0) return fail(err, errlen, "cross_entropy_back: d loss %s must be a scalar", ty(dl, bd));
    ir_node tmp = *n;
    tmp.src = n->src + 1;
    tmp.nsrc = 2;
    if (!shape_cross_entropy(&tmp, err, errlen)) return false;
    n->dtype = l->dtype;
    n->shape = l->shape;
    return true;
}

bool shape_global_norm(ir_node *n, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    for (int i = 0; i < n->nsrc; i++)
        if (n->src[i]->dtype != n->src[0]->dtype || !ir_dtype_is_float(n->src[0]->dtype))
            return fail(err, errlen, "global_norm: operand %d is %s; all must share one float dtype", i,
                        ty(n->src[i], b));
    n->dtype = n->src[0]->dtype;
    n->shape = (ir_shape){.rank = 0};
    return true;
}

bool shape_optimizer(ir_node *n, char *err, size_t errlen)
{
    char bp[TYPE_BUF], bg[TYPE_BUF];
    if (n->nsrc % 2 != 1)
        return fail(err, errlen, "%s: expects k params, k gradients and a norm, got %d operands", ir_op_name(n->op),
                    n->nsrc);
    int k = n->nsrc / 2;
    for (int i = 0; i < k; i++) {
        const ir_node *p = n->src[i], *g = n->src[k + i];
        if (!(p->flags & IR_NF_PARAM))
            return fail(err, errlen, "%s: operand %d (%%%s) is not a parameter", ir_op_name(n->op), i, p->name);
        if (p->dtype != g->dtype || !ir_shape_eq(&p->shape, &g->shape))
            return fail(err, errlen, "%s: gradient %s does not match parameter %%%s %s", ir_op_name(n->op),
                        ty(g, bg), p->name, ty(p, bp));
    }
    if (n->src[n->nsrc - 1]->shape.rank != 0)
        return fail(err, errlen, "%s: the last operand (the gradient norm) must be a scalar", ir_op_name(n->op));
    n->dtype = n->src[n->nsrc - 1]->dtype;
    n->shape = (ir_shape){.rank = 0};
    return true;
}

/* ---- vocab-parallel cross-entropy ------------------------------------------ */

/* [..., V] -> [...]: one value per row (and a matching second operand). */
bool shape_vp_rows(ir_node *n, char *err, size_t errlen)
{
    const ir_node *l = n->src[0];
    char bl[TYPE_BUF], bm[TYPE_BUF];
    if (!ir_dtype_is_float(l->dtype) || l->shape.rank < 2)
        return fail(err, errlen, "%s: logits %s must be a float tensor of rank >= 2", ir_op_name(n->op), ty(l, bl));
    ir_shape s = l->shape;
    s.rank--;
    if (n->nsrc == 2 && (n->src[1]->dtype != l->dtype || !ir_shape_eq(&n->src[1]->shape, &s)))
        return fail(err, errlen, "%s: row values %s do not fit logits %s", ir_op_name(n->op), ty(n->src[1], bm),
                    ty(l, bl));
    n->dtype = l->dtype;
    n->shape = s;
    return true;
}

bool shape_vp_target(ir_node *n, char *err, size_t errlen)
{
    ir_node tmp = *n;
    tmp.nsrc = 1;
    if (!shape_vp_rows(&tmp, err, errlen)) return false;
    char bt[TYPE_BUF];
    const ir_node *t = n->src[1];
    if (ir_dtype_is_float(t->dtype) || !ir_shape_eq(&t->shape, &tmp.shape))
        return fail(err, errlen, "%s: labels %s do not fit the logits' rows", ir_op_name(n->op), ty(t, bt));
    n->dtype = tmp.dtype;
    n->shape = tmp.shape;
    return true;
}

/* (logits, labels, max, sumexp, target) -> the mean loss. */
bool shape_vp_loss(ir_node *n, char *err, size_t errlen)
{
    ir_node tmp = *n;
    tmp.nsrc = 2;
    if (!shape_vp_target(&tmp, err, errlen)) return false;
    for (int i = 2; i < 5; i++)
        if (n->src[i]->dtype != tmp.dtype || !ir_shape_eq(&n->src[i]->shape, &tmp.shape)) {
            char b[TYPE_BUF];
            return fail(err, errlen, "%s: operand %d %s does not fit the logits' rows", ir_op_name(n->op), i,
                        ty(n->src[i], b));
        }
    if (ir_attr_int(n, "vocab") < 1) return fail(err, errlen, "%s: vocab must be positive", ir_op_name(n->op));
    n->dtype = tmp.dtype;
    n->shape = (ir_shape){.rank = 0};
    return true;
}

/* (d loss, logits, labels, max, sumexp) -> d logits. */
bool shape_vp_back(ir_node *n, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    if (n->src[0]->shape.rank != 0) return fail(err, errlen, "%s: d loss %s must be a scalar", ir_op_name(n->op), ty(n->src[0], b));
    ir_node tmp = *n;
    tmp.src = n->src + 1;
    tmp.nsrc = 2;
    if (!shape_vp_target(&tmp, err, errlen)) return false;
    n->dtype = n->src[1]->dtype;
    n->shape = n->src[1]->shape;
    return true;
}
