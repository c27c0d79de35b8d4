/* Unit tests of the autodiff pass (passes/autodiff.c, passes/grad*.c):
 * the structure of the backward graph it builds. The numbers are checked
 * by test_gradcheck (finite differences through the CPU executor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "support/util.h"
#include "ir/ir.h"
#include "passes/pass.h"

static const src_loc noloc = {0};

static ir_node *leaf(ir_graph *g, ir_op op, const char *name, ir_dtype t, int rank, const int64_t *dims)
{
    ir_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) s.dim[i] = dims[i];
    ir_node *n = ir_leaf_new(g, op, name, t, &s, noloc);
    if (n && op == IR_OP_PARAM) ir_attr_set_sym(n, "init", "normal");
    return n;
}

static ir_node *param(ir_graph *g, const char *name, int rank, const int64_t *dims)
{
    return leaf(g, IR_OP_PARAM, name, IR_F32, rank, dims);
}

static ir_node *op(ir_graph *g, ir_op o, int nsrc, ir_node **src, const char *name)
{
    char err[256];
    ir_node *n = ir_node_end(g, ir_node_begin(g, o, nsrc, src, noloc), name, err, sizeof err);
    if (!n) fprintf(stderr, "build %s: %s\n", name, err);
    return n;
}

static ir_node *op_int(ir_graph *g, ir_op o, ir_node *x, const char *name, const char **attrs, const int64_t *vals,
                       int nattrs)
{
    char err[256];
    ir_node *n = ir_node_begin(g, o, 1, &x, noloc);
    for (int i = 0; i < nattrs; i++) ir_attr_set_int(n, attrs[i], vals[i]);
    n = ir_node_end(g, n, name, err, sizeof err);
    if (!n) fprintf(stderr, "build %s: %s\n", name, err);
    return n;
}

static ir_node *loss_of(ir_graph *g, ir_node *x)
{
    ir_node *l = op(g, IR_OP_SUM, 1, &x, "loss");
    l->flags |= IR_NF_LOSS;
    return l;
}

/* Runs autodiff (diagnostics into a buffer) and the verifier. */
static bool run(ir_graph *g, char *msg, size_t msglen)
{
    FILE *f = tmpfile();
    diag d;
    diag_init(&d, f);
    pass_ctx ctx = {.d = &d, .verify_each = true};
    const pass_info *list[] = {pass_lookup("autodiff")};
    bool ok = list[0] && pass_run_list(g, list, 1, &ctx, NULL, NULL);
    diag_free(&d);
    rewind(f);
    size_t n = fread(msg, 1, msglen - 1, f);
    msg[n] = 0;
    fclose(f);
    if (ok && n) fprintf(stderr, "unexpected diagnostics: %s", msg);
    return ok;
}

static int count_op(const ir_graph *g, ir_op o)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) k += g->nodes[i]->op == o;
    return k;
}

/* Nodes named grad.<param>: exactly one per parameter, of its type. */
static void check_param_grads(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *p = g->nodes[i];
        if (p->op != IR_OP_PARAM) continue;
        char name[256];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const ir_node *gr = ir_graph_find(g, name);
        CHECK(gr != NULL);
        if (!gr) continue;
        CHECK(gr->dtype == p->dtype && ir_shape_eq(&gr->shape, &p->shape));
        CHECK(gr->flags & IR_NF_OUTPUT);
    }
}

/* y = x + x: one gradient, dy + dy. */
static void test_fanout(void)
{
    ir_graph *g = ir_graph_new("fanout");
    g->cse = true;
    ir_node *x = param(g, "x", 2, (int64_t[]){3, 4});
    ir_node *y = op(g, IR_OP_ADD, 2, (ir_node *[]){x, x}, "y");
    loss_of(g, y);
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    const ir_node *gy = ir_graph_find(g, "grad.y"), *gx = ir_graph_find(g, "grad.x");
    CHECK(gy && gy->op == IR_OP_BROADCAST);
    CHECK(gx && gx->op == IR_OP_ADD && gx->src[0] == gy && gx->src[1] == gy);
    CHECK(count_op(g, IR_OP_ADD) == 2); /* the forward one and the accumulation */
    check_param_grads(g);
    ir_graph_free(g);
}

