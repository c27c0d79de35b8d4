/* Reverse-mode automatic differentiation (docs/autodiff.md).
 *
 * One reverse walk over the forward graph. The loss's gradient is seeded
 * with a `full` 1.0 named grad.<loss>; then, from the last node to the
 * first, every node that received a gradient hands it to its op's rule
 * (ops.def's 7th column, dispatched through a table built from the op
 * table), which emits ordinary IR for the gradients of its operands and
 * accumulates them through ad_accum. Topological order means a node's
 * gradient is complete when the walk reaches it.
 *
 * Only values that depend on a parameter get gradients (floats; inputs and
 * integer tensors never). Afterwards every parameter has exactly one
 * gradient node named grad.<param>, flagged output: its accumulated
 * gradient, a copy of it where that node is not the parameter's alone, or
 * a `full` 0 of its shape when the parameter does not reach the loss. The
 * seed is flagged `seed` (IR_NF_SEED), which the passes after autodiff,
 * codegen and the FLOPs count ask instead of its name; a graph that has a
 * seed already is left as it is.
 *
 * Dropout keys: every dropout with key 0 gets a stable key from its name
 * first, and dropout_back copies it, so both use one mask. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grad.h"
#include "support/util.h"

static const ad_rule rules[IR_OP_COUNT] = {
#define NOGRAD NULL
#define OP(e, mn, lo, hi, attrs, shape, grad, flops, axis, flags) [IR_OP_##e] = grad,
#include "ir/ops.def"
#undef NOGRAD
};

struct ad_split {
    ad_split *next;
    ir_node *slice, *dy;
};

_Noreturn void ad_bug(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tgc_assert_fail(__FILE__, __LINE__, msg);
}

static const char *type_of(const ir_node *n, char *buf, size_t len)
{
    ir_type_str(n->dtype, &n->shape, buf, len);
    return buf;
}

/* ---- building backward nodes ------------------------------------------ */

bool ad_needs(const ad_ctx *c, const ir_node *x)
{
    return x->id >= 0 && x->id < c->nfwd && c->req[x->id];
}

ir_node *ad_op(ad_ctx *c, ir_op op, int nsrc, ir_node *const *src)
{
    return ir_node_begin(c->g, op, nsrc, src, c->cur->loc);
}

ir_node *ad_op1(ad_ctx *c, ir_op op, ir_node *a) { return ad_op(c, op, 1, &a); }
ir_node *ad_op2(ad_ctx *c, ir_op op, ir_node *a, ir_node *b) { return ad_op(c, op, 2, (ir_node *[]){a, b}); }
ir_node *ad_op3(ad_ctx *c, ir_op op, ir_node *a, ir_node *b, ir_node *d)
{
    return ad_op(c, op, 3, (ir_node *[]){a, b, d});
}

ir_node *ad_true(ir_node *b, const char *attr)
{
    ir_attr_set_bool(b, attr, true);
    return b;
}

void ad_same_attrs(ir_node *b, const ir_node *from)
{
    const ir_op_info *to = ir_op_get(b->op), *fi = ir_op_get(from->op);
    for (int i = 0; i < to->nattrs; i++) {
        int k = ir_op_attr_index(from->op, to->attrs[i].name);
        if (k >= 0 && fi->attrs[k].kind == to->attrs[i].kind) b->attrs[i] = from->attrs[k];
    }
}

static ir_node *finish(ad_ctx *c, ir_node *b, const char *name, const ir_node *of)
{
    char err[512];
    int before = c->g->nnodes;
    ir_node *n = ir_node_end(c->g, b, name, err, sizeof err);
    if (!n)
        ad_bug("autodiff: the gradient rule of %s ('%%%s') built an ill-typed node: %s", ir_op_name(c->cur->op),
               c->cur->name, err);
    if (n->id >= before) { /* new, not merged with an earlier node */
        n->stage = c->cur->stage;
        n->chunk = c->cur->chunk;
        if (of) n->shard = of->shard;
    }
    return n;
}

