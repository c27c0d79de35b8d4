/* Shared by the passes that rebuild the graph node by node (tp, sp,
 * kvcache): the old -> new node map, building a copy of a node with new
 * operands, inserting communication ops, and following an axis through an
 * op by its axis rule. */
#ifndef TGC_PASSES_REBUILD_H
#define TGC_PASSES_REBUILD_H
#include "pass.h"

typedef struct rb_ctx {
    ir_graph *old, *g; /* the graph being rewritten, and its replacement */
    ir_node **map;     /* old id -> node in g */
    int8_t *aux;       /* per old node, for the pass (tp: parameter split dims) */
    int64_t t;         /* the group size */
    const char *what;  /* "tensor parallelism (--tp 2)": the prefix of errors */
    const char *hint;  /* appended to rb_follow's "no rule" error, or NULL */
    diag *d;
    char err[512];
} rb_ctx;

void rb_begin(rb_ctx *c, ir_graph *g, int64_t t, const char *what, diag *d);
/* On success the rebuilt graph takes g's place; frees the scratch. */
bool rb_end(rb_ctx *c, bool ok);

bool rb_fail(rb_ctx *c, const ir_node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool rb_split(const ir_node *n);
void rb_set_split(ir_node *n, int dim);
/* op(srcs) in the new graph with `like`'s attributes and flags (when like
 * has the same op), named `name`; reports at loc and returns NULL on error. */
ir_node *rb_emit(rb_ctx *c, const ir_node *like, ir_op op, int nsrc, ir_node **srcs, const char *name,
                 src_loc loc);
/* op(x) size=t, split along out_dim (-1: not split); named `as`, or
 * X.OP when as is NULL. */
ir_node *rb_comm(rb_ctx *c, ir_op op, ir_node *x, const ir_node *at, int out_dim, const char *as);
/* A copy of leaf n with shape s (its split dim `dim`). */
bool rb_copy_leaf(rb_ctx *c, const ir_node *n, const ir_shape *s, int dim);
/* Copies n with its operands mapped, keeping the split of operand 0. */
bool rb_copy(rb_ctx *c, const ir_node *n, int dim);
/* Follows the axes dims[i] (-1: none) of n's operands through n's axis
 * rule (ops.def's axis column): the dim of the result they all land on, or
 * -1 when none lands on one (unused operands; summed ones when sum_ok).
 * Otherwise reports at n, naming n, its op and the operand, and returns -2:
 * an axis the op sums over (unless sum_ok), mixes or has no rule for, or
 * two that land on different dims. `noun` names the axis ("the split"). */
int rb_follow(rb_ctx *c, const ir_node *n, const int *dims, bool sum_ok, const char *noun);

#endif