/* A value split in three along one axis, every part used: one concat. */
static void test_split(void)
{
    ir_graph *g = ir_graph_new("split");
    g->cse = true;
    ir_node *x = param(g, "x", 2, (int64_t[]){2, 9});
    ir_node *part[3];
    const char *names[] = {"a", "b", "c"}, *attrs[] = {"axis", "start", "len"};
    for (int i = 0; i < 3; i++) part[i] = op_int(g, IR_OP_SLICE, x, names[i], attrs, (int64_t[]){1, 3 * i, 3}, 3);
    ir_node *ab = op(g, IR_OP_MUL, 2, (ir_node *[]){part[0], part[1]}, "ab");
    loss_of(g, op(g, IR_OP_ADD, 2, (ir_node *[]){ab, part[2]}, "y"));
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    const ir_node *gx = ir_graph_find(g, "grad.x");
    CHECK(gx && gx->op == IR_OP_CONCAT && gx->nsrc == 3 && ir_attr_int(gx, "axis") == 1);
    CHECK(gx && gx->src[0] == ir_graph_find(g, "grad.a") && gx->src[2] == ir_graph_find(g, "grad.y")); /* c gets dy as is */
    CHECK(count_op(g, IR_OP_PAD) == 0);
    check_param_grads(g);
    ir_graph_free(g);
}

/* A tied weight used by two linears: one accumulated gradient, named
 * grad.w, and no other node of that name. */
static void test_tied(void)
{
    ir_graph *g = ir_graph_new("tied");
    g->cse = true;
    ir_node *x = leaf(g, IR_OP_INPUT, "x", IR_F32, 2, (int64_t[]){5, 6});
    ir_node *w = param(g, "w", 2, (int64_t[]){6, 6});
    ir_node *h = op(g, IR_OP_LINEAR, 2, (ir_node *[]){x, w}, "h");
    ir_node *h2 = op(g, IR_OP_LINEAR, 2, (ir_node *[]){h, w}, "h2");
    loss_of(g, h2);
    int before = g->nnodes;
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    const ir_node *gw = ir_graph_find(g, "grad.w");
    CHECK(gw && gw->op == IR_OP_ADD);
    CHECK(gw && gw->src[0]->op == IR_OP_MATMUL && gw->src[1]->op == IR_OP_MATMUL);
    int outputs = 0;
    for (int i = 0; i < g->nnodes; i++) outputs += (g->nodes[i]->flags & IR_NF_OUTPUT) != 0;
    CHECK(outputs == 1);
    /* seed, broadcast, dh, two dw parts and their sum; no dx for the input */
    CHECK(g->nnodes - before == 6);
    check_param_grads(g);
    ir_graph_free(g);
}

/* A parameter that does not reach the loss gets a zero gradient. */
static void test_unreached(void)
{
    ir_graph *g = ir_graph_new("unreached");
    g->cse = true;
    ir_node *w = param(g, "w", 1, (int64_t[]){4});
    ir_node *u = param(g, "u", 2, (int64_t[]){2, 3});
    ir_node *dead = op(g, IR_OP_GELU, 1, &u, "dead");
    (void)dead;
    loss_of(g, op(g, IR_OP_GELU, 1, &w, "y"));
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    const ir_node *gu = ir_graph_find(g, "grad.u");
    CHECK(gu && gu->op == IR_OP_FULL && ir_attr_float(gu, "value") == 0.0);
    CHECK(gu && ir_shape_eq(&gu->shape, &u->shape));
    CHECK(count_op(g, IR_OP_GELU_BACK) == 1); /* nothing for %dead */
    check_param_grads(g);
    ir_graph_free(g);
}

/* Dropout gets a key from its name, and dropout_back the same one. */
static void test_dropout_key(void)
{
    ir_graph *g = ir_graph_new("drop");
    g->cse = true;
    ir_node *w = param(g, "w", 1, (int64_t[]){8});
    char err[256];
    ir_node *d = ir_node_begin(g, IR_OP_DROPOUT, 1, &w, noloc);
    ir_attr_set_float(d, "p", 0.25);
    d = ir_node_end(g, d, "drop", err, sizeof err);
    loss_of(g, d);
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    const ir_node *db = ir_graph_find(g, "grad.w");
    int64_t key = ir_attr_int(d, "key");
    CHECK(key > 0 && key <= 0x7fffffff);
    CHECK(db && db->op == IR_OP_DROPOUT_BACK && ir_attr_int(db, "key") == key && ir_attr_float(db, "p") == 0.25);
    ir_graph_free(g);
}

