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

/* ---- the sequence axes (the sp and kvcache passes) ---------------------------------------
 * Which dims of a value run over the positions of the sequence, followed
 * from their sources through every op by its axis rule (ir_axis_index),
 * never guessed from sizes. q: the positions (a kvcache step's new ones);
 * k: positions a second operand brought in on another dim (the keys of
 * attention scores [.., q, k]). Each is a dim, RB_SEQ_NONE (the value does
 * not run over the sequence there) or RB_SEQ_LOST (an op mixed, cut or had
 * no rule for it: `lost` names that op). */
enum { RB_SEQ_NONE = -1, RB_SEQ_LOST = -2 };
typedef struct rb_seq {
    int8_t q, k;
    const ir_node *lost; /* where the axis was lost, or NULL */
} rb_seq;

/* The token input: the input `tokens` (i32[seq, ...], as the data
 * loader and the sampler feed it), or NULL. */
const ir_node *rb_seq_tokens(const ir_graph *g);
/* The sources of the sequence: dim 0 of the i32 inputs `tokens` and
 * `labels` (the [seq, batch] layout the data loader feeds), and the `axis`
 * dim of an arange (position ids). Any other leaf: none. */
rb_seq rb_seq_source(const ir_node *leaf);
/* n's axes from those of its operands (in[i] for n->src[i]): the positions
 * of operand 0 that land on a dim of the result are its q; positions of
 * another operand that land elsewhere are its k; an axis the op sums over
 * leaves (a sum over positions does not run over them); one it mixes or has
 * no rule for is lost. */
rb_seq rb_seq_follow(const ir_node *n, const rb_seq *in);

#endif
