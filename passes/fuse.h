/* Shared by the fuse pass's two files: fuse.c (the pass, --fuse, the named
 * fusions) and fuse_groups.c (generic fusion into one kernel per group). */
#ifndef TGC_PASSES_FUSE_H
#define TGC_PASSES_FUSE_H
#include "pass.h"

/* Who reads each node: users of node i are user[start[i] .. start[i + 1]),
 * one entry per operand slot, in node order. */
typedef struct fuse_uses {
    int *start, *user;
} fuse_uses;

void fuse_uses_build(const ir_graph *g, fuse_uses *u);
void fuse_uses_free(fuse_uses *u);

static inline int fuse_nusers(const fuse_uses *u, int i) { return u->start[i + 1] - u->start[i]; }

/* An output or the loss: its value must reach memory. */
static inline bool fuse_flagged(const ir_node *n) { return (n->flags & (IR_NF_OUTPUT | IR_NF_LOSS)) != 0; }

/* Assigns fuse(N) to the groups of generic fusion and orders each group's
 * nodes consecutively (fuse_groups.c). Not for graphs stored in 16 bits. */
void fuse_groups(ir_graph *g);

#endif
