/* Statements: declarations (hparam, input, param), assignments, loops,
 * return, minimize, output, and the instantiation of blocks (custom ops:
 * lower_custom.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"
#include "support/util.h"

void fe_scope_init(fe_lower *L, fe_scope *s, fe_scope *parent, const fe_stmt *block, const char *prefix)
{
    memset(s, 0, sizeof *s);
    s->parent = parent;
    s->block = block;
    s->prefix = prefix;
    fe_map_init(&s->syms, L->mem);
    fe_map_init(&s->insts, L->mem);
}

fe_sym *fe_sym_bind(fe_lower *L, fe_scope *s, const char *name, fe_sym_kind kind, fe_value v, src_loc loc)
{
    fe_sym *sym = arena_alloc(L->mem, sizeof *sym);
    *sym = (fe_sym){kind, v, loc, NULL};
    fe_map_put(&s->syms, name, sym);
    return sym;
}

static const char *sym_kind_name(fe_sym_kind k)
{
    switch (k) {
    case FE_SYM_VAR: return "variable";
    case FE_SYM_INPUT: return "input";
    case FE_SYM_PARAM: return "parameter";
    case FE_SYM_HPARAM: return "hyperparameter";
    }
    return "name";
}

/* A new declaration of `kind` named `name`: false (after an error) when the
 * scope already has that name. */
static bool check_new_name(fe_lower *L, fe_scope *s, const char *name, fe_sym_kind kind, src_loc loc)
{
    const fe_sym *old = fe_map_get(kind == FE_SYM_HPARAM ? &L->hparams : &s->syms, name);
    if (!old) return true;
    bool again = old->loc.line == loc.line && old->loc.col == loc.col;
    if (old->kind == kind)
        fe_error(L, loc, "duplicate %s '%s'%s", sym_kind_name(kind), name,
                 again ? " (the loop declares it again in each iteration)" : "");
    else
        fe_error(L, loc, "duplicate name '%s': it is already a %s", name, sym_kind_name(old->kind));
    if (old->loc.line > 0 && !again) fe_note(L, old->loc, "'%s' was first declared here", name);
    return false;
}

/* ---- types ----------------------------------------------------------------- */

static bool eval_type(fe_lower *L, fe_scope *s, const fe_type *t, ir_dtype *dt, ir_shape *sh)
{
    bool ok = true;
    if (!ir_dtype_lookup(t->dtype, dt)) {
        fe_suggest sg;
        fe_suggest_init(&sg, t->dtype);
        for (int i = 0; i < IR_DTYPE_COUNT; i++) fe_suggest_add(&sg, ir_dtype_name((ir_dtype)i));
        fe_error(L, t->loc, "unknown dtype '%s'%s%s%s (dtypes: f32, f16, bf16, f64, i32, i64, u8)",
                 t->dtype, sg.best ? "; did you mean '" : "", sg.best ? sg.best : "", sg.best ? "'?" : "");
        ok = false;
    }
    if (t->dims.n > IR_MAX_RANK) {
        fe_error(L, t->loc, "a tensor has at most %d dimensions, got %d", IR_MAX_RANK, t->dims.n);
        return false;
    }
    sh->rank = 0;
    for (const fe_arg *a = t->dims.head; a; a = a->next)
        ok = fe_eval_dim(L, s, a->value, &sh->dim[sh->rank++]) && ok;
    return ok && fe_check_numel(L, t->loc, sh);
}

/* ---- declarations ------------------------------------------------------------- */

static void exec_hparam(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (!check_new_name(L, s, st->name, FE_SYM_HPARAM, st->name_loc)) return;
    const fe_value *ov = fe_map_get(&L->overrides, st->name);
    fe_value v = ov ? *ov : fe_eval(L, s, st->value, NULL);
    if (v.kind != FE_V_ERROR && v.kind != FE_V_INT && v.kind != FE_V_FLOAT) {
        fe_error(L, st->value->loc, "hyperparameter '%s' must be a number, got %s", st->name,
                 fe_value_str(L, v));
        v.kind = FE_V_ERROR;
    }
    fe_sym *sym = arena_alloc(L->mem, sizeof *sym);
    *sym = (fe_sym){FE_SYM_HPARAM, v, st->name_loc, ov ? NULL : st->value};
    fe_map_put(&L->hparams, st->name, sym);
    if (v.kind == FE_V_INT) ir_graph_add_hparam(L->g, st->name, false, v.i, (double)v.i);
    if (v.kind == FE_V_FLOAT) ir_graph_add_hparam(L->g, st->name, true, (int64_t)0, v.f);
}

