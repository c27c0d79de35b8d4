/* fe_compile: parse, check the program's structure (statement placement,
 * blocks and custom ops, recursion, model flags), apply --set and flag overrides, and lower
 * the top level. */
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"
#include "frontend/lower.h"
#include "frontend/parse.h"
#include "support/util.h"

/* ---- placement ------------------------------------------------------------ */

static const char *stmt_keyword(fe_stmt_kind k)
{
    switch (k) {
    case FE_ST_HPARAM: return "hparam";
    case FE_ST_INPUT: return "input";
    case FE_ST_BLOCK: return "block";
    case FE_ST_OP: return "op";
    case FE_ST_MINIMIZE: return "minimize";
    case FE_ST_OUTPUT: return "output";
    case FE_ST_RETURN: return "return";
    case FE_ST_IF: return "if";
    default: return "";
    }
}

/* hparam, input, block and op belong to the top level (outside loops);
 * minimize and output outside blocks and ops; return inside them; param
 * not in an op (its forward is not differentiated). `def` is the block or
 * op around st, NULL at the top level. */
static void check_placement(fe_lower *L, const fe_stmt *st, const fe_stmt *def, bool in_loop)
{
    const char *inside = !def ? NULL : def->kind == FE_ST_OP ? "an op" : "a block";
    for (; st; st = st->next) {
        const char *kw = stmt_keyword(st->kind);
        switch (st->kind) {
        case FE_ST_HPARAM: case FE_ST_INPUT: case FE_ST_BLOCK: case FE_ST_OP:
            if (def || in_loop)
                fe_error(L, st->loc, "'%s' is only allowed at the top level, outside loops and ifs", kw);
            break;
        case FE_ST_MINIMIZE: case FE_ST_OUTPUT:
            if (def) fe_error(L, st->loc, "'%s' is not allowed inside %s", kw, inside);
            break;
        case FE_ST_RETURN:
            if (!def) fe_error(L, st->loc, "'return' outside a block or an op");
            break;
        case FE_ST_PARAM:
            if (def && def->kind == FE_ST_OP)
                fe_error(L, st->loc, "a parameter cannot be declared inside op '%s': pass it to the op "
                         "as an argument (autodiff does not look into a custom op, so it would get no "
                         "gradient)", def->name);
            break;
        default: break;
        }
        if (st->kind == FE_ST_BLOCK || st->kind == FE_ST_OP) check_placement(L, st->body.head, st, false);
        if (st->kind == FE_ST_OP) check_placement(L, st->bwd_body.head, st, false);
        if (st->kind == FE_ST_FOR || st->kind == FE_ST_IF) check_placement(L, st->body.head, def, true);
        if (st->kind == FE_ST_IF) check_placement(L, st->else_body.head, def, true);
    }
}

/* ---- blocks and ops ------------------------------------------------------------ */

static bool check_args(fe_lower *L, const fe_stmt *st)
{
    bool ok = true;
    for (const fe_ident *a = st->idents.head; a; a = a->next)
        for (const fe_ident *b = st->idents.head; b != a; b = b->next)
            if (strcmp(a->name, b->name) == 0) {
                fe_error(L, a->loc, "duplicate argument '%s' of %s '%s'", a->name, fe_def_kind(st),
                         st->name);
                ok = false;
            }
    return ok;
}

/* backward(dy): exactly one name, the gradient of the result, which is not
 * also the name of an argument. */
static bool check_backward_params(fe_lower *L, const fe_stmt *st)
{
    const fe_idents *p = &st->bwd_params;
    if (p->n != 1) {
        fe_error(L, p->n ? p->head->next->loc : st->bwd_loc,
                 "the backward of op '%s' takes one parameter, the gradient of its result; got %d",
                 st->name, p->n);
        return false;
    }
    for (const fe_ident *a = st->idents.head; a; a = a->next)
        if (strcmp(a->name, p->head->name) == 0) {
            fe_error(L, p->head->loc, "the gradient '%s' of op '%s' has the name of one of its arguments",
                     a->name, st->name);
            return false;
        }
    return true;
}

