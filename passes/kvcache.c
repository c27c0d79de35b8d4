/* The kvcache pass: a forward graph over s positions becomes the graph of
 * one step of KV-cached generation over T new positions (docs/sampling.md).
 *
 * The pass tracks, for every value, which of its axes runs over the
 * sequence: the "query" axis (positions of this step: s of them become T)
 * and the "key" axis (every position cached so far: s of them, the cache's
 * length). The sources of the sequence the sp pass follows too
 * (rb_seq_source: the `tokens` and `labels` inputs on dim 0, an arange on
 * its axis; never a size) start it; every op moves the axes by its axis
 * rule (ops.def's axis column, ir/axis.c, which tp and sp read too): linears, norms,
 * embeddings and elementwise ops keep them, reshapes (by how the dims
 * factor) and permutes move them; a batched matmul whose right operand
 * runs over this step's positions reads that operand through a kv_cache
 * node instead, which writes the step's T positions into a persistent
 * buffer at [rt.pos, rt.pos + T) and yields all s of them (so scores become
 * [.., T, s] and the product with V [.., T, d]); grouped-query
 * attention's keys and values are cached before their repeat_interleave:
 * g heads, not n; a causal attention op reads its k and v through kv_cache
 * nodes the same way. Positions then start at rt.pos: the causal softmax
 * (and attention) lets query i see keys j <= i + rt.pos, arange counts from
 * rt.pos and rope rotates by i + rt.pos (their pos_offset attribute).
 *
 * Anything else that reads sequence positions — a softmax over cached keys
 * that is not causal, a padding mask, a slice, concat or reduction along
 * the sequence, a matmul contracting over this step's positions, an op
 * whose axis rule is NOAXIS — has no decoding rule and is an error naming
 * the node, as is a graph with a backward or an optimizer (the pass
 * decodes forward graphs).
 *
 * With T = s and rt.pos = 0 the step is the whole forward (the prefill of a
 * prompt, which also fills the cache); with T = 1 it is one decoding step.
 * The pass does nothing unless --kv-cache T (pass_options.kv_positions) is
 * given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rebuild.h"
#include "support/util.h"

/* The sequence axes of every value (rb_seq, the sp pass's too): q over
 * this step's positions, k over the cached ones. This pass refuses where
 * the sp pass would mark an axis lost, so neither is ever RB_SEQ_LOST. */
typedef struct kv_ctx {
    rb_ctx rb;
    rb_seq *ax; /* per old node id */
    int64_t s, t;
} kv_ctx;

static const rb_seq NONE = {RB_SEQ_NONE, RB_SEQ_NONE, NULL};

static bool has_seq(rb_seq a) { return a.q >= 0 || a.k >= 0; }

static bool kv_fail(kv_ctx *c, const ir_node *n, const char *why)
{
    return rb_fail(&c->rb, n, "%s '%%%s': %s", ir_op_name(n->op), n->name, why);
}

/* n's op over srcs with n's attributes and flags, and pos_offset set
 * (before the shape rule: a causal softmax's check depends on it);
 * reports at n and returns NULL on error. */
static ir_node *emit_pos(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    ir_node *m = ir_node_begin(c->rb.g, n->op, n->nsrc, srcs, n->loc);
    memcpy(m->attrs, n->attrs, (size_t)ir_op_get(n->op)->nattrs * sizeof *m->attrs);
    m->flags = n->flags;
    ir_attr_set_bool(m, "pos_offset", true);
    ir_node *r = ir_node_end(c->rb.g, m, n->name, c->rb.err, sizeof c->rb.err);
    if (!r) rb_fail(&c->rb, n, "%s", c->rb.err);
    return r;
}

static ir_node *finish(kv_ctx *c, const ir_node *old, ir_node *m, rb_seq a)
{
    if (!m) return NULL;
    m->fuse = old->fuse;
    c->rb.map[old->id] = m, c->ax[old->id] = a;
    return m;
}

/* ---- leaves ------------------------------------------------------------------------------- */

/* The sources of the sequence (rb_seq_source, shared with the sp pass)
 * shrink to this step's T positions along their sequence dim. */