static void exec_input(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (!check_new_name(L, s, st->name, FE_SYM_INPUT, st->name_loc)) return;
    fe_sym *sym = fe_sym_bind(L, s, st->name, FE_SYM_INPUT, (fe_value){FE_V_ERROR, 0, 0, NULL}, st->name_loc);
    ir_dtype dt;
    ir_shape sh;
    if (!eval_type(L, s, &st->type, &dt, &sh)) return;
    ir_node *n = ir_leaf_new(L->g, IR_OP_INPUT, st->name, dt, &sh, st->name_loc);
    if (!n) {
        fe_error(L, st->name_loc, "the name '%s' is already taken by another value", st->name);
        return;
    }
    sym->v = fe_tensor(n);
}

/* normal(std), scaled_normal(std, layers), zeros, ones; none = normal(0.02). */
static bool eval_init(fe_lower *L, fe_scope *s, const fe_expr *e, const char **init, double *std)
{
    *init = "normal";
    *std = 0.02;
    if (!e) return true;
    const char *name = e->kind == FE_EX_NAME || e->kind == FE_EX_CALL ? e->name : "";
    int nargs = e->kind == FE_EX_CALL ? e->args.n : 0;
    bool bad_args = false;
    if (strcmp(name, "zeros") == 0 || strcmp(name, "ones") == 0) {
        *init = name;
        bad_args = nargs != 0;
    } else if (strcmp(name, "normal") == 0 || strcmp(name, "scaled_normal") == 0) {
        int want = name[0] == 's' ? 2 : 1;
        bad_args = e->kind == FE_EX_CALL ? nargs != want : want == 2;
        const fe_arg *a = e->args.head;
        if (!bad_args && a) {
            fe_value sd = fe_eval_number(L, s, a->value, "the standard deviation");
            int64_t layers = 1;
            if (sd.kind == FE_V_ERROR) return false;
            if (want == 2 && !fe_eval_int(L, s, a->next->value, "scaled_normal's layer count", &layers))
                return false;
            if (fe_num(sd) < 0 || layers < 1) {
                fe_error(L, e->loc, "%s needs a standard deviation >= 0 and a positive layer count%s", name,
                         fe_blame_hparams(L, e));
                return false;
            }
            *std = fe_num(sd) / sqrt(2.0 * (double)layers);
            if (want == 1) *std = fe_num(sd);
        }
    } else {
        fe_error(L, e->loc, "unknown initialiser (expected normal(std), scaled_normal(std, layers), "
                 "zeros or ones)");
        return false;
    }
    if (bad_args)
        fe_error(L, e->loc, "wrong arguments for initialiser '%s' (expected normal(std), "
                 "scaled_normal(std, layers), zeros or ones)", name);
    return !bad_args;
}

static bool eval_param_flags(fe_lower *L, const fe_stmt *st, unsigned *flags)
{
    bool ok = true;
    for (const fe_ident *f = st->idents.head; f; f = f->next) {
        if (strcmp(f->name, "no_decay") == 0) {
            *flags |= IR_NF_NO_DECAY;
            continue;
        }
        fe_suggest sg;
        fe_suggest_init(&sg, f->name);
        fe_suggest_add(&sg, "no_decay");
        fe_error(L, f->loc, "unknown parameter flag '%s'%s", f->name,
                 sg.best ? "; did you mean 'no_decay'?" : " (the only flag is no_decay)");
        ok = false;
    }
    return ok;
}

/* A parameter in a block that a custom op uses: it would get no gradient.
 * (One declared in the op itself was reported before lowering.) */
static bool param_outside_ops(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (!s->in_op) return true;
    if (s->block != s->in_op)
        fe_error(L, st->loc, "a parameter cannot be declared in block '%s' when op '%s' uses it: "
                 "pass it to the op as an argument (autodiff does not look into a custom op, so it "
                 "would get no gradient)", s->block->name, s->in_op->name);
    return false;
}

