/* The attention pass (docs/attention.md): after tp, sp and pp, before
 * autodiff, so that the backward of what it makes is the fused op's own
 * gradient rule (grad_attention: one attention_back), the way flash
 * attention is a custom autograd function rather than a rewrite of the
 * backward.
 *
 * It rewrites the attention core as the models write it,
 *
 *   s  = bmm(q, k) transpose_b        q [b, n, s_q, d], k [b, n, s_k, d]
 *   s' = scale(s) | mul(s, full)      optional: a constant factor
 *   p  = softmax(s'[, mask]) scale causal pos_offset
 *   p' = dropout(p) p key             optional
 *   o  = bmm(p', v)                   v [b, n, s_k, d]
 *
 * into o = attention(q, k, v[, mask]) with the product of the scales, causal,
 * pos_offset, the dropout's p and key (autodiff's key for a dropout that has
 * none yet: the fused op draws the mask that dropout would have), and o's
 * name, flags, location, shard, stage and chunk (the node is o, rewritten in
 * place, so names in dumps and checkpoints do not move). Grouped-query
 * attention written with the head repeat (repeat_interleave of k and v along
 * the heads, on [b, g, s, d] or before the permute to it) is absorbed: the
 * fused op reads the g un-repeated heads, and query head h reads key/value
 * head h / (n / g).
 *
 * It fires only where every replaced intermediate (s, s', p, p', and a
 * repeat it absorbs) has no other reader and is no output, so no value
 * anybody reads changes; elsewhere the chain stays as written.
 *
 * Then every attention op (the chain's and a model's attention()) reads q,
 * k and v in place where they are permutes of [s, b, heads, d] values
 * (layout=sbnd) or of the slices of one packed [s, b, n, 3d] tensor
 * (layout=packed), and writes its output as [s, b, n, d] where a permute
 * back is its one reader (out=sbnd): the copies go (docs/attention.md,
 * "Layouts"; --no-attention-inplace and a KV-cached step keep them). Every
 * attention op gets backend=auto|tgc|cudnn, the --attention-backend chosen
 * (ir/ops.def; the runtime reads it off the op). With --attention-backend
 * unfused the pass is off (its gate) and the graph keeps the chain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

static const char *const backend_names[] = {[PASS_ATTENTION_AUTO] = "auto", [PASS_ATTENTION_TGC] = "tgc",
                                            [PASS_ATTENTION_CUDNN] = "cudnn", [PASS_ATTENTION_UNFUSED] = "unfused"};

bool pass_attention_backend_parse(const char *name, int *out)
{
    for (int i = 0; i < (int)ARRAY_LEN(backend_names); i++)
        if (name && strcmp(name, backend_names[i]) == 0) {
            *out = i;
            return true;
        }
    return false;
}

typedef struct at_ctx {
    ir_graph *g;
    int *start, *user; /* readers of node i: user[start[i] .. start[i + 1]) */
    bool *dead;        /* by id: replaced, removed at the end */
} at_ctx;

static void uses_build(at_ctx *c)
{
    int n = c->g->nnodes, edges = 0;
    c->start = xcalloc((size_t)n + 2, sizeof *c->start);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c->g->nodes[i]->nsrc; k++, edges++) c->start[c->g->nodes[i]->src[k]->id + 2]++;
    for (int i = 2; i <= n + 1; i++) c->start[i] += c->start[i - 1];
    c->user = xmalloc(((size_t)edges + 1) * sizeof *c->user);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < c->g->nodes[i]->nsrc; k++) c->user[c->start[c->g->nodes[i]->src[k]->id + 1]++] = i;
}

static int nusers(const at_ctx *c, const ir_node *n) { return c->start[n->id + 1] - c->start[n->id]; }

/* An intermediate the rewrite may remove: read once (by the next op of the
 * chain), no output or loss, not removed already. */
static bool private_value(const at_ctx *c, const ir_node *n)
{
    return !c->dead[n->id] && nusers(c, n) == 1 && !(n->flags & (IR_NF_OUTPUT | IR_NF_LOSS));
}

/* n = alpha * x: a scale, or a mul by a `full` constant. */
static bool const_factor(const ir_node *n, ir_node **x, double *alpha)
{
    if (n->op == IR_OP_SCALE) {
        *x = n->src[0];
        *alpha = ir_attr_float(n, "alpha");
        return true;
    }
    if (n->op != IR_OP_MUL) return false;
    for (int k = 0; k < 2; k++)
        if (n->src[k]->op == IR_OP_FULL && n->src[1 - k]->op != IR_OP_FULL &&
            ir_shape_eq(&n->src[1 - k]->shape, &n->shape)) {
            *x = n->src[1 - k];
            *alpha = ir_attr_float(n->src[k], "value");
            return true;
        }
    return false;
}

