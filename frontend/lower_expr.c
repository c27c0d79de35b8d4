/* Expressions: numbers (hyperparameter arithmetic), names, tensor
 * arithmetic (add/sub/mul/scale) and the dispatch of calls. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"
#include "support/util.h"

fe_value fe_int(int64_t i) { return (fe_value){.kind = FE_V_INT, .i = i}; }
fe_value fe_float(double f) { return (fe_value){.kind = FE_V_FLOAT, .f = f}; }
fe_value fe_tensor(ir_node *t) { return (fe_value){.kind = FE_V_TENSOR, .t = t}; }
static fe_value fe_err(void) { return (fe_value){.kind = FE_V_ERROR}; }
double fe_num(fe_value v) { return v.kind == FE_V_INT ? (double)v.i : v.f; }
static bool is_num(fe_value v) { return v.kind == FE_V_INT || v.kind == FE_V_FLOAT; }

bool fe_double_is_int(double v, int64_t *out)
{
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || floor(v) != v) return false;
    *out = (int64_t)v;
    return true;
}

/* ---- names ------------------------------------------------------------------ */

fe_sym *fe_lookup(fe_lower *L, fe_scope *s, const char *name)
{
    fe_sym *sym = fe_map_get(&s->syms, name);
    return sym ? sym : fe_map_get(&L->hparams, name);
}

void fe_unknown_name(fe_lower *L, fe_scope *s, const fe_expr *e)
{
    fe_suggest sg;
    fe_suggest_init(&sg, e->name);
    fe_suggest_map(&sg, &s->syms);
    fe_suggest_map(&sg, &L->hparams);
    if (sg.best)
        fe_error(L, e->loc, "unknown name '%s'; did you mean '%s'?", e->name, sg.best);
    else
        fe_error(L, e->loc, "unknown name '%s'", e->name);
}

static fe_value eval_name(fe_lower *L, fe_scope *s, const fe_expr *e)
{
    fe_sym *sym = fe_lookup(L, s, e->name);
    if (sym) return sym->v;
    if (fe_map_get(&L->blocks, e->name) || fe_is_op_name(e->name) || strcmp(e->name, "sqrt") == 0)
        fe_error(L, e->loc, "'%s' is a function; call it with arguments", e->name);
    else
        fe_unknown_name(L, s, e);
    return fe_err();
}

/* ---- blame for a bad size or count ----------------------------------------- */

/* The hyperparameters, not positive, that a size or count is computed from,
 * followed through the definitions of derived ones (head_dim = hidden /
 * heads); a name shadowing nothing but the hyperparameter map. */
typedef struct blame {
    strbuf b;
    const char *seen[4];
    int n;
    bool fraction; /* blame the hyperparameters that are not integers instead */
} blame;

static bool blamed(const blame *bl, double v)
{
    int64_t i;
    return bl->fraction ? !fe_double_is_int(v, &i) : !(v > 0);
}

static void blame_walk(fe_lower *L, const fe_expr *e, blame *bl)
{
    if (!e || bl->n == (int)ARRAY_LEN(bl->seen)) return;
    if (e->kind == FE_EX_NAME) {
        const fe_sym *h = fe_map_get(&L->hparams, e->name);
        bool num = h && (h->v.kind == FE_V_INT || h->v.kind == FE_V_FLOAT);
        for (int i = 0; num && i < bl->n; i++) num = strcmp(bl->seen[i], e->name) != 0;
        if (!num || !blamed(bl, fe_num(h->v))) return;
        bl->seen[bl->n++] = e->name;
        sb_printf(&bl->b, "%shyperparameter %s = ", bl->n > 1 ? ", " : " (", e->name);
        if (h->v.kind == FE_V_INT) sb_printf(&bl->b, "%lld", (long long)h->v.i);
        else sb_put_double(&bl->b, h->v.f);
        if (fe_map_get(&L->overrides, e->name)) sb_printf(&bl->b, ", from --set %s", e->name);
        else sb_printf(&bl->b, ", declared at line %d", h->loc.line);
        blame_walk(L, h->def, bl); /* head_dim = hidden / heads: on to heads */
        return;
    }
    blame_walk(L, e->lhs, bl);
    blame_walk(L, e->rhs, bl);
    for (const fe_arg *a = e->args.head; a; a = a->next) blame_walk(L, a->value, bl);
}

static const char *blame_of(fe_lower *L, const fe_expr *e, bool fraction)
{
    blame bl = {.n = 0, .fraction = fraction};
    sb_init(&bl.b);
    blame_walk(L, e, &bl);
    if (bl.n) sb_putc(&bl.b, ')');
    const char *s = arena_strdup(L->mem, bl.b.s ? bl.b.s : "");
    sb_free(&bl.b);
    return s;
}