static void exec_param(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (!param_outside_ops(L, s, st)) {
        /* Uses of the name stay silent. */
        if (!fe_map_get(&s->syms, st->name))
            fe_sym_bind(L, s, st->name, FE_SYM_PARAM, (fe_value){FE_V_ERROR, 0, 0, NULL}, st->name_loc);
        return;
    }
    if (!check_new_name(L, s, st->name, FE_SYM_PARAM, st->name_loc)) return;
    fe_sym *sym = fe_sym_bind(L, s, st->name, FE_SYM_PARAM, (fe_value){FE_V_ERROR, 0, 0, NULL}, st->name_loc);
    ir_dtype dt;
    ir_shape sh;
    const char *init;
    double std;
    unsigned flags = 0;
    bool ok = eval_type(L, s, &st->type, &dt, &sh);
    if (ok && !ir_dtype_is_float(dt)) {
        fe_error(L, st->type.loc, "parameter '%s' must have a floating-point type, got %s", st->name,
                 ir_dtype_name(dt));
        ok = false;
    }
    ok = eval_init(L, s, st->value, &init, &std) && ok;
    ok = eval_param_flags(L, st, &flags) && ok;
    if (!ok) return;
    const char *full = fe_node_name(L, s, st->name, "param");
    ir_node *n = ir_leaf_new(L->g, IR_OP_PARAM, full, dt, &sh, st->name_loc);
    if (!n) {
        fe_error(L, st->name_loc, "the name '%s' is already taken by another value", full);
        return;
    }
    ir_attr_set_sym(n, "init", init);
    ir_attr_set_float(n, "std", std);
    n->flags |= flags;
    sym->v = fe_tensor(n);
}

/* ---- assignments ------------------------------------------------------------- */

static bool check_targets(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    bool ok = true;
    for (const fe_ident *t = st->idents.head; t; t = t->next) {
        const fe_sym *sym = fe_lookup(L, s, t->name);
        if (sym && sym->kind != FE_SYM_VAR) {
            fe_error(L, t->loc, "cannot assign to %s '%s'", sym_kind_name(sym->kind), t->name);
            ok = false;
        }
        for (const fe_ident *u = st->idents.head; u != t; u = u->next)
            if (strcmp(u->name, t->name) == 0) {
                fe_error(L, t->loc, "'%s' is assigned twice", t->name);
                ok = false;
            }
    }
    return ok;
}

static bool instance_name(fe_lower *L, fe_scope *s, const fe_stmt *st, fe_hints *h)
{
    if (!st->as_name) return true;
    h->inst = st->as_name;
    h->inst_loc = st->as_loc;
    if (!st->as_index) return true;
    int64_t i;
    if (!fe_eval_int(L, s, st->as_index, "an instance index", &i)) return false;
    if (i < 0) {
        fe_error(L, st->as_index->loc, "instance index %lld is negative", (long long)i);
        return false;
    }
    h->inst = arena_printf(L->mem, "%s.%lld", st->as_name, (long long)i);
    return true;
}

static void exec_assign(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    fe_hints h = {st->idents.head, st->idents.n, NULL, st->loc};
    fe_value *vals = NULL;
    int n = -1;
    if (check_targets(L, s, st) && instance_name(L, s, st, &h))
        n = fe_eval_multi(L, s, st->value, &h, &vals);
    if (n >= 0 && n != st->idents.n) {
        const char *what = st->value->kind == FE_EX_CALL ? arena_printf(L->mem, "'%s'", st->value->name)
                                                         : "the expression";
        fe_error(L, st->value->loc, "%s gives %d value%s, but %d target%s assigned", what, n,
                 n == 1 ? "" : "s", st->idents.n, st->idents.n == 1 ? " is" : "s are");
        n = -1;
    }
    int i = 0;
    for (const fe_ident *t = st->idents.head; t; t = t->next, i++) {
        fe_sym *sym = fe_map_get(&s->syms, t->name);
        if (sym && sym->kind != FE_SYM_VAR) continue;
        fe_value v = n >= 0 ? vals[i] : (fe_value){FE_V_ERROR, 0, 0, NULL};
        if (sym) sym->v = v;
        else fe_sym_bind(L, s, t->name, FE_SYM_VAR, v, t->loc);
    }
}

/* ---- control ------------------------------------------------------------------- */