/* Errors: no loss; an op without a gradient rule on the way. */
static void test_errors(void)
{
    ir_graph *g = ir_graph_new("noloss");
    ir_node *w = param(g, "w", 1, (int64_t[]){8});
    op(g, IR_OP_GELU, 1, &w, "y");
    char msg[1024];
    CHECK(!run(g, msg, sizeof msg));
    CHECK(strstr(msg, "autodiff: the model has no loss (add `minimize NAME`)") != NULL);
    ir_graph_free(g);

    g = ir_graph_new("norule");
    w = param(g, "w", 2, (int64_t[]){2, 8});
    loss_of(g, op(g, IR_OP_COLSUM, 1, &w, "c"));
    CHECK(!run(g, msg, sizeof msg));
    CHECK(strstr(msg, "'%c' (colsum) has no gradient rule") != NULL);
    ir_graph_free(g);
}

/* Differentiating a differentiated graph changes nothing. */
static void test_idempotent(void)
{
    ir_graph *g = ir_graph_new("twice");
    g->cse = true;
    ir_node *w = param(g, "w", 1, (int64_t[]){8});
    loss_of(g, op(g, IR_OP_SILU, 1, &w, "y"));
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    char *a = ir_graph_print(g);
    CHECK(run(g, msg, sizeof msg));
    char *b = ir_graph_print(g);
    CHECK_STR(a, b);
    free(a);
    free(b);
    ir_graph_free(g);
}

/* ---- every rule, on a one-op graph --------------------------------------- */

#define P(name, shape) "%" name " = param init=normal : f32[" shape "]\n"

