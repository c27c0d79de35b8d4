/* Shared by the passes that rebuild the graph node by node (tp, sp): the
 * old -> new node map, building a copy of a node with new operands, and
 * inserting communication ops. */
#ifndef TGC_PASSES_REBUILD_H
#define TGC_PASSES_REBUILD_H
#include "pass.h"

typedef struct rb_ctx {
    ir_graph *old, *g; /* the graph being rewritten, and its replacement */
    ir_node **map;     /* old id -> node in g */
    int8_t *aux;       /* per old node, for the pass (tp: parameter split dims) */
    int64_t t;         /* the group size */
    const char *what;  /* "tensor parallelism (--tp 2)": the prefix of errors */
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
/* Where dim k of a reshape's input lands in its output: the output dim
 * whose prefix product equals the input's before dim k, i.e. the outermost
 * factor of a split of dim k or the merge of dim k with the dims inside
 * it. -1 when the reshape mixes dim k with outer dims. (tp: the split dim;
 * kvcache: the sequence axes.) */
int rb_reshape_dim(const ir_shape *in, int k, const ir_shape *out);

#endif