static bool kv_leaf(kv_ctx *c, const ir_node *n)
{
    rb_seq a = NONE;
    ir_shape s = n->shape;
    rb_seq src = rb_seq_source(n);
    if (src.q >= 0) {
        if (s.dim[src.q] != c->s)
            return rb_fail(&c->rb, n, "%s '%%%s' runs over %lld positions along dim %d; the sequence (the "
                           "tokens' dim 0) has %lld", ir_op_name(n->op), n->name, (long long)s.dim[src.q],
                           src.q, (long long)c->s);
        a.q = src.q;
        s.dim[src.q] = c->t;
    }
    if (!rb_copy_leaf(&c->rb, n, &s, -1)) return false;
    ir_node *m = c->rb.map[n->id];
    if (n->op == IR_OP_ARANGE && a.q >= 0) ir_attr_set_bool(m, "pos_offset", true);
    finish(c, n, m, a);
    return true;
}

/* ---- ops that move the sequence axes ------------------------------------------------------ */

static bool kv_reshape(kv_ctx *c, const ir_node *n, ir_node *x)
{
    const ir_node *x0 = n->src[0];
    rb_seq ax = c->ax[x0->id], r = NONE;
    ir_shape s = n->shape;
    for (int w = 0; w < 2; w++) {
        int k = w ? ax.k : ax.q;
        if (k < 0) continue;
        int j = ir_axis_map(n, 0, k);
        /* The sequence must stay the outermost factor of the dim it lands in. */
        if (j < 0 || n->shape.dim[j] % x0->shape.dim[k] != 0)
            return kv_fail(c, n, "it mixes the sequence axis with the dims outside it");
        if (w) r.k = (int8_t)j;
        else {
            r.q = (int8_t)j;
            s.dim[j] = s.dim[j] / c->s * c->t;
        }
    }
    ir_node *m = ir_node_begin(c->rb.g, IR_OP_RESHAPE, 1, &x, n->loc);
    ir_attr_set_ints(m, "shape", s.dim, s.rank);
    m->flags = n->flags;
    ir_node *res = ir_node_end(c->rb.g, m, n->name, c->rb.err, sizeof c->rb.err);
    if (!res) return rb_fail(&c->rb, n, "%s", c->rb.err);
    finish(c, n, res, r);
    return true;
}

/* ---- attention ---------------------------------------------------------------------------- */

/* x (the new graph's value of old node x0) through a kv_cache along this
 * step's positions, dim q: all s positions cached so far. */
static ir_node *kv_cached(kv_ctx *c, const ir_node *x0, ir_node *x, int q, const ir_node *at)
{
    char name[1024];
    snprintf(name, sizeof name, "%s.kv_cache", x0->name);
    ir_node *m = ir_node_begin(c->rb.g, IR_OP_KV_CACHE, 1, &x, x0->loc);
    ir_attr_set_int(m, "axis", q);
    ir_attr_set_int(m, "len", c->s);
    ir_node *kv = ir_node_end(c->rb.g, m, name, c->rb.err, sizeof c->rb.err);
    if (!kv) rb_fail(&c->rb, at, "%s", c->rb.err);
    return kv;
}

/* bmm(A, B): B over this step's positions is read through its cache. */
static bool kv_bmm(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    const ir_node *a0 = n->src[0], *b0 = n->src[1];
    rb_seq A = c->ax[a0->id], Bx = c->ax[b0->id];
    int r = a0->shape.rank;
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    int am = ta ? r - 1 : r - 2, ak = ta ? r - 2 : r - 1, bk = tb ? r - 1 : r - 2, bn = tb ? r - 2 : r - 1;
    if ((A.q >= 0 && A.q < r - 2) || (A.k >= 0 && A.k < r - 2) || (Bx.q >= 0 && Bx.q < r - 2) ||
        (Bx.k >= 0 && Bx.k < r - 2))
        return kv_fail(c, n, "its batch dims run over the sequence");
    if (A.q == ak)
        return kv_fail(c, n, "it contracts over this step's positions (a product over the sequence that a "
                       "KV cache cannot split)");
    if (Bx.q >= 0) { /* keys or values: read through the cache */
        if (!(srcs[1] = kv_cached(c, b0, srcs[1], Bx.q, n))) return false;
        Bx = (rb_seq){RB_SEQ_NONE, Bx.q, NULL};
    }
    if ((A.k == ak) != (Bx.k == bk))
        return kv_fail(c, n, "it contracts cached positions with other values");
    rb_seq res = NONE;
    if (A.q == am) res.q = (int8_t)(r - 2);
    if (A.k == am) res.k = (int8_t)(r - 2);
    if (Bx.k == bn) res.k = (int8_t)(r - 1);
    return finish(c, n, rb_emit(&c->rb, n, n->op, 2, srcs, n->name, n->loc), res) != NULL;
}