/* The matched chain, from the final product back. */
typedef struct at_chain {
    ir_node *pv, *drop, *sm, *factor, *qk;
    ir_node *q, *k, *v, *mask;
    double alpha;
} at_chain;

/* o = bmm(p', v) with p' = [dropout](softmax([alpha *] bmm(q, k^T))), each
 * intermediate private, all of rank 4 and one dtype. */
static bool match(const at_ctx *c, ir_node *pv, at_chain *m)
{
    memset(m, 0, sizeof *m);
    m->alpha = 1;
    if (pv->op != IR_OP_BMM || pv->shape.rank != 4 || ir_attr_bool(pv, "transpose_a") ||
        ir_attr_bool(pv, "transpose_b"))
        return false;
    m->pv = pv;
    ir_node *x = pv->src[0];
    if (x->op == IR_OP_DROPOUT) {
        if (!private_value(c, x)) return false;
        m->drop = x;
        x = x->src[0];
    }
    if (x->op != IR_OP_SOFTMAX || !private_value(c, x)) return false;
    m->sm = x;
    m->mask = x->nsrc > 1 ? x->src[1] : NULL;
    x = x->src[0];
    ir_node *inner;
    if (const_factor(x, &inner, &m->alpha)) {
        if (!private_value(c, x)) return false;
        m->factor = x;
        x = inner;
    }
    if (x->op != IR_OP_BMM || !private_value(c, x) || ir_attr_bool(x, "transpose_a") ||
        !ir_attr_bool(x, "transpose_b"))
        return false;
    m->qk = x;
    m->q = x->src[0], m->k = x->src[1], m->v = pv->src[1];
    const ir_node *all[] = {m->q, m->k, m->v};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        if (all[i]->shape.rank != 4 || all[i]->dtype != pv->dtype) return false;
    /* attention's k and v have one shape: v's head_dim is k's. */
    return ir_shape_eq(&m->k->shape, &m->v->shape);
}

/* ---- grouped-query attention: the head repeat ------------------------------------------- */

/* x read by a private repeat of `repeats` along `axis`: x, else NULL. */
static ir_node *unrepeated(const at_ctx *c, ir_node *r, int axis, int64_t *repeats)
{
    if (r->op != IR_OP_REPEAT_INTERLEAVE || !private_value(c, r) || ir_attr_int(r, "axis") != axis)
        return NULL;
    *repeats = ir_attr_int(r, "repeats");
    return r->src[0];
}

/* Where k (or v) [b, n, s, d] is the repeat of [b, g, s, d] along the heads,
 * directly or before a private permute that takes its heads to dim 1: the
 * node the fused op reads instead (the permute then permutes the
 * un-repeated value, in place), and *repeats; else k itself, *repeats 1. */
static ir_node *head_source(at_ctx *c, ir_node *k, int64_t *repeats, ir_node **dies, ir_node **permute)
{
    *repeats = 1, *dies = NULL, *permute = NULL;
    ir_node *x = unrepeated(c, k, 1, repeats);
    if (x) {
        *dies = k;
        return x;
    }
    if (k->op != IR_OP_PERMUTE || !private_value(c, k)) return k;
    int np;
    const int64_t *perm = ir_attr_ints(k, "perm", &np);
    if (np != 4 || !(x = unrepeated(c, k->src[0], (int)perm[1], repeats))) return k;
    *dies = k->src[0];
    *permute = k;
    return x;
}

/* Reads k and v un-repeated where both come through the same repeat of
 * their heads (k and v must keep one shape). */
static void absorb_repeat(at_ctx *c, at_chain *m)
{
    int64_t rk, rv;
    ir_node *dk, *dv, *pk, *pvm;
    ir_node *k = head_source(c, m->k, &rk, &dk, &pk), *v = head_source(c, m->v, &rv, &dv, &pvm);
    if (rk <= 1 || rk != rv || k == v || !ir_shape_eq(&k->shape, &v->shape)) return;
    ir_node *perm[2] = {pk, pvm};
    ir_node *src[2] = {k, v};
    for (int i = 0; i < 2; i++)
        if (perm[i]) { /* permute(repeat(x)) -> permute(x): the heads g on dim 1 */
            char err[256];
            perm[i]->src[0] = src[i];
            TGC_ASSERT(ir_op_get(IR_OP_PERMUTE)->shape(perm[i], err, sizeof err));
            src[i] = perm[i];
        }
    c->dead[dk->id] = c->dead[dv->id] = true;
    m->k = src[0], m->v = src[1];
}