const char *fe_blame_hparams(fe_lower *L, const fe_expr *e) { return blame_of(L, e, false); }

/* The hyperparameters with a fractional value that a size or count is
 * computed from (group = heads / kv_heads where kv_heads does not divide). */
static const char *blame_fraction(fe_lower *L, const fe_expr *e) { return blame_of(L, e, true); }

/* ---- numbers ----------------------------------------------------------------- */

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static bool ipow(int64_t base, int64_t exp, int64_t *out)
{
    int64_t r = 1;
    while (exp > 0) {
        if ((exp & 1) && __builtin_mul_overflow(r, base, &r)) return false;
        exp >>= 1;
        if (exp && __builtin_mul_overflow(base, base, &base)) return false;
    }
    *out = r;
    return true;
}

/* Integer arithmetic; false on overflow (and for '/' that does not divide,
 * which the caller then does in floating point). */
static bool int_arith(fe_arith op, int64_t a, int64_t b, int64_t *r)
{
    switch (op) {
    case FE_AR_ADD: return !__builtin_add_overflow(a, b, r);
    case FE_AR_SUB: return !__builtin_sub_overflow(a, b, r);
    case FE_AR_MUL: return !__builtin_mul_overflow(a, b, r);
    case FE_AR_DIV:
        if ((a == INT64_MIN && b == -1) || a % b != 0) return false;
        *r = a / b;
        return true;
    case FE_AR_FLOORDIV:
        if (a == INT64_MIN && b == -1) return false;
        *r = floor_div(a, b);
        return true;
    case FE_AR_MOD:
        *r = (b == -1) ? 0 : a - floor_div(a, b) * b;
        return true;
    case FE_AR_POW: return ipow(a, b, r);
    default: return false;
    }
}

static double float_arith(fe_arith op, double a, double b)
{
    switch (op) {
    case FE_AR_ADD: return a + b;
    case FE_AR_SUB: return a - b;
    case FE_AR_MUL: return a * b;
    case FE_AR_DIV: return a / b;
    case FE_AR_FLOORDIV: return floor(a / b);
    case FE_AR_MOD: { double m = fmod(a, b); return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; }
    case FE_AR_POW: return pow(a, b);
    default: return NAN;
    }
}

static fe_value number_arith(fe_lower *L, src_loc loc, fe_arith op, fe_value a, fe_value b)
{
    const char *opn = fe_arith_name(op);
    bool divides = op == FE_AR_DIV || op == FE_AR_FLOORDIV || op == FE_AR_MOD;
    if (divides && fe_num(b) == 0) {
        fe_error(L, loc, "division by zero in '%s'", opn);
        return fe_err();
    }
    if (a.kind == FE_V_INT && b.kind == FE_V_INT && !(op == FE_AR_POW && b.i < 0)) {
        int64_t r;
        if (int_arith(op, a.i, b.i, &r)) return fe_int(r);
        if (op != FE_AR_DIV) {
            fe_error(L, loc, "integer overflow in '%s'", opn);
            return fe_err();
        }
    }
    double r = float_arith(op, fe_num(a), fe_num(b));
    if (isnan(r) && !isnan(fe_num(a)) && !isnan(fe_num(b))) {
        fe_error(L, loc, "'%s' has no real result here", opn);
        return fe_err();
    }
    return fe_float(r);
}

/* ---- tensor arithmetic -------------------------------------------------------- */

static fe_value scale_node(fe_lower *L, fe_scope *s, const fe_expr *e, ir_node *x, double alpha,
                           const char *hint)
{
    ir_node *n = ir_node_begin(L->g, IR_OP_SCALE, 1, &x, e->loc);
    ir_attr_set_float(n, "alpha", alpha);
    n = fe_finish_node(L, e, n, fe_node_name(L, s, hint, "scale"));
    return n ? fe_tensor(n) : fe_err();
}

