/* Shape rules: one function per row of ops.def that computes a node's dtype
 * and shape from its operands and attributes, or says why they do not fit.
 * Messages name both types involved, as users need to see them. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir_internal.h"

#define TYPE_BUF IR_TYPE_BUF
#define ty ir_shape_ty
#define fail ir_shape_fail

const char *ir_shape_ty(const ir_node *n, char buf[IR_TYPE_BUF])
{
    ir_type_str(n->dtype, &n->shape, buf, IR_TYPE_BUF);
    return buf;
}

bool ir_shape_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

static void set_type(ir_node *n, ir_dtype t, const ir_shape *s)
{
    n->dtype = t;
    n->shape = *s;
}

static int64_t last_dim(const ir_node *n) { return n->shape.dim[n->shape.rank - 1]; }

static bool need_float(const ir_node *n, const ir_node *x, const char *what, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    if (ir_dtype_is_float(x->dtype)) return true;
    return fail(err, errlen, "%s: %s must be floating point, got %s", ir_op_name(n->op), what, ty(x, b));
}

static bool need_int(const ir_node *n, const ir_node *x, const char *what, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    if (!ir_dtype_is_float(x->dtype)) return true;
    return fail(err, errlen, "%s: %s must be an integer tensor, got %s", ir_op_name(n->op), what, ty(x, b));
}

static bool need_rank(const ir_node *n, const ir_node *x, const char *what, int lo, char *err, size_t errlen)
{
    char b[TYPE_BUF];
    if (x->shape.rank >= lo) return true;
    return fail(err, errlen, "%s: %s must have at least %d dimension%s, got %s", ir_op_name(n->op), what, lo,
                lo == 1 ? "" : "s", ty(x, b));
}

static bool same_dtype(const ir_node *n, const ir_node *a, const ir_node *b, char *err, size_t errlen)
{
    char ba[TYPE_BUF], bb[TYPE_BUF];
    if (a->dtype == b->dtype) return true;
    return fail(err, errlen, "%s: dtype mismatch between %s and %s", ir_op_name(n->op), ty(a, ba), ty(b, bb));
}

bool shape_leaf(ir_node *n, char *err, size_t errlen)
{
    for (int i = 0; i < n->shape.rank; i++)
        if (n->shape.dim[i] <= 0)
            return fail(err, errlen, "%s: dimension %d is %lld, must be positive", ir_op_name(n->op), i,
                        (long long)n->shape.dim[i]);
    return true;
}

/* A leaf whose `axis` must name one of its dims (negative: from the end):
 * the kernels index the shape with it. */
bool shape_arange(ir_node *n, char *err, size_t errlen)
{
    if (!shape_leaf(n, err, errlen)) return false;
    int64_t axis = ir_attr_int(n, "axis");
    if (axis < -n->shape.rank || axis >= n->shape.rank)
        return fail(err, errlen, "arange: axis %lld is not a dimension of its %d-dimensional result", (long long)axis,
                    n->shape.rank);
    return true;
}

bool shape_same1(ir_node *n, char *err, size_t errlen)
{
    set_type(n, n->src[0]->dtype, &n->src[0]->shape);
    return true;
}

bool shape_same2(ir_node *n, char *err, size_t errlen)
{
    const ir_node *a = n->src[0], *b = n->src[1];
    char ba[TYPE_BUF], bb[TYPE_BUF];
    if (!need_float(n, a, "operand", err, errlen)) return false;
    if (a->dtype != b->dtype || !ir_shape_eq(&a->shape, &b->shape))
        return fail(err, errlen, "%s: operands differ: %s vs %s", ir_op_name(n->op), ty(a, ba), ty(b, bb));
    set_type(n, a->dtype, &a->shape);
    return true;
}

bool shape_dropout(ir_node *n, char *err, size_t errlen)
{
    double p = ir_attr_float(n, "p");
    if (!(p >= 0.0 && p < 1.0)) return fail(err, errlen, "dropout: p must be in [0, 1), got %g", p);
    if (!need_float(n, n->src[0], "input", err, errlen)) return false;
    return shape_same1(n, err, errlen);
}