static void collect_blocks(fe_lower *L, const fe_stmt *st)
{
    for (; st; st = st->next) {
        if (st->kind != FE_ST_BLOCK && st->kind != FE_ST_OP) continue;
        const char *kind = fe_def_kind(st);
        if (fe_is_op_name(st->name) || strcmp(st->name, "sqrt") == 0) {
            fe_error(L, st->name_loc, "%s '%s' has the name of %s", kind, st->name,
                     st->kind == FE_ST_OP ? "a built-in op" : "an op");
            continue;
        }
        const fe_stmt *old = fe_map_get(&L->blocks, st->name);
        if (old) {
            if (old->kind == st->kind)
                fe_error(L, st->name_loc, "duplicate %s '%s'", kind, st->name);
            else
                fe_error(L, st->name_loc, "%s '%s' has the name of %s '%s'", kind, st->name,
                         fe_def_kind(old), old->name);
            fe_note(L, old->name_loc, "%s '%s' was first defined here", fe_def_kind(old), st->name);
            continue;
        }
        bool ok = check_args(L, st);
        if (st->kind == FE_ST_OP) ok = check_backward_params(L, st) && ok;
        if (!ok) fe_map_put(&L->bad_blocks, st->name, (void *)st);
        fe_map_put(&L->blocks, st->name, (void *)st);
    }
}

/* Depth-first search over "block or op A calls block or op B" to report
 * cycles (through a forward or a backward body). */
typedef struct fe_cycle_search {
    fe_lower *L;
    fe_map color;                       /* name -> 1 (on the path) or 2 (done) */
    const char *path[FE_MAX_BLOCK_DEPTH + 1];
    int depth;
} fe_cycle_search;

static void visit_block(fe_cycle_search *cs, const fe_stmt *blk);

static void visit_call(fe_cycle_search *cs, const fe_expr *e)
{
    const fe_stmt *callee = fe_map_get(&cs->L->blocks, e->name);
    if (!callee) return;
    intptr_t c = (intptr_t)fe_map_get(&cs->color, e->name);
    if (c == 2) return;
    if (c == 0) {
        visit_block(cs, callee);
        return;
    }
    strbuf b;
    sb_init(&b);
    int from = 0;
    while (strcmp(cs->path[from], e->name) != 0) from++;
    for (int i = from; i < cs->depth; i++) sb_printf(&b, "%s -> ", cs->path[i]);
    sb_puts(&b, e->name);
    fe_error(cs->L, e->loc, "recursive use of %s '%s': %s", fe_def_kind(callee), e->name, b.s);
    sb_free(&b);
}

static void visit_expr(fe_cycle_search *cs, const fe_expr *e)
{
    if (!e) return;
    if (e->kind == FE_EX_CALL) visit_call(cs, e);
    visit_expr(cs, e->lhs);
    visit_expr(cs, e->rhs);
    for (const fe_arg *a = e->args.head; a; a = a->next) visit_expr(cs, a->value);
}

static void visit_stmts(fe_cycle_search *cs, const fe_stmt *st)
{
    for (; st; st = st->next) {
        if (st->kind == FE_ST_BLOCK || st->kind == FE_ST_OP) continue;
        visit_expr(cs, st->value);
        visit_expr(cs, st->lo);
        visit_expr(cs, st->hi);
        visit_expr(cs, st->as_index);
        for (const fe_arg *a = st->exprs.head; a; a = a->next) visit_expr(cs, a->value);
        for (const fe_arg *a = st->type.dims.head; a; a = a->next) visit_expr(cs, a->value);
        visit_stmts(cs, st->body.head);
        visit_stmts(cs, st->else_body.head);
    }
}

static void visit_block(fe_cycle_search *cs, const fe_stmt *blk)
{
    if (cs->depth >= FE_MAX_BLOCK_DEPTH) return; /* the lowering reports the depth */
    fe_map_put(&cs->color, blk->name, (void *)(intptr_t)1);
    cs->path[cs->depth++] = blk->name;
    visit_stmts(cs, blk->body.head);
    visit_stmts(cs, blk->bwd_body.head);
    cs->depth--;
    fe_map_put(&cs->color, blk->name, (void *)(intptr_t)2);
}

static void check_recursion(fe_lower *L, const fe_stmt *st)
{
    fe_cycle_search cs = {.L = L};
    fe_map_init(&cs.color, L->mem);
    for (; st; st = st->next)
        if ((st->kind == FE_ST_BLOCK || st->kind == FE_ST_OP) && fe_map_get(&L->blocks, st->name) == st &&
            !fe_map_get(&cs.color, st->name))
            visit_block(&cs, st);
}

/* ---- model flags and overrides ---------------------------------------------- */

