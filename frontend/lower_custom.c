/* Custom ops with a user-written backward, the DSL's form of
 * torch.autograd.Function:
 *
 *   op NAME(x0, ..., xk) { forward ...; return y } backward(dy) { ...; return dx0, ..., dxk }
 *
 * A call lowers to the IR of docs/autodiff.md ("Custom ops"):
 *
 *   the forward body, named under the instance's prefix like a block's
 *   %c = custom_out(%y, %x0, ..., %xk)           the call's value
 *   %<inst>.bwd.dy = cotangent(%c)
 *   the backward body, named under <inst>.bwd; it sees the arguments, the
 *   forward body's variables and dy
 *   %<inst>.bwd.grad.<xi> = custom_grad(%dxi, %c) index=i
 *
 * The differentiable arguments are the floating-point tensors, in the
 * order of the op's parameter list; the backward returns one gradient for
 * each, of its type. Integer tensors, numbers and booleans are passed in
 * (numbers as compile-time constants) and get no gradient. */
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"
#include "support/util.h"

/* The most differentiable arguments custom_out takes (ir/ops.def). */
#define FE_MAX_OP_ARGS 64

typedef struct fe_op_call {
    const fe_stmt *op;
    const fe_expr *e;          /* the call */
    const char *inst;          /* the instance's prefix */
    fe_scope fs;               /* arguments and forward (then backward) variables */
    ir_node *src[FE_MAX_OP_ARGS + 1]; /* y, then the differentiable arguments */
    const fe_ident *arg[FE_MAX_OP_ARGS];
    int nargs;
} fe_op_call;

/* `as NAME` names the instance as for a block; without it, uses of one op
 * in a scope are numbered (gelu, gelu.1, ...): an op has no parameters, so
 * its instance names only group its nodes. */
static bool op_instance(fe_lower *L, fe_scope *s, const fe_op_call *oc, const fe_hints *h,
                        const char **inst)
{
    src_loc loc = h && h->inst ? h->inst_loc : oc->e->loc;
    if (h && h->inst) {
        *inst = h->inst;
        if (fe_map_get(&s->insts, *inst)) {
            fe_error(L, loc, "duplicate instance name '%s'", *inst);
            return false;
        }
    } else {
        *inst = oc->op->name;
        for (int k = 1; fe_map_get(&s->insts, *inst); k++)
            *inst = arena_printf(L->mem, "%s.%d", oc->op->name, k);
    }
    if (++L->op_instances > FE_MAX_INSTANCES) {
        fe_error(L, loc, "model too large: more than %d custom op instances", FE_MAX_INSTANCES);
        L->stop = true;
        return false;
    }
    fe_map_put(&s->insts, *inst, (void *)*inst);
    return true;
}

/* The floating-point tensor arguments, in the op's parameter order. */
static bool collect_args(fe_lower *L, fe_op_call *oc)
{
    oc->nargs = 0;
    for (const fe_ident *a = oc->op->idents.head; a; a = a->next) {
        const fe_sym *sym = fe_map_get(&oc->fs.syms, a->name);
        if (!sym || sym->v.kind != FE_V_TENSOR || !ir_dtype_is_float(sym->v.t->dtype)) continue;
        if (oc->nargs == FE_MAX_OP_ARGS) {
            fe_error(L, oc->e->loc, "op '%s' is given more than %d floating-point tensors",
                     oc->op->name, FE_MAX_OP_ARGS);
            return false;
        }
        oc->arg[oc->nargs] = a;
        oc->src[1 + oc->nargs++] = sym->v.t;
    }
    return true;
}

/* "x, w" */
static const char *arg_names(fe_lower *L, const fe_op_call *oc)
{
    strbuf b;
    sb_init(&b);
    for (int i = 0; i < oc->nargs; i++) sb_printf(&b, "%s'%s'", i ? ", " : "", oc->arg[i]->name);
    const char *r = arena_strdup(L->mem, b.s ? b.s : "");
    sb_free(&b);
    return r;
}