ir_node *ad_end(ad_ctx *c, ir_node *b, const ir_node *of)
{
    char name[512];
    snprintf(name, sizeof name, "grad.%s", of->name);
    return finish(c, b, name, of);
}

ir_node *ad_end_named(ad_ctx *c, ir_node *b, const char *name) { return finish(c, b, name, NULL); }

ir_node *ad_full(ad_ctx *c, const char *base, ir_dtype t, const ir_shape *s, double value, const ir_node *like)
{
    const char *name = base;
    for (int k = 1; ir_graph_find(c->g, name); k++) name = arena_printf(&c->scratch, "%s.%d", base, k);
    ir_node *n = ir_leaf_new(c->g, IR_OP_FULL, name, t, s, like->loc);
    TGC_ASSERT(n);
    ir_attr_set_float(n, "value", value);
    n->stage = like->stage;
    n->chunk = like->chunk;
    if (ir_shape_eq(s, &like->shape)) n->shard = like->shard;
    return n;
}

/* ---- accumulation -------------------------------------------------------- */

void ad_accum(ad_ctx *c, ir_node *x, ir_node *gx)
{
    char bx[96], bg[96];
    if (!ir_shape_eq(&gx->shape, &x->shape) || gx->dtype != x->dtype)
        ad_bug("autodiff: the gradient rule of %s ('%%%s') gives '%%%s' of type %s as the gradient of '%%%s' "
               "of type %s", ir_op_name(c->cur->op), c->cur->name, gx->name, type_of(gx, bg, sizeof bg), x->name,
               type_of(x, bx, sizeof bx));
    if (!ad_needs(c, x)) return;
    ir_node **slot = &c->grad[x->id];
    *slot = *slot ? ad_end(c, ad_op2(c, IR_OP_ADD, *slot, gx), x) : gx;
}

void ad_emit(ad_ctx *c, ir_node *x, ir_node *b) { ad_accum(c, x, ad_end(c, b, x)); }

/* ---- splits: slices that tile their operand along one axis ------------- */

static int cmp_start(const void *a, const void *b)
{
    int64_t sa = ir_attr_int(*(ir_node *const *)a, "start"), sb = ir_attr_int(*(ir_node *const *)b, "start");
    return (sa > sb) - (sa < sb);
}

/* The forward slices of x along axis, sorted by start (malloc'd; *count),
 * or NULL when they do not tile x exactly or are fewer than two. */
static ir_node **split_parts(const ad_ctx *c, const ir_node *x, int64_t axis, int *count)
{
    int lo = c->use_off[x->id], hi = c->use_off[x->id + 1], k = 0;
    ir_node **parts = xmalloc((size_t)(hi - lo + 1) * sizeof *parts);
    for (int u = lo; u < hi; u++) {
        ir_node *s = c->g->nodes[c->uses[u]];
        if (s->op == IR_OP_SLICE && c->owner[s->id] < 0 && ir_attr_int(s, "axis") == axis) parts[k++] = s;
    }
    qsort(parts, (size_t)k, sizeof *parts, cmp_start);
    int64_t at = 0;
    for (int i = 0; i < k && at >= 0; i++)
        at = ir_attr_int(parts[i], "start") == at ? at + ir_attr_int(parts[i], "len") : -1;
    if (k < 2 || at != x->shape.dim[axis]) {
        free(parts);
        return NULL;
    }
    *count = k;
    return parts;
}

bool ad_defer_split(ad_ctx *c, ir_node *slice, ir_node *dy)
{
    int count;
    ir_node *x = slice->src[0];
    ir_node **parts = split_parts(c, x, ir_attr_int(slice, "axis"), &count);
    if (!parts) return false;
    free(parts);
    ad_split *s = arena_alloc(&c->scratch, sizeof *s);
    *s = (ad_split){c->split[x->id], slice, dy};
    c->split[x->id] = s;
    return true;
}