static fe_value tensor_arith(fe_lower *L, fe_scope *s, const fe_expr *e, fe_value a, fe_value b,
                             const char *hint)
{
    static const ir_op ops[] = {[FE_AR_ADD] = IR_OP_ADD, [FE_AR_SUB] = IR_OP_SUB, [FE_AR_MUL] = IR_OP_MUL};
    fe_arith op = e->op;
    if (a.kind == FE_V_TENSOR && b.kind == FE_V_TENSOR && op <= FE_AR_MUL) {
        ir_node *src[2] = {a.t, b.t};
        ir_node *n = ir_node_begin(L->g, ops[op], 2, src, e->loc);
        n = fe_finish_node(L, e, n, fe_node_name(L, s, hint, ir_op_name(ops[op])));
        return n ? fe_tensor(n) : fe_err();
    }
    if (op == FE_AR_MUL && a.kind == FE_V_TENSOR && is_num(b))
        return scale_node(L, s, e, a.t, fe_num(b), hint);
    if (op == FE_AR_MUL && is_num(a) && b.kind == FE_V_TENSOR)
        return scale_node(L, s, e, b.t, fe_num(a), hint);
    if (op == FE_AR_DIV && a.kind == FE_V_TENSOR && is_num(b)) {
        if (fe_num(b) == 0) {
            fe_error(L, e->loc, "division by zero in '/'");
            return fe_err();
        }
        return scale_node(L, s, e, a.t, 1.0 / fe_num(b), hint);
    }
    fe_error(L, e->loc, "operator '%s' cannot be applied to %s and %s", fe_arith_name(op),
             fe_value_str(L, a), fe_value_str(L, b));
    return fe_err();
}

static fe_value eval_binary(fe_lower *L, fe_scope *s, const fe_expr *e, const char *hint)
{
    fe_value a = fe_eval(L, s, e->lhs, NULL);
    fe_value b = fe_eval(L, s, e->rhs, NULL);
    if (a.kind == FE_V_ERROR || b.kind == FE_V_ERROR) return fe_err();
    if (is_num(a) && is_num(b)) return number_arith(L, e->loc, e->op, a, b);
    if (a.kind == FE_V_BOOL || b.kind == FE_V_BOOL) {
        fe_error(L, e->loc, "operator '%s' cannot be applied to %s and %s", fe_arith_name(e->op),
                 fe_value_str(L, a), fe_value_str(L, b));
        return fe_err();
    }
    return tensor_arith(L, s, e, a, b, hint);
}

static fe_value eval_unary(fe_lower *L, fe_scope *s, const fe_expr *e, const char *hint)
{
    fe_value a = fe_eval(L, s, e->lhs, NULL);
    if (a.kind == FE_V_ERROR) return a;
    if (e->op == FE_AR_POS && a.kind != FE_V_BOOL) return a;
    if (a.kind == FE_V_INT) {
        if (a.i == INT64_MIN) {
            fe_error(L, e->loc, "integer overflow in '-'");
            return fe_err();
        }
        return fe_int(-a.i);
    }
    if (a.kind == FE_V_FLOAT) return fe_float(-a.f);
    if (a.kind == FE_V_TENSOR) return scale_node(L, s, e, a.t, -1.0, hint);
    fe_error(L, e->loc, "operator '%s' cannot be applied to %s", fe_arith_name(e->op),
             fe_value_str(L, a));
    return fe_err();
}

/* ---- calls ------------------------------------------------------------------- */

static int eval_sqrt(fe_lower *L, fe_scope *s, const fe_expr *e, fe_value **out)
{
    if (e->args.n != 1 || e->args.head->key) {
        fe_error(L, e->loc, "sqrt expects 1 number, got %d argument%s", e->args.n,
                 e->args.n == 1 ? "" : "s");
        return -1;
    }
    fe_value v = fe_eval_number(L, s, e->args.head->value, "sqrt");
    if (v.kind == FE_V_ERROR) return -1;
    if (fe_num(v) < 0) {
        fe_error(L, e->args.head->loc, "sqrt of a negative number (%g)", fe_num(v));
        return -1;
    }
    *out = arena_alloc(L->mem, sizeof **out);
    (*out)[0] = fe_float(sqrt(fe_num(v)));
    return 1;
}

static void unknown_call(fe_lower *L, fe_scope *s, const fe_expr *e)
{
    if (fe_lookup(L, s, e->name)) {
        fe_error(L, e->loc, "'%s' is not an op or a block", e->name);
        return;
    }
    fe_suggest sg;
    fe_suggest_init(&sg, e->name);
    fe_suggest_ops(&sg);
    fe_suggest_map(&sg, &L->blocks);
    fe_suggest_add(&sg, "sqrt");
    if (sg.best)
        fe_error(L, e->loc, "unknown op or block '%s'; did you mean '%s'?", e->name, sg.best);
    else
        fe_error(L, e->loc, "unknown op or block '%s'", e->name);
}