static bool kv_softmax(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    rb_seq a = c->ax[n->src[0]->id];
    int r = n->shape.rank;
    if (a.q == r - 1) return kv_fail(c, n, "it normalises over this step's positions");
    if (a.k == r - 1) {
        if (n->nsrc == 2)
            return kv_fail(c, n, "it has a padding mask; a KV cache decodes causal attention only");
        if (!ir_attr_bool(n, "causal") || a.q != r - 2)
            return kv_fail(c, n, "it normalises over cached positions without a causal mask over [.., query, "
                           "key]: position i would see later positions");
    }
    ir_node *m = a.k == r - 1 ? emit_pos(c, n, srcs) : rb_emit(&c->rb, n, n->op, n->nsrc, srcs, n->name, n->loc);
    return finish(c, n, m, a) != NULL;
}

/* The fused op (the attention pass's, or the model's attention()): causal
 * attention whose queries, keys and values run over this step's positions
 * on dim 2 ([b, heads, s, d]) reads k and v through their caches (all s
 * positions, keys of the same heads: g of them under grouped-query
 * attention) and places its queries at rt.pos (pos_offset), as the
 * bmm/softmax chain does. */
/* One node of a layout copy the attention pass folded, made again. */
static ir_node *kv_copy(kv_ctx *c, const ir_node *at, ir_op op, ir_node *x, const int64_t *perm, int64_t start,
                        int64_t len, const char *suffix)
{
    char name[1024];
    snprintf(name, sizeof name, "%s.%s", at->name, suffix);
    ir_node *m = ir_node_begin(c->rb.g, op, 1, &x, at->loc);
    if (op == IR_OP_PERMUTE) ir_attr_set_ints(m, "perm", perm, 4);
    else ir_attr_set_int(m, "axis", 3), ir_attr_set_int(m, "start", start), ir_attr_set_int(m, "len", len);
    ir_node *r = ir_node_end(c->rb.g, m, name, c->rb.err, sizeof c->rb.err);
    if (!r) rb_fail(&c->rb, at, "%s", c->rb.err);
    return r;
}

/* An attention op in the attention pass's layouts (a plan's graph,
 * docs/attention.md "Layouts"): the caches hold [b, g, s, d], so the step
 * reads q, k and v through [b, heads, s, d] copies again and permutes the
 * output back, the op itself in the plain layout. */