static ir_node *split_grad_of(const ad_split *list, const ir_node *slice)
{
    for (; list; list = list->next)
        if (list->slice == slice) return list->dy;
    return NULL;
}

/* The deferred slice gradients of x along one axis: one concat (zeros for
 * the parts without a gradient), or a pad when only one part has one. */
static void split_flush_axis(ad_ctx *c, ir_node *x, const ad_split *list, int64_t axis)
{
    int count, have = 0;
    ir_node **parts = split_parts(c, x, axis, &count);
    TGC_ASSERT(parts);
    const ad_split *one = NULL;
    for (const ad_split *s = list; s; s = s->next)
        if (ir_attr_int(s->slice, "axis") == axis) { have++; one = s; }
    if (have == 1) {
        ad_emit(c, x, ad_slice_pad(c, one->slice, one->dy));
    } else {
        for (int i = 0; i < count; i++) {
            ir_node *dy = split_grad_of(list, parts[i]);
            char base[512];
            snprintf(base, sizeof base, "grad.%s", parts[i]->name);
            parts[i] = dy ? dy : ad_full(c, base, parts[i]->dtype, &parts[i]->shape, 0.0, parts[i]);
        }
        ir_node *b = ad_op(c, IR_OP_CONCAT, count, parts);
        ir_attr_set_int(b, "axis", axis);
        ad_emit(c, x, b);
    }
    free(parts);
}

static void split_flush(ad_ctx *c, ir_node *x)
{
    ad_split *list = c->split[x->id];
    c->split[x->id] = NULL;
    for (const ad_split *s = list; s; s = s->next) {
        int64_t axis = ir_attr_int(s->slice, "axis");
        bool first = true; /* handle each axis once, at its latest entry */
        for (const ad_split *t = list; t != s; t = t->next)
            if (ir_attr_int(t->slice, "axis") == axis) first = false;
        if (first) split_flush_axis(c, x, list, axis);
    }
}

/* The complete gradient of forward node x, or NULL. */
static ir_node *grad_of(ad_ctx *c, ir_node *x)
{
    if (c->split[x->id]) {
        ir_node *cur = c->cur;
        c->cur = x;
        split_flush(c, x);
        c->cur = cur;
    }
    return c->grad[x->id];
}

/* ---- setup ------------------------------------------------------------- */

/* A dropout's mask is keyed by its name, so any partition draws the same;
 * so is the mask of an attention written in the model (the attention pass
 * gives a fused one its dropout's key). */
static void dropout_keys(ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *n = g->nodes[i];
        if ((n->op != IR_OP_DROPOUT && n->op != IR_OP_ATTENTION) || ir_attr_int(n, "key") != 0) continue;
        ir_attr_set_int(n, "key", pass_dropout_key(n->name));
    }
}

static void users_build(ad_ctx *c)
{
    int n = c->nfwd;
    c->use_off = xcalloc((size_t)n + 2, sizeof *c->use_off);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < c->g->nodes[i]->nsrc; s++) c->use_off[c->g->nodes[i]->src[s]->id + 2]++;
    for (int i = 0; i < n; i++) c->use_off[i + 2] += c->use_off[i + 1];
    c->uses = xmalloc(((size_t)c->use_off[n + 1] + 1) * sizeof *c->uses);
    for (int i = 0; i < n; i++)
        for (int s = 0; s < c->g->nodes[i]->nsrc; s++) c->uses[c->use_off[c->g->nodes[i]->src[s]->id + 1]++] = i;
}

/* Which values need a gradient: floats that depend on a parameter, outside
 * the custom ops' backward bodies. A custom_out's result (operand 0) is not
 * differentiated, so only its other operands count. */