/* Each case defines %y from parameters (and integer inputs). */
static const char *const rule_cases[] = {
    P("x", "2, 3, 5") P("w", "7, 5") P("b", "7") "%y = linear(%x, %w, %b) : f32[2, 3, 7]\n",
    P("a", "2, 3, 4") P("b", "2, 4, 5") "%y = bmm(%a, %b) alpha=0.5 : f32[2, 3, 5]\n",
    P("a", "2, 3, 4") P("b", "2, 5, 4") "%y = bmm(%a, %b) transpose_b=true : f32[2, 3, 5]\n",
    P("a", "2, 4, 3") P("b", "2, 4, 5") "%y = bmm(%a, %b) transpose_a=true : f32[2, 3, 5]\n",
    P("a", "2, 4, 3") P("b", "2, 5, 4") "%y = bmm(%a, %b) transpose_a=true transpose_b=true : f32[2, 3, 5]\n",
    "%t = input : i32[3, 2]\n" P("w", "11, 5") "%y = embedding(%t, %w) : f32[3, 2, 5]\n",
    P("x", "3, 7") P("g", "7") P("b", "7") "%y = layernorm(%x, %g, %b) : f32[3, 7]\n",
    P("x", "3, 7") P("g", "7") "%y = rmsnorm(%x, %g) : f32[3, 7]\n",
    P("a", "3, 5") P("b", "3, 5") "%y = add(%a, %b) : f32[3, 5]\n",
    P("a", "3, 5") P("b", "3, 5") "%y = sub(%a, %b) : f32[3, 5]\n",
    P("a", "3, 5") P("b", "3, 5") "%y = mul(%a, %b) : f32[3, 5]\n",
    P("a", "3, 5") P("b", "5") "%y = bias_add(%a, %b) : f32[3, 5]\n",
    P("a", "3, 5") "%y = scale(%a) alpha=-0.5 : f32[3, 5]\n",
    P("a", "3, 5") "%y = gelu(%a) approx=erf : f32[3, 5]\n",
    P("a", "3, 5") "%y = silu(%a) : f32[3, 5]\n",
    P("a", "3, 5") P("b", "3, 5") "%y = swiglu(%a, %b) : f32[3, 5]\n",
    P("a", "3, 5") "%y = dropout(%a) p=0.5 : f32[3, 5]\n",
    "%m = input : u8[2, 5]\n" P("x", "2, 3, 4, 5") "%y = softmax(%x, %m) scale=0.5 : f32[2, 3, 4, 5]\n",
    P("x", "5, 2, 3, 6") "%y = rope(%x) : f32[5, 2, 3, 6]\n",
    P("x", "3, 4") "%y = reshape(%x) shape=[2, 6] : f32[2, 6]\n",
    P("x", "2, 3, 4") "%y = permute(%x) perm=[2, 0, 1] : f32[4, 2, 3]\n",
    P("x", "4, 3") "%y = slice(%x) axis=0 start=1 len=2 : f32[2, 3]\n",
    P("a", "2, 3") P("b", "2, 2") "%y = concat(%a, %b, %a) axis=1 : f32[2, 8]\n",
    P("x", "2, 3, 4") "%y = repeat_interleave(%x) axis=1 repeats=2 : f32[2, 6, 4]\n",
    "%l = input : i32[3, 2]\n" P("x", "3, 2, 7") "%y = cross_entropy(%x, %l) : f32[]\n",
    "%l = input : i32[3, 2]\n" P("x", "3, 2, 5") P("w", "7, 5") P("b", "7")
    "%y = lm_head_ce(%x, %w, %l, %b) chunk=3 : f32[]\n",
    P("x", "3, 4") "%y = sum(%x) : f32[]\n",
    P("x", "3, 4") "%y = mean(%x) : f32[]\n",
    P("a", "2, 3, 4") P("b", "4, 5") "%y = matmul(%a, %b) : f32[2, 3, 5]\n",
    P("a", "2, 3, 4") P("b", "5, 4") "%y = matmul(%a, %b) transpose_b=true : f32[2, 3, 5]\n",
    P("a", "2, 3, 4") P("b", "2, 3, 5") "%y = matmul(%a, %b) transpose_a=true : f32[4, 5]\n",
    P("x", "2, 3") "%y = pad(%x) axis=1 start=2 total=7 : f32[2, 7]\n",
    P("x", "2, 4") "%y = tp_copy(%x) size=2 : f32[2, 4]\n",
    P("x", "2, 4") "%y = tp_reduce(%x) size=2 : f32[2, 4]\n",
    P("x", "2, 4") "%y = tp_gather(%x) size=2 : f32[2, 8]\n",
    P("x", "2, 4") "%y = tp_scatter(%x) size=2 : f32[2, 2]\n",
    P("x", "2, 4") "%y = sp_gather(%x) size=2 : f32[4, 4]\n",
    P("x", "2, 4") "%y = sp_scatter(%x) size=2 : f32[1, 4]\n",
    P("x", "2, 4") "%y = sp_split(%x) size=2 : f32[1, 4]\n",
    "%lab = input : i32[2]\n" P("x", "2, 4")
    "%m = vocab_parallel_max(%x) : f32[2]\n%s = vocab_parallel_sumexp(%x, %m) : f32[2]\n"
    "%t = vocab_parallel_target(%x, %lab) : f32[2]\n"
    "%y = vocab_parallel_cross_entropy(%x, %lab, %m, %s, %t) vocab=8 : f32[]\n",
    P("x", "2, 4") "%s = pp_send(%x) to_stage=1 : f32[2, 4]\n%y = pp_recv(%s) from_stage=0 : f32[2, 4]\n",
    /* grouped-query: 4 query heads over 2 key/value heads, a padding mask */
    P("q", "1, 4, 3, 2") P("k", "1, 2, 3, 2") P("v", "1, 2, 3, 2") "%m = input : i32[1, 3]\n"
    "%y = attention(%q, %k, %v, %m) scale=0.5 causal=true p=0.1 key=3 : f32[1, 4, 3, 2]\n",
    P("x", "2, 4") P("w", "2, 4") "%i = mul(%x, %w) : f32[2, 4]\n%c = custom_out(%i, %x) : f32[2, 4]\n"
    "%ct = cotangent(%c) : f32[2, 4]\n%d = custom_grad(%ct, %c) index=0 : f32[2, 4]\n"
    "%y = add(%c, %w) : f32[2, 4]\n",
};

static bool case_uses(const char *text, const char *mnemonic)
{
    char pat[64];
    snprintf(pat, sizeof pat, " = %s(", mnemonic);
    return strstr(text, pat) != NULL;
}

