/* The fuse pass (docs/fusion.md): after autodiff, so that the forward and
 * the backward of each pattern are rewritten together.
 *
 * Named fusions, Megatron-LM's (the paper's section 4.2):
 *
 *   bias + GeLU           linear(x, w, b) or bias_add(x, b) -> gelu, and its
 *                         gelu_back: the linear drops its bias (Megatron's
 *                         skip_bias_add), gelu -> bias_gelu(pre, b),
 *                         gelu_back(dy, y) -> bias_gelu_back(dy, pre, b).
 *                         The pre-bias value is what the backward reads; the
 *                         bias gradient (colsum of the backward value) is
 *                         untouched.
 *   bias + dropout + add  linear/bias_add -> dropout -> add (either order):
 *                         add -> bias_dropout_add(pre, b, residual) with the
 *                         dropout's p and key, so the dropout_back of the
 *                         backward still draws the same mask.
 *   scale + softmax       a scale (or a mul by a full constant) feeding
 *                         softmax folds into softmax's scale, and the scale
 *                         of the gradient into softmax_back's. softmax itself
 *                         already applies scale, padding mask and implicit
 *                         causal mask in one row kernel.
 *
 * Each fires only where the replaced intermediates have no other reader and
 * are no output, so no value anybody reads changes. Nodes are rewritten in
 * place (they keep their names), and the ones that die are compacted away.
 * Then generic fusion groups the rest (fuse_groups.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "support/util.h"

/* ---- --fuse=LIST ------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned bits;
} fusion_names[] = {
    {"bias_gelu", PASS_FUSE_BIAS_GELU}, {"bias_dropout_add", PASS_FUSE_BIAS_DROPOUT_ADD},
    {"softmax", PASS_FUSE_SOFTMAX},     {"elementwise", PASS_FUSE_ELEMENTWISE},
    {"all", PASS_FUSE_ALL},             {"none", 0},
};

bool pass_fuse_parse(const char *list, unsigned *out, char *err, size_t cap)
{
    *out = 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        bool found = false;
        for (size_t i = 0; i < ARRAY_LEN(fusion_names); i++)
            if (strlen(fusion_names[i].name) == n && memcmp(fusion_names[i].name, p, n) == 0) {
                *out |= fusion_names[i].bits;
                found = true;
            }
        if (!found) {
            snprintf(err, cap, "'%.*s' is not a fusion (expected a comma list of bias_gelu, bias_dropout_add, "
                     "softmax, elementwise, all, none)", (int)n, p);
            return false;
        }
        if (!comma) return true;
        p = comma + 1;
    }
}

/* ---- use lists ------------------------------------------------------------------- */

void fuse_uses_build(const ir_graph *g, fuse_uses *u)
{
    int n = g->nnodes, edges = 0;
    u->start = xcalloc((size_t)n + 2, sizeof *u->start);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i]->nsrc; k++) {
            u->start[g->nodes[i]->src[k]->id + 2]++; /* counts, shifted by two for the fill below */
            edges++;
        }
    for (int i = 2; i <= n + 1; i++) u->start[i] += u->start[i - 1];
    u->user = xmalloc(((size_t)edges + 1) * sizeof *u->user);
    /* start[s + 1] is the fill cursor of s; it ends at start[s + 2]. */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i]->nsrc; k++) u->user[u->start[g->nodes[i]->src[k]->id + 1]++] = i;
}

void fuse_uses_free(fuse_uses *u)
{
    free(u->start);
    free(u->user);
}

/* ---- rewriting in place ------------------------------------------------------------ */

typedef struct fz {
    ir_graph *g;
    fuse_uses u;
    bool *dead; /* by id: replaced, removed at the end */
} fz;

/* n becomes op(src...) with op's default attributes; its type must not
 * change (the fusions replace a value by an equal one). */
static void retype(fz *f, ir_node *n, ir_op op, int nsrc, ir_node *const *src)
{
    ir_node *fresh = ir_node_alloc(f->g, op, nsrc); /* arena storage for operands and attributes */
    memcpy(fresh->src, src, (size_t)nsrc * sizeof *src);
    n->op = op;
    n->nsrc = nsrc;
    n->src = fresh->src;
    n->attrs = fresh->attrs;
}

static void check_type(const ir_node *n)
{
    ir_node tmp = *n;
    char err[256];
    TGC_ASSERT(ir_op_get(n->op)->shape(&tmp, err, sizeof err));
    TGC_ASSERT(tmp.dtype == n->dtype && ir_shape_eq(&tmp.shape, &n->shape));
}

/* A linear with a bias, or a bias_add: the biased value a fusion absorbs. */
static bool biased(const ir_node *n)
{
    return (n->op == IR_OP_LINEAR && n->nsrc == 3) || n->op == IR_OP_BIAS_ADD;
}

/* Takes the bias out of pre: a linear drops its third operand and is from
 * now on the pre-bias value; a bias_add dies. Returns the pre-bias value
 * and its bias in *b. */