static void exec_for(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    int64_t lo, hi;
    bool ok = fe_eval_int(L, s, st->lo, "a loop bound", &lo);
    ok = fe_eval_int(L, s, st->hi, "a loop bound", &hi) && ok;
    if (!ok) return;
    if (hi < lo) { /* `for i in 0 .. layers` with layers = -1 is a mistake, not zero layers */
        fe_error(L, st->hi->loc, "loop '%s' from %lld to %lld: the end is below the start, a negative count%s",
                 st->name, (long long)lo, (long long)hi, fe_blame_hparams(L, st->hi));
        return;
    }
    uint64_t span = (uint64_t)hi - (uint64_t)lo;
    if (span > FE_MAX_LOOP_ITERS) {
        fe_error(L, st->loc, "loop of %llu iterations (the limit is %d)", (unsigned long long)span,
                 FE_MAX_LOOP_ITERS);
        return;
    }
    int64_t count = (int64_t)span;
    fe_sym *old = fe_lookup(L, s, st->name);
    if (old && old->kind != FE_SYM_VAR) {
        fe_error(L, st->name_loc, "cannot use %s '%s' as a loop variable", sym_kind_name(old->kind),
                 st->name);
        return;
    }
    bool top = !s->block && s->loop_depth == 0;
    for (int64_t i = 0; i < count; i++) {
        if (!fe_tick(L, st->loc)) break;
        fe_sym *var = fe_map_get(&s->syms, st->name);
        if (var) var->v = fe_int(lo + i);
        else fe_sym_bind(L, s, st->name, FE_SYM_VAR, fe_int(lo + i), st->name_loc);
        int errors = L->nerrors, insts = L->instances;
        s->loop_depth++;
        fe_exec_stmts(L, s, st->body.head);
        s->loop_depth--;
        if (top && L->instances > insts) L->g->num_layers++;
        /* One report per error, not one per iteration. */
        if (L->nerrors > errors || s->returned || L->stop) return;
    }
}

/* if COND { ... } else { ... }: one branch, chosen when the model is
 * lowered from COND's value (hyperparameters: a model variant, e.g. a
 * flag's switch); a tensor is refused, the graph has no control flow. */
static void exec_if(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    fe_value c = fe_eval(L, s, st->value, NULL);
    if (c.kind == FE_V_ERROR) return;
    if (c.kind != FE_V_INT && c.kind != FE_V_FLOAT && c.kind != FE_V_BOOL) {
        fe_error(L, st->value->loc, "'if' expects a number or a bool of hyperparameters (the branch is chosen when "
                 "the model is compiled), got %s", fe_value_str(L, c));
        return;
    }
    bool take = c.kind == FE_V_FLOAT ? c.f != 0.0 : c.i != 0;
    fe_exec_stmts(L, s, take ? st->body.head : st->else_body.head);
}

static void exec_return(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    s->rets = arena_alloc(L->mem, (size_t)st->exprs.n * sizeof *s->rets);
    s->nrets = st->exprs.n;
    s->ret_stmt = st;
    int i = 0;
    for (const fe_arg *a = st->exprs.head; a; a = a->next) s->rets[i++] = fe_eval(L, s, a->value, NULL);
    s->returned = true;
}

static bool is_scalar_float(const ir_node *n)
{
    return n->shape.rank == 0 && ir_dtype_is_float(n->dtype);
}

static void exec_minimize(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (L->loss_stmt) {
        fe_error(L, st->loc, "more than one 'minimize'");
        fe_note(L, L->loss_stmt->loc, "the first 'minimize' is here");
        return;
    }
    L->loss_stmt = st;
    fe_value v = fe_eval(L, s, st->value, NULL);
    if (v.kind == FE_V_ERROR) return;
    if (v.kind != FE_V_TENSOR || !is_scalar_float(v.t)) {
        fe_error(L, st->value->loc, "minimize expects a scalar float tensor, got %s", fe_value_str(L, v));
        return;
    }
    v.t->flags |= IR_NF_LOSS;
}

static void exec_output(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    for (const fe_arg *a = st->exprs.head; a; a = a->next) {
        fe_value v = fe_eval(L, s, a->value, NULL);
        if (v.kind == FE_V_TENSOR) v.t->flags |= IR_NF_OUTPUT;
        else if (v.kind != FE_V_ERROR)
            fe_error(L, a->value->loc, "output expects a tensor, got %s", fe_value_str(L, v));
    }
}

void fe_exec_stmts(fe_lower *L, fe_scope *s, const fe_stmt *st)
{
    if (!st || !fe_enter(L, st->loc)) return;
    for (; st && !s->returned && !L->stop; st = st->next) {
        if (!fe_tick(L, st->loc)) break;
        bool top = !s->block && s->loop_depth == 0;
        switch (st->kind) {
        /* Misplaced statements were reported before lowering: skip them. */
        case FE_ST_HPARAM: if (top) exec_hparam(L, s, st); break;
        case FE_ST_INPUT: if (top) exec_input(L, s, st); break;
        case FE_ST_PARAM: exec_param(L, s, st); break;
        case FE_ST_BLOCK: case FE_ST_OP: break; /* collected before lowering */
        case FE_ST_FOR: exec_for(L, s, st); break;
        case FE_ST_IF: exec_if(L, s, st); break;
        case FE_ST_ASSIGN: exec_assign(L, s, st); break;
        case FE_ST_RETURN: if (s->block) exec_return(L, s, st); break;
        case FE_ST_MINIMIZE: if (!s->block) exec_minimize(L, s, st); break;
        case FE_ST_OUTPUT: if (!s->block) exec_output(L, s, st); break;
        }
    }
    L->nest--;
}