/* Every parameter gets a computed gradient of its type; the graph verifies. */
static void run_rule_case(const char *body)
{
    char text[2048], msg[1024];
    snprintf(text, sizeof text, "tgc-ir 1\nmodel \"rule\"\n%s%%loss = sum(%%y) : f32[] loss\n", body);
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = ir_graph_read(text, strlen(text), "rule.ir", &d);
    diag_free(&d);
    CHECK(g != NULL);
    if (!g) return;
    CHECK(run(g, msg, sizeof msg));
    check_param_grads(g);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if ((n->flags & IR_NF_OUTPUT) && n->op == IR_OP_FULL) {
            fprintf(stderr, "zero gradient %s in case:\n%s", n->name, body);
            CHECK(!"a parameter of a rule case got no gradient");
        }
    }
    ir_graph_free(g);
}

static void test_rules(void)
{
    for (size_t i = 0; i < ARRAY_LEN(rule_cases); i++) run_rule_case(rule_cases[i]);
    /* Every op with a gradient rule has a case. */
    for (int o = 0; o < IR_OP_COUNT; o++) {
        const ir_op_info *info = ir_op_get((ir_op)o);
        if (strcmp(info->grad_rule, "NOGRAD") == 0) continue;
        bool found = false;
        for (size_t i = 0; i < ARRAY_LEN(rule_cases) && !found; i++) found = case_uses(rule_cases[i], info->name);
        if (!found) fprintf(stderr, "no autodiff case for op '%s'\n", info->name);
        CHECK(found);
    }
}

/* ---- custom ops, built through the C API ---------------------------------- */

/* c = custom_out(inner(x, w), x, w) with the backward dx = 2 ct, dw = ct * x. */
static void test_custom(void)
{
    ir_graph *g = ir_graph_new("custom");
    g->cse = true;
    ir_node *x = param(g, "x", 2, (int64_t[]){2, 4}), *w = param(g, "w", 2, (int64_t[]){2, 4});
    ir_node *inner = op(g, IR_OP_MUL, 2, (ir_node *[]){x, w}, "c.inner");
    ir_node *c = op(g, IR_OP_CUSTOM_OUT, 3, (ir_node *[]){inner, x, w}, "c");
    ir_node *ct = op(g, IR_OP_COTANGENT, 1, &c, "c.ct");
    ir_node *dx = ir_node_begin(g, IR_OP_SCALE, 1, &ct, noloc);
    ir_attr_set_float(dx, "alpha", 2.0);
    char err[256];
    dx = ir_node_end(g, dx, "c.dx", err, sizeof err);
    ir_node *dw = op(g, IR_OP_MUL, 2, (ir_node *[]){ct, x}, "c.dw");
    for (int i = 0; i < 2; i++) {
        ir_node *decl = ir_node_begin(g, IR_OP_CUSTOM_GRAD, 2, (ir_node *[]){i ? dw : dx, c}, noloc);
        ir_attr_set_int(decl, "index", i);
        CHECK(ir_node_end(g, decl, "c.decl", err, sizeof err) != NULL);
    }
    loss_of(g, c);
    char msg[1024];
    CHECK(run(g, msg, sizeof msg));
    CHECK(count_op(g, IR_OP_COTANGENT) == 0 && count_op(g, IR_OP_CUSTOM_GRAD) == 0);
    CHECK(count_op(g, IR_OP_CUSTOM_OUT) == 0);
    const ir_node *lc = ir_graph_find(g, "c");
    CHECK(lc && lc->op == IR_OP_SCALE && lc->src[0] == inner);
    const ir_node *gc = ir_graph_find(g, "grad.c"), *gx = ir_graph_find(g, "grad.x"), *gw = ir_graph_find(g, "grad.w");
    /* dx = 2 * dc (the clone of c.dx, now grad.x); dw = dc * x; nothing
     * flows through the forward body (mul(c.inner) has no gradient). */
    CHECK(gx && gx->op == IR_OP_SCALE && gx->src[0] == gc && ir_attr_float(gx, "alpha") == 2.0);
    CHECK(gw && gw->op == IR_OP_MUL && gw->src[0] == gc && gw->src[1] == x);
    CHECK(count_op(g, IR_OP_MUL) == 2);
    check_param_grads(g);
    ir_graph_free(g);
}

int main(void)
{
    test_fanout();
    test_split();
    test_tied();
    test_unreached();
    test_dropout_key();
    test_errors();
    test_idempotent();
    test_rules();
    test_custom();
    CHECK_DONE();
}
