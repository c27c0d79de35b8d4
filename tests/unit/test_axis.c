/* Unit tests of the axis rules (ops.def's axis column, ir/axis.c): the
 * reshape rule by factorisation, the rules of the ops the parallel passes
 * meet, and the list of ops left at the refusing default. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir/ir.h"

static const src_loc noloc = {0};

static ir_shape shp(int rank, const int64_t *dims)
{
    ir_shape s = {.rank = rank};
    for (int i = 0; i < rank; i++) s.dim[i] = dims[i];
    return s;
}

#define SHAPE(...) shp((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static int rdim(ir_shape in, int k, ir_shape out) { return ir_reshape_dim(&in, k, &out); }

static void test_reshape_factorisation(void)
{
    /* The split hidden dim becomes (heads, head_dim): the split goes to
     * heads whatever the batch is, 1 (micro-batch 1) included. */
    CHECK(rdim(SHAPE(16, 1, 96), 2, SHAPE(16, 1, 4, 24)) == 2);
    CHECK(rdim(SHAPE(16, 2, 96), 2, SHAPE(16, 2, 4, 24)) == 2);
    CHECK(rdim(SHAPE(16, 8, 96), 2, SHAPE(16, 8, 4, 24)) == 2);
    CHECK(rdim(SHAPE(2, 2, 8), 2, SHAPE(2, 2, 2, 4)) == 2); /* seq = batch = heads = t = 2 */
    CHECK(rdim(SHAPE(1, 1, 8), 2, SHAPE(1, 1, 2, 4)) == 2);
    /* ... and back: heads merged with the head dim inside them. */
    CHECK(rdim(SHAPE(16, 1, 4, 24), 2, SHAPE(16, 1, 96)) == 2);
    CHECK(rdim(SHAPE(16, 1, 4, 24), 3, SHAPE(16, 1, 96)) == IR_AXIS_MIXED);
    /* Size-1 dims inserted or removed around the split dim. */
    CHECK(rdim(SHAPE(16, 1, 96), 2, SHAPE(16, 96)) == 1);
    CHECK(rdim(SHAPE(16, 96), 1, SHAPE(16, 1, 96)) == 2);
    CHECK(rdim(SHAPE(16, 96), 1, SHAPE(16, 96, 1)) == 1);
    CHECK(rdim(SHAPE(1, 16, 8), 1, SHAPE(16, 8)) == 0);
    CHECK(rdim(SHAPE(16, 8), 0, SHAPE(1, 1, 16, 8)) == 2);
    /* The sequence axis (kvcache) of [s, 1, 3h] is dim 0, not the batch's 1. */
    CHECK(rdim(SHAPE(4, 1, 72), 0, SHAPE(4, 1, 3, 24)) == 0);
    CHECK(rdim(SHAPE(4, 1, 3, 8), 0, SHAPE(4, 1, 24)) == 0);
    /* A dim merged with dims outside it, or split into factors it does not lead. */
    CHECK(rdim(SHAPE(4, 6), 1, SHAPE(24)) == IR_AXIS_MIXED);
    CHECK(rdim(SHAPE(4, 6), 0, SHAPE(24)) == 0);
    CHECK(rdim(SHAPE(4, 6), 1, SHAPE(6, 4)) == IR_AXIS_MIXED);
    CHECK(rdim(SHAPE(4, 6), 0, SHAPE(6, 4)) == 0);
    CHECK(rdim(SHAPE(4, 6), 1, SHAPE(4, 2, 3)) == 1);
    /* A size-1 dim follows the size-1 dims of the same run, in order, or
     * nothing when the reshape removes it. */
    CHECK(rdim(SHAPE(4, 1, 1, 6), 1, SHAPE(4, 1, 1, 6)) == 1);
    CHECK(rdim(SHAPE(4, 1, 1, 6), 2, SHAPE(4, 1, 1, 6)) == 2);
    CHECK(rdim(SHAPE(4, 1, 6), 1, SHAPE(4, 6)) == IR_AXIS_MIXED);
    CHECK(rdim(SHAPE(4, 1, 6), 1, SHAPE(4, 6, 1)) == IR_AXIS_MIXED);
}

static ir_node *leaf(ir_graph *g, const char *name, ir_shape s)
{
    return ir_leaf_new(g, IR_OP_INPUT, name, IR_F32, &s, noloc);
}

static ir_node *node(ir_graph *g, ir_op op, int nsrc, ir_node **src, const char *name)
{
    char err[256];
    ir_node *n = ir_node_end(g, ir_node_begin(g, op, nsrc, src, noloc), name, err, sizeof err);
    if (!n) fprintf(stderr, "%s: %s\n", name, err);
    return n;
}

