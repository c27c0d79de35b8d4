/* Constructors of the syntax tree, called from the parser's actions. */
#include "frontend/ast.h"

#include <stdarg.h>
#include <stdio.h>

#include "support/util.h"

src_loc fe_loc(const fe_parse *ps, int line, int col)
{
    return (src_loc){ps->file, line, col};
}

void fe_parse_error(fe_parse *ps, src_loc loc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ps->nerrors++;
    diag_error(ps->d, loc, "%s", msg);
}

fe_expr *fe_expr_new(fe_parse *ps, fe_expr_kind kind, src_loc loc)
{
    fe_expr *e = arena_alloc(ps->mem, sizeof *e);
    e->kind = kind;
    e->loc = loc;
    e->depth = 1;
    return e;
}

fe_expr *fe_expr_int(fe_parse *ps, src_loc loc, int64_t v)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_INT, loc);
    e->i = v;
    return e;
}

fe_expr *fe_expr_float(fe_parse *ps, src_loc loc, double v)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_FLOAT, loc);
    e->f = v;
    return e;
}

fe_expr *fe_expr_bool(fe_parse *ps, src_loc loc, bool v)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_BOOL, loc);
    e->i = v;
    return e;
}

fe_expr *fe_expr_name(fe_parse *ps, src_loc loc, const char *name)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_NAME, loc);
    e->name = name;
    return e;
}

/* Gives e its depth; a tree deeper than FE_MAX_EXPR_DEPTH becomes an error
 * node (reported once per file) so that no later walk recurses without
 * bound. */
static fe_expr *depth_check(fe_parse *ps, fe_expr *e, int child_depth)
{
    e->depth = child_depth + 1;
    if (e->depth <= FE_MAX_EXPR_DEPTH) return e;
    if (!ps->depth_reported) {
        ps->depth_reported = true;
        fe_parse_error(ps, e->loc, "expression nested too deeply (more than %d levels)",
                       FE_MAX_EXPR_DEPTH);
    }
    return fe_expr_new(ps, FE_EX_ERROR, e->loc);
}

fe_expr *fe_expr_binary(fe_parse *ps, src_loc loc, fe_arith op, fe_expr *l, fe_expr *r)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_BINARY, loc);
    e->op = op;
    e->lhs = l;
    e->rhs = r;
    return depth_check(ps, e, l->depth > r->depth ? l->depth : r->depth);
}

fe_expr *fe_expr_unary(fe_parse *ps, src_loc loc, fe_arith op, fe_expr *x)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_UNARY, loc);
    e->op = op;
    e->lhs = x;
    return depth_check(ps, e, x->depth);
}

static int args_depth(const fe_args *a)
{
    int d = 0;
    for (const fe_arg *p = a->head; p; p = p->next)
        if (p->value->depth > d) d = p->value->depth;
    return d;
}

fe_expr *fe_expr_call(fe_parse *ps, src_loc loc, const char *name, fe_args args)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_CALL, loc);
    e->name = name;
    e->args = args;
    return depth_check(ps, e, args_depth(&args));
}

fe_expr *fe_expr_list(fe_parse *ps, src_loc loc, fe_args items)
{
    fe_expr *e = fe_expr_new(ps, FE_EX_LIST, loc);
    e->args = items;
    return depth_check(ps, e, args_depth(&items));
}

fe_args fe_args_one(fe_parse *ps, const char *key, src_loc loc, fe_expr *value)
{
    return fe_args_add(ps, (fe_args){0}, key, loc, value);
}

fe_args fe_args_add(fe_parse *ps, fe_args l, const char *key, src_loc loc, fe_expr *value)
{
    fe_arg *a = arena_alloc(ps->mem, sizeof *a);
    a->key = key;
    a->loc = loc;
    a->value = value;
    if (l.tail) l.tail->next = a;
    else l.head = a;
    l.tail = a;
    l.n++;
    return l;
}

fe_idents fe_idents_one(fe_parse *ps, const char *name, src_loc loc)
{
    return fe_idents_add(ps, (fe_idents){0}, name, loc);
}

fe_idents fe_idents_add(fe_parse *ps, fe_idents l, const char *name, src_loc loc)
{
    fe_ident *id = arena_alloc(ps->mem, sizeof *id);
    id->name = name;
    id->loc = loc;
    if (l.tail) l.tail->next = id;
    else l.head = id;
    l.tail = id;
    l.n++;
    return l;
}

fe_stmts fe_stmts_add(fe_stmts l, fe_stmt *s)
{
    if (!s) return l; /* a statement dropped by error recovery */
    if (l.tail) l.tail->next = s;
    else l.head = s;
    l.tail = s;
    l.n++;
    return l;
}

fe_stmt *fe_stmt_new(fe_parse *ps, fe_stmt_kind kind, src_loc loc)
{
    fe_stmt *s = arena_alloc(ps->mem, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    s->name_loc = loc;
    return s;
}

const char *fe_arith_name(fe_arith op)
{
    static const char *const names[] = {
        [FE_AR_ADD] = "+", [FE_AR_SUB] = "-", [FE_AR_MUL] = "*", [FE_AR_DIV] = "/",
        [FE_AR_FLOORDIV] = "//", [FE_AR_MOD] = "%", [FE_AR_POW] = "**",
        [FE_AR_NEG] = "-", [FE_AR_POS] = "+",
    };
    return (unsigned)op < ARRAY_LEN(names) ? names[op] : "?";
}