/* ---- the rewrite -------------------------------------------------------------------------- */

/* The dropout mask the fused op draws: the dropout's own key, or the one
 * autodiff would give it (from its name). */
static int64_t mask_key(const ir_node *drop)
{
    int64_t key = ir_attr_int(drop, "key");
    return key ? key : pass_dropout_key(drop->name);
}

/* A full constant that only dead nodes read dies too. */
static void drop_unused_full(at_ctx *c, const ir_node *f)
{
    for (int j = 0; f && j < f->nsrc; j++) {
        const ir_node *k = f->src[j];
        if (k->op != IR_OP_FULL || (k->flags & (IR_NF_OUTPUT | IR_NF_LOSS))) continue;
        bool used = false;
        for (int u = c->start[k->id]; u < c->start[k->id + 1]; u++) used |= !c->dead[c->user[u]];
        if (!used) c->dead[k->id] = true;
    }
}

/* o becomes attention(q, k, v[, mask]) in place: it keeps its name, flags,
 * location, shard, stage and chunk. */
static bool rewrite(at_ctx *c, at_chain *m, diag *d)
{
    ir_node *o = m->pv;
    double scale = ir_attr_float(m->sm, "scale") * m->alpha;
    bool causal = ir_attr_bool(m->sm, "causal"), pos = ir_attr_bool(m->sm, "pos_offset");
    double p = m->drop ? ir_attr_float(m->drop, "p") : 0;
    int64_t key = m->drop ? mask_key(m->drop) : 0;
    ir_node *shell = ir_node_alloc(c->g, IR_OP_ATTENTION, m->mask ? 4 : 3);
    shell->src[0] = m->q, shell->src[1] = m->k, shell->src[2] = m->v;
    if (m->mask) shell->src[3] = m->mask;
    ir_shape before = o->shape;
    ir_dtype type = o->dtype;
    o->op = IR_OP_ATTENTION;
    o->nsrc = shell->nsrc;
    o->src = shell->src;
    o->attrs = shell->attrs;
    ir_attr_set_float(o, "scale", scale);
    ir_attr_set_bool(o, "causal", causal);
    ir_attr_set_bool(o, "pos_offset", pos);
    ir_attr_set_float(o, "p", p);
    ir_attr_set_int(o, "key", key);
    char err[512];
    if (!ir_op_get(IR_OP_ATTENTION)->shape(o, err, sizeof err) || o->dtype != type || !ir_shape_eq(&o->shape, &before)) {
        diag_error(d, o->loc, "attention: fusing '%%%s': %s", o->name, err);
        return false;
    }
    ir_node *gone[] = {m->qk, m->factor, m->sm, m->drop};
    for (size_t i = 0; i < ARRAY_LEN(gone); i++)
        if (gone[i]) c->dead[gone[i]->id] = true;
    drop_unused_full(c, m->factor);
    return true;
}

/* ---- layouts: q, k, v read and the output written in place ------------------------------ */

static bool perm_is(const ir_node *x, int a, int b, int c3, int d)
{
    int np;
    const int64_t *p = x->op == IR_OP_PERMUTE ? ir_attr_ints(x, "perm", &np) : NULL;
    return p && np == 4 && p[0] == a && p[1] == b && p[2] == c3 && p[3] == d;
}

/* y where x = permute(y, [1, 2, 0, 3]) is private: the operand read in
 * place, [s, b, heads, d]; else NULL. */
static ir_node *seq_first(const at_ctx *c, ir_node *x)
{
    return perm_is(x, 1, 2, 0, 3) && private_value(c, x) && x->src[0]->shape.rank == 4 ? x->src[0] : NULL;
}

/* X where y[0], y[1], y[2] are private slices of X's last dim at 0, d and
 * 2d with X [s, b, n, 3d] (the fused QKV projection, Megatron's per-head
 * packing); else NULL. */
static ir_node *packed_source(const at_ctx *c, ir_node *const *y)
{
    ir_node *x = y[0]->op == IR_OP_SLICE ? y[0]->src[0] : NULL;
    if (!x || x->shape.rank != 4) return NULL;
    int64_t d = y[0]->shape.dim[3];
    if (x->shape.dim[3] != 3 * d) return NULL;
    for (int i = 0; i < 3; i++)
        if (y[i]->op != IR_OP_SLICE || y[i]->src[0] != x || !private_value(c, y[i]) ||
            ir_attr_int(y[i], "axis") != 3 || ir_attr_int(y[i], "start") != i * d || ir_attr_int(y[i], "len") != d)
            return NULL;
    return x;
}