bool shape_bias_add(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0], *b = n->src[1];
    char bx[TYPE_BUF], bb[TYPE_BUF];
    if (!need_float(n, x, "input", err, errlen) || !need_rank(n, x, "input", 1, err, errlen)) return false;
    if (b->shape.rank != 1 || b->shape.dim[0] != last_dim(x) || b->dtype != x->dtype)
        return fail(err, errlen, "bias_add: bias %s does not match the last dimension of %s", ty(b, bb), ty(x, bx));
    set_type(n, x->dtype, &x->shape);
    return true;
}

bool shape_linear(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0], *w = n->src[1];
    char bx[TYPE_BUF], bw[TYPE_BUF], bb[TYPE_BUF];
    if (!need_float(n, x, "input", err, errlen) || !need_rank(n, x, "input", 1, err, errlen)) return false;
    if (w->shape.rank != 2)
        return fail(err, errlen, "linear: weight must be [out, in], got %s", ty(w, bw));
    if (!same_dtype(n, x, w, err, errlen)) return false;
    if (w->shape.dim[1] != last_dim(x))
        return fail(err, errlen, "linear: input %s does not match weight %s (%lld input features vs %lld)",
                    ty(x, bx), ty(w, bw), (long long)last_dim(x), (long long)w->shape.dim[1]);
    if (n->nsrc == 3) {
        const ir_node *b = n->src[2];
        if (b->shape.rank != 1 || b->shape.dim[0] != w->shape.dim[0] || b->dtype != w->dtype)
            return fail(err, errlen, "linear: bias %s does not match weight %s (expected [%lld])", ty(b, bb),
                        ty(w, bw), (long long)w->shape.dim[0]);
    }
    ir_shape s = x->shape;
    s.dim[s.rank - 1] = w->shape.dim[0];
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_bmm(ir_node *n, char *err, size_t errlen)
{
    const ir_node *a = n->src[0], *b = n->src[1];
    char ba[TYPE_BUF], bb[TYPE_BUF];
    if (!need_float(n, a, "operand", err, errlen) || !need_rank(n, a, "operand", 2, err, errlen) ||
        !need_rank(n, b, "operand", 2, err, errlen) || !same_dtype(n, a, b, err, errlen))
        return false;
    int r = a->shape.rank;
    if (b->shape.rank != r)
        return fail(err, errlen, "bmm: operands have different ranks: %s vs %s", ty(a, ba), ty(b, bb));
    for (int i = 0; i < r - 2; i++)
        if (a->shape.dim[i] != b->shape.dim[i])
            return fail(err, errlen, "bmm: batch dimensions differ: %s vs %s", ty(a, ba), ty(b, bb));
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    int64_t m = a->shape.dim[r - (ta ? 1 : 2)], ka = a->shape.dim[r - (ta ? 2 : 1)];
    int64_t kb = b->shape.dim[r - (tb ? 1 : 2)], nn = b->shape.dim[r - (tb ? 2 : 1)];
    if (ka != kb)
        return fail(err, errlen, "bmm: contraction dimensions differ (%lld vs %lld): %s%s x %s%s", (long long)ka,
                    (long long)kb, ty(a, ba), ta ? "^T" : "", ty(b, bb), tb ? "^T" : "");
    ir_shape s = a->shape;
    s.dim[r - 2] = m;
    s.dim[r - 1] = nn;
    set_type(n, a->dtype, &s);
    return true;
}