static bool kv_attention_laid(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    static const int64_t to_bnsd[] = {1, 2, 0, 3}, to_sbnd[] = {2, 0, 1, 3};
    static const char *const names[][2] = {{"q_slice", "q_bnsd"}, {"k_slice", "k_bnsd"}, {"v_slice", "v_bnsd"}};
    ir_attn_layout l = ir_attn_in_layout(n);
    bool osb = ir_attn_out_sbnd(n);
    int64_t d = n->src[0]->shape.dim[3] / (l == IR_ATTN_PACKED ? 3 : 1);
    for (int i = 0; i < 3; i++) {
        rb_seq a = c->ax[n->src[i]->id];
        if (a.q != (l == IR_ATTN_BNSD ? 2 : 0) || a.k >= 0)
            return kv_fail(c, n, "its queries, keys and values do not all run over this step's positions on the "
                           "sequence dim");
        ir_node *x = srcs[i];
        if (l == IR_ATTN_PACKED && !(x = kv_copy(c, n, IR_OP_SLICE, x, NULL, i * d, d, names[i][0]))) return false;
        if (l != IR_ATTN_BNSD && !(x = kv_copy(c, n, IR_OP_PERMUTE, x, to_bnsd, 0, 0, names[i][1]))) return false;
        if (i > 0 && !(x = kv_cached(c, x, x, 2, n))) return false;
        srcs[i] = x;
    }
    if (!ir_attr_bool(n, "causal"))
        return kv_fail(c, n, "it attends over cached positions without a causal mask: position i would see later "
                       "positions");
    char name[1024];
    snprintf(name, sizeof name, "%s%s", n->name, osb ? ".bnsd" : "");
    ir_node *m = ir_node_begin(c->rb.g, n->op, n->nsrc, srcs, n->loc);
    memcpy(m->attrs, n->attrs, (size_t)ir_op_get(n->op)->nattrs * sizeof *m->attrs);
    m->flags = osb ? 0 : n->flags;
    ir_attr_set_bool(m, "pos_offset", true);
    TGC_ASSERT(ir_attr_set_sym(m, "layout", "bnsd") && ir_attr_set_sym(m, "out", "bnsd"));
    ir_node *r = ir_node_end(c->rb.g, m, name, c->rb.err, sizeof c->rb.err);
    if (!r) return rb_fail(&c->rb, n, "%s", c->rb.err), false;
    if (!osb) return finish(c, n, r, (rb_seq){2, RB_SEQ_NONE, NULL}) != NULL;
    char pn[1024];
    snprintf(pn, sizeof pn, "%s", n->name);
    ir_node *p = ir_node_begin(c->rb.g, IR_OP_PERMUTE, 1, &r, n->loc);
    ir_attr_set_ints(p, "perm", to_sbnd, 4);
    p->flags = n->flags;
    ir_node *o = ir_node_end(c->rb.g, p, pn, c->rb.err, sizeof c->rb.err);
    if (!o) return rb_fail(&c->rb, n, "%s", c->rb.err), false;
    return finish(c, n, o, (rb_seq){0, RB_SEQ_NONE, NULL}) != NULL;
}

static bool kv_attention(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    rb_seq q = c->ax[n->src[0]->id], k = c->ax[n->src[1]->id], v = c->ax[n->src[2]->id];
    if (n->nsrc > 3) return kv_fail(c, n, "it has a padding mask; a KV cache decodes causal attention only");
    if (ir_attn_in_layout(n) != IR_ATTN_BNSD || ir_attn_out_sbnd(n)) return kv_attention_laid(c, n, srcs);
    if (q.q != 2 || q.k >= 0 || k.q != 2 || k.k >= 0 || v.q != 2 || v.k >= 0)
        return kv_fail(c, n, "its queries, keys and values do not all run over this step's positions on dim 2 "
                       "([batch, heads, seq, head_dim])");
    if (!ir_attr_bool(n, "causal"))
        return kv_fail(c, n, "it attends over cached positions without a causal mask: position i would see later "
                       "positions");
    for (int i = 1; i < 3; i++)
        if (!(srcs[i] = kv_cached(c, n->src[i], srcs[i], 2, n))) return false;
    return finish(c, n, emit_pos(c, n, srcs), (rb_seq){2, RB_SEQ_NONE, NULL}) != NULL;
}

/* Grouped-query attention's keys and values, repeated along the heads for
 * the bmms that read them: the cache holds the g heads before the repeat
 * (g/n of the memory), and the repeat reads it. Only when every user of
 * the repeat is a bmm that reads it as its right operand (as keys or
 * values); otherwise the repeat follows its axis rule and a bmm after it
 * caches the repeated heads. A repeat along the sequence itself (each
 * position r times) has no decoding rule. */
static bool kv_repeat(kv_ctx *c, const ir_node *n, ir_node **srcs, bool *done)
{
    rb_seq a = c->ax[n->src[0]->id];
    int axis = (int)ir_attr_int(n, "axis");
    *done = false;
    if (a.q == axis || a.k == axis) return kv_fail(c, n, "it repeats the positions of the sequence");
    if (a.q < 0 || a.k >= 0) return true;
    bool read = false;
    for (int i = n->id + 1; i < c->rb.old->nnodes; i++) {
        const ir_node *u = c->rb.old->nodes[i];
        for (int k = 0; k < u->nsrc; k++) {
            if (u->src[k] != n) continue;
            if (u->op != IR_OP_BMM || k != 1 || u->src[0] == n) return true;
            read = true;
        }
    }
    if (!read || (n->flags & IR_NF_OUTPUT)) return true;
    ir_node *kv = kv_cached(c, n->src[0], srcs[0], a.q, n);
    if (!kv) return false;
    *done = true;
    rb_seq r = {RB_SEQ_NONE, a.q, NULL};
    return finish(c, n, rb_emit(&c->rb, n, n->op, 1, &kv, n->name, n->loc), r) != NULL;
}

