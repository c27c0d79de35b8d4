/* The gradient rules of ops.def, one per differentiable op. Each gets the
 * forward node n and the complete gradient dy of its result, and for every
 * operand that needs one emits the operand's gradient as ordinary IR
 * (docs/autodiff.md has the table). ad_emit names it grad.<operand>, checks
 * its shape against the operand and accumulates it. */
#include "grad.h"

#include "support/util.h"

static ir_node *with_int(ir_node *b, const char *attr, int64_t v)
{
    ir_attr_set_int(b, attr, v);
    return b;
}

static ir_node *with_bool(ir_node *b, const char *attr, bool v)
{
    if (v) ir_attr_set_bool(b, attr, v);
    return b;
}

static ir_node *with_float(ir_node *b, const char *attr, double v)
{
    ir_attr_set_float(b, attr, v);
    return b;
}

static ir_node *with_ints(ir_node *b, const char *attr, const int64_t *v, int n)
{
    ir_attr_set_ints(b, attr, v, n);
    return b;
}

/* An op applied to dy with n's attributes: the many rules of that shape. */
static ir_node *same_op(ad_ctx *c, ir_op op, ir_node *dy, const ir_node *n)
{
    ir_node *b = ad_op1(c, op, dy);
    ad_same_attrs(b, n);
    return b;
}

/* ---- dense layers ------------------------------------------------------- */

/* y = x w^T + b */
void grad_linear(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0], *w = n->src[1];
    if (ad_needs(c, x)) ad_emit(c, x, ad_op2(c, IR_OP_MATMUL, dy, w));
    if (ad_needs(c, w)) ad_emit(c, w, ad_true(ad_op2(c, IR_OP_MATMUL, dy, x), "transpose_a"));
    if (n->nsrc == 3 && ad_needs(c, n->src[2])) ad_emit(c, n->src[2], ad_op1(c, IR_OP_COLSUM, dy));
}

static ir_node *bmm(ad_ctx *c, ir_node *a, ir_node *b, bool ta, bool tb, double alpha)
{
    ir_node *m = ad_op2(c, IR_OP_BMM, a, b);
    ir_attr_set_bool(m, "transpose_a", ta);
    ir_attr_set_bool(m, "transpose_b", tb);
    return with_float(m, "alpha", alpha);
}

/* C = alpha op(A) op(B), op = identity or transpose of the last two dims:
 *   A B:     dA = dC B^T      dB = A^T dC
 *   A B^T:   dA = dC B        dB = dC^T A
 *   A^T B:   dA = B dC^T      dB = A dC
 *   A^T B^T: dA = B^T dC^T    dB = dC^T A^T      (all times alpha) */
void grad_bmm(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *a = n->src[0], *b = n->src[1];
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    double alpha = ir_attr_float(n, "alpha");
    if (ad_needs(c, a)) ad_emit(c, a, ta ? bmm(c, b, dy, tb, true, alpha) : bmm(c, dy, b, false, !tb, alpha));
    if (ad_needs(c, b)) ad_emit(c, b, tb ? bmm(c, dy, a, true, ta, alpha) : bmm(c, a, dy, !ta, false, alpha));
}

static ir_node *mm(ad_ctx *c, ir_node *a, ir_node *b, bool ta, bool tb)
{
    ir_node *m = ad_op2(c, IR_OP_MATMUL, a, b);
    ir_attr_set_bool(m, "transpose_a", ta);
    ir_attr_set_bool(m, "transpose_b", tb);
    return m;
}

/* y = a b or a b^T (b stored [n, k]), a[..., k]; or, with transpose_a,
 * y[m, n] = sum over the leading dims R of a[R, m] b[R, n]:
 *   a b:    da = dy b^T   db = a^T dy
 *   a b^T:  da = dy b     db = dy^T a
 *   a^T b:  da = b dy^T   db = a dy */
void grad_matmul(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *a = n->src[0], *b = n->src[1];
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    if (ad_needs(c, a)) ad_emit(c, a, ta ? mm(c, b, dy, false, true) : mm(c, dy, b, false, !tb));
    if (ad_needs(c, b))
        ad_emit(c, b, ta ? mm(c, a, dy, false, false) : tb ? mm(c, dy, a, true, false) : mm(c, a, dy, true, false));
}

/* y[..., h] = w[tokens[...], h]: the rows of dW are sums of dy's rows. */
void grad_embedding(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *w = n->src[1];
    if (ad_needs(c, w))
        ad_emit(c, w, with_int(ad_op2(c, IR_OP_EMBEDDING_BACK, n->src[0], dy), "vocab", w->shape.dim[0]));
}