/* Lowers the forward body; its one result, a floating-point tensor, or NULL. */
static ir_node *run_forward(fe_lower *L, fe_op_call *oc)
{
    fe_scope *fs = &oc->fs;
    const fe_stmt *op = oc->op;
    fe_exec_stmts(L, fs, op->body.head);
    if (L->stop) return NULL;
    if (!fs->returned) {
        fe_error(L, op->name_loc, "op '%s' has no 'return': its forward must return one tensor", op->name);
        return NULL;
    }
    for (int i = 0; i < fs->nrets; i++)
        if (fs->rets[i].kind == FE_V_ERROR) return NULL;
    if (fs->nrets != 1) {
        fe_error(L, fs->ret_stmt->loc, "op '%s' returns %d values; a custom op returns one tensor",
                 op->name, fs->nrets);
        return NULL;
    }
    fe_value y = fs->rets[0];
    if (y.kind != FE_V_TENSOR || !ir_dtype_is_float(y.t->dtype)) {
        fe_error(L, fs->ret_stmt->exprs.head->loc, "op '%s' must return a floating-point tensor, got %s",
                 op->name, fe_value_str(L, y));
        return NULL;
    }
    return y.t;
}

/* Binds the gradient parameter to cotangent(c) and switches the scope to
 * the backward: names under <inst>.bwd, a fresh return. */
static bool begin_backward(fe_lower *L, fe_op_call *oc, ir_node *c)
{
    fe_scope *fs = &oc->fs;
    const fe_ident *dy = oc->op->bwd_params.head;
    if (fe_map_get(&fs->syms, dy->name)) {
        fe_error(L, dy->loc, "the gradient '%s' of op '%s' has the name of a variable of its forward body",
                 dy->name, oc->op->name);
        return false;
    }
    fs->prefix = arena_printf(L->mem, "%s.bwd", oc->inst);
    fe_map_init(&fs->insts, L->mem);
    fs->in_backward = true;
    fs->returned = false;
    fs->ret_stmt = NULL;
    fs->rets = NULL;
    fs->nrets = 0;
    fs->loop_depth = 0;
    ir_node *ct = ir_node_begin(L->g, IR_OP_COTANGENT, 1, &c, dy->loc);
    ct = fe_finish_node(L, oc->e, ct, fe_node_name(L, fs, dy->name, "cotangent"));
    if (!ct) return false;
    fe_sym_bind(L, fs, dy->name, FE_SYM_VAR, fe_tensor(ct), dy->loc);
    return true;
}

/* Checks one returned gradient against its argument. */
static bool check_grad(fe_lower *L, const fe_op_call *oc, int i, fe_value dx, src_loc loc)
{
    const ir_node *x = oc->src[1 + i];
    const char *name = oc->arg[i]->name;
    if (dx.kind == FE_V_ERROR) return false;
    if (dx.kind != FE_V_TENSOR) {
        fe_error(L, loc, "the gradient of argument '%s' of op '%s' must be a tensor, got %s", name,
                 oc->op->name, fe_value_str(L, dx));
        return false;
    }
    if (dx.t->dtype != x->dtype || !ir_shape_eq(&dx.t->shape, &x->shape)) {
        fe_error(L, loc, "the gradient of argument '%s' of op '%s' is %s, but '%s' is %s", name,
                 oc->op->name, fe_type_str(L, dx.t), name, fe_type_str(L, x));
        return false;
    }
    return true;
}