static ir_node *unbias(fz *f, ir_node *pre, ir_node **b)
{
    if (pre->op == IR_OP_LINEAR) {
        *b = pre->src[2];
        pre->nsrc = 2;
        return pre;
    }
    *b = pre->src[1];
    f->dead[pre->id] = true;
    return pre->src[0];
}

static bool usable(const fz *f, const ir_node *n) { return !f->dead[n->id] && !fuse_flagged(n); }

/* ---- bias + GeLU --------------------------------------------------------------------- */

/* The pre-activation may be read by the gelu and by gelu_backs as their x
 * (the gradient of the same activation); anything else keeps it. */
static bool gelu_users(const fz *f, const ir_node *pre, const ir_node *gl, ir_node **backs, int *nb)
{
    *nb = 0;
    const char *approx = ir_attr_sym(gl, "approx");
    for (int k = f->u.start[pre->id]; k < f->u.start[pre->id + 1]; k++) {
        ir_node *u = f->g->nodes[f->u.user[k]];
        if (u == gl) continue;
        if (u->op != IR_OP_GELU_BACK || u->src[1] != pre || u->src[0] == pre || f->dead[u->id] ||
            strcmp(ir_attr_sym(u, "approx"), approx) != 0)
            return false;
        backs[(*nb)++] = u;
    }
    return true;
}

static int fuse_bias_gelu(fz *f)
{
    int count = 0;
    ir_node **backs = xmalloc(((size_t)f->g->nnodes + 1) * sizeof *backs);
    for (int i = 0; i < f->g->nnodes; i++) {
        ir_node *gl = f->g->nodes[i], *pre = gl->nsrc ? gl->src[0] : NULL;
        int nb;
        if (gl->op != IR_OP_GELU || f->dead[i] || !biased(pre) || !usable(f, pre) || !gelu_users(f, pre, gl, backs, &nb))
            continue;
        const char *approx = ir_attr_sym(gl, "approx");
        ir_node *b, *x = unbias(f, pre, &b);
        ir_node *fwd[2] = {x, b};
        retype(f, gl, IR_OP_BIAS_GELU, 2, fwd);
        ir_attr_set_sym(gl, "approx", approx);
        check_type(gl);
        for (int j = 0; j < nb; j++) {
            ir_node *bwd[3] = {backs[j]->src[0], x, b};
            retype(f, backs[j], IR_OP_BIAS_GELU_BACK, 3, bwd);
            ir_attr_set_sym(backs[j], "approx", approx);
            check_type(backs[j]);
        }
        count++;
    }
    free(backs);
    return count;
}

/* ---- bias + dropout + residual add ------------------------------------------------------ */

static bool same_shard(const ir_node *a, const ir_node *b)
{
    return a->shard.dim == b->shard.dim && (a->shard.dim < 0 || a->shard.group == b->shard.group);
}

/* add(residual, dropout(pre)) in either order, where the dropout and the
 * biased pre feed nothing else. A dropout without a key (forward-only IR
 * that autodiff never saw) takes it from its name in codegen; the fused op
 * has another name, so that one is left alone. */
static bool bda_match(const fz *f, const ir_node *a, int side)
{
    const ir_node *d = a->src[side], *r = a->src[1 - side];
    if (d->op != IR_OP_DROPOUT || d == r || !usable(f, d) || fuse_nusers(&f->u, d->id) != 1) return false;
    if (ir_attr_int(d, "key") == 0 || !same_shard(d, a)) return false;
    const ir_node *pre = d->src[0];
    return biased(pre) && usable(f, pre) && fuse_nusers(&f->u, pre->id) == 1;
}

static int fuse_bias_dropout_add(fz *f)
{
    int count = 0;
    for (int i = 0; i < f->g->nnodes; i++) {
        ir_node *a = f->g->nodes[i];
        if (a->op != IR_OP_ADD || f->dead[i]) continue;
        int side = bda_match(f, a, 0) ? 0 : bda_match(f, a, 1) ? 1 : -1;
        if (side < 0) continue;
        ir_node *d = a->src[side], *r = a->src[1 - side];
        double p = ir_attr_float(d, "p");
        int64_t key = ir_attr_int(d, "key");
        ir_node *b, *x = unbias(f, d->src[0], &b);
        f->dead[d->id] = true;
        ir_node *src[3] = {x, b, r};
        retype(f, a, IR_OP_BIAS_DROPOUT_ADD, 3, src);
        ir_attr_set_float(a, "p", p);
        ir_attr_set_int(a, "key", key);
        check_type(a);
        count++;
    }
    return count;
}

/* ---- scale + mask + softmax --------------------------------------------------------------- */

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
        if (n->src[k]->op == IR_OP_FULL && n->src[1 - k]->op != IR_OP_FULL) {
            *x = n->src[1 - k];
            *alpha = ir_attr_float(n->src[k], "value");
            return true;
        }
    return false;
}

static ir_node *only_user(const fz *f, const ir_node *n)
{
    return fuse_nusers(&f->u, n->id) == 1 ? f->g->nodes[f->u.user[f->u.start[n->id]]] : NULL;
}

/* The backward of softmax sm reads it as y in softmax_back nodes; each one's
 * only reader must be the matching scale of the gradient (autodiff's rule
 * for scale), which then folds too. Collects those pairs. */
