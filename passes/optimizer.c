/* The optimizer pass: appends the parameter update to the training graph,
 * so the whole step is one static graph (CONVENTIONS 8). For the
 * parameters p_0..p_{k-1} in graph order and their gradients
 * grad.p_0..grad.p_{k-1} (from autodiff) it adds
 *
 *   %grad_norm = global_norm(%grad.p_0, ...)
 *   %optimizer = adamw(%p_0, ..., %grad.p_0, ..., %grad_norm) beta1=...
 *
 * (or sgd). Each gradient operand is a distinct computed node, which memplan
 * places in the flat gradient buffer at its parameter's offset; where
 * autodiff produced a shared or leaf value, a copy (reshape) is inserted.
 *
 * First it gives every parameter its group (docs/schedules.md): no_decay
 * by Megatron's rule (flagged, 1-dimensional, or a bias), and the lr_mult /
 * wd_mult attributes of the last --param-group whose glob matches. */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

/* ---- parameter groups ------------------------------------------------------------ */

/* One --param-group item "GLOB:key=value,..." (text up to len): the glob
 * into glob[], the multipliers into *lr / *wd (left alone when absent).
 * False with a message in err. */
static bool group_item(const char *item, size_t len, char *glob, size_t gcap, double *lr, double *wd, char *err,
                       size_t cap)
{
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (item[i] == ':') colon = item + i;
    if (!colon || colon == item) {
        snprintf(err, cap, "'%.*s': expected GLOB:lr_mult=X,wd_mult=Y", (int)len, item);
        return false;
    }
    size_t glen = (size_t)(colon - item);
    if (glen >= gcap) {
        snprintf(err, cap, "'%.*s': the glob is too long", (int)len, item);
        return false;
    }
    memcpy(glob, item, glen);
    glob[glen] = 0;
    const char *p = colon + 1, *end = item + len;
    if (p == end) {
        snprintf(err, cap, "'%.*s': expected lr_mult=X and/or wd_mult=Y after the ':'", (int)len, item);
        return false;
    }
    while (p < end) {
        size_t n = 0;
        while (p + n < end && p[n] != ',') n++;
        char kv[64];
        if (n >= sizeof kv) {
            snprintf(err, cap, "'%.*s': '%.20s...' is too long", (int)len, item, p);
            return false;
        }
        memcpy(kv, p, n);
        kv[n] = 0;
        char *eq = strchr(kv, '=');
        double v;
        bool is_lr = eq && (size_t)(eq - kv) == 7 && strncmp(kv, "lr_mult", 7) == 0;
        bool is_wd = eq && (size_t)(eq - kv) == 7 && strncmp(kv, "wd_mult", 7) == 0;
        if (!is_lr && !is_wd) {
            snprintf(err, cap, "'%s' in '%.*s': expected lr_mult=X or wd_mult=Y", kv, (int)len, item);
            return false;
        }
        if (!parse_double(eq + 1, &v) || !isfinite(v) || v < 0.0) {
            snprintf(err, cap, "'%s' in '%.*s': the multiplier must be a non-negative number", kv, (int)len, item);
            return false;
        }
        *(is_lr ? lr : wd) = v;
        p += n + (p + n < end);
    }
    return true;
}

/* Reads each ';'-separated item; with p, the last one whose glob matches
 * p's name sets g's multipliers. False at the first bad item. */
static bool groups_walk(const char *spec, const ir_node *p, pass_param_group *g, char *err, size_t cap)
{
    int index = 0;
    for (const char *s = spec; s && *s; index++) {
        size_t len = strcspn(s, ";");
        char glob[256];
        double lr = 1.0, wd = 1.0;
        if (!group_item(s, len, glob, sizeof glob, &lr, &wd, err, cap)) return false;
        if (p && fnmatch(glob, p->name, 0) == 0) {
            g->lr_mult = lr;
            g->wd_mult = wd;
            g->rule = index;
        }
        s += len + (s[len] == ';');
    }
    return true;
}

bool pass_param_groups_check(const char *param_groups, char *err, size_t cap)
{
    return groups_walk(param_groups, NULL, NULL, err, cap);
}

void pass_param_group_of(const ir_node *p, const char *param_groups, pass_param_group *out)
{
    size_t len = strlen(p->name);
    *out = (pass_param_group){.lr_mult = 1.0, .wd_mult = 1.0, .rule = -1};
    out->no_decay = (p->flags & IR_NF_NO_DECAY) || p->shape.rank == 1 ||
                    (len >= 5 && strcmp(p->name + len - 5, ".bias") == 0);
    char err[256];
    groups_walk(param_groups, p, out, err, sizeof err); /* checked when the options were read */
}

