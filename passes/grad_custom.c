/* Custom ops with a user-written backward, JAX's custom_vjp in IR
 * (docs/autodiff.md):
 *
 *   %c  = custom_out(%y, %x0, ..., %xk)   forward: %y, not differentiated
 *   %ct = cotangent(%c)                   stands for the gradient of %c
 *   ...  the backward body: ordinary IR using %ct, the xs, forward values
 *   %d  = custom_grad(%dx, %c) index=i    %dx is the gradient of %x<i>
 *
 * The backward body of %c is every node that depends on a cotangent of %c.
 * When the reverse walk reaches %c with gradient dy, the body nodes that a
 * custom_grad needs are cloned in order with the cotangent replaced by dy,
 * and each declared gradient is accumulated into its operand. Afterwards
 * the placeholders and the original bodies leave the graph, and custom_out
 * becomes its forward meaning, an identity (scale alpha=1): no pass after
 * autodiff sees a custom op. */
#include <stdlib.h>
#include <string.h>

#include "grad.h"
#include "support/util.h"

static bool user_error(ad_ctx *c, const ir_node *n, const char *what)
{
    diag_error(c->d, n->loc, "autodiff: '%%%s' (%s) %s", n->name, ir_op_name(n->op), what);
    return false;
}

/* The custom_out whose body n belongs to (from its operands), or -1. */
static bool owner_of(ad_ctx *c, const ir_node *n, int *owner)
{
    *owner = n->op == IR_OP_COTANGENT ? n->src[0]->id : -1;
    for (int s = 0; s < n->nsrc && n->op != IR_OP_COTANGENT; s++) {
        int o = c->owner[n->src[s]->id];
        if (o < 0 || o == *owner) continue;
        if (*owner >= 0) return user_error(c, n, "mixes the backward bodies of two custom ops");
        *owner = o;
    }
    return true;
}

/* One custom_grad: refers to a gradient of its own op's body or to a
 * forward value, and is the only one for its operand. */
static bool check_custom_grad(ad_ctx *c, const ir_node *n, uint64_t *declared)
{
    int o = c->owner[n->src[0]->id], id = n->src[1]->id;
    if (o >= 0 && o != id) return user_error(c, n, "declares a gradient computed in another custom op's backward");
    int64_t i = ir_attr_int(n, "index");
    if (i < 64 && (declared[id] >> i & 1)) return user_error(c, n, "declares a gradient given already");
    if (i < 64) declared[id] |= (uint64_t)1 << i;
    return true;
}

bool ad_custom_prepare(ad_ctx *c)
{
    bool ok = true;
    uint64_t *declared = xcalloc((size_t)c->nfwd + 1, sizeof *declared);
    for (int i = 0; i < c->nfwd; i++) {
        const ir_node *n = c->g->nodes[i];
        int o = -1;
        if (n->op == IR_OP_CUSTOM_GRAD) ok = check_custom_grad(c, n, declared) && ok;
        else ok = owner_of(c, n, &o) && ok;
        c->owner[i] = o;
        if (o < 0) continue;
        if (n->flags & (IR_NF_LOSS | IR_NF_OUTPUT))
            ok = user_error(c, n, "is part of a custom op's backward, so it cannot be the loss or an output") && ok;
        if (n->op == IR_OP_CUSTOM_OUT) ok = user_error(c, n, "is a custom op inside another's backward") && ok;
    }
    free(declared);
    return ok;
}

static ir_node *mapped(const ad_ctx *c, ir_node *v)
{
    return v->id < c->nfwd && c->owner[v->id] >= 0 ? c->clone[v->id] : v;
}

static bool declares(const ad_ctx *c, const ir_node *n, const ir_node *cust)
{
    return n->op == IR_OP_CUSTOM_GRAD && n->src[1] == cust &&
           ad_needs(c, cust->src[1 + ir_attr_int(n, "index")]);
}