static bool softmax_backs(const fz *f, const ir_node *sm, double alpha, ir_node **sb, ir_node **gs, int *n)
{
    *n = 0;
    for (int k = f->u.start[sm->id]; k < f->u.start[sm->id + 1]; k++) {
        ir_node *u = f->g->nodes[f->u.user[k]];
        if (u->op != IR_OP_SOFTMAX_BACK || u->src[1] != sm) continue;
        ir_node *s = only_user(f, u), *x;
        double a;
        if (u->src[0] == sm || f->dead[u->id] || fuse_flagged(u) || !s || f->dead[s->id] ||
            !const_factor(s, &x, &a) || x != u || memcmp(&a, &alpha, sizeof a) != 0)
            return false;
        sb[*n] = u;
        gs[(*n)++] = s;
    }
    return true;
}

/* Every use of `from` reads `to` instead. */
static void replace_uses(fz *f, const ir_node *from, ir_node *to)
{
    for (int k = f->u.start[from->id]; k < f->u.start[from->id + 1]; k++) {
        ir_node *u = f->g->nodes[f->u.user[k]];
        for (int j = 0; j < u->nsrc; j++)
            if (u->src[j] == from) u->src[j] = to;
    }
}

/* A full constant that only dead nodes read dies too. */
static void drop_unused_full(fz *f, const ir_node *s)
{
    for (int j = 0; j < s->nsrc; j++) {
        const ir_node *c = s->src[j];
        if (c->op != IR_OP_FULL || fuse_flagged(c)) continue;
        bool used = false;
        for (int k = f->u.start[c->id]; k < f->u.start[c->id + 1]; k++) used |= !f->dead[f->u.user[k]];
        if (!used) f->dead[c->id] = true;
    }
}

static void scale_by(ir_node *n, double alpha) { ir_attr_set_float(n, "scale", ir_attr_float(n, "scale") * alpha); }

static int fuse_softmax_scale(fz *f)
{
    int count = 0;
    ir_node **sb = xmalloc(((size_t)f->g->nnodes + 1) * sizeof *sb), **gs = xmalloc(((size_t)f->g->nnodes + 1) * sizeof *gs);
    for (int i = 0; i < f->g->nnodes; i++) {
        ir_node *sm = f->g->nodes[i], *s = sm->nsrc ? sm->src[0] : NULL, *x;
        double alpha;
        int nb;
        if (sm->op != IR_OP_SOFTMAX || f->dead[i] || !const_factor(s, &x, &alpha) || !usable(f, s) ||
            fuse_nusers(&f->u, s->id) != 1 || !softmax_backs(f, sm, alpha, sb, gs, &nb))
            continue;
        sm->src[0] = x;
        scale_by(sm, alpha);
        f->dead[s->id] = true;
        drop_unused_full(f, s);
        for (int j = 0; j < nb; j++) {
            /* softmax_back now gives the gradient of x itself: it takes the
             * name, flags and readers of the scale it absorbs. */
            scale_by(sb[j], alpha);
            replace_uses(f, gs[j], sb[j]);
            sb[j]->name = gs[j]->name;
            sb[j]->flags |= gs[j]->flags;
            f->dead[gs[j]->id] = true;
            drop_unused_full(f, gs[j]);
        }
        count++;
    }
    free(sb);
    free(gs);
    return count;
}

/* ---- the pass ------------------------------------------------------------------------------ */

typedef int (*named_fn)(fz *f);

bool pass_fuse(ir_graph *g, pass_ctx *ctx)
{
    unsigned set = ctx->opts ? ctx->opts->fuse : PASS_FUSE_ALL;
    static const struct {
        unsigned bit;
        named_fn fn;
    } named[] = {
        {PASS_FUSE_SOFTMAX, fuse_softmax_scale},
        {PASS_FUSE_BIAS_GELU, fuse_bias_gelu},
        {PASS_FUSE_BIAS_DROPOUT_ADD, fuse_bias_dropout_add},
    };
    for (size_t k = 0; k < ARRAY_LEN(named); k++) {
        if (!(set & named[k].bit)) continue;
        fz f = {.g = g, .dead = xcalloc((size_t)g->nnodes + 1, sizeof(bool))};
        fuse_uses_build(g, &f.u);
        named[k].fn(&f);
        bool *keep = xmalloc(((size_t)g->nnodes + 1) * sizeof *keep);
        for (int i = 0; i < g->nnodes; i++) keep[i] = !f.dead[i];
        ir_graph_compact(g, keep); /* also rebuilds the name map: a softmax_back may have a new name */
        free(keep);
        free(f.dead);
        fuse_uses_free(&f.u);
    }
    for (int i = 0; i < g->nnodes; i++) g->nodes[i]->fuse = -1;
    /* 16-bit storage: the optimizer pass marks the graph later, so the
     * options say it (a graph read back from text says it itself). */
    bool mixed = g->precision != IR_F32 || (ctx->opts && ctx->opts->precision != IR_F32);
    if ((set & PASS_FUSE_ELEMENTWISE) && !mixed) fuse_groups(g);
    return true;
}