void grad_layernorm(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0], *w = n->src[1], *b = n->src[2], *m;
    if (ad_needs(c, x)) { m = ad_op3(c, IR_OP_LAYERNORM_DX, dy, x, w); ad_same_attrs(m, n); ad_emit(c, x, m); }
    if (ad_needs(c, w)) { m = ad_op2(c, IR_OP_LAYERNORM_DW, dy, x); ad_same_attrs(m, n); ad_emit(c, w, m); }
    if (ad_needs(c, b)) ad_emit(c, b, ad_op1(c, IR_OP_COLSUM, dy));
}

void grad_rmsnorm(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0], *w = n->src[1], *m;
    if (ad_needs(c, x)) { m = ad_op3(c, IR_OP_RMSNORM_DX, dy, x, w); ad_same_attrs(m, n); ad_emit(c, x, m); }
    if (ad_needs(c, w)) { m = ad_op2(c, IR_OP_RMSNORM_DW, dy, x); ad_same_attrs(m, n); ad_emit(c, w, m); }
}

/* ---- elementwise -------------------------------------------------------- */

void grad_add(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ad_accum(c, n->src[0], dy);
    ad_accum(c, n->src[1], dy);
}

void grad_sub(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ad_accum(c, n->src[0], dy);
    if (ad_needs(c, n->src[1])) ad_emit(c, n->src[1], with_float(ad_op1(c, IR_OP_SCALE, dy), "alpha", -1.0));
}

void grad_mul(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *a = n->src[0], *b = n->src[1];
    if (ad_needs(c, a)) ad_emit(c, a, ad_op2(c, IR_OP_MUL, dy, b));
    if (ad_needs(c, b)) ad_emit(c, b, ad_op2(c, IR_OP_MUL, dy, a));
}

void grad_bias_add(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ad_accum(c, n->src[0], dy);
    if (ad_needs(c, n->src[1])) ad_emit(c, n->src[1], ad_op1(c, IR_OP_COLSUM, dy));
}

void grad_scale(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], same_op(c, IR_OP_SCALE, dy, n));
}

void grad_gelu(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0];
    if (!ad_needs(c, x)) return;
    ir_node *b = ad_op2(c, IR_OP_GELU_BACK, dy, x);
    ad_same_attrs(b, n); /* approx */
    ad_emit(c, x, b);
}

void grad_silu(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], ad_op2(c, IR_OP_SILU_BACK, dy, n->src[0]));
}

/* y = silu(gate) * up */
void grad_swiglu(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *gate = n->src[0], *up = n->src[1];
    if (ad_needs(c, gate)) ad_emit(c, gate, ad_op3(c, IR_OP_SWIGLU_DGATE, dy, gate, up));
    if (!ad_needs(c, up)) return;
    char name[512];
    snprintf(name, sizeof name, "%s.silu", gate->name);
    ir_node *act = ad_end_named(c, ad_op1(c, IR_OP_SILU, gate), name); /* CSE finds a forward one */
    ad_emit(c, up, ad_op2(c, IR_OP_MUL, dy, act));
}

/* The same p and key give the forward's mask. */
void grad_dropout(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], same_op(c, IR_OP_DROPOUT_BACK, dy, n));
}

/* ---- attention ------------------------------------------------------------ */

/* From the output y = n itself; masked entries have y = 0, so they get no
 * gradient, and the mask operand none. */
void grad_softmax(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0];
    if (!ad_needs(c, x)) return;
    ir_node *b = ad_op2(c, IR_OP_SOFTMAX_BACK, dy, n);
    ad_same_attrs(b, n); /* scale */
    ad_emit(c, x, b);
}

/* A rotation: its gradient is the inverse rotation. */
void grad_rope(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (!ad_needs(c, n->src[0])) return;
    ir_node *b = same_op(c, IR_OP_ROPE, dy, n);
    ir_attr_set_bool(b, "inverse", !ir_attr_bool(n, "inverse"));
    ad_emit(c, n->src[0], b);
}

/* ---- shape ---------------------------------------------------------------- */

void grad_reshape(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0];
    if (ad_needs(c, x)) ad_emit(c, x, with_ints(ad_op1(c, IR_OP_RESHAPE, dy), "shape", x->shape.dim, x->shape.rank));
}