/* Attention a reads its q, k and v where they come from: where all three
 * are the private permute [1, 2, 0, 3] of a [s, b, heads, d] value, it reads
 * those values (layout=sbnd), and where those are the three slices of one
 * packed [s, b, n, 3d] tensor, that tensor (layout=packed); the permutes
 * (and slices) go. Anything else stays as it is. */
static void fold_inputs(at_ctx *c, ir_node *a)
{
    if (ir_attn_in_layout(a) != IR_ATTN_BNSD) return;
    ir_node *y[3];
    for (int i = 0; i < 3; i++)
        if (!(y[i] = seq_first(c, a->src[i]))) return;
    if (y[0] == y[1] || y[0] == y[2] || y[1] == y[2]) return;
    ir_node *x = packed_source(c, y);
    for (int i = 0; i < 3; i++) {
        c->dead[a->src[i]->id] = true;
        if (x) c->dead[y[i]->id] = true;
        a->src[i] = x ? x : y[i];
    }
    TGC_ASSERT(ir_attr_set_sym(a, "layout", x ? "packed" : "sbnd"));
    char err[512];
    TGC_ASSERT(ir_op_get(IR_OP_ATTENTION)->shape(a, err, sizeof err));
}

/* Attention a writes its output as [s, b, n, d] where its one reader is a
 * private permute [2, 0, 1, 3] (Megatron's activations again): the
 * permute's readers read a, and the permute goes. */
static void fold_output(at_ctx *c, ir_node *a)
{
    if (ir_attn_out_sbnd(a) || (a->flags & (IR_NF_OUTPUT | IR_NF_LOSS)) || nusers(c, a) != 1) return;
    ir_node *p = c->g->nodes[c->user[c->start[a->id]]];
    if (!perm_is(p, 2, 0, 1, 3) || c->dead[p->id] || (p->flags & (IR_NF_OUTPUT | IR_NF_LOSS))) return;
    TGC_ASSERT(ir_attr_set_sym(a, "out", "sbnd"));
    char err[512];
    TGC_ASSERT(ir_op_get(IR_OP_ATTENTION)->shape(a, err, sizeof err));
    TGC_ASSERT(ir_shape_eq(&a->shape, &p->shape));
    a->shard = p->shard; /* p's value, the same [s, b, n, d] */
    for (int u = c->start[p->id]; u < c->start[p->id + 1]; u++) {
        ir_node *r = c->g->nodes[c->user[u]];
        for (int k = 0; k < r->nsrc; k++)
            if (r->src[k] == p) r->src[k] = a;
    }
    c->dead[p->id] = true;
}

bool pass_attention(ir_graph *g, pass_ctx *ctx)
{
    if (ctx->opts && ctx->opts->attention_backend == PASS_ATTENTION_UNFUSED) return true;
    at_ctx c = {.g = g, .dead = xcalloc((size_t)g->nnodes + 1, sizeof(bool))};
    uses_build(&c);
    bool ok = true;
    for (int i = 0; ok && i < g->nnodes; i++) {
        at_chain m;
        if (c.dead[i] || !match(&c, g->nodes[i], &m)) continue;
        absorb_repeat(&c, &m);
        ok = rewrite(&c, &m, ctx->d);
    }
    /* In place (not in a KV-cached step: the kvcache pass caches k and v
     * as [b, g, s, d]). Every attention op, the chain's and the model's. */
    bool inplace = !ctx->opts || (ctx->opts->attention_inplace && ctx->opts->kv_positions == 0);
    for (int i = 0; ok && inplace && i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_ATTENTION && !c.dead[i]) {
            fold_inputs(&c, g->nodes[i]);
            fold_output(&c, g->nodes[i]);
        }
    /* The backend chosen is each op's own attribute (its gradient copies
     * it), which the runtime reads; nothing asks the pass's record. */
    const char *backend = backend_names[ctx->opts ? ctx->opts->attention_backend : PASS_ATTENTION_AUTO];
    for (int i = 0; ok && i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_ATTENTION && !c.dead[i]) TGC_ASSERT(ir_attr_set_sym(g->nodes[i], "backend", backend));
    if (ok) {
        bool *keep = xmalloc(((size_t)g->nnodes + 1) * sizeof *keep);
        for (int i = 0; i < g->nnodes; i++) keep[i] = !c.dead[i];
        ir_graph_compact(g, keep);
        free(keep);
    }
    free(c.dead);
    free(c.start);
    free(c.user);
    return ok;
}