static void test_rules(void)
{
    ir_graph *g = ir_graph_new("t");
    ir_node *x = leaf(g, "x", SHAPE(16, 1, 8)), *w = leaf(g, "w", SHAPE(24, 8)), *y = leaf(g, "y", SHAPE(16, 1, 8));
    ir_node *lin = node(g, IR_OP_LINEAR, 2, (ir_node *[]){x, w}, "lin");
    CHECK(ir_axis_map(lin, 0, 1) == 1 && ir_axis_map(lin, 0, 2) == IR_AXIS_SUMMED);
    CHECK(ir_axis_map(lin, 1, 0) == 2 && ir_axis_map(lin, 1, 1) == IR_AXIS_SUMMED); /* column / row parallel */
    ir_node *add = node(g, IR_OP_ADD, 2, (ir_node *[]){x, y}, "add");
    CHECK(ir_axis_map(add, 1, 2) == 2);
    ir_node *p = ir_node_begin(g, IR_OP_PERMUTE, 1, &x, noloc);
    ir_attr_set_ints(p, "perm", (int64_t[]){1, 2, 0}, 3);
    char err[256];
    p = ir_node_end(g, p, "p", err, sizeof err);
    CHECK(p && ir_axis_map(p, 0, 0) == 2 && ir_axis_map(p, 0, 2) == 1);
    /* grouped-query attention's repeat of the key/value heads: a block
     * split of the heads stays one, on the same dim, both ways */
    ir_node *kv = leaf(g, "kv", SHAPE(2, 2, 16, 8));
    ir_node *rep = ir_node_begin(g, IR_OP_REPEAT_INTERLEAVE, 1, &kv, noloc);
    ir_attr_set_int(rep, "axis", 1);
    ir_attr_set_int(rep, "repeats", 3);
    rep = ir_node_end(g, rep, "rep", err, sizeof err); /* [2, 6, 16, 8] */
    CHECK(rep && rep->shape.dim[1] == 6 && ir_axis_map(rep, 0, 1) == 1 && ir_axis_map(rep, 0, 2) == 2);
    CHECK(rep && ir_axis_index(rep, 0, 2) == 2 && ir_axis_map(rep, 0, 0) == 0);
    ir_node *back = ir_node_begin(g, IR_OP_REPEAT_INTERLEAVE_BACK, 1, &rep, noloc);
    ir_attr_set_int(back, "axis", 1);
    ir_attr_set_int(back, "repeats", 3);
    back = ir_node_end(g, back, "back", err, sizeof err);
    CHECK(back && back->shape.dim[1] == 2 && ir_axis_map(back, 0, 1) == 1);
    ir_node *a = leaf(g, "a", SHAPE(2, 4, 16, 8)), *b = leaf(g, "b", SHAPE(2, 4, 16, 8));
    ir_node *bmm = ir_node_begin(g, IR_OP_BMM, 2, (ir_node *[]){a, b}, noloc);
    ir_attr_set_bool(bmm, "transpose_b", true);
    bmm = ir_node_end(g, bmm, "scores", err, sizeof err); /* [2, 4, 16, 16] */
    CHECK(bmm && ir_axis_map(bmm, 0, 1) == 1 && ir_axis_map(bmm, 1, 1) == 1);
    CHECK(ir_axis_map(bmm, 0, 2) == 2 && ir_axis_map(bmm, 1, 2) == 3);
    CHECK(ir_axis_map(bmm, 0, 3) == IR_AXIS_SUMMED && ir_axis_map(bmm, 1, 3) == IR_AXIS_SUMMED);
    ir_node *sm = ir_node_begin(g, IR_OP_SOFTMAX, 1, &bmm, noloc);
    ir_attr_set_bool(sm, "causal", true);
    sm = ir_node_end(g, sm, "probs", err, sizeof err);
    CHECK(sm && ir_axis_map(sm, 0, 1) == 1 && ir_axis_map(sm, 0, 3) == IR_AXIS_MIXED);
    CHECK(ir_axis_map(sm, 0, 2) == IR_AXIS_MIXED); /* the causal mask numbers the queries */
    /* ... but the positions stay on their dims: the sequence axis follows
     * the queries and keys through the softmax, and a norm's rows. */
    CHECK(ir_axis_index(sm, 0, 2) == 2 && ir_axis_index(sm, 0, 3) == 3 && ir_axis_index(sm, 0, 1) == 1);
    CHECK(ir_axis_index(bmm, 0, 3) == IR_AXIS_SUMMED && ir_axis_index(lin, 0, 0) == 0);
    ir_node *gw = leaf(g, "gw", SHAPE(8));
    ir_node *rn = node(g, IR_OP_RMSNORM, 2, (ir_node *[]){x, gw}, "rn");
    CHECK(rn && ir_axis_map(rn, 0, 2) == IR_AXIS_MIXED && ir_axis_index(rn, 0, 2) == 2);
    CHECK(ir_axis_map(rn, 1, 0) == IR_AXIS_MIXED && ir_axis_index(rn, 1, 0) == 2 && ir_axis_index(rn, 0, 0) == 0);
    ir_node *sum = node(g, IR_OP_SUM, 1, &x, "sum");
    CHECK(ir_axis_map(sum, 0, 0) == IR_AXIS_SUMMED);
    ir_node *cs = node(g, IR_OP_COLSUM, 1, &x, "colsum");
    CHECK(ir_axis_map(cs, 0, 2) == IR_AXIS_NORULE);
    ir_graph_free(g);
}

/* Every op names its rule; those left at the refusing default are listed
 * here, so that a new op gets a rule or joins this list on purpose. */
static void test_table(void)
{
    static const char *norule =
        "input param full arange colsum embedding_back layernorm_dx layernorm_dw rmsnorm_dx rmsnorm_dw "
        "cross_entropy_back attention_back result bias_gelu_back lm_head_ce lm_head_ce_back vocab_parallel_max "
        "vocab_parallel_sumexp vocab_parallel_target "
        "vocab_parallel_cross_entropy vocab_parallel_cross_entropy_back global_norm adamw sgd ";
    char got[2048] = "";
    for (int op = 0; op < IR_OP_COUNT; op++) {
        const ir_op_info *info = ir_op_get((ir_op)op);
        CHECK(info->axis && info->axis_rule && info->axis_rule[0]);
        if (strcmp(info->axis_rule, "NOAXIS") != 0) continue;
        CHECK(info->axis(NULL, 0, 0) == IR_AXIS_NORULE);
        strcat(got, info->name);
        strcat(got, " ");
    }
    CHECK_STR(got, norule);
    CHECK_STR(ir_op_get(IR_OP_RESHAPE)->axis_rule, "axis_reshape");
}

int main(void)
{
    test_reshape_factorisation();
    test_rules();
    test_table();
    CHECK_DONE();
}