/* Marks each parameter with its group: the no_decay flag, and lr_mult /
 * wd_mult where a --param-group matches (memplan lays out equal groups
 * together; the update kernel reads them). */
static void assign_groups(ir_graph *g, const pass_options *o)
{
    for (int i = 0; i < g->nnodes; i++) {
        ir_node *p = g->nodes[i];
        if (!(p->flags & IR_NF_PARAM)) continue;
        pass_param_group grp;
        pass_param_group_of(p, o->param_groups, &grp);
        if (grp.no_decay) p->flags |= IR_NF_NO_DECAY;
        if (grp.rule < 0) continue; /* keeps what the IR says (text IR may set them) */
        ir_attr_set_float(p, "lr_mult", grp.lr_mult);
        ir_attr_set_float(p, "wd_mult", grp.wd_mult);
    }
}

/* ---- the pass -------------------------------------------------------------------- */

static ir_node *grad_of(ir_graph *g, const ir_node *p)
{
    char name[1024];
    snprintf(name, sizeof name, "grad.%s", p->name);
    return ir_graph_find(g, name);
}

/* A private copy of v (a reshape to its own shape) for a parameter whose
 * gradient node cannot be placed in the gradient buffer as is. */
static ir_node *grad_copy(ir_graph *g, ir_node *v, const ir_node *p, char *err, size_t errlen)
{
    bool cse = g->cse;
    g->cse = false;
    ir_node *r = ir_node_begin(g, IR_OP_RESHAPE, 1, &v, p->loc);
    ir_attr_set_ints(r, "shape", v->shape.dim, v->shape.rank);
    char name[1024];
    snprintf(name, sizeof name, "grad.%s.copy", p->name);
    r = ir_node_end(g, r, name, err, errlen);
    g->cse = cse;
    return r;
}

/* The gradient norm. Under tensor parallelism each rank holds parts of the
 * split parameters and whole copies of the others: the split gradients'
 * sums of squares are all-reduced over the group and the replicated ones
 * counted once, norm = sqrt(allreduce(sum split^2) + sum replicated^2). */
static ir_node *grad_norm(ir_graph *g, ir_node **grads, int k, const char *name, bool pp, bool sharded, char *err,
                          size_t errlen)
{
    ir_node **split = xmalloc((size_t)k * sizeof *split), **whole = xmalloc((size_t)k * sizeof *whole);
    int ns = 0, nw = 0;
    for (int i = 0; i < k; i++) {
        if (grads[i]->shard.dim >= 0) split[ns++] = grads[i];
        else whole[nw++] = grads[i];
    }
    /* The distributed optimizer (sharded): each replica reads its shard of
     * the gradients, and the squares are summed over the data-parallel
     * group. Pipeline stages (pp): each holds its own parameters'
     * gradients, and the squares are summed over the pipeline group. */
    char part[256];
    ir_node *norm;
    if (ns == 0) {
        norm = ir_node_begin(g, IR_OP_GLOBAL_NORM, k, grads, (src_loc){0});
    } else {
        ir_node *parts[2] = {NULL, NULL};
        ir_node *a = ir_node_begin(g, IR_OP_GLOBAL_NORM, ns, split, (src_loc){0});
        ir_attr_set_sym(a, "group", "tp");
        if (sharded) ir_attr_set_bool(a, "sharded", true);
        snprintf(part, sizeof part, "%s.split", name);
        parts[0] = ir_node_end(g, a, part, err, errlen);
        if (nw && parts[0]) {
            ir_node *b = ir_node_begin(g, IR_OP_GLOBAL_NORM, nw, whole, (src_loc){0});
            if (sharded) ir_attr_set_bool(b, "sharded", true);
            snprintf(part, sizeof part, "%s.replicated", name);
            parts[1] = ir_node_end(g, b, part, err, errlen);
        }
        norm = !parts[0] || (nw && !parts[1]) ? NULL : ir_node_begin(g, IR_OP_GLOBAL_NORM, nw ? 2 : 1, parts, (src_loc){0});
    }
    if (norm && (pp || sharded)) ir_attr_set_sym(norm, "group", pp && sharded ? "dp_pp" : pp ? "pp" : "dp");
    if (norm && sharded && ns == 0) ir_attr_set_bool(norm, "sharded", true);
    norm = norm ? ir_node_end(g, norm, name, err, errlen) : NULL;
    free(split);
    free(whole);
    return norm;
}