/* ---- blocks -------------------------------------------------------------------- */

const char *fe_def_kind(const fe_stmt *def)
{
    return def->kind == FE_ST_OP ? "op" : "block";
}

bool fe_bind_args(fe_lower *L, fe_scope *s, fe_scope *bs, const fe_expr *e, const fe_stmt *def)
{
    const char *kind = fe_def_kind(def);
    int npos = 0;
    bool ok = true;
    for (const fe_arg *a = e->args.head; a; a = a->next) npos += !a->key;
    if (npos > def->idents.n) {
        fe_error(L, e->loc, "%s '%s' expects %d argument%s, got %d", kind, def->name, def->idents.n,
                 def->idents.n == 1 ? "" : "s", npos);
        return false;
    }
    const fe_ident *p = def->idents.head;
    for (const fe_arg *a = e->args.head; a; a = a->next) {
        const fe_ident *q = p;
        if (a->key)
            for (q = def->idents.head; q && strcmp(q->name, a->key) != 0; q = q->next) {}
        else
            p = p->next;
        if (!q) {
            fe_error(L, a->loc, "%s '%s' has no argument '%s'", kind, def->name, a->key);
            ok = false;
            continue;
        }
        if (fe_map_get(&bs->syms, q->name)) {
            fe_error(L, a->loc, "argument '%s' of %s '%s' given twice", q->name, kind, def->name);
            ok = false;
            continue;
        }
        fe_value v = fe_eval(L, s, a->value, NULL);
        ok = v.kind != FE_V_ERROR && ok;
        fe_sym_bind(L, bs, q->name, FE_SYM_VAR, v, q->loc);
    }
    for (const fe_ident *q = def->idents.head; q && ok; q = q->next)
        if (!fe_map_get(&bs->syms, q->name)) {
            fe_error(L, e->loc, "%s '%s': missing argument '%s'", kind, def->name, q->name);
            ok = false;
        }
    return ok;
}

static bool claim_instance(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_stmt *blk,
                           const fe_hints *h, const char **inst)
{
    *inst = h && h->inst ? h->inst : blk->name;
    src_loc loc = h && h->inst ? h->inst_loc : e->loc;
    if (fe_map_get(&s->insts, *inst)) {
        if (h && h->inst)
            fe_error(L, loc, "duplicate instance name '%s'", *inst);
        else
            fe_error(L, loc, "duplicate instance name '%s' (give each use of block '%s' its own "
                     "name with 'as')", *inst, blk->name);
        return false;
    }
    if (++L->instances > FE_MAX_INSTANCES) {
        fe_error(L, loc, "model too large: more than %d block instances", FE_MAX_INSTANCES);
        L->stop = true;
        return false;
    }
    return true;
}

int fe_call_block(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_stmt *blk,
                  const fe_hints *h, fe_value **out)
{
    if (fe_map_get(&L->bad_blocks, blk->name)) return -1; /* already reported */
    for (const fe_scope *p = s; p; p = p->parent)
        if (p->block == blk) return -1; /* recursion: reported before lowering */
    if (L->depth >= FE_MAX_BLOCK_DEPTH) {
        fe_error(L, e->loc, "blocks nested more than %d deep", FE_MAX_BLOCK_DEPTH);
        return -1;
    }
    const char *inst;
    if (!claim_instance(L, s, e, blk, h, &inst)) return -1;
    const char *prefix = s->prefix[0] ? arena_printf(L->mem, "%s.%s", s->prefix, inst) : inst;
    fe_scope bs;
    fe_scope_init(L, &bs, s, blk, prefix);
    bs.in_op = s->in_op;
    bs.in_backward = s->in_backward;
    if (!fe_bind_args(L, s, &bs, e, blk)) return -1;
    fe_map_put(&s->insts, inst, (void *)inst);
    int errors = L->nerrors;
    L->depth++;
    fe_exec_stmts(L, &bs, blk->body.head);
    L->depth--;
    for (int i = 0; i < bs.nrets; i++)
        if (bs.rets[i].kind == FE_V_ERROR) return -1;
    if (L->nerrors > errors && bs.nrets == 0) return -1;
    *out = bs.rets;
    return bs.nrets;
}