static int eval_call(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h, fe_value **out)
{
    const fe_stmt *blk = fe_map_get(&L->blocks, e->name);
    if (blk && blk->kind == FE_ST_OP) return fe_call_custom_op(L, s, e, blk, h, out);
    if (blk) return fe_call_block(L, s, e, blk, h, out);
    if (h && h->inst) {
        fe_error(L, h->inst_loc, "'as' names a block instance, but '%s' is not a block", e->name);
        return -1;
    }
    if (strcmp(e->name, "sqrt") == 0) return eval_sqrt(L, s, e, out);
    int n = fe_call_op(L, s, e, h, out);
    if (n == -2) {
        unknown_call(L, s, e);
        return -1;
    }
    return n;
}

int fe_eval_multi(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h, fe_value **out)
{
    if (e->kind == FE_EX_CALL) {
        if (!fe_tick(L, e->loc) || !fe_enter(L, e->loc)) return -1;
        int n = eval_call(L, s, e, h, out);
        L->nest--;
        return n;
    }
    if (h && h->inst) {
        fe_error(L, h->inst_loc, "'as' names a block instance, but the value is not a block call");
        return -1;
    }
    fe_value v = fe_eval(L, s, e, h);
    if (v.kind == FE_V_ERROR) return -1;
    *out = arena_alloc(L->mem, sizeof **out);
    (*out)[0] = v;
    return 1;
}

static fe_value eval_call_one(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h)
{
    fe_value *vals;
    int n = eval_call(L, s, e, h, &vals);
    if (n < 0) return fe_err();
    if (n == 1) return vals[0];
    if (n == 0)
        fe_error(L, e->loc, "'%s' returns no value", e->name);
    else
        fe_error(L, e->loc, "'%s' returns %d values where one is expected", e->name, n);
    return fe_err();
}

static fe_value eval_expr(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h);

fe_value fe_eval(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h)
{
    if (!fe_tick(L, e->loc) || !fe_enter(L, e->loc)) return fe_err();
    fe_value v = eval_expr(L, s, e, h);
    L->nest--;
    return v;
}

static fe_value eval_expr(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h)
{
    const char *hint = h && h->ntargets == 1 ? h->targets->name : NULL;
    switch (e->kind) {
    case FE_EX_INT: return fe_int(e->i);
    case FE_EX_FLOAT: return fe_float(e->f);
    case FE_EX_BOOL: return (fe_value){.kind = FE_V_BOOL, .i = e->i};
    case FE_EX_NAME: return eval_name(L, s, e);
    case FE_EX_BINARY: return eval_binary(L, s, e, hint);
    case FE_EX_UNARY: return eval_unary(L, s, e, hint);
    case FE_EX_CALL: return eval_call_one(L, s, e, h);
    case FE_EX_LIST:
        fe_error(L, e->loc, "a list is only allowed as an argument of an op");
        return fe_err();
    case FE_EX_ERROR: return fe_err();
    }
    return fe_err();
}

/* ---- typed evaluation ----------------------------------------------------------- */

fe_value fe_eval_number(fe_lower *L, fe_scope *s, const fe_expr *e, const char *what)
{
    fe_value v = fe_eval(L, s, e, NULL);
    if (v.kind == FE_V_ERROR || is_num(v)) return v;
    fe_error(L, e->loc, "%s expects a number, got %s", what, fe_value_str(L, v));
    return fe_err();
}

bool fe_eval_int(fe_lower *L, fe_scope *s, const fe_expr *e, const char *what, int64_t *out)
{
    fe_value v = fe_eval_number(L, s, e, what);
    if (v.kind == FE_V_ERROR) return false;
    if (v.kind == FE_V_INT) {
        *out = v.i;
        return true;
    }
    if (fe_double_is_int(v.f, out)) return true;
    fe_error(L, e->loc, "%s expects an integer, got %g%s", what, v.f, blame_fraction(L, e));
    return false;
}

bool fe_eval_dim(fe_lower *L, fe_scope *s, const fe_expr *e, int64_t *out)
{
    fe_value v = fe_eval_number(L, s, e, "a dimension");
    if (v.kind == FE_V_ERROR) return false;
    int64_t d = v.i;
    if (v.kind == FE_V_FLOAT && !fe_double_is_int(v.f, &d)) {
        if (fabs(v.f) < 9007199254740992.0 || isnan(v.f))
            fe_error(L, e->loc, "dimension %g is not an integer%s", v.f, blame_fraction(L, e));
        else
            fe_error(L, e->loc, "dimension %g is too large", v.f);
        return false;
    }
    if (d <= 0) {
        fe_error(L, e->loc, "dimension %lld is not positive%s", (long long)d, fe_blame_hparams(L, e));
        return false;
    }
    if (d > FE_MAX_DIM) {
        fe_error(L, e->loc, "dimension %lld is too large (the limit is %lld)", (long long)d,
                 (long long)FE_MAX_DIM);
        return false;
    }
    *out = d;
    return true;
}