static void set_attrs(ir_node *u, const pass_options *o, bool sgd)
{
    ir_attr_set_float(u, "weight_decay", o->weight_decay);
    ir_attr_set_float(u, "clip", o->clip_grad);
    if (sgd) {
        ir_attr_set_float(u, "momentum", o->momentum);
        ir_attr_set_float(u, "dampening", o->dampening);
        ir_attr_set_bool(u, "nesterov", o->nesterov);
        return;
    }
    ir_attr_set_float(u, "beta1", o->beta1);
    ir_attr_set_float(u, "beta2", o->beta2);
    ir_attr_set_float(u, "eps", o->eps);
    ir_attr_set_bool(u, "decoupled", strcmp(o->optimizer, "adam") != 0);
}

bool pass_optimizer(ir_graph *g, pass_ctx *ctx)
{
    pass_options defaults;
    pass_options_defaults(&defaults);
    const pass_options *o = ctx->opts ? ctx->opts : &defaults;
    /* Mixed precision: the graph stores params, activations and grads in
     * 16 bits; the update keeps fp32 master weights (codegen). */
    g->precision = o->precision;
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) k += (g->nodes[i]->flags & IR_NF_PARAM) != 0;
    if (k == 0) {
        diag_error_plain(ctx->d, "optimizer: the model has no parameters to train");
        return false;
    }
    assign_groups(g, o);
    /* Pipeline stages: one update per stage, over the parameters the
     * stage holds (memplan lays out each stage's buffers from 0), with
     * the gradient norm of the whole model. */
    int stages, chunks;
    ir_graph_pp_dims(g, &stages, &chunks);
    ir_node **ops = xmalloc((size_t)(2 * k + 1) * sizeof *ops);
    char err[512];
    bool ok = true;
    for (int st = 0; st < stages && ok; st++) {
        int j = 0, ks = 0;
        for (int i = 0; i < g->nnodes; i++)
            ks += (g->nodes[i]->flags & IR_NF_PARAM) && (stages == 1 || g->nodes[i]->stage == st);
        if (ks == 0) continue;
        for (int i = 0, n = g->nnodes; i < n && ok; i++) {
            ir_node *p = g->nodes[i];
            if (!(p->flags & IR_NF_PARAM) || (stages > 1 && p->stage != st)) continue;
            ir_node *gr = grad_of(g, p);
            if (!gr) {
                diag_error(ctx->d, p->loc, "optimizer: parameter '%s' has no gradient (run autodiff first)", p->name);
                ok = false;
                break;
            }
            bool shared = false;
            for (int q = 0; q < j; q++) shared |= ops[ks + q] == gr;
            if (shared || (ir_op_get(gr->op)->flags & IR_OPF_LEAF && gr->op != IR_OP_FULL)) {
                gr = grad_copy(g, gr, p, err, sizeof err);
                if (gr && stages > 1) gr->stage = st, gr->chunk = p->chunk;
            }
            ops[j] = p;
            ops[ks + j] = gr;
            j++;
        }
        if (!ok) break;
        char nname[64], uname[64];
        snprintf(nname, sizeof nname, stages > 1 ? "grad_norm.stage%d" : "grad_norm", st);
        snprintf(uname, sizeof uname, stages > 1 ? "optimizer.stage%d" : "optimizer", st);
        ir_node *norm = grad_norm(g, ops + ks, ks, nname, stages > 1, o->dist_opt, err, sizeof err);
        ops[2 * ks] = norm;
        bool sgd = strcmp(o->optimizer, "sgd") == 0;
        ir_node *u = norm ? ir_node_begin(g, sgd ? IR_OP_SGD : IR_OP_ADAMW, 2 * ks + 1, ops, (src_loc){0}) : NULL;
        if (u) set_attrs(u, o, sgd);
        if (u && o->dist_opt) ir_attr_set_bool(u, "sharded", true);
        u = u ? ir_node_end(g, u, uname, err, sizeof err) : NULL;
        if (!u) {
            diag_error_plain(ctx->d, "optimizer: %s", err);
            ok = false;
        }
        /* The norm's parts and the update run on the stage. */
        for (int i = g->nnodes - 1; ok && stages > 1 && i >= 0 && g->nodes[i]->stage < 0; i--)
            g->nodes[i]->stage = st, g->nodes[i]->chunk = -1;
    }
    free(ops);
    return ok;
}