static void requires_grad(ad_ctx *c)
{
    for (int i = 0; i < c->nfwd; i++) {
        const ir_node *n = c->g->nodes[i];
        bool r = n->op == IR_OP_PARAM;
        for (int s = n->op == IR_OP_CUSTOM_OUT ? 1 : 0; s < n->nsrc && !r; s++) r = c->req[n->src[s]->id];
        c->req[i] = r && ir_dtype_is_float(n->dtype) && c->owner[i] < 0 && n->op != IR_OP_COTANGENT &&
                    n->op != IR_OP_CUSTOM_GRAD;
    }
}

static void ctx_init(ad_ctx *c, ir_graph *g, diag *d)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->d = d;
    c->nfwd = g->nnodes;
    size_t n = (size_t)g->nnodes + 1;
    c->req = xcalloc(n, sizeof *c->req);
    c->grad = xcalloc(n, sizeof *c->grad);
    c->split = xcalloc(n, sizeof *c->split);
    c->owner = xcalloc(n, sizeof *c->owner);
    c->clone = xcalloc(n, sizeof *c->clone);
    c->mark = xcalloc(n, sizeof *c->mark);
    arena_init(&c->scratch);
    c->ok = true;
}

static void ctx_free(ad_ctx *c)
{
    free(c->req);
    free(c->grad);
    free(c->split);
    free(c->owner);
    free(c->clone);
    free(c->mark);
    free(c->use_off);
    free(c->uses);
    free(c->clones);
    arena_free(&c->scratch);
}

/* ---- the walk ------------------------------------------------------------ */

static void walk(ad_ctx *c, ir_node *loss)
{
    char name[512];
    snprintf(name, sizeof name, "grad.%s", loss->name);
    c->grad[loss->id] = ad_full(c, name, loss->dtype, &loss->shape, 1.0, loss);
    c->grad[loss->id]->flags |= IR_NF_SEED; /* where the backward starts: the passes after ask this flag, not the name */
    for (int i = c->nfwd - 1; i >= 0; i--) {
        ir_node *n = c->g->nodes[i];
        ir_node *dy = grad_of(c, n);
        if (!dy) continue;
        c->cur = n;
        if (rules[n->op]) {
            rules[n->op](c, n, dy);
        } else if (!(ir_op_get(n->op)->flags & IR_OPF_LEAF)) {
            diag_error(c->d, n->loc, "autodiff: '%%%s' (%s) has no gradient rule, but the loss depends on a "
                       "parameter through it", n->name, ir_op_name(n->op));
            c->ok = false;
        }
    }
}

/* ---- parameters' gradients and names ------------------------------------- */

/* An identity copy (scale 1) of gx that CSE does not merge. */
static ir_node *copy_of(ad_ctx *c, ir_node *gx, const ir_node *p, const char *name)
{
    bool cse = c->g->cse;
    c->g->cse = false;
    ir_node *b = ad_op1(c, IR_OP_SCALE, gx);
    ir_attr_set_float(b, "alpha", 1.0);
    ir_node *n = finish(c, b, name, p);
    c->g->cse = cse;
    return n;
}

static void rename_add(ad_rename **list, int *n, int *cap, ir_node *node, const char *to)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *list = xrealloc(*list, (size_t)*cap * sizeof **list);
    }
    (*list)[(*n)++] = (ad_rename){node, to};
}

/* Gives each listed node its name at once. Whoever held a wanted name
 * takes a name the listed nodes give up (a permutation of names, so the
 * graph's name map stays valid until the caller rebuilds it). */
static void renames_apply(ir_graph *g, const ad_rename *r, int n)
{
    bool *listed = xcalloc((size_t)g->nnodes, sizeof *listed), *holds = xcalloc((size_t)g->nnodes, sizeof *holds);
    ir_node **holder = xcalloc((size_t)n + 1, sizeof *holder);
    const char **freed = xcalloc((size_t)n + 1, sizeof *freed);
    for (int i = 0; i < n; i++) listed[r[i].n->id] = true;
    for (int i = 0; i < n; i++) {
        holder[i] = ir_graph_find(g, r[i].to);
        if (holder[i]) holds[holder[i]->id] = true;
    }
    int nfreed = 0, k = 0;
    for (int i = 0; i < n; i++)
        if (!holds[r[i].n->id]) freed[nfreed++] = r[i].n->name;
    for (int i = 0; i < n; i++) r[i].n->name = r[i].to;
    for (int i = 0; i < n; i++)
        if (holder[i] && !listed[holder[i]->id]) {
            TGC_ASSERT(k < nfreed);
            holder[i]->name = freed[k++];
        }
    free(listed);
    free(holds);
    free(holder);
    free(freed);
}

