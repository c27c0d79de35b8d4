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
 * autodiff produced a shared or leaf value, a copy (reshape) is inserted. */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "support/util.h"

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
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) k += (g->nodes[i]->flags & IR_NF_PARAM) != 0;
    if (k == 0) {
        diag_error_plain(ctx->d, "optimizer: the model has no parameters to train");
        return false;
    }
    ir_node **ops = xmalloc((size_t)(2 * k + 1) * sizeof *ops);
    char err[512];
    bool ok = true;
    int j = 0;
    for (int i = 0, n = g->nnodes; i < n && ok; i++) {
        ir_node *p = g->nodes[i];
        if (!(p->flags & IR_NF_PARAM)) continue;
        ir_node *gr = grad_of(g, p);
        if (!gr) {
            diag_error(ctx->d, p->loc, "optimizer: parameter '%s' has no gradient (run autodiff first)", p->name);
            ok = false;
            break;
        }
        bool shared = false;
        for (int q = 0; q < j; q++) shared |= ops[k + q] == gr;
        if (shared || (ir_op_get(gr->op)->flags & IR_OPF_LEAF && gr->op != IR_OP_FULL)) gr = grad_copy(g, gr, p, err, sizeof err);
        ops[j] = p;
        ops[k + j] = gr;
        j++;
    }
    if (ok) {
        ir_node *norm = ir_node_begin(g, IR_OP_GLOBAL_NORM, k, ops + k, (src_loc){0});
        norm = ir_node_end(g, norm, "grad_norm", err, sizeof err);
        ops[2 * k] = norm;
        bool sgd = strcmp(o->optimizer, "sgd") == 0;
        ir_node *u = norm ? ir_node_begin(g, sgd ? IR_OP_SGD : IR_OP_ADAMW, 2 * k + 1, ops, (src_loc){0}) : NULL;
        if (u) set_attrs(u, o, sgd);
        if (!u || !ir_node_end(g, u, "optimizer", err, sizeof err)) {
            diag_error_plain(ctx->d, "optimizer: %s", err);
            ok = false;
        }
    }
    free(ops);
    return ok;
}