bool shape_embedding(ir_node *n, char *err, size_t errlen)
{
    const ir_node *t = n->src[0], *w = n->src[1];
    char bw[TYPE_BUF], bt[TYPE_BUF];
    if (!need_int(n, t, "tokens", err, errlen) || !need_float(n, w, "weight", err, errlen)) return false;
    if (w->shape.rank != 2) return fail(err, errlen, "embedding: weight must be [vocab, hidden], got %s", ty(w, bw));
    if (t->shape.rank >= IR_MAX_RANK)
        return fail(err, errlen, "embedding: tokens %s have too many dimensions", ty(t, bt));
    /* Positions from arange (a learned position table) must be rows of the
     * table: a shorter table would embed the last positions as zeros. */
    if (t->op == IR_OP_ARANGE && !ir_attr_bool(t, "pos_offset") && w->shard.dim < 0) {
        int64_t axis = ir_attr_int(t, "axis");
        axis = axis < 0 ? axis + t->shape.rank : axis;
        if (axis >= 0 && axis < t->shape.rank && t->shape.dim[axis] > w->shape.dim[0])
            return fail(err, errlen, "embedding: positions 0..%lld (arange) index past the %lld rows of weight %s",
                        (long long)t->shape.dim[axis] - 1, (long long)w->shape.dim[0], ty(w, bw));
    }
    ir_shape s = t->shape;
    s.dim[s.rank++] = w->shape.dim[1];
    set_type(n, w->dtype, &s);
    return true;
}

bool shape_norm(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF], bp[TYPE_BUF];
    if (!need_float(n, x, "input", err, errlen) || !need_rank(n, x, "input", 1, err, errlen)) return false;
    if (!(ir_attr_float(n, "eps") > 0.0)) return fail(err, errlen, "%s: eps must be positive", ir_op_name(n->op));
    for (int i = 1; i < n->nsrc; i++) {
        const ir_node *p = n->src[i];
        if (p->shape.rank != 1 || p->shape.dim[0] != last_dim(x) || p->dtype != x->dtype)
            return fail(err, errlen, "%s: %s %s does not match the normalised dimension of %s (expected [%lld])",
                        ir_op_name(n->op), i == 1 ? "weight" : "bias", ty(p, bp), ty(x, bx),
                        (long long)last_dim(x));
    }
    set_type(n, x->dtype, &x->shape);
    return true;
}

bool shape_softmax(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF], bm[TYPE_BUF];
    if (!need_float(n, x, "input", err, errlen) || !need_rank(n, x, "input", 1, err, errlen)) return false;
    int r = x->shape.rank;
    /* A KV-cached step (pos_offset) has its s_q queries among the s_k keys. */
    bool pos = ir_attr_bool(n, "pos_offset");
    if (pos && !ir_attr_bool(n, "causal"))
        return fail(err, errlen, "softmax: pos_offset places the queries of a causal mask; this softmax is not causal");
    if (ir_attr_bool(n, "causal") &&
        (r < 2 || (pos ? x->shape.dim[r - 2] > x->shape.dim[r - 1] : x->shape.dim[r - 1] != x->shape.dim[r - 2])))
        return fail(err, errlen, "softmax: a causal mask needs %s scores, got %s",
                    pos ? "[..., s_q, s_k] (s_q <= s_k)" : "square [..., s, s]", ty(x, bx));
    if (n->nsrc == 2) {
        const ir_node *m = n->src[1];
        if (r < 3 || m->shape.rank != 2 || m->shape.dim[0] != x->shape.dim[0] ||
            m->shape.dim[1] != x->shape.dim[r - 1])
            return fail(err, errlen, "softmax: padding mask %s does not fit scores %s (expected [%lld, %lld])",
                        ty(m, bm), ty(x, bx), (long long)x->shape.dim[0], (long long)x->shape.dim[r - 1]);
    }
    set_type(n, x->dtype, &x->shape);
    return true;
}

bool shape_rope(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    if (!need_float(n, x, "input", err, errlen)) return false;
    if (x->shape.rank != 4 || x->shape.dim[3] % 2 != 0)
        return fail(err, errlen, "rope: input must be [s, b, heads, head_dim] with an even head_dim, got %s",
                    ty(x, bx));
    if (!(ir_attr_float(n, "base") > 0.0)) return fail(err, errlen, "rope: base must be positive");
    /* Llama 3.1's frequency scaling (scaling_factor 1: none). */
    double f = ir_attr_float(n, "scaling_factor"), lo = ir_attr_float(n, "low_freq_factor"),
           hi = ir_attr_float(n, "high_freq_factor");
    if (!(f >= 1.0 && f <= 1e6))
        return fail(err, errlen, "rope: scaling_factor %g must be between 1 (no scaling) and 1e6", f);
    if (f != 1.0 && !(lo > 0.0 && hi > lo && hi <= 1e6))
        return fail(err, errlen, "rope: low_freq_factor %g and high_freq_factor %g must be positive, low below high",
                    lo, hi);
    if (f != 1.0 && ir_attr_int(n, "original_max_pos") < 1)
        return fail(err, errlen, "rope: original_max_pos %lld must be at least 1",
                    (long long)ir_attr_int(n, "original_max_pos"));
    set_type(n, x->dtype, &x->shape);
    return true;
}