/* ---- the rest ----------------------------------------------------------------------------- */

/* Every other op: the axes follow its axis rule (ops.def). This step's
 * positions may be summed into a scalar (the loss of this step); anything
 * else that sums, mixes or has no rule for an axis is refused. */
static bool kv_follow(kv_ctx *c, const ir_node *n, ir_node **srcs)
{
    int q[64], k[64];
    for (int i = 0; i < n->nsrc; i++) q[i] = c->ax[n->src[i]->id].q, k[i] = c->ax[n->src[i]->id].k;
    int rq = rb_follow(&c->rb, n, q, n->shape.rank == 0, "this step's positions");
    int rk = rq == -2 ? -2 : rb_follow(&c->rb, n, k, false, "the cached positions");
    if (rk == -2) return false;
    rb_seq a = {(int8_t)rq, (int8_t)rk, NULL};
    return finish(c, n, rb_emit(&c->rb, n, n->op, n->nsrc, srcs, n->name, n->loc), a) != NULL;
}

static bool kv_node(kv_ctx *c, const ir_node *n)
{
    if (ir_op_get(n->op)->flags & IR_OPF_LEAF) return kv_leaf(c, n);
    ir_node *srcs[64];
    if (n->nsrc > 64) return kv_fail(c, n, "too many operands");
    bool any = false;
    for (int i = 0; i < n->nsrc; i++) {
        srcs[i] = c->rb.map[n->src[i]->id];
        any |= has_seq(c->ax[n->src[i]->id]);
    }
    if (!any) return finish(c, n, rb_emit(&c->rb, n, n->op, n->nsrc, srcs, n->name, n->loc), NONE) != NULL;
    rb_seq a = c->ax[n->src[0]->id];
    switch (n->op) {
    case IR_OP_RESHAPE: return kv_reshape(c, n, srcs[0]);
    case IR_OP_BMM: return kv_bmm(c, n, srcs);
    case IR_OP_SOFTMAX: return kv_softmax(c, n, srcs);
    case IR_OP_ATTENTION: return kv_attention(c, n, srcs);
    case IR_OP_ROPE:
        if (a.q != 0 || a.k >= 0) return kv_fail(c, n, "its positions are not along dim 0");
        return finish(c, n, emit_pos(c, n, srcs), a) != NULL;
    case IR_OP_REPEAT_INTERLEAVE: {
        bool done;
        if (!kv_repeat(c, n, srcs, &done)) return false;
        return done || kv_follow(c, n, srcs);
    }
    default: return kv_follow(c, n, srcs);
    }
}

bool pass_kvcache(ir_graph *g, pass_ctx *ctx)
{
    int64_t t = ctx->opts ? ctx->opts->kv_positions : 0;
    if (t <= 0) return true;
    const ir_node *tok = rb_seq_tokens(g);
    int64_t s = tok ? tok->shape.dim[0] : 0;
    if (s <= 0) {
        diag_error_plain(ctx->d, "kvcache: model '%s' has no input 'tokens' (i32[seq, batch]) to take the sequence "
                         "from", g->model);
        return false;
    }
    if (t > s) {
        diag_error_plain(ctx->d, "kvcache: --kv-cache %lld is more positions than the model's sequence of %lld",
                         (long long)t, (long long)s);
        return false;
    }
    kv_ctx c;
    char what[64];
    snprintf(what, sizeof what, "kvcache (--kv-cache %lld)", (long long)t);
    rb_begin(&c.rb, g, t, what, ctx->d);
    c.rb.hint = " (the kvcache pass decodes forward graphs: after lowering, dce and fuse, before autodiff)";
    c.ax = xmalloc(((size_t)g->nnodes + 1) * sizeof *c.ax);
    c.s = s;
    c.t = t;
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->stage >= 0 && n->stage != g->nodes[0]->stage) {
            ok = kv_fail(&c, n, "the graph has pipeline stages; decode a serial graph");
            break;
        }
        ok = kv_node(&c, n);
    }
    free(c.ax);
    return rb_end(&c.rb, ok);
}
