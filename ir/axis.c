/* Axis rules: one function per row of ops.def (its axis column) saying
 * where dim `dim` of operand `operand` lands in the op's result: a dim of
 * the result, or IR_AXIS_UNUSED (the operand only is a reference), SUMMED
 * (the result sums over it), MIXED (the op mixes, cuts or numbers the
 * elements along it, and they do not stay on one dim of the result),
 * ALONG(d) (the op mixes or numbers the elements along it, and they stay
 * on dim d: a split does not survive, the positions do) or NORULE
 * (NOAXIS, the table's default). The tp, sp and kvcache passes follow a
 * split (ir_axis_map: ALONG is MIXED) or the sequence (ir_axis_index:
 * ALONG(d) is d) through every op with these rules, and refuse what does
 * not land on a dim of the result. */
#include "ir_internal.h"
#include "support/util.h"

#define LAST(x) ((x)->shape.rank - 1)

int ir_axis_index(const ir_node *n, int operand, int dim)
{
    TGC_ASSERT(operand >= 0 && operand < n->nsrc);
    TGC_ASSERT(dim >= 0 && dim < n->src[operand]->shape.rank);
    int m = ir_op_get(n->op)->axis(n, operand, dim);
    return m <= IR_AXIS_ALONG(0) ? IR_AXIS_ALONG(0) - m : m;
}

int ir_axis_map(const ir_node *n, int operand, int dim)
{
    TGC_ASSERT(operand >= 0 && operand < n->nsrc);
    TGC_ASSERT(dim >= 0 && dim < n->src[operand]->shape.rank);
    int m = ir_op_get(n->op)->axis(n, operand, dim);
    return m <= IR_AXIS_ALONG(0) ? IR_AXIS_MIXED : m;
}

/* Size-1 dims are inserted or removed freely; the other dims factor into
 * groups of equal product (in [s, b, 3h] -> out [s, b, n, 3d]: {s}, {b},
 * {3h} -> {n, 3d}). Dim k lands on the outermost dim of out's group when it
 * leads its group in `in` (the prefix products before both are equal): a
 * split of dim k into t blocks is then a split of that dim into t blocks.
 * A size-1 dim k lands on the size-1 dim of out in the same place, counted
 * among the run of size-1 dims there. */
int ir_reshape_dim(const ir_shape *in, int k, const ir_shape *out)
{
    int64_t before = 1, acc = 1;
    int ones = 0, seen = 0; /* size-1 dims of in just before k; of out at the place */
    for (int i = 0; i < k; i++) before *= in->dim[i];
    for (int i = k - 1; i >= 0 && in->dim[i] == 1; i--) ones++;
    bool unit = in->dim[k] == 1;
    for (int j = 0; j < out->rank; j++) {
        if (acc == before && (out->dim[j] == 1) == unit && (!unit || seen++ == ones)) return j;
        acc *= out->dim[j];
        if (acc > before) return IR_AXIS_MIXED;
    }
    return IR_AXIS_MIXED;
}

int ir_axis_norule(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand, (void)dim;
    return IR_AXIS_NORULE;
}

/* Every operand has the result's shape (elementwise ops, identities). */
int axis_same(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand;
    return dim;
}

/* The value is operand 0's; the others are only referenced. */
int axis_first(const ir_node *n, int operand, int dim)
{
    (void)n;
    return operand == 0 ? dim : IR_AXIS_UNUSED;
}

/* Operand 1 is a bias [n] along the result's last dim; the others have
 * the result's shape. */
int axis_bias(const ir_node *n, int operand, int dim)
{
    return operand == 1 ? LAST(n) : dim;
}

/* Row by row over the last dim (softmax_back, tp_gather, tp_scatter). */
int axis_rows(const ir_node *n, int operand, int dim)
{
    return dim == LAST(n->src[operand]) ? IR_AXIS_ALONG(dim) : dim;
}

/* Gathers or scatters dim 0 (the sequence-parallel collectives). */
int axis_seq_comm(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand;
    return dim == 0 ? IR_AXIS_ALONG(0) : dim;
}

/* norm(x, weight[, bias]) over x's last dim; the weight and bias run along it. */
int axis_norm(const ir_node *n, int operand, int dim)
{
    if (operand > 0) return IR_AXIS_ALONG(LAST(n));
    return axis_rows(n, operand, dim);
}

/* softmax(x[b, ..., s_q, s_k][, mask[b, s_k]]) over the last dim; a causal
 * mask numbers the queries too. */
int axis_softmax(const ir_node *n, int operand, int dim)
{
    int r = n->shape.rank;
    if (operand == 1) return dim == 0 ? 0 : IR_AXIS_ALONG(r - 1);
    if (dim == r - 1 || (dim == r - 2 && ir_attr_bool(n, "causal"))) return IR_AXIS_ALONG(dim);
    return dim;
}