/* Is `name` one that the first n renames (the parameters' gradients) give? */
static bool rename_target(const ad_rename *r, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].to, name) == 0) return true;
    return false;
}

/* One gradient node per parameter, named grad.<param>; the clones of custom
 * backward bodies take the names of the nodes they copy. */
static void name_gradients(ad_ctx *c)
{
    ir_graph *g = c->g;
    int nparams = 0, nren = 0, cap = 0;
    for (int i = 0; i < c->nfwd; i++) nparams += g->nodes[i]->op == IR_OP_PARAM;
    bool *claimed = xcalloc((size_t)g->nnodes + (size_t)nparams + 1, sizeof *claimed);
    ad_rename *ren = NULL;
    for (int i = 0; i < c->nfwd; i++) {
        ir_node *p = g->nodes[i];
        if (p->op != IR_OP_PARAM) continue;
        ir_node *gx = grad_of(c, p);
        const char *to = arena_printf(&g->mem, "grad.%s", p->name);
        c->cur = p;
        if (!gx) gx = ad_full(c, to, p->dtype, &p->shape, 0.0, p);
        else if (gx->id < c->nfwd || claimed[gx->id]) gx = copy_of(c, gx, p, to);
        claimed[gx->id] = true;
        gx->flags |= IR_NF_OUTPUT; /* live until the optimizer (or the caller) reads it */
        rename_add(&ren, &nren, &cap, gx, to);
    }
    int ngrads = nren;
    for (int i = 0; i < c->nclones; i++) {
        const ad_rename *r = &c->clones[i];
        if (!claimed[r->n->id] && !rename_target(ren, ngrads, r->to))
            rename_add(&ren, &nren, &cap, r->n, arena_strdup(&g->mem, r->to));
    }
    renames_apply(g, ren, nren);
    free(ren);
    free(claimed);
}

/* ---- the pass ------------------------------------------------------------ */

static void prepare(ad_ctx *c)
{
    dropout_keys(c->g);
    c->ok = ad_custom_prepare(c);
    users_build(c);
    requires_grad(c);
}

bool pass_autodiff(ir_graph *g, pass_ctx *ctx)
{
    ir_node *loss = (ir_node *)ir_graph_loss(g);
    if (!loss) {
        diag_error_plain(ctx->d, "autodiff: the model has no loss (add `minimize NAME`)");
        return false;
    }
    if (ir_graph_seed(g)) return true; /* differentiated already */
    bool cse = g->cse;
    g->cse = true; /* backward nodes merge with equal earlier ones */
    bool *keep = xmalloc((size_t)g->nnodes + 1);
    memset(keep, 1, (size_t)g->nnodes + 1);
    if (!cse) ir_graph_compact(g, keep); /* fills the CSE map (a graph read from text) */
    ad_ctx c;
    ctx_init(&c, g, ctx->d);
    prepare(&c);
    if (c.ok && c.req[loss->id]) walk(&c, loss);
    if (c.ok) {
        name_gradients(&c);
        keep = xrealloc(keep, (size_t)g->nnodes + 1);
        memset(keep, 1, (size_t)g->nnodes + 1);
        ad_custom_finish(&c, keep);
        ir_graph_compact(g, keep);
    }
    bool ok = c.ok;
    ctx_free(&c);
    free(keep);
    g->cse = cse;
    return ok;
}