const char *const fe_model_flags[] = {
    "num-layers", "hidden-size", "num-attention-heads", "num-query-groups", "ffn-hidden-size", "seq-length",
    "max-position-embeddings", "hidden-dropout", "attention-dropout", "init-method-std", "use-rope-scaling",
    "rope-scaling-factor", "add-qkv-bias", "qk-layernorm", NULL,
};

bool fe_model_flag_is_switch(const char *flag)
{
    return flag && (strcmp(flag, "use-rope-scaling") == 0 || strcmp(flag, "add-qkv-bias") == 0 ||
                    strcmp(flag, "qk-layernorm") == 0);
}

static bool model_flag_known(const char *flag)
{
    for (int i = 0; fe_model_flags[i]; i++)
        if (strcmp(fe_model_flags[i], flag) == 0) return true;
    return false;
}

/* Every `flag F` names a model flag, and no two hyperparameters share one. */
static void check_flags(fe_lower *L, const fe_stmt *prog)
{
    for (const fe_stmt *st = prog; st; st = st->next) {
        if (st->kind != FE_ST_HPARAM || !st->flag) continue;
        if (!model_flag_known(st->flag)) {
            strbuf list;
            sb_init(&list);
            for (int i = 0; fe_model_flags[i]; i++) sb_printf(&list, "%s%s", i ? ", " : "", fe_model_flags[i]);
            fe_error(L, st->flag_loc, "'%s' is not a model flag; a hyperparameter can be bound to one of: %s",
                     st->flag, list.s);
            sb_free(&list);
            continue;
        }
        for (const fe_stmt *o = prog; o != st; o = o->next)
            if (o->kind == FE_ST_HPARAM && o->flag && strcmp(o->flag, st->flag) == 0) {
                fe_error(L, st->flag_loc, "flag '%s' is already bound to hyperparameter '%s'", st->flag, o->name);
                fe_note(L, o->flag_loc, "bound here");
                break;
            }
    }
}

/* "--set k=v" or "--flag v", as the command line gave it. */
static const char *override_str(fe_lower *L, const fe_override *o)
{
    char buf[256];
    if (o->flag && fe_model_flag_is_switch(o->name) && o->value && strcmp(o->value, "1") == 0)
        snprintf(buf, sizeof buf, "--%s", o->name);
    else
        snprintf(buf, sizeof buf, o->flag ? "--%s %s" : "--set %s=%s", o->name ? o->name : "",
                 o->value ? o->value : "");
    return arena_strdup(L->mem, buf);
}

static void unknown_override(fe_lower *L, const fe_stmt *prog, const fe_override *o, src_loc cl,
                             bool list_them)
{
    fe_suggest sg;
    fe_suggest_init(&sg, o->name);
    strbuf list;
    sb_init(&list);
    for (const fe_stmt *st = prog; st; st = st->next)
        if (st->kind == FE_ST_HPARAM) {
            fe_suggest_add(&sg, st->name);
            sb_printf(&list, "%s%s", list.len ? ", " : "", st->name);
        }
    if (sg.best)
        fe_error(L, cl, "--set %s=%s: no hyperparameter '%s' in model '%s'; did you mean '%s'?",
                 o->name, o->value, o->name, L->model, sg.best);
    else
        fe_error(L, cl, "--set %s=%s: no hyperparameter '%s' in model '%s'", o->name, o->value,
                 o->name, L->model);
    if (list_them)
        fe_note(L, cl, "the hyperparameters of '%s' are: %s", L->model, list.len ? list.s : "(none)");
    sb_free(&list);
}

static void unbound_flag(fe_lower *L, const fe_stmt *prog, const fe_override *o, src_loc cl)
{
    strbuf list;
    sb_init(&list);
    for (const fe_stmt *st = prog; st; st = st->next)
        if (st->kind == FE_ST_HPARAM && st->flag)
            sb_printf(&list, "%s--%s (%s)", list.len ? ", " : "", st->flag, st->name);
    if (list.len)
        fe_error(L, cl, "%s: model '%s' binds no hyperparameter to --%s; the flags it binds are: %s",
                 override_str(L, o), L->model, o->name, list.s);
    else
        fe_error(L, cl, "%s: model '%s' binds no hyperparameter to --%s, nor any other flag (use --set NAME=VALUE; "
                 "docs/dsl.md tells how a model binds flags)", override_str(L, o), L->model, o->name);
    sb_free(&list);
}