/* y.dim[i] = x.dim[perm[i]], so dx = permute(dy, inverse perm). */
void grad_permute(ad_ctx *c, ir_node *n, ir_node *dy)
{
    int count;
    const int64_t *perm = ir_attr_ints(n, "perm", &count);
    int64_t inv[IR_MAX_RANK];
    for (int i = 0; i < count; i++) inv[perm[i]] = i;
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], with_ints(ad_op1(c, IR_OP_PERMUTE, dy), "perm", inv, count));
}

ir_node *ad_slice_pad(ad_ctx *c, const ir_node *slice, ir_node *dy)
{
    ir_node *b = ad_op1(c, IR_OP_PAD, dy);
    int64_t axis = ir_attr_int(slice, "axis");
    with_int(b, "axis", axis);
    with_int(b, "start", ir_attr_int(slice, "start"));
    return with_int(b, "total", slice->src[0]->shape.dim[axis]);
}

/* One part of a split joins its siblings in one concat (autodiff.c);
 * a lone slice pads its gradient back. */
void grad_slice(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (!ad_needs(c, n->src[0]) || ad_defer_split(c, n, dy)) return;
    ad_emit(c, n->src[0], ad_slice_pad(c, n, dy));
}

void grad_concat(ad_ctx *c, ir_node *n, ir_node *dy)
{
    int64_t axis = ir_attr_int(n, "axis"), at = 0;
    for (int i = 0; i < n->nsrc; i++) {
        ir_node *x = n->src[i], *b;
        int64_t len = x->shape.dim[axis];
        if (ad_needs(c, x)) {
            b = with_int(with_int(ad_op1(c, IR_OP_SLICE, dy), "axis", axis), "start", at);
            ad_emit(c, x, with_int(b, "len", len));
        }
        at += len;
    }
}

/* The inverse of a pad is the slice it came from. */
void grad_pad(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0];
    if (!ad_needs(c, x)) return;
    int64_t axis = ir_attr_int(n, "axis");
    ir_node *b = with_int(with_int(ad_op1(c, IR_OP_SLICE, dy), "axis", axis), "start", ir_attr_int(n, "start"));
    ad_emit(c, x, with_int(b, "len", x->shape.dim[axis]));
}

/* Each slice of x went to `repeats` slices of y: its gradient sums them. */
void grad_repeat_interleave(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], same_op(c, IR_OP_REPEAT_INTERLEAVE_BACK, dy, n));
}

/* ---- losses and reductions ---------------------------------------------- */

void grad_cross_entropy(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *logits = n->src[0];
    if (!ad_needs(c, logits)) return;
    ir_node *b = ad_op3(c, IR_OP_CROSS_ENTROPY_BACK, dy, logits, n->src[1]);
    ad_same_attrs(b, n); /* ignore_index */
    ad_emit(c, logits, b);
}

/* The reductions (max, sum of exp, target) are constants of the gradient:
 * d logits = (softmax - onehot) * d loss / count, from the local part. */
void grad_vp_cross_entropy(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *logits = n->src[0];
    if (!ad_needs(c, logits)) return;
    ir_node *src[5] = {dy, logits, n->src[1], n->src[2], n->src[3]};
    ir_node *b = ad_op(c, IR_OP_VP_CROSS_ENTROPY_BACK, 5, src);
    ad_same_attrs(b, n); /* ignore_index, vocab */
    ad_emit(c, logits, b);
}

static void reduce_back(ad_ctx *c, ir_node *n, ir_node *dy, double alpha)
{
    ir_node *x = n->src[0];
    if (!ad_needs(c, x)) return;
    ir_node *b = with_ints(ad_op1(c, IR_OP_BROADCAST, dy), "shape", x->shape.dim, x->shape.rank);
    ad_emit(c, x, with_float(b, "alpha", alpha));
}

void grad_sum(ad_ctx *c, ir_node *n, ir_node *dy) { reduce_back(c, n, dy, 1.0); }

void grad_mean(ad_ctx *c, ir_node *n, ir_node *dy)
{
    reduce_back(c, n, dy, 1.0 / (double)ir_shape_numel(&n->src[0]->shape));
}

/* ---- communication: each op's gradient is its dual (DESIGN.md) ------------ */

static void dual(ad_ctx *c, ir_node *n, ir_node *dy, ir_op op)
{
    if (ad_needs(c, n->src[0])) ad_emit(c, n->src[0], same_op(c, op, dy, n)); /* size */
}