/* custom_grad(dx_i, c) index=i for each returned gradient. */
static bool declare_grads(fe_lower *L, fe_op_call *oc, ir_node *c)
{
    const fe_scope *fs = &oc->fs;
    const fe_stmt *op = oc->op;
    if (!fs->returned) {
        fe_error(L, op->bwd_loc, "the backward of op '%s' has no 'return': it must return the "
                 "gradient%s of %s", op->name, oc->nargs == 1 ? "" : "s", arg_names(L, oc));
        return false;
    }
    if (fs->nrets != oc->nargs) {
        fe_error(L, fs->ret_stmt->loc, "the backward of op '%s' returns %d gradient%s, but the op has "
                 "%d floating-point tensor argument%s%s%s", op->name, fs->nrets, fs->nrets == 1 ? "" : "s",
                 oc->nargs, oc->nargs == 1 ? "" : "s", oc->nargs ? ": " : "", arg_names(L, oc));
        return false;
    }
    bool ok = true;
    const fe_arg *a = fs->ret_stmt->exprs.head;
    for (int i = 0; i < oc->nargs; i++, a = a->next) {
        if (!check_grad(L, oc, i, fs->rets[i], a->loc)) {
            ok = false;
            continue;
        }
        ir_node *src[2] = {fs->rets[i].t, c};
        ir_node *n = ir_node_begin(L->g, IR_OP_CUSTOM_GRAD, 2, src, a->loc);
        ir_attr_set_int(n, "index", i);
        const char *hint = arena_printf(L->mem, "grad.%s", oc->arg[i]->name);
        ok = fe_finish_node(L, a->value, n, fe_node_name(L, fs, hint, "custom_grad")) && ok;
    }
    return ok;
}

static ir_node *lower_op(fe_lower *L, fe_scope *s, fe_op_call *oc, const fe_hints *h)
{
    /* The arguments as passed: the forward may rebind their names. */
    if (!collect_args(L, oc)) return NULL;
    ir_node *y = run_forward(L, oc);
    if (!y) return NULL;
    oc->src[0] = y;
    ir_node *c = ir_node_begin(L->g, IR_OP_CUSTOM_OUT, 1 + oc->nargs, oc->src, oc->e->loc);
    c = fe_finish_node(L, oc->e, c, fe_node_name(L, s, fe_hint_one(h), oc->op->name));
    if (!c || !begin_backward(L, oc, c)) return NULL;
    fe_exec_stmts(L, &oc->fs, oc->op->bwd_body.head);
    if (L->stop) return NULL;
    for (int i = 0; i < oc->fs.nrets; i++)
        if (oc->fs.rets[i].kind == FE_V_ERROR) return NULL;
    return declare_grads(L, oc, c) ? c : NULL;
}

int fe_call_custom_op(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_stmt *op,
                      const fe_hints *h, fe_value **out)
{
    if (fe_map_get(&L->bad_blocks, op->name)) return -1; /* already reported */
    for (const fe_scope *p = s; p; p = p->parent)
        if (p->block == op) return -1; /* recursion: reported before lowering */
    if (s->in_backward) {
        fe_error(L, e->loc, "op '%s' cannot be used in the backward of op '%s' (a backward is "
                 "ordinary IR that autodiff copies, not a place for another custom op)",
                 op->name, s->in_op->name);
        return -1;
    }
    if (L->depth >= FE_MAX_BLOCK_DEPTH) {
        fe_error(L, e->loc, "blocks and ops nested more than %d deep", FE_MAX_BLOCK_DEPTH);
        return -1;
    }
    fe_op_call *oc = arena_alloc(L->mem, sizeof *oc);
    oc->op = op;
    oc->e = e;
    if (!op_instance(L, s, oc, h, &oc->inst)) return -1;
    if (s->prefix[0]) oc->inst = arena_printf(L->mem, "%s.%s", s->prefix, oc->inst);
    fe_scope_init(L, &oc->fs, s, op, oc->inst);
    oc->fs.in_op = op;
    if (!fe_bind_args(L, s, &oc->fs, e, op)) return -1;
    L->depth++;
    ir_node *c = lower_op(L, s, oc, h);
    L->depth--;
    if (!c) return -1;
    *out = arena_alloc(L->mem, sizeof **out);
    (*out)[0] = fe_tensor(c);
    return 1;
}
