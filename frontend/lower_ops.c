/* Op calls. The forward ops of ir/ops.def flagged IR_OPF_DSL are callable by
 * their mnemonic: positional tensor operands, then keyword attributes,
 * checked against the op's schema in the table (arity, attribute names,
 * kinds, symbols, defaults). A few DSL built-ins sit on top (transpose,
 * split, arange, full, attention, repeat_interleave); nothing else here knows about particular ops
 * except the small tables below. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "frontend/lower.h"
#include "support/util.h"

typedef struct fe_call {
    const fe_expr *e;
    const fe_arg **pos;
    int npos;
    const fe_arg **kw;
    int nkw;
    bool *kw_used;
} fe_call;

/* Tensor operands that may also be given by keyword: softmax(x, mask=m). */
static const struct {
    ir_op op;
    const char *key;
    int index;
} operand_keywords[] = {
    {IR_OP_SOFTMAX, "mask", 1},
};

typedef int (*fe_builtin_fn)(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_transpose(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_split(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_arange(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_full(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_attention(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);
static int builtin_repeat_interleave(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out);

static const struct {
    const char *name;
    fe_builtin_fn fn;
} builtins[] = {
    {"transpose", builtin_transpose},
    {"split", builtin_split},
    {"arange", builtin_arange},
    {"full", builtin_full},
    {"attention", builtin_attention},
    {"repeat_interleave", builtin_repeat_interleave},
};

/* The IR form of custom ops: written in the DSL as `op ... backward ...`. */
static const ir_op custom_op_parts[] = {IR_OP_CUSTOM_OUT, IR_OP_COTANGENT, IR_OP_CUSTOM_GRAD};

/* The ops a model may call (IR_OPF_DSL). Leaves come from declarations and
 * built-ins; backward, optimizer and communication ops are inserted by passes. */
static bool op_callable(ir_op op) { return ir_op_has(op, IR_OPF_DSL); }

bool fe_is_op_name(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
        if (strcmp(builtins[i].name, name) == 0) return true;
    ir_op op;
    return ir_op_lookup(name, &op) && op_callable(op);
}

void fe_suggest_ops(fe_suggest *sg)
{
    for (size_t i = 0; i < ARRAY_LEN(builtins); i++) fe_suggest_add(sg, builtins[i].name);
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (op_callable((ir_op)op)) fe_suggest_add(sg, ir_op_name((ir_op)op));
}

/* ---- helpers -------------------------------------------------------------- */

const char *fe_hint_one(const fe_hints *h)
{
    return h && h->ntargets == 1 ? h->targets->name : NULL;
}

static const char *hint_at(const fe_hints *h, int i, int n)
{
    if (!h || h->ntargets != n) return NULL;
    const fe_ident *t = h->targets;
    for (int k = 0; k < i && t; k++) t = t->next;
    return t ? t->name : NULL;
}

static fe_value *one_value(fe_lower *L, ir_node *n)
{
    fe_value *v = arena_alloc(L->mem, sizeof *v);
    *v = fe_tensor(n);
    return v;
}

ir_node *fe_finish_node(fe_lower *L, const fe_expr *e, ir_node *n, const char *name)
{
    char err[512] = "";
    ir_node *r = ir_node_end(L->g, n, name, err, sizeof err);
    if (!r) fe_error(L, e->loc, "%s", err[0] ? err : "invalid operands");
    return r;
}

bool fe_check_numel(fe_lower *L, src_loc loc, const ir_shape *sh)
{
    int64_t n = 1;
    for (int i = 0; i < sh->rank; i++)
        if (__builtin_mul_overflow(n, sh->dim[i], &n) || n > FE_MAX_NUMEL) {
            fe_error(L, loc, "tensor too large (more than %lld elements)", (long long)FE_MAX_NUMEL);
            return false;
        }
    return true;
}

ir_node *fe_new_leaf(fe_lower *L, ir_op op, const char *name, ir_dtype t,
                     const ir_shape *shape, src_loc loc)
{
    const char *unique = name;
    for (int k = 1; ir_graph_find(L->g, unique); k++)
        unique = arena_printf(L->mem, "%s.%d", name, k);
    return ir_leaf_new(L->g, op, unique, t, shape, loc);
}

/* Splits the arguments into positional and keyword ones. */
static bool call_init(fe_lower *L, const fe_expr *e, fe_call *c)
{
    memset(c, 0, sizeof *c);
    c->e = e;
    int n = e->args.n;
    c->pos = arena_alloc(L->mem, (size_t)n * sizeof *c->pos);
    c->kw = arena_alloc(L->mem, (size_t)n * sizeof *c->kw);
    c->kw_used = arena_alloc(L->mem, (size_t)n * sizeof *c->kw_used);
    bool ok = true;
    for (const fe_arg *a = e->args.head; a; a = a->next) {
        if (!a->key) {
            if (c->nkw) {
                fe_error(L, a->loc, "positional argument after keyword arguments");
                ok = false;
            }
            c->pos[c->npos++] = a;
            continue;
        }
        for (int k = 0; k < c->nkw; k++)
            if (strcmp(c->kw[k]->key, a->key) == 0) {
                fe_error(L, a->loc, "argument '%s' given twice", a->key);
                ok = false;
            }
        c->kw[c->nkw++] = a;
    }
    return ok;
}

static bool eval_tensor(fe_lower *L, fe_scope *s, const fe_arg *a, const char *op, int index,
                        ir_node **out)
{
    fe_value v = fe_eval(L, s, a->value, NULL);
    if (v.kind == FE_V_ERROR) return false;
    if (v.kind == FE_V_TENSOR) {
        *out = v.t;
        return true;
    }
    fe_error(L, a->loc, "operand %d of %s must be a tensor, got %s", index + 1, op,
             fe_value_str(L, v));
    return false;
}

static void arity_error(fe_lower *L, const fe_expr *e, const ir_op_info *info, int got)
{
    int lo = info->min_src, hi = info->max_src;
    /* dropout(x, 0.1): an attribute given by position. */
    const char *hint = got > hi && info->nattrs > 0
                           ? arena_printf(L->mem, " (attributes are given by name, as in %s=...)",
                                          info->attrs[0].name)
                           : "";
    if (lo == hi)
        fe_error(L, e->loc, "%s expects %d tensor operand%s, got %d%s", info->name, lo,
                 lo == 1 ? "" : "s", got, hint);
    else
        fe_error(L, e->loc, "%s expects %d to %d tensor operands, got %d%s", info->name, lo, hi, got, hint);
}

static const char *attr_list(fe_lower *L, const ir_op_info *info)
{
    strbuf b;
    sb_init(&b);
    for (int i = 0; i < info->nattrs; i++) sb_printf(&b, "%s%s", i ? ", " : "", info->attrs[i].name);
    const char *r = arena_strdup(L->mem, b.s ? b.s : "");
    sb_free(&b);
    return r;
}

static const char *sym_list(fe_lower *L, const ir_attr_def *d)
{
    strbuf b;
    sb_init(&b);
    for (int i = 0; i < d->nsyms; i++)
        sb_printf(&b, "%s%s", i == 0 ? "" : i == d->nsyms - 1 ? " or " : ", ", d->syms[i]);
    const char *r = arena_strdup(L->mem, b.s ? b.s : "");
    sb_free(&b);
    return r;
}

static void unknown_attr(fe_lower *L, const fe_arg *a, const char *op, const ir_op_info *info)
{
    if (info->nattrs == 0)
        fe_error(L, a->loc, "%s has no attributes; '%s' is not one", op, a->key);
    else
        fe_error(L, a->loc, "%s has no attribute '%s' (valid attributes: %s)", op, a->key,
                 attr_list(L, info));
}

/* Checks that every keyword was understood. */
static bool no_other_keywords(fe_lower *L, fe_call *c, const char *op, const char *valid)
{
    bool ok = true;
    for (int k = 0; k < c->nkw; k++)
        if (!c->kw_used[k]) {
            if (valid[0])
                fe_error(L, c->kw[k]->loc, "%s has no attribute '%s' (valid attributes: %s)", op,
                         c->kw[k]->key, valid);
            else
                fe_error(L, c->kw[k]->loc, "%s has no attributes; '%s' is not one", op, c->kw[k]->key);
            ok = false;
        }
    return ok;
}

/* Normalises a possibly negative axis against a rank. */
static bool norm_axis(fe_lower *L, src_loc loc, int64_t *axis, const ir_node *x)
{
    int rank = x->shape.rank;
    if (*axis < -rank || *axis >= rank) {
        fe_error(L, loc, "axis %lld is out of range for %s", (long long)*axis, fe_type_str(L, x));
        return false;
    }
    if (*axis < 0) *axis += rank;
    return true;
}

/* ---- attribute values ------------------------------------------------------ */

static bool set_sym_attr(fe_lower *L, const fe_arg *a, ir_node *n, const ir_attr_def *d, const char *op)
{
    if (a->value->kind == FE_EX_NAME && ir_attr_set_sym(n, d->name, a->value->name)) return true;
    const char *got = a->value->kind == FE_EX_NAME
                          ? arena_printf(L->mem, "'%s'", a->value->name)
                          : "an expression";
    fe_error(L, a->value->loc, "attribute '%s' of %s must be %s; got %s", d->name, op,
             sym_list(L, d), got);
    return false;
}

static bool set_bool_attr(fe_lower *L, fe_scope *s, const fe_arg *a, ir_node *n, const char *name,
                          const char *op)
{
    fe_value v = fe_eval(L, s, a->value, NULL);
    if (v.kind == FE_V_ERROR) return false;
    if (v.kind != FE_V_BOOL) {
        fe_error(L, a->value->loc, "attribute '%s' of %s expects true or false, got %s", name, op,
                 fe_value_str(L, v));
        return false;
    }
    ir_attr_set_bool(n, name, v.i != 0);
    return true;
}

/* reshape's shape: positive dims and at most one -1, which is inferred. */
static bool resolve_shape(fe_lower *L, const fe_arg *a, ir_node *n, int64_t *v, int count)
{
    int infer = -1;
    int64_t known = 1;
    const fe_arg *item = a->value->args.head;
    for (int i = 0; i < count; i++, item = item ? item->next : NULL) {
        /* Only a -1 written as such is inferred; one computed from
         * hyperparameters (heads = -1) is a bad dimension. */
        const fe_expr *x = item ? item->value : NULL;
        bool literal = !x || x->kind == FE_EX_INT || (x->kind == FE_EX_UNARY && x->lhs && x->lhs->kind == FE_EX_INT);
        if (v[i] == -1 && infer < 0 && literal) { infer = i; continue; }
        if (v[i] <= 0 || v[i] > FE_MAX_DIM) {
            const fe_expr *e = item ? item->value : a->value;
            fe_error(L, e->loc, "dimension %lld is not positive%s", (long long)v[i], fe_blame_hparams(L, e));
            return false;
        }
        if (__builtin_mul_overflow(known, v[i], &known)) known = INT64_MAX;
    }
    if (infer < 0 || n->nsrc < 1) return true;
    int64_t total = ir_shape_numel(&n->src[0]->shape);
    if (known == 0 || total % known != 0) {
        fe_error(L, a->value->loc,
                 "cannot infer the -1 dimension: %s has %lld elements, not a multiple of %lld",
                 fe_type_str(L, n->src[0]), (long long)total, (long long)known);
        return false;
    }
    v[infer] = total / known;
    return true;
}

static bool set_ints_attr(fe_lower *L, fe_scope *s, const fe_arg *a, ir_node *n, const ir_attr_def *d,
                          const char *op)
{
    if (a->value->kind != FE_EX_LIST) {
        fe_error(L, a->value->loc, "attribute '%s' of %s expects a list of integers like [0, 1]",
                 d->name, op);
        return false;
    }
    if (a->value->args.n > IR_MAX_INTS) {
        fe_error(L, a->value->loc, "attribute '%s' of %s has %d elements (at most %d)", d->name, op,
                 a->value->args.n, IR_MAX_INTS);
        return false;
    }
    int64_t v[IR_MAX_INTS];
    int count = 0;
    bool ok = true;
    const char *what = arena_printf(L->mem, "an element of attribute '%s' of %s", d->name, op);
    for (const fe_arg *it = a->value->args.head; it; it = it->next)
        ok = fe_eval_int(L, s, it->value, what, &v[count++]) && ok;
    if (!ok) return false;
    if (strcmp(d->name, "shape") == 0 && !resolve_shape(L, a, n, v, count)) return false;
    if (strcmp(d->name, "perm") == 0 && n->nsrc > 0 && count == n->src[0]->shape.rank)
        for (int i = 0; i < count; i++)
            if (v[i] < 0 && v[i] >= -count) v[i] += count;
    ir_attr_set_ints(n, d->name, v, count);
    return true;
}

static bool set_attr(fe_lower *L, fe_scope *s, const fe_arg *a, ir_node *n, const ir_attr_def *d,
                     const char *op)
{
    const char *what = arena_printf(L->mem, "attribute '%s' of %s", d->name, op);
    switch (d->kind) {
    case IR_ATTR_SYM: return set_sym_attr(L, a, n, d, op);
    case IR_ATTR_BOOL: return set_bool_attr(L, s, a, n, d->name, op);
    case IR_ATTR_INTS: return set_ints_attr(L, s, a, n, d, op);
    case IR_ATTR_FLOAT: {
        fe_value v = fe_eval_number(L, s, a->value, what);
        if (v.kind == FE_V_ERROR) return false;
        ir_attr_set_float(n, d->name, fe_num(v));
        return true;
    }
    case IR_ATTR_INT: {
        int64_t v;
        if (!fe_eval_int(L, s, a->value, what, &v)) return false;
        if (strcmp(d->name, "axis") == 0 && n->nsrc > 0 && !norm_axis(L, a->value->loc, &v, n->src[0]))
            return false;
        ir_attr_set_int(n, d->name, v);
        return true;
    }
    }
    return false;
}

/* Sets the attributes given by keyword (those not already consumed). */
static bool apply_keywords(fe_lower *L, fe_scope *s, fe_call *c, ir_node *n, const char *op)
{
    const ir_op_info *info = ir_op_get(n->op);
    bool ok = true;
    for (int k = 0; k < c->nkw; k++) {
        if (c->kw_used[k]) continue;
        c->kw_used[k] = true;
        int idx = ir_op_attr_index(n->op, c->kw[k]->key);
        if (idx < 0) {
            unknown_attr(L, c->kw[k], op, info);
            ok = false;
            continue;
        }
        ok = set_attr(L, s, c->kw[k], n, &info->attrs[idx], op) && ok;
    }
    return ok;
}

/* ---- the generic op -------------------------------------------------------- */

/* Tensor operands from positional arguments and operand keywords; a list
 * literal after them is the value of the op's first `ints` attribute
 * (reshape(x, [a, b]), permute(x, [1, 0])). */
static int gather_operands(fe_lower *L, fe_scope *s, fe_call *c, ir_op op, ir_node **src,
                           const fe_arg **list_arg, bool *ok)
{
    const char *name = ir_op_name(op);
    int nsrc = 0, max = ir_op_get(op)->max_src;
    for (int i = 0; i < c->npos; i++) {
        if (c->pos[i]->value->kind == FE_EX_LIST && i == c->npos - 1 && i > 0) {
            *list_arg = c->pos[i];
            break;
        }
        /* Extra operands are not evaluated: the arity error says it all. */
        if (nsrc < max) *ok = eval_tensor(L, s, c->pos[i], name, nsrc, &src[nsrc]) && *ok;
        nsrc++;
    }
    for (size_t t = 0; t < ARRAY_LEN(operand_keywords); t++) {
        if (operand_keywords[t].op != op) continue;
        for (int k = 0; k < c->nkw; k++) {
            if (strcmp(c->kw[k]->key, operand_keywords[t].key) != 0) continue;
            c->kw_used[k] = true;
            if (nsrc != operand_keywords[t].index) {
                fe_error(L, c->kw[k]->loc, "%s: operand '%s' given twice, or after a missing operand",
                         name, c->kw[k]->key);
                *ok = false;
                continue;
            }
            *ok = eval_tensor(L, s, c->kw[k], name, nsrc, &src[nsrc]) && *ok;
            nsrc++;
        }
    }
    return nsrc;
}

static bool apply_list_arg(fe_lower *L, fe_scope *s, const fe_arg *list, ir_node *n, const char *op)
{
    const ir_op_info *info = ir_op_get(n->op);
    for (int i = 0; i < info->nattrs; i++)
        if (info->attrs[i].kind == IR_ATTR_INTS) return set_ints_attr(L, s, list, n, &info->attrs[i], op);
    fe_error(L, list->loc, "%s takes no list argument", op);
    return false;
}

static int op_generic(fe_lower *L, fe_scope *s, fe_call *c, ir_op op, const fe_hints *h, fe_value **out)
{
    const ir_op_info *info = ir_op_get(op);
    ir_node *src[65];
    const fe_arg *list = NULL;
    bool ok = true;
    int nsrc = gather_operands(L, s, c, op, src, &list, &ok);
    if (nsrc < info->min_src || nsrc > info->max_src) {
        arity_error(L, c->e, info, nsrc);
        ok = false;
    }
    /* Without valid operands the attributes are still checked, on a
     * scratch node that never joins the graph. */
    ir_node *n = ok ? ir_node_begin(L->g, op, nsrc, src, c->e->loc) : ir_node_alloc(L->g, op, 0);
    if (list) ok = apply_list_arg(L, s, list, n, info->name) && ok;
    ok = apply_keywords(L, s, c, n, info->name) && ok;
    if (!ok) return -1;
    n = fe_finish_node(L, c->e, n, fe_node_name(L, s, hint_at(h, 0, 1), info->name));
    if (!n) return -1;
    *out = one_value(L, n);
    return 1;
}

int fe_call_op(fe_lower *L, fe_scope *s, const fe_expr *e, const fe_hints *h, fe_value **out)
{
    fe_builtin_fn fn = NULL;
    for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
        if (strcmp(builtins[i].name, e->name) == 0) fn = builtins[i].fn;
    ir_op op;
    bool known = ir_op_lookup(e->name, &op);
    for (size_t i = 0; known && i < ARRAY_LEN(custom_op_parts); i++)
        if (op == custom_op_parts[i]) {
            fe_error(L, e->loc, "%s cannot be called: a custom op is defined as "
                     "'op NAME(args) { ... } backward(dy) { ... }' and called by its name", e->name);
            return -1;
        }
    if (!fn && !(known && op_callable(op))) return -2;
    fe_call c;
    if (!call_init(L, e, &c)) return -1;
    return fn ? fn(L, s, &c, h, out) : op_generic(L, s, &c, op, h, out);
}

/* ---- built-ins --------------------------------------------------------------- */

static bool use_keyword(fe_call *c, const char *key, const fe_arg **out)
{
    for (int k = 0; k < c->nkw; k++)
        if (strcmp(c->kw[k]->key, key) == 0) {
            c->kw_used[k] = true;
            *out = c->kw[k];
            return true;
        }
    return false;
}

/* transpose(x, d0, d1): a permute that swaps two axes. */
static int builtin_transpose(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    if (!no_other_keywords(L, c, "transpose", "")) return -1;
    if (c->npos != 3) {
        fe_error(L, c->e->loc, "transpose expects a tensor and two axes, got %d argument%s", c->npos,
                 c->npos == 1 ? "" : "s");
        return -1;
    }
    ir_node *x;
    int64_t d0, d1;
    bool ok = eval_tensor(L, s, c->pos[0], "transpose", 0, &x);
    ok = fe_eval_int(L, s, c->pos[1]->value, "transpose", &d0) && ok;
    ok = fe_eval_int(L, s, c->pos[2]->value, "transpose", &d1) && ok;
    if (!ok || !norm_axis(L, c->pos[1]->loc, &d0, x) || !norm_axis(L, c->pos[2]->loc, &d1, x))
        return -1;
    int64_t perm[IR_MAX_RANK];
    for (int i = 0; i < x->shape.rank; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    ir_node *n = ir_node_begin(L->g, IR_OP_PERMUTE, 1, &x, c->e->loc);
    ir_attr_set_ints(n, "perm", perm, x->shape.rank);
    n = fe_finish_node(L, c->e, n, fe_node_name(L, s, hint_at(h, 0, 1), "permute"));
    if (!n) return -1;
    *out = one_value(L, n);
    return 1;
}

static bool split_args(fe_lower *L, fe_scope *s, fe_call *c, ir_node **x, int64_t *parts, int64_t *axis)
{
    const fe_arg *axis_arg = NULL;
    use_keyword(c, "axis", &axis_arg);
    bool ok = no_other_keywords(L, c, "split", "axis");
    if (c->npos != 2) {
        fe_error(L, c->e->loc, "split expects a tensor and a number of parts, got %d argument%s",
                 c->npos, c->npos == 1 ? "" : "s");
        return false;
    }
    ok = eval_tensor(L, s, c->pos[0], "split", 0, x) && ok;
    ok = fe_eval_int(L, s, c->pos[1]->value, "split", parts) && ok;
    if (!axis_arg) {
        fe_error(L, c->e->loc, "split: missing attribute 'axis'");
        return false;
    }
    ok = fe_eval_int(L, s, axis_arg->value, "attribute 'axis' of split", axis) && ok;
    if (!ok || !norm_axis(L, axis_arg->value->loc, axis, *x)) return false;
    if (*parts < 1 || *parts > FE_MAX_SPLIT) {
        fe_error(L, c->pos[1]->loc, "split into %lld parts (it must be 1 to %d)%s", (long long)*parts,
                 FE_MAX_SPLIT, fe_blame_hparams(L, c->pos[1]->value));
        return false;
    }
    int64_t dim = (*x)->shape.dim[*axis];
    if (dim % *parts != 0) {
        fe_error(L, c->e->loc, "split: dimension %lld of %s (axis %lld) is not divisible by %lld",
                 (long long)dim, fe_type_str(L, *x), (long long)*axis, (long long)*parts);
        return false;
    }
    return true;
}

/* split(x, n, axis=k): n equal slices along axis k. */
static int builtin_split(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    ir_node *x;
    int64_t parts, axis;
    if (!split_args(L, s, c, &x, &parts, &axis)) return -1;
    int64_t len = x->shape.dim[axis] / parts;
    fe_value *vals = arena_alloc(L->mem, (size_t)parts * sizeof *vals);
    for (int64_t i = 0; i < parts; i++) {
        ir_node *n = ir_node_begin(L->g, IR_OP_SLICE, 1, &x, c->e->loc);
        ir_attr_set_int(n, "axis", axis);
        ir_attr_set_int(n, "start", i * len);
        ir_attr_set_int(n, "len", len);
        n = fe_finish_node(L, c->e, n, fe_node_name(L, s, hint_at(h, (int)i, (int)parts), "slice"));
        if (!n) return -1;
        vals[i] = fe_tensor(n);
    }
    *out = vals;
    return (int)parts;
}

/* Dimensions given as arguments (arange) or as a list (full). */
static bool eval_dims(fe_lower *L, fe_scope *s, const fe_arg *first, int count, src_loc loc, ir_shape *sh)
{
    if (count > IR_MAX_RANK) {
        fe_error(L, loc, "a tensor has at most %d dimensions, got %d", IR_MAX_RANK, count);
        return false;
    }
    bool ok = true;
    sh->rank = 0;
    for (const fe_arg *a = first; a && sh->rank < count; a = a->next)
        ok = fe_eval_dim(L, s, a->value, &sh->dim[sh->rank++]) && ok;
    return ok && fe_check_numel(L, loc, sh);
}

/* arange(d0, d1, ..., axis=0): i32 positions, element [i0, i1, ...] = i_axis. */
static int builtin_arange(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    const fe_arg *axis_arg = NULL;
    use_keyword(c, "axis", &axis_arg);
    bool ok = no_other_keywords(L, c, "arange", "axis");
    if (c->npos < 1) {
        fe_error(L, c->e->loc, "arange expects at least one dimension");
        return -1;
    }
    ir_shape sh;
    ok = eval_dims(L, s, c->e->args.head, c->npos, c->e->loc, &sh) && ok;
    int64_t axis = 0;
    if (axis_arg) ok = fe_eval_int(L, s, axis_arg->value, "attribute 'axis' of arange", &axis) && ok;
    if (!ok) return -1;
    if (axis < -sh.rank || axis >= sh.rank) {
        fe_error(L, axis_arg->value->loc, "axis %lld is out of range for %d dimensions",
                 (long long)axis, sh.rank);
        return -1;
    }
    if (axis < 0) axis += sh.rank;
    ir_node *n = fe_new_leaf(L, IR_OP_ARANGE, fe_node_name(L, s, hint_at(h, 0, 1), "arange"),
                             IR_I32, &sh, c->e->loc);
    ir_attr_set_int(n, "axis", axis);
    *out = one_value(L, n);
    return 1;
}

/* full(value, [d0, d1, ...]): an f32 constant. */
static int builtin_full(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    bool ok = no_other_keywords(L, c, "full", "");
    if (c->npos != 2 || c->pos[1]->value->kind != FE_EX_LIST) {
        fe_error(L, c->e->loc, "full expects a value and a list of dimensions: full(0.0, [seq, batch])");
        return -1;
    }
    fe_value v = fe_eval_number(L, s, c->pos[0]->value, "full");
    const fe_expr *list = c->pos[1]->value;
    ir_shape sh;
    ok = eval_dims(L, s, list->args.head, list->args.n, list->loc, &sh) && ok;
    if (!ok || v.kind == FE_V_ERROR) return -1;
    ir_node *n = fe_new_leaf(L, IR_OP_FULL, fe_node_name(L, s, hint_at(h, 0, 1), "full"), IR_F32,
                             &sh, c->e->loc);
    ir_attr_set_float(n, "value", fe_num(v));
    *out = one_value(L, n);
    return 1;
}

/* attention(q, k, v, mask=m, scale=x, causal=true, dropout=p): the fused
 * attention op (docs/attention.md). q [b, n, s_q, d], k and v [b, g, s_k, d]
 * (g dividing n: grouped-query attention), a padding mask [b, s_k] (also
 * the fourth positional operand); scale defaults to 1/sqrt(d), as
 * PyTorch's scaled_dot_product_attention. The dropout's key is autodiff's,
 * from the node's name, as a dropout's. */
static int builtin_attention(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    static const char *const keys[] = {"mask", "scale", "causal", "dropout"};
    const fe_arg *kw[ARRAY_LEN(keys)] = {NULL};
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) use_keyword(c, keys[i], &kw[i]);
    bool ok = no_other_keywords(L, c, "attention", "mask, scale, causal, dropout");
    int nsrc = c->npos + (kw[0] != NULL);
    if (c->npos < 3 || nsrc > 4) {
        fe_error(L, c->e->loc, "attention expects q, k and v and an optional padding mask, got %d tensor operand%s%s",
                 nsrc, nsrc == 1 ? "" : "s", c->npos > 4 ? " (attributes are given by name, as in scale=...)" : "");
        return -1;
    }
    ir_node *src[4];
    for (int i = 0; i < c->npos; i++) ok = eval_tensor(L, s, c->pos[i], "attention", i, &src[i]) && ok;
    if (kw[0]) ok = eval_tensor(L, s, kw[0], "attention", 3, &src[3]) && ok;
    fe_value scale = {.kind = FE_V_ERROR}, p = {.kind = FE_V_ERROR};
    if (kw[1]) ok = (scale = fe_eval_number(L, s, kw[1]->value, "attribute 'scale' of attention")).kind != FE_V_ERROR && ok;
    if (kw[3]) ok = (p = fe_eval_number(L, s, kw[3]->value, "attribute 'dropout' of attention")).kind != FE_V_ERROR && ok;
    if (!ok) return -1;
    ir_node *n = ir_node_begin(L->g, IR_OP_ATTENTION, nsrc, src, c->e->loc);
    if (kw[2] && !set_bool_attr(L, s, kw[2], n, "causal", "attention")) return -1;
    if (src[0]->shape.rank == 4 && src[0]->shape.dim[3] > 0)
        ir_attr_set_float(n, "scale", 1.0 / sqrt((double)src[0]->shape.dim[3]));
    if (kw[1]) ir_attr_set_float(n, "scale", fe_num(scale));
    if (kw[3]) ir_attr_set_float(n, "p", fe_num(p));
    n = fe_finish_node(L, c->e, n, fe_node_name(L, s, hint_at(h, 0, 1), "attention"));
    if (!n) return -1;
    *out = one_value(L, n);
    return 1;
}

/* repeat_interleave(x, axis=k, repeats=r): the op of that name, except that
 * repeats=1 is x itself, so that a model with as many key/value heads as
 * query heads (kv_heads = heads) repeats nothing and pays no copy. */
static int builtin_repeat_interleave(fe_lower *L, fe_scope *s, fe_call *c, const fe_hints *h, fe_value **out)
{
    const char *op = "repeat_interleave";
    const fe_arg *r = NULL, *axis_arg = NULL;
    for (int k = 0; k < c->nkw; k++) {
        if (strcmp(c->kw[k]->key, "repeats") == 0) r = c->kw[k];
        if (strcmp(c->kw[k]->key, "axis") == 0) axis_arg = c->kw[k];
    }
    int64_t repeats = 0, axis;
    if (r && !fe_eval_int(L, s, r->value, "attribute 'repeats' of repeat_interleave", &repeats)) return -1;
    if (repeats != 1 || c->npos != 1 || !axis_arg) return op_generic(L, s, c, IR_OP_REPEAT_INTERLEAVE, h, out);
    use_keyword(c, "repeats", &r);
    use_keyword(c, "axis", &axis_arg);
    bool ok = no_other_keywords(L, c, op, "axis, repeats");
    ir_node *x;
    ok = eval_tensor(L, s, c->pos[0], op, 0, &x) && ok;
    ok = fe_eval_int(L, s, axis_arg->value, "attribute 'axis' of repeat_interleave", &axis) && ok;
    if (!ok || !norm_axis(L, axis_arg->value->loc, &axis, x)) return -1;
    *out = one_value(L, x);
    return 1;
}
