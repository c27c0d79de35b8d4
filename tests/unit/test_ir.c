/* Unit tests of the op table, attributes, the node builder (shape rules,
 * CSE, naming) and graph rewriting. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/ir.h"
#include "passes/pass.h"

static const src_loc noloc = {0};

static ir_node *leaf(ir_graph *g, ir_op op, const char *name, ir_dtype t, int rank, const int64_t *dims)
{
    ir_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) s.dim[i] = dims[i];
    ir_node *n = ir_leaf_new(g, op, name, t, &s, noloc);
    if (n && op == IR_OP_PARAM) ir_attr_set_sym(n, "init", "zeros");
    return n;
}

static ir_node *build(ir_graph *g, ir_op op, int nsrc, ir_node **src, const char *name, char *err)
{
    ir_node *n = ir_node_begin(g, op, nsrc, src, noloc);
    return ir_node_end(g, n, name, err, 256);
}

static void test_op_table(void)
{
    for (int op = 0; op < IR_OP_COUNT; op++) {
        const ir_op_info *info = ir_op_get((ir_op)op);
        ir_op back;
        CHECK(ir_op_lookup(info->name, &back) && back == (ir_op)op);
        CHECK(info->min_src <= info->max_src);
        CHECK(info->shape && info->flops);
        /* Leaves have no operands and no gradient rule. */
        if (info->flags & IR_OPF_LEAF) CHECK(info->max_src == 0);
        /* An update is part of the optimizer step and has p, g and the norm;
         * a model calls forward ops only: no leaf, backward, collective or
         * optimizer op is callable by its mnemonic. */
        if (info->flags & IR_OPF_UPDATE) CHECK((info->flags & IR_OPF_OPTIMIZER) && info->min_src >= 3);
        if (info->flags & IR_OPF_DSL)
            CHECK(!(info->flags & (IR_OPF_LEAF | IR_OPF_COLLECTIVE | IR_OPF_OPTIMIZER)) && strcmp(info->grad_rule, "NOGRAD") != 0);
        CHECK(ir_op_has((ir_op)op, IR_OPF_UPDATE) == ((info->flags & IR_OPF_UPDATE) != 0));
        for (int a = 0; a < info->nattrs; a++) CHECK(ir_op_attr_index((ir_op)op, info->attrs[a].name) == a);
    }
    CHECK(ir_op_has(IR_OP_ADAMW, IR_OPF_UPDATE) && ir_op_has(IR_OP_SGD, IR_OPF_UPDATE));
    CHECK(ir_op_has(IR_OP_GLOBAL_NORM, IR_OPF_OPTIMIZER) && !ir_op_has(IR_OP_GLOBAL_NORM, IR_OPF_UPDATE));
    CHECK(ir_op_has(IR_OP_LAYERNORM, IR_OPF_SEQ_REGION) && !ir_op_has(IR_OP_LINEAR, IR_OPF_SEQ_REGION));
    CHECK(ir_op_has(IR_OP_LINEAR, IR_OPF_DSL) && !ir_op_has(IR_OP_LAYERNORM_DX, IR_OPF_DSL));
    ir_op op;
    CHECK(!ir_op_lookup("no_such_op", &op));
    CHECK(ir_op_attr_index(IR_OP_SOFTMAX, "causal") >= 0);
    CHECK(ir_op_attr_index(IR_OP_SOFTMAX, "nope") == -1);
    ir_dtype t;
    CHECK(ir_dtype_lookup("bf16", &t) && t == IR_BF16 && ir_dtype_size(t) == 2);
    CHECK(!ir_dtype_lookup("f8", &t));
}

static void test_attrs_and_shapes(void)
{
    ir_graph *g = ir_graph_new("t");
    char err[256];
    ir_node *x = leaf(g, IR_OP_INPUT, "x", IR_F32, 3, (int64_t[]){16, 2, 8});
    ir_node *w = leaf(g, IR_OP_PARAM, "w", IR_F32, 2, (int64_t[]){24, 8});
    ir_node *b = leaf(g, IR_OP_PARAM, "b", IR_F32, 1, (int64_t[]){24});
    CHECK(leaf(g, IR_OP_INPUT, "x", IR_F32, 1, (int64_t[]){1}) == NULL); /* duplicate name */
    ir_node *lin = ir_node_begin(g, IR_OP_LINEAR, 3, (ir_node *[]){x, w, b}, noloc);
    CHECK(ir_attr_set_sym(lin, "parallel", "column"));
    CHECK(!ir_attr_set_sym(lin, "parallel", "diagonal"));
    lin = ir_node_end(g, lin, "qkv", err, sizeof err);
    CHECK(lin && lin->shape.rank == 3 && lin->shape.dim[2] == 24);
    CHECK_STR(ir_attr_sym(lin, "parallel"), "column");
    CHECK(!ir_attr_bool(lin, "gather_output"));

    /* A mismatch names both shapes. */
    ir_node *bad = build(g, IR_OP_LINEAR, 2, (ir_node *[]){lin, w}, "bad", err);
    CHECK(bad == NULL);
    CHECK_STR(err, "linear: input f32[16, 2, 24] does not match weight f32[24, 8] (24 input features vs 8)");

    /* A required attribute left unset is reported. */
    ir_node *d = ir_node_begin(g, IR_OP_DROPOUT, 1, &lin, noloc);
    CHECK(ir_node_end(g, d, "drop", err, sizeof err) == NULL);
    CHECK_STR(err, "dropout: missing attribute 'p'");

    ir_node *r = ir_node_begin(g, IR_OP_RESHAPE, 1, &lin, noloc);
    ir_attr_set_ints(r, "shape", (int64_t[]){16, 2, 4, -1}, 4);
    r = ir_node_end(g, r, "heads", err, sizeof err);
    CHECK(r && r->shape.rank == 4 && r->shape.dim[3] == 6);

    ir_node *p = ir_node_begin(g, IR_OP_PERMUTE, 1, &r, noloc);
    ir_attr_set_ints(p, "perm", (int64_t[]){1, 2, 0, 3}, 4);
    p = ir_node_end(g, p, "q", err, sizeof err);
    CHECK(p && p->shape.dim[0] == 2 && p->shape.dim[1] == 4 && p->shape.dim[2] == 16 && p->shape.dim[3] == 6);

    ir_node *s = ir_node_begin(g, IR_OP_BMM, 2, (ir_node *[]){p, p}, noloc);
    ir_attr_set_bool(s, "transpose_b", true);
    s = ir_node_end(g, s, "scores", err, sizeof err);
    CHECK(s && s->shape.dim[2] == 16 && s->shape.dim[3] == 16);
    CHECK(ir_node_flops(s) == 2LL * 2 * 4 * 16 * 16 * 6);

    ir_node *sc = ir_node_begin(g, IR_OP_TP_SCATTER, 1, &lin, noloc);
    ir_attr_set_int(sc, "size", 5);
    CHECK(ir_node_end(g, sc, "sc", err, sizeof err) == NULL);
    CHECK_STR(err, "tp_scatter: dimension 2 of f32[16, 2, 24] (24) does not divide by the group size 5");
    ir_graph_free(g);
}