bool shape_reshape(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int count;
    const int64_t *d = ir_attr_ints(n, "shape", &count);
    ir_shape s = {.rank = count};
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < count; i++) {
        if (d[i] == -1 && infer < 0) { infer = i; continue; }
        if (d[i] <= 0) return fail(err, errlen, "reshape: dimension %d is %lld", i, (long long)d[i]);
        s.dim[i] = d[i];
        if (d[i] > IR_MAX_NUMEL / known) return fail(err, errlen, "reshape: the new shape has more than 2^48 elements");
        known *= d[i];
    }
    int64_t total = ir_shape_numel(&x->shape);
    if (infer >= 0) {
        if (known == 0 || total % known != 0)
            return fail(err, errlen, "reshape: cannot infer dimension %d of %s from %lld elements", infer,
                        "the new shape", (long long)total);
        s.dim[infer] = total / known;
        known = total;
    }
    if (known != total) {
        char bs[TYPE_BUF];
        ir_type_str(x->dtype, &s, bs, sizeof bs);
        return fail(err, errlen, "reshape: %s has %lld elements but %s has %lld", ty(x, bx), (long long)total, bs,
                    (long long)known);
    }
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_permute(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int count;
    const int64_t *p = ir_attr_ints(n, "perm", &count);
    if (count != x->shape.rank)
        return fail(err, errlen, "permute: %d axes given for %s", count, ty(x, bx));
    bool seen[IR_MAX_RANK] = {0};
    ir_shape s = {.rank = count};
    for (int i = 0; i < count; i++) {
        if (p[i] < 0 || p[i] >= count || seen[p[i]])
            return fail(err, errlen, "permute: [..] is not a permutation of the %d axes of %s", count, ty(x, bx));
        seen[p[i]] = true;
        s.dim[i] = x->shape.dim[p[i]];
    }
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_slice(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis"), start = ir_attr_int(n, "start"), len = ir_attr_int(n, "len");
    if (axis < 0 || axis >= x->shape.rank)
        return fail(err, errlen, "slice: axis %lld out of range for %s", (long long)axis, ty(x, bx));
    if (start < 0 || len <= 0 || start > x->shape.dim[axis] - len)
        return fail(err, errlen, "slice: start %lld, len %lld out of range for axis %lld of %s", (long long)start,
                    (long long)len, (long long)axis, ty(x, bx));
    ir_shape s = x->shape;
    s.dim[axis] = len;
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_repeat_interleave(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis"), r = ir_attr_int(n, "repeats");
    if (axis < 0 || axis >= x->shape.rank)
        return fail(err, errlen, "repeat_interleave: axis %lld out of range for %s", (long long)axis, ty(x, bx));
    if (r < 1 || x->shape.dim[axis] > IR_MAX_NUMEL / r || ir_shape_numel(&x->shape) > IR_MAX_NUMEL / r)
        return fail(err, errlen, "repeat_interleave: repeats %lld out of range for axis %lld of %s", (long long)r,
                    (long long)axis, ty(x, bx));
    ir_shape s = x->shape;
    s.dim[axis] *= r;
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_kv_cache(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis"), len = ir_attr_int(n, "len");
    if (axis < 0 || axis >= x->shape.rank)
        return fail(err, errlen, "kv_cache: axis %lld out of range for %s", (long long)axis, ty(x, bx));
    if (len < x->shape.dim[axis] || len > IR_MAX_NUMEL)
        return fail(err, errlen, "kv_cache: a cache of %lld positions cannot hold the %lld of %s along axis %lld",
                    (long long)len, (long long)x->shape.dim[axis], ty(x, bx), (long long)axis);
    if (!ir_dtype_is_float(x->dtype))
        return fail(err, errlen, "kv_cache: %s is not a floating-point value", ty(x, bx));
    ir_shape s = x->shape;
    s.dim[axis] = len;
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_concat(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF], by[TYPE_BUF];
    int64_t axis = ir_attr_int(n, "axis");
    if (axis < 0 || axis >= x->shape.rank)
        return fail(err, errlen, "concat: axis %lld out of range for %s", (long long)axis, ty(x, bx));
    ir_shape s = x->shape;
    for (int i = 1; i < n->nsrc; i++) {
        const ir_node *y = n->src[i];
        bool ok = y->dtype == x->dtype && y->shape.rank == x->shape.rank;
        for (int d = 0; ok && d < x->shape.rank; d++)
            if (d != axis && y->shape.dim[d] != x->shape.dim[d]) ok = false;
        if (!ok)
            return fail(err, errlen, "concat: %s does not fit %s along axis %lld", ty(y, by), ty(x, bx),
                        (long long)axis);
        s.dim[axis] += y->shape.dim[axis];
    }
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_cross_entropy(ir_node *n, char *err, size_t errlen)
{
    const ir_node *l = n->src[0], *t = n->src[1];
    char bl[TYPE_BUF], bt[TYPE_BUF];
    if (!need_float(n, l, "logits", err, errlen) || !need_rank(n, l, "logits", 2, err, errlen) ||
        !need_int(n, t, "labels", err, errlen))
        return false;
    bool ok = t->shape.rank == l->shape.rank - 1;
    for (int i = 0; ok && i < t->shape.rank; i++) ok = t->shape.dim[i] == l->shape.dim[i];
    if (!ok)
        return fail(err, errlen, "cross_entropy: labels %s do not match logits %s (expected the logits' shape "
                    "without its last dimension)", ty(t, bt), ty(l, bl));
    ir_shape s = {.rank = 0};
    set_type(n, l->dtype, &s);
    return true;
}

bool shape_reduce_all(ir_node *n, char *err, size_t errlen)
{
    if (!need_float(n, n->src[0], "input", err, errlen)) return false;
    ir_shape s = {.rank = 0};
    set_type(n, n->src[0]->dtype, &s);
    return true;
}

/* Collectives that change one dimension by the group size. */
static bool resize_dim(ir_node *n, bool last, bool gather, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    char bx[TYPE_BUF];
    int64_t size = ir_attr_int(n, "size");
    if (size < 1) return fail(err, errlen, "%s: group size must be positive, got %lld", ir_op_name(n->op), (long long)size);
    if (!need_rank(n, x, "input", 1, err, errlen)) return false;
    ir_shape s = x->shape;
    int d = last ? s.rank - 1 : 0;
    if (gather) {
        if (size > IR_MAX_NUMEL / s.dim[d])
            return fail(err, errlen, "%s: group size %lld is too large", ir_op_name(n->op), (long long)size);
        s.dim[d] *= size;
    } else {
        if (s.dim[d] % size != 0)
            return fail(err, errlen, "%s: dimension %d of %s (%lld) does not divide by the group size %lld",
                        ir_op_name(n->op), d, ty(x, bx), (long long)s.dim[d], (long long)size);
        s.dim[d] /= size;
    }
    set_type(n, x->dtype, &s);
    return true;
}

bool shape_gather_last(ir_node *n, char *err, size_t errlen) { return resize_dim(n, true, true, err, errlen); }
bool shape_scatter_last(ir_node *n, char *err, size_t errlen) { return resize_dim(n, true, false, err, errlen); }
bool shape_gather_first(ir_node *n, char *err, size_t errlen) { return resize_dim(n, false, true, err, errlen); }
bool shape_scatter_first(ir_node *n, char *err, size_t errlen) { return resize_dim(n, false, false, err, errlen); }

/* ---- attention ------------------------------------------------------------ */

/* q [b, n, s_q, d], k and v [b, g, s_k, d] with g dividing n, an optional
 * padding mask [b, s_k]; causal as softmax's. */
ir_attn_layout ir_attn_in_layout(const ir_node *n)
{
    const char *l = ir_attr_sym(n, "layout");
    return strcmp(l, "sbnd") == 0 ? IR_ATTN_SBND : strcmp(l, "packed") == 0 ? IR_ATTN_PACKED : IR_ATTN_BNSD;
}

bool ir_attn_out_sbnd(const ir_node *n) { return strcmp(ir_attr_sym(n, "out"), "sbnd") == 0; }

bool ir_attn_view(const ir_node *n, const ir_node *x, int which, ir_shape *out, char *err, size_t errlen)
{
    char bx[TYPE_BUF];
    static const char *const names[] = {"q", "k", "v"};
    ir_attn_layout l = ir_attn_in_layout(n);
    *out = x->shape;
    if (x->shape.rank != 4)
        return fail(err, errlen, "%s: %s must be of rank 4 (%s), got %s", ir_op_name(n->op), names[which],
                    l == IR_ATTN_BNSD ? "[batch, heads, seq, head_dim]" : "[seq, batch, heads, ...]", ty(x, bx));
    if (l == IR_ATTN_BNSD) return true;
    const int64_t *d = x->shape.dim;
    if (l == IR_ATTN_PACKED && d[3] % 3 != 0)
        return fail(err, errlen, "%s: layout=packed needs [seq, batch, heads, 3 * head_dim], got %s", ir_op_name(n->op),
                    ty(x, bx));
    *out = (ir_shape){.rank = 4, .dim = {d[1], d[2], d[0], l == IR_ATTN_PACKED ? d[3] / 3 : d[3]}};
    return true;
}

ir_shape ir_attn_out_logical(const ir_node *a)
{
    const int64_t *d = a->shape.dim;
    if (!ir_attn_out_sbnd(a)) return a->shape;
    return (ir_shape){.rank = 4, .dim = {d[1], d[2], d[0], d[3]}};
}

/* The logical q, k and v of attention (or attention_back) n, read from
 * xq, xk, xv by its layout, checked. */
static bool attention_operands(const ir_node *n, const ir_node *xq, const ir_node *xk, const ir_node *xv,
                               const ir_node *m, ir_shape *qs, char *err, size_t errlen)
{
    char bq[TYPE_BUF], bk[TYPE_BUF], bv[TYPE_BUF];
    if (!need_float(n, xq, "q", err, errlen) || !same_dtype(n, xq, xk, err, errlen) ||
        !same_dtype(n, xq, xv, err, errlen))
        return false;
    if (ir_attn_in_layout(n) == IR_ATTN_PACKED && (xq != xk || xq != xv))
        return fail(err, errlen, "%s: layout=packed reads q, k and v from one operand, got %s, %s, %s",
                    ir_op_name(n->op), ty(xq, bq), ty(xk, bk), ty(xv, bv));
    ir_shape ks, vs;
    if (!ir_attn_view(n, xq, 0, qs, err, errlen) || !ir_attn_view(n, xk, 1, &ks, err, errlen) ||
        !ir_attn_view(n, xv, 2, &vs, err, errlen))
        return false;
    if (!ir_shape_eq(&ks, &vs))
        return fail(err, errlen, "%s: k and v differ: %s vs %s", ir_op_name(n->op), ty(xk, bk), ty(xv, bv));
    const int64_t *qd = qs->dim, *kd = ks.dim;
    if (qd[0] != kd[0] || qd[3] != kd[3])
        return fail(err, errlen, "%s: q %s and k %s differ in batch or head_dim", ir_op_name(n->op), ty(xq, bq),
                    ty(xk, bk));
    if (qd[1] % kd[1] != 0)
        return fail(err, errlen, "%s: %lld query heads do not divide into %lld key/value heads (q %s, k %s)",
                    ir_op_name(n->op), (long long)qd[1], (long long)kd[1], ty(xq, bq), ty(xk, bk));
    bool pos = ir_attr_bool(n, "pos_offset"), causal = ir_attr_bool(n, "causal");
    if (pos && !causal)
        return fail(err, errlen, "%s: pos_offset places the queries of a causal mask; this attention is not causal",
                    ir_op_name(n->op));
    if (causal && (pos ? qd[2] > kd[2] : qd[2] != kd[2]))
        return fail(err, errlen, "%s: a causal mask needs %s, got q %s and k %s", ir_op_name(n->op),
                    pos ? "s_q <= s_k" : "as many queries as keys", ty(xq, bq), ty(xk, bk));
    double p = ir_attr_float(n, "p");
    if (!(p >= 0 && p < 1)) return fail(err, errlen, "%s: dropout p = %g is not in [0, 1)", ir_op_name(n->op), p);
    if (m) {
        char bm[TYPE_BUF];
        if (m->shape.rank != 2 || m->shape.dim[0] != qd[0] || m->shape.dim[1] != kd[2])
            return fail(err, errlen, "%s: padding mask %s does not fit k %s (expected [%lld, %lld])", ir_op_name(n->op),
                        ty(m, bm), ty(xk, bk), (long long)qd[0], (long long)kd[2]);
    }
    return true;
}

bool shape_attention(ir_node *n, char *err, size_t errlen)
{
    ir_shape s;
    if (!attention_operands(n, n->src[0], n->src[1], n->src[2], n->nsrc > 3 ? n->src[3] : NULL, &s, err, errlen))
        return false;
    s.dim[3] = n->src[2]->shape.dim[3] / (ir_attn_in_layout(n) == IR_ATTN_PACKED ? 3 : 1);
    if (ir_attn_out_sbnd(n)) s = (ir_shape){.rank = 4, .dim = {s.dim[2], s.dim[0], s.dim[1], s.dim[3]}};
    set_type(n, n->src[0]->dtype, &s);
    return true;
}

/* (dy, q, k, v, a[, mask]): dy is attention a's output, q, k and v its
 * operands read in its layout. The value has q's operand's shape (with
 * layout=packed: d of the packed operand). */
bool shape_attention_back(ir_node *n, char *err, size_t errlen)
{
    const ir_node *dy = n->src[0], *q = n->src[1], *a = n->src[4];
    char b1[TYPE_BUF], b2[TYPE_BUF];
    if (a->op != IR_OP_ATTENTION)
        return fail(err, errlen, "attention_back: operand 5 must be the attention it differentiates, got %s",
                    ir_op_name(a->op));
    if (strcmp(ir_attr_sym(n, "layout"), ir_attr_sym(a, "layout")) != 0 ||
        strcmp(ir_attr_sym(n, "out"), ir_attr_sym(a, "out")) != 0)
        return fail(err, errlen, "attention_back: layout=%s out=%s, but the attention it differentiates has layout=%s out=%s",
                    ir_attr_sym(n, "layout"), ir_attr_sym(n, "out"), ir_attr_sym(a, "layout"), ir_attr_sym(a, "out"));
    ir_shape qs;
    if (!attention_operands(n, q, n->src[2], n->src[3], n->nsrc > 5 ? n->src[5] : NULL, &qs, err, errlen)) return false;
    ir_shape al = ir_attn_out_logical(a);
    if (!ir_shape_eq(&dy->shape, &a->shape) || dy->dtype != a->dtype || !ir_shape_eq(&qs, &al))
        return fail(err, errlen, "attention_back: dy %s does not match the attention's output %s", ty(dy, b1),
                    ty(a, b2));
    set_type(n, q->dtype, &q->shape);
    return true;
}

bool shape_result(ir_node *n, char *err, size_t errlen)
{
    const ir_node *x = n->src[0];
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(x, t, s);
    int64_t i = ir_attr_int(n, "index");
    if (i < 1 || i >= count)
        return fail(err, errlen, "result: index %lld, but %s has %d extra result%s", (long long)i, ir_op_name(x->op),
                    count - 1, count == 2 ? "" : "s");
    set_type(n, t[i], &s[i]);
    return true;
}