/* rope(x[s, b, heads, d]): positions along dim 0, pairs along dim 3. */
int axis_rope(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand;
    return dim == 0 || dim == 3 ? IR_AXIS_ALONG(dim) : dim;
}

int axis_reshape(const ir_node *n, int operand, int dim)
{
    return ir_reshape_dim(&n->src[operand]->shape, dim, &n->shape);
}

/* out dim j = in dim perm[j]. */
int axis_permute(const ir_node *n, int operand, int dim)
{
    (void)operand;
    int np;
    const int64_t *perm = ir_attr_ints(n, "perm", &np);
    for (int j = 0; j < np; j++)
        if (perm[j] == dim) return j;
    return IR_AXIS_MIXED;
}

/* Cuts, joins or pads along the `axis` attribute (slice, concat, pad,
 * kv_cache); the other dims pass. */
int axis_along(const ir_node *n, int operand, int dim)
{
    (void)operand;
    return dim == ir_attr_int(n, "axis") ? IR_AXIS_MIXED : dim;
}

/* repeat_interleave and its gradient: every dim stays. Block k of t along
 * `axis` (slices [k g/t, (k+1) g/t)) becomes block k of the result (its
 * slices repeated, or summed back), so a block split stays a block split. */
int axis_repeat_interleave(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand;
    return dim;
}

/* linear(x[..., in], w[out, in], b[out]) -> [..., out]. */
int axis_linear(const ir_node *n, int operand, int dim)
{
    if (operand == 0) return dim == LAST(n->src[0]) ? IR_AXIS_SUMMED : dim;
    if (operand == 1) return dim == 0 ? LAST(n) : IR_AXIS_SUMMED;
    return LAST(n);
}

/* bmm(a[..., m, k], b[..., k, n]) -> [..., m, n] (transposes swap the last two). */
int axis_bmm(const ir_node *n, int operand, int dim)
{
    int r = n->shape.rank;
    if (dim < r - 2) return dim;
    bool t = ir_attr_bool(n, operand == 0 ? "transpose_a" : "transpose_b");
    int inner = operand == 0 ? r - 2 : r - 1; /* m of a, n of b: the dim that stays */
    bool stays = (dim == inner) != t;
    return stays ? inner : IR_AXIS_SUMMED;
}

/* embedding(tokens[...], w[vocab, h]) -> [..., h]: looking up a block of
 * the rows gives the rows of that block, zero elsewhere (a partial sum). */
int axis_embedding(const ir_node *n, int operand, int dim)
{
    if (operand == 0) return dim;
    return dim == 0 ? IR_AXIS_SUMMED : LAST(n);
}

/* The mean over tokens of a row-wise loss over the last dim. */
int axis_cross_entropy(const ir_node *n, int operand, int dim)
{
    return operand == 0 && dim == LAST(n->src[0]) ? IR_AXIS_MIXED : IR_AXIS_SUMMED;
}

/* A sum or mean of every element. */
int axis_summed(const ir_node *n, int operand, int dim)
{
    (void)n, (void)operand, (void)dim;
    return IR_AXIS_SUMMED;
}

/* matmul: a[..., k] x b[k, n] (b[n, k] with transpose_b) -> [..., n]; with
 * transpose_a, a[R..., m]^T x b[R..., n] -> [m, n]. */
int axis_matmul(const ir_node *n, int operand, int dim)
{
    bool last = dim == LAST(n->src[operand]);
    if (ir_attr_bool(n, "transpose_a")) return last ? operand : IR_AXIS_SUMMED;
    if (operand == 0) return last ? IR_AXIS_SUMMED : dim;
    int ndim = ir_attr_bool(n, "transpose_b") ? 0 : 1;
    return dim == ndim ? LAST(n) : IR_AXIS_SUMMED;
}

/* attention(q [b, n, s_q, d], k, v [b, g, s_k, d][, mask [b, s_k]]) -> [b, n, s_q, d]:
 * batch and heads stay (a block of the key/value heads serves the block of
 * query heads that reads it); the queries stay on dim 2 (mixed by a causal
 * mask, which numbers them); the keys and q's and k's head_dim are summed
 * inside the softmax; v's head_dim is the result's. */
int axis_attention(const ir_node *n, int operand, int dim)
{
    /* The attention pass's layouts come after tp and sp: no rule for them. */
    if (n && (ir_attn_in_layout(n) != IR_ATTN_BNSD || ir_attn_out_sbnd(n))) return IR_AXIS_MIXED;
    if (operand == 3) return dim == 0 ? 0 : IR_AXIS_MIXED;
    if (dim <= 1) return dim;
    if (operand == 0 && dim == 2) return ir_attr_bool(n, "causal") ? IR_AXIS_ALONG(2) : 2;
    if (operand == 2 && dim == 3) return 3;
    /* The keys leave the result as a product's contracted dim does (the
     * sequence axis of k and v ends here; a split of them is refused). */
    if (operand >= 1 && dim == 2) return IR_AXIS_SUMMED;
    return IR_AXIS_MIXED;
}