static void test_cse_and_names(void)
{
    ir_graph *g = ir_graph_new("t");
    g->cse = true;
    char err[256];
    ir_node *x = leaf(g, IR_OP_INPUT, "x", IR_F32, 2, (int64_t[]){4, 4});
    ir_node *a = build(g, IR_OP_GELU, 1, &x, "a", err);
    ir_node *b = build(g, IR_OP_GELU, 1, &x, "b", err);
    CHECK(a && a == b); /* pure and equal: merged */
    ir_node *e = ir_node_begin(g, IR_OP_GELU, 1, &x, noloc);
    ir_attr_set_sym(e, "approx", "erf");
    e = ir_node_end(g, e, "a", err, sizeof err);
    CHECK(e && e != a);
    CHECK_STR(e->name, "a.1"); /* unique names */
    ir_node *d1 = ir_node_begin(g, IR_OP_DROPOUT, 1, &x, noloc);
    ir_attr_set_float(d1, "p", 0.1);
    d1 = ir_node_end(g, d1, "d", err, sizeof err);
    ir_node *d2 = ir_node_begin(g, IR_OP_DROPOUT, 1, &x, noloc);
    ir_attr_set_float(d2, "p", 0.1);
    d2 = ir_node_end(g, d2, "d", err, sizeof err);
    CHECK(d1 && d2 && d1 != d2); /* side effects are never merged */
    CHECK(ir_graph_find(g, "d.1") == d2);

    /* DCE keeps what reaches the loss, and leaves. */
    ir_node *m = build(g, IR_OP_MEAN, 1, &a, "loss", err);
    m->flags |= IR_NF_LOSS;
    diag dg;
    diag_init(&dg, stderr);
    pass_ctx ctx = {.d = &dg};
    CHECK(pass_dce(g, &ctx));
    CHECK(g->nnodes == 3 && ir_graph_find(g, "d") == NULL && ir_graph_find(g, "loss") == m);
    CHECK(m->id == 2 && ir_graph_find(g, "x")->id == 0);
    diag_free(&dg);
    ir_graph_free(g);
}

/* A node's loc file lives in its own graph's arena: a graph rebuilt from
 * one read from text keeps its names after the original is freed (a loc
 * pointing into the freed arena read back as "" or garbage). */
static void test_loc_file_owned(void)
{
    static const char text[] = "tgc-ir 1\nmodel \"m\"\n%x = input : f32[4] loc(\"a.tg\":3:5)\n";
    diag dg;
    diag_init(&dg, stderr);
    ir_graph *g = ir_graph_read(text, sizeof text - 1, "t.ir", &dg);
    CHECK(g != NULL);
    if (!g) return;
    const char *theirs = g->nodes[0]->loc.file;
    ir_graph *h = ir_graph_new_like(g);
    ir_node *x = ir_leaf_new(h, IR_OP_INPUT, "x", IR_F32, &g->nodes[0]->shape, g->nodes[0]->loc);
    ir_node *y = ir_leaf_new(h, IR_OP_INPUT, "y", IR_F32, &g->nodes[0]->shape, g->nodes[0]->loc);
    ir_graph_free(g);
    CHECK(x && y && x->loc.file != theirs && x->loc.file == y->loc.file); /* one copy per name in a row */
    CHECK(x && strcmp(x->loc.file, "a.tg") == 0 && x->loc.line == 3 && x->loc.col == 5);
    ir_graph_free(h);
    diag_free(&dg);
}

int main(void)
{
    test_loc_file_owned();
    test_op_table();
    test_attrs_and_shapes();
    test_cse_and_names();
    CHECK_DONE();
}
