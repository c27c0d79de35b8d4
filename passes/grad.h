/* Autodiff internals, shared by the pass (autodiff.c), the per-op gradient
 * rules (grad.c) and the custom-op mechanism (grad_custom.c). Nothing
 * outside passes/autodiff*.c and passes/grad*.c includes this file.
 *
 * A rule receives the forward node n and the gradient dy of its result
 * (complete: every user of n was differentiated before n). For each operand
 * x that ad_needs, it builds the gradient of x from ordinary IR ops and
 * hands it to ad_accum (usually through ad_emit). Rules never decide names,
 * locations or pipeline stages: the helpers below do. */
#ifndef TGC_PASSES_GRAD_H
#define TGC_PASSES_GRAD_H
#include "pass.h"
#include "support/arena.h"

typedef struct ad_split ad_split; /* a slice gradient waiting for its siblings */

typedef struct ad_rename {
    ir_node *n;
    const char *to;
} ad_rename;

typedef struct ad_ctx {
    ir_graph *g;
    diag *d;
    int nfwd;            /* the forward graph: node ids [0, nfwd) */
    bool *req;           /* by forward id: depends on a parameter (floats only) */
    ir_node **grad;      /* by forward id: the gradient accumulated so far */
    ad_split **split;    /* by forward id: deferred slice gradients (one split) */
    int *use_off, *uses; /* forward users of each forward node (CSR) */
    int *owner;          /* by forward id: the custom_out whose backward body
                            holds the node (it depends on its cotangent), or -1 */
    ir_node **clone;     /* by forward id: a body node's clone */
    bool *mark;          /* by forward id: scratch */
    ir_node *cur;        /* the node being differentiated: loc and stage of
                            everything built for it */
    ad_rename *clones;   /* (clone, name of the body node it copies) */
    int nclones, clones_cap;
    arena scratch;
    bool ok;             /* no user error so far */
} ad_ctx;

typedef void (*ad_rule)(ad_ctx *c, ir_node *n, ir_node *dy);

/* The rules, declared from the op table (ops.def's 7th column). */
#define NOGRAD ad_no_rule
#define OP(e, mn, lo, hi, attrs, shape, grad, flops, axis, flags) void grad(ad_ctx *c, ir_node *n, ir_node *dy);
#include "ir/ops.def"
#undef NOGRAD

/* Does the loss's gradient have to reach x (x depends on a parameter)? */
bool ad_needs(const ad_ctx *c, const ir_node *x);

/* Starts a backward node at the location of c->cur. ad_op1/2/3 are the
 * usual arities; ad_true sets a bool attribute and returns the node. */
ir_node *ad_op(ad_ctx *c, ir_op op, int nsrc, ir_node *const *src);
ir_node *ad_op1(ad_ctx *c, ir_op op, ir_node *a);
ir_node *ad_op2(ad_ctx *c, ir_op op, ir_node *a, ir_node *b);
ir_node *ad_op3(ad_ctx *c, ir_op op, ir_node *a, ir_node *b, ir_node *d);
ir_node *ad_true(ir_node *b, const char *attr);
/* Copies every attribute of `from` that b's op has too (same name and
 * kind): eps, approx, p, key, scale, ignore_index, size, base. */
void ad_same_attrs(ir_node *b, const ir_node *from);

/* Finishes b (shape rule, CSE, naming). A shape error is a bug in a rule
 * and aborts with the message. ad_end names it grad.<of> and gives it
 * of's sharding; ad_end_named is for intermediate values. */
ir_node *ad_end(ad_ctx *c, ir_node *b, const ir_node *of);
ir_node *ad_end_named(ad_ctx *c, ir_node *b, const char *name);

/* The one accumulation helper: adds gx to the gradient of x (add where x
 * fans out). gx must have x's shape. */
void ad_accum(ad_ctx *c, ir_node *x, ir_node *gx);
/* ad_accum(c, x, ad_end(c, b, x)). */
void ad_emit(ad_ctx *c, ir_node *x, ir_node *b);

/* A `full` leaf of the given type, named base (or base.N), placed like
 * `like` (location, stage, sharding). */
ir_node *ad_full(ad_ctx *c, const char *base, ir_dtype t, const ir_shape *s, double value, const ir_node *like);

/* Slices: when the slices of x along one axis tile it (a split), their
 * gradients are collected and become one concat when x is reached, instead
 * of a sum of pads. Returns false when `slice` is not part of such a split. */
bool ad_defer_split(ad_ctx *c, ir_node *slice, ir_node *dy);
/* pad(dy) back to the operand's shape: the plain gradient of one slice. */
ir_node *ad_slice_pad(ad_ctx *c, const ir_node *slice, ir_node *dy);

/* Custom ops (grad_custom.c). prepare fills c->owner and checks the
 * placeholders (user errors go to c->d); finish marks the placeholders and
 * backward bodies for removal in keep[] and lowers custom_out to identity. */
bool ad_custom_prepare(ad_ctx *c);
void ad_custom_finish(ad_ctx *c, bool *keep);

/* A broken invariant of autodiff itself: prints the message and aborts. */
_Noreturn void ad_bug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