/* c->mark: the body nodes of cust that a needed custom_grad depends on. */
static void body_mark(ad_ctx *c, const ir_node *cust)
{
    for (int j = c->nfwd - 1; j > cust->id; j--) {
        const ir_node *m = c->g->nodes[j];
        c->mark[j] = c->mark[j] && c->owner[j] == cust->id;
        if (!c->mark[j] && !declares(c, m, cust)) continue;
        for (int s = 0; s < m->nsrc; s++)
            if (c->owner[m->src[s]->id] == cust->id) c->mark[m->src[s]->id] = true;
    }
}

static ir_node *body_clone(ad_ctx *c, const ir_node *m)
{
    ir_node **src = xmalloc((size_t)m->nsrc * sizeof *src + 1);
    for (int s = 0; s < m->nsrc; s++) src[s] = mapped(c, m->src[s]);
    ir_node *b = ir_node_begin(c->g, m->op, m->nsrc, src, m->loc);
    free(src);
    memcpy(b->attrs, m->attrs, (size_t)ir_op_get(m->op)->nattrs * sizeof *b->attrs);
    int before = c->g->nnodes;
    ir_node *n = ad_end_named(c, b, m->name);
    if (n->id < before) return n; /* merged with an equal node */
    n->shard = m->shard;
    if (c->nclones == c->clones_cap) {
        c->clones_cap = c->clones_cap ? 2 * c->clones_cap : 16;
        c->clones = xrealloc(c->clones, (size_t)c->clones_cap * sizeof *c->clones);
    }
    c->clones[c->nclones++] = (ad_rename){n, m->name};
    return n;
}

void grad_custom_out(ad_ctx *c, ir_node *n, ir_node *dy)
{
    body_mark(c, n);
    for (int j = n->id + 1; j < c->nfwd; j++)
        if (c->mark[j]) {
            ir_node *m = c->g->nodes[j];
            c->clone[j] = m->op == IR_OP_COTANGENT ? dy : body_clone(c, m);
        }
    for (int j = n->id + 1; j < c->nfwd; j++) {
        ir_node *m = c->g->nodes[j];
        if (declares(c, m, n)) ad_accum(c, n->src[1 + ir_attr_int(m, "index")], mapped(c, m->src[0]));
    }
}

/* custom_out(y, xs...) becomes scale(y) alpha=1 in place: same name, flags,
 * location and annotations. */
static void lower_custom_out(ir_graph *g, ir_node *old)
{
    ir_node *s = ir_node_alloc(g, IR_OP_SCALE, 1);
    ir_node **src = s->src;
    ir_attr_val *attrs = s->attrs;
    *s = *old;
    s->op = IR_OP_SCALE;
    s->nsrc = 1;
    s->src = src;
    s->src[0] = old->src[0];
    s->attrs = attrs;
    ir_attr_set_float(s, "alpha", 1.0);
    g->nodes[old->id] = s;
    for (int i = old->id + 1; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nsrc; k++)
            if (g->nodes[i]->src[k] == old) g->nodes[i]->src[k] = s;
}

void ad_custom_finish(ad_ctx *c, bool *keep)
{
    ir_graph *g = c->g;
    for (int i = 0; i < c->nfwd; i++) {
        ir_op op = g->nodes[i]->op;
        keep[i] = c->owner[i] < 0 && op != IR_OP_COTANGENT && op != IR_OP_CUSTOM_GRAD;
    }
    for (int i = 0; i < c->nfwd; i++)
        if (g->nodes[i]->op == IR_OP_CUSTOM_OUT) lower_custom_out(g, g->nodes[i]);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; keep[i] && k < g->nodes[i]->nsrc; k++)
            if (!keep[g->nodes[i]->src[k]->id])
                ad_bug("autodiff: '%%%s' uses '%%%s', a custom op's placeholder or backward body",
                       g->nodes[i]->name, g->nodes[i]->src[k]->name);
}