void grad_tp_copy(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_TP_REDUCE); }
void grad_tp_reduce(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_TP_COPY); }
void grad_tp_gather(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_TP_SCATTER); }
void grad_tp_scatter(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_TP_GATHER); }
void grad_sp_gather(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_SP_SCATTER); }
void grad_sp_scatter(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_SP_GATHER); }
void grad_sp_split(ad_ctx *c, ir_node *n, ir_node *dy) { dual(c, n, dy, IR_OP_SP_GATHER); }

/* A stage boundary: what was sent comes back as a gradient from the stage
 * it went to, and the receiver sends the gradient back where it came from.
 * A per_step transfer (a weight, sent once per step) gets a per_step
 * gradient transfer: the gradient summed over the step's micro-batches. */
void grad_pp_send(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0]))
        ad_emit(c, n->src[0], with_bool(with_int(ad_op1(c, IR_OP_PP_RECV, dy), "from_stage", ir_attr_int(n, "to_stage")),
                                        "per_step", ir_attr_bool(n, "per_step")));
}

void grad_pp_recv(ad_ctx *c, ir_node *n, ir_node *dy)
{
    if (ad_needs(c, n->src[0]))
        ad_emit(c, n->src[0], with_bool(with_int(ad_op1(c, IR_OP_PP_SEND, dy), "to_stage", ir_attr_int(n, "from_stage")),
                                        "per_step", ir_attr_bool(n, "per_step")));
}

/* ---- attention -------------------------------------------------------------- */

/* One attention_back computes dq, dk and dv together (its value is dq;
 * result 1 and 2 are dk and dv), recomputing the scores from the forward's
 * saved log-sum-exp; with layout=packed, d of the packed q | k | v alone.
 * The mask gets no gradient. */
void grad_attention(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x[3] = {n->src[0], n->src[1], n->src[2]};
    bool need[3] = {ad_needs(c, x[0]), ad_needs(c, x[1]), ad_needs(c, x[2])};
    if (!need[0] && !need[1] && !need[2]) return;
    ir_node *src[6] = {dy, x[0], x[1], x[2], n, n->nsrc > 3 ? n->src[3] : NULL};
    ir_node *b = ad_op(c, IR_OP_ATTENTION_BACK, n->nsrc + 2, src);
    ad_same_attrs(b, n); /* scale, causal, pos_offset, p, key, layout, out */
    if (ir_attn_in_layout(n) == IR_ATTN_PACKED) { /* q, k, v are one tensor: its d[q | k | v] is the value */
        ad_accum(c, x[0], ad_end(c, b, x[0]));
        return;
    }
    b = need[0] ? ad_end(c, b, x[0]) : ad_end_named(c, b, arena_printf(&c->scratch, "grad.%s.back", n->name));
    if (need[0]) ad_accum(c, x[0], b);
    for (int i = 1; i < 3; i++)
        if (need[i]) {
            ir_node *r = ad_op1(c, IR_OP_RESULT, b);
            ir_attr_set_int(r, "index", i);
            ad_emit(c, x[i], r);
        }
}

/* The fused LM head: one lm_head_ce_back gives dx (its value), dw
 * (result 1) and db (result 2), as attention_back does; a tied weight's dw joins the
 * embedding's through ad_accum. */
void grad_lm_head_ce(ad_ctx *c, ir_node *n, ir_node *dy)
{
    ir_node *x = n->src[0], *w = n->src[1], *bias = n->nsrc > 3 ? n->src[3] : NULL;
    bool need_x = ad_needs(c, x), need_w = ad_needs(c, w), need_b = bias && ad_needs(c, bias);
    if (!need_x && !need_w && !need_b) return;
    ir_node *src[6] = {dy, x, w, n->src[2], n, bias};
    ir_node *b = ad_op(c, IR_OP_LM_HEAD_CE_BACK, bias ? 6 : 5, src);
    ad_same_attrs(b, n); /* ignore_index, chunk */
    b = need_x ? ad_end(c, b, x) : ad_end_named(c, b, arena_printf(&c->scratch, "grad.%s.back", n->name));
    if (need_x) ad_accum(c, x, b);
    if (need_w) {
        ir_node *r = ad_op1(c, IR_OP_RESULT, b);
        ir_attr_set_int(r, "index", 1);
        ad_emit(c, w, r);
    }
    if (need_b) {
        ir_node *r = ad_op1(c, IR_OP_RESULT, b);
        ir_attr_set_int(r, "index", 2);
        ad_emit(c, bias, r);
    }
}