/* The hyperparameter o sets (its name, or the one bound to its flag), or NULL. */
static const fe_stmt *override_target(const fe_stmt *prog, const fe_override *o)
{
    const char *name = o->name ? o->name : "";
    for (const fe_stmt *st = prog; st; st = st->next)
        if (st->kind == FE_ST_HPARAM && strcmp(o->flag ? (st->flag ? st->flag : "") : st->name, name) == 0) return st;
    return NULL;
}

static void apply_overrides(fe_lower *L, const fe_stmt *prog, const fe_override *ov, int nov)
{
    src_loc cl = {diag_intern("<command line>"), 0, 0};
    bool listed = false;
    fe_map by; /* hyperparameter -> the override that set it */
    fe_map_init(&by, L->mem);
    for (int i = 0; i < nov; i++) {
        const fe_override *o = &ov[i];
        const char *value = o->value ? o->value : "";
        const fe_stmt *st = override_target(prog, o);
        if (!st && o->flag) { unbound_flag(L, prog, o, cl); continue; }
        if (!st) {
            unknown_override(L, prog, &(fe_override){o->name ? o->name : "", value, false}, cl, !listed);
            listed = true;
            continue;
        }
        const fe_override *prev = fe_map_get(&by, st->name);
        if (prev && prev->flag != o->flag) {
            fe_error(L, cl, "%s and %s both set hyperparameter '%s'; give one", override_str(L, prev),
                     override_str(L, o), st->name);
            continue;
        }
        fe_map_put(&by, st->name, (void *)o);
        fe_value *v = arena_alloc(L->mem, sizeof *v);
        double f;
        if (parse_i64(value, &v->i)) v->kind = FE_V_INT;
        else if (parse_double(value, &f) && f == f) *v = fe_float(f);
        else {
            fe_error(L, cl, "%s: '%s' is not a number", override_str(L, o), value);
            continue;
        }
        fe_map_put(&L->overrides, st->name, v);
    }
}

/* ---- entry point ------------------------------------------------------------ */

/* What every command after check needs of a model: a loss to minimise and
 * parameters to train. Checked here, so `tgc check` refuses what compile
 * and run would, with the same message. */
static void check_trainable(fe_lower *L)
{
    const char *why = ir_graph_untrainable(L->g);
    const ir_node *loss = ir_graph_loss(L->g);
    if (why) fe_error(L, loss ? loss->loc : (src_loc){L->file, 0, 0}, "model '%s' %s", L->model, why);
}

static const char *model_stem(arena *mem, const char *file)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (n == 0 || strcmp(base, "-") == 0) return "model";
    return arena_strndup(mem, base, n);
}

static ir_graph *lower_program(fe_parse *ps, const fe_override *ov, int nov)
{
    fe_lower L = {.d = ps->d, .file = ps->file, .mem = ps->mem};
    L.model = model_stem(ps->mem, ps->file);
    L.g = ir_graph_new(L.model);
    L.g->cse = true;
    fe_map_init(&L.hparams, L.mem);
    fe_map_init(&L.blocks, L.mem);
    fe_map_init(&L.overrides, L.mem);
    fe_map_init(&L.reported, L.mem);
    fe_map_init(&L.bad_blocks, L.mem);
    const fe_stmt *prog = ps->program.head;
    check_placement(&L, prog, NULL, false);
    collect_blocks(&L, prog);
    check_recursion(&L, prog);
    check_flags(&L, prog);
    apply_overrides(&L, prog, ov, nov);
    fe_scope top;
    fe_scope_init(&L, &top, NULL, NULL, "");
    fe_exec_stmts(&L, &top, prog);
    if (L.nerrors == 0 && !L.stop) check_trainable(&L);
    if (L.nerrors > 0 || L.stop) {
        ir_graph_free(L.g);
        return NULL;
    }
    return L.g;
}

ir_graph *fe_compile(const char *file, const char *text, size_t len,
                     const fe_override *ov, int nov, diag *d)
{
    if (!file) file = "<input>";
    if (!text) len = 0;
    const char *fname = diag_add_source(d, file, text ? text : "", len);
    arena mem;
    arena_init(&mem);
    fe_parse ps = {.mem = &mem, .d = d, .file = fname};
    ir_graph *g = NULL;
    if (fe_parse_text(&ps, text ? text : "", len)) g = lower_program(&ps, ov, nov);
    arena_free(&mem);
    return g;
}
