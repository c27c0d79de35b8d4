/* Generic fusion (docs/fusion.md): groups of nodes that codegen emits as one
 * kernel by substituting expressions — a value a group member computes is
 * recomputed where another member reads it instead of going through memory.
 *
 * A group has at most one anchor, a row or column reduction (an op flagged
 * FUSIBLE | REDUCE: layernorm, rmsnorm, softmax, softmax_back, their dx,
 * colsum), and elementwise ops (FUSIBLE | ELEMENTWISE) over the same shape:
 *
 *   producers  feed the anchor, or each other. They are recomputed at every
 *              load, and a row reduction loads its input once per pass over
 *              the row (two or three): before one, only cheap producers —
 *              about one FLOP per element, no random numbers — qualify. (A
 *              dropout_back before softmax_back would keep the largest
 *              gradient, [b, heads, s, s], out of memory, but recomputing
 *              its Philox numbers in each pass made the CPU step slower and
 *              changed how the compiler vectorised the reduction.)
 *   epilogues  read the anchor's result element by element (operands of
 *              their own shape, rank >= 2, so never a bias slot). After a
 *              causal softmax, whose masked tail the kernel writes as zeros,
 *              only ops that map 0 to 0 (dropout, scale) qualify.
 *
 * Without an anchor, a chain of elementwise ops over one shape is one map
 * kernel. Every value of a group that is an output or read outside it is
 * still written (at most 4 per kernel); the rest get no buffer.
 *
 * Legality: nothing outside the group reads a member before the group's
 * last node (where the kernel runs); the members then move together, just
 * before it, in their order. No GEMM, collective, view or leaf joins a
 * group, and a graph in 16-bit precision is not fused generically: its
 * stored intermediates are rounded, and keeping them in registers would
 * change the results. */
#include <stdlib.h>
#include <string.h>

#include "fuse.h"
#include "support/util.h"

/* The kernel limits of codegen (KMAX_OUT, KMAX_ARGS in codegen/kir.h). */
#define GROUP_MAX_WRITES 4
#define GROUP_MAX_ARGS 16

typedef struct grouper {
    ir_graph *g;
    fuse_uses u;
    int *gid;      /* group of each node, -1 */
    int ngroups;
    int *glast;    /* last position of each group */
    /* the group being built */
    int *mem, nmem;
    int cur, last;
    const ir_node *anchor; /* NULL: a map chain */
} grouper;

static bool ew(const ir_node *n)
{
    unsigned f = ir_op_get(n->op)->flags;
    return (f & IR_OPF_ELEMENTWISE) && (f & IR_OPF_FUSIBLE) && !(f & (IR_OPF_COLLECTIVE | IR_OPF_LEAF)) &&
           n->shape.rank >= 1 && ir_dtype_is_float(n->dtype);
}

static bool anchor_op(const ir_node *n)
{
    unsigned f = ir_op_get(n->op)->flags;
    return (f & IR_OPF_FUSIBLE) && (f & IR_OPF_REDUCE) && ir_dtype_is_float(n->dtype);
}

/* The shape the group's elementwise members have: the anchor's main input. */
static const ir_shape *space_of(const grouper *p)
{
    return p->anchor ? &p->anchor->src[0]->shape : &p->g->nodes[p->mem[0]]->shape;
}

/* The anchor writes an element per element of the space (not colsum). */
static bool anchor_elementwise(const ir_node *a) { return ir_shape_eq(&a->shape, &a->src[0]->shape); }

static bool causal(const ir_node *a)
{
    return ir_op_attr_index(a->op, "causal") >= 0 && ir_attr_bool(a, "causal");
}

/* About one FLOP per element and no random numbers (ops with a `key` draw
 * them): cheap enough to recompute at every load of a row reduction. */
static bool cheap(const ir_node *n)
{
    return ir_op_attr_index(n->op, "key") < 0 && ir_node_flops(n) <= ir_shape_numel(&n->shape);
}

static bool member(const grouper *p, int i) { return p->gid[i] == p->cur; }

/* A reader outside the group, or the output flag: the value is written. */
static bool read_outside(const grouper *p, int i, int also)
{
    if (fuse_flagged(p->g->nodes[i])) return true;
    for (int k = p->u.start[i]; k < p->u.start[i + 1]; k++)
        if (!member(p, p->u.user[k]) && p->u.user[k] != also) return true;
    return false;
}

/* The first reader of a member outside the group (INT32_MAX: none); `also`
 * counts as inside. */
static int first_outside_reader(const grouper *p, int also)
{
    int first = INT32_MAX;
    for (int m = 0; m < p->nmem; m++)
        for (int k = p->u.start[p->mem[m]]; k < p->u.start[p->mem[m] + 1]; k++) {
            int r = p->u.user[k];
            if (!member(p, r) && r != also && r < first) first = r;
        }
    return first;
}

/* Kernel arguments and written values with candidate c added. */
static bool within_limits(const grouper *p, int c)
{
    int writes = 0, inputs = 0;
    int n = p->nmem + 1;
    for (int m = 0; m < n; m++) {
        int i = m < p->nmem ? p->mem[m] : c;
        writes += read_outside(p, i, c);
        const ir_node *x = p->g->nodes[i];
        for (int k = 0; k < x->nsrc; k++) {
            int s = x->src[k]->id;
            bool seen = member(p, s) || s == c;
            /* count each outside operand once */
            for (int m2 = 0; m2 < m && !seen; m2++) {
                const ir_node *y = p->g->nodes[m2 < p->nmem ? p->mem[m2] : c];
                for (int j = 0; j < y->nsrc && !seen; j++) seen = y->src[j]->id == s;
            }
            for (int j = 0; j < k && !seen; j++) seen = x->src[j]->id == s;
            inputs += !seen;
        }
    }
    return writes <= GROUP_MAX_WRITES && writes + inputs <= GROUP_MAX_ARGS;
}

static void add_member(grouper *p, int i)
{
    p->gid[i] = p->cur;
    p->mem[p->nmem++] = i;
    if (i > p->last) p->last = i;
}

/* Epilogue candidate e of the anchor group: reads members only through
 * operands of its own shape, and at least one. */
static bool reads_group_elementwise(const grouper *p, const ir_node *e)
{
    bool any = false;
    for (int k = 0; k < e->nsrc; k++) {
        if (!member(p, e->src[k]->id)) continue;
        if (!ir_shape_eq(&e->src[k]->shape, &e->shape)) return false;
        any = true;
    }
    return any;
}

static bool reads_group(const grouper *p, const ir_node *e)
{
    for (int k = 0; k < e->nsrc; k++)
        if (member(p, e->src[k]->id)) return true;
    return false;
}

/* Consumers in node order, as long as no outside reader of a member comes
 * first (the kernel runs at the group's last node). */
static void add_consumers(grouper *p)
{
    const ir_node *a = p->anchor;
    if (a && (!anchor_elementwise(a) || a->shape.rank < 2)) return;
    const ir_shape *space = space_of(p);
    for (int j = p->last + 1; j < p->g->nnodes; j++) {
        int limit = first_outside_reader(p, j);
        if (j > limit) return;
        const ir_node *e = p->g->nodes[j];
        bool ok = p->gid[j] < 0 && ew(e) && ir_shape_eq(&e->shape, space) &&
                  (a ? reads_group_elementwise(p, e) : reads_group(p, e));
        if (ok && a && causal(a) && e->op != IR_OP_DROPOUT && e->op != IR_OP_SCALE) ok = false;
        if (ok && !within_limits(p, j)) ok = false;
        if (ok) add_member(p, j);
        else if (reads_group(p, e)) return; /* a reader that stays outside: nothing later may join */
    }
}

/* Producers: operands of members, recursively. */
static void add_producers(grouper *p)
{
    const ir_node *a = p->anchor;
    const ir_shape *space = space_of(p);
    bool row = a && anchor_elementwise(a);             /* a row reduction writing elements */
    bool writes_ok = !a || (row && !causal(a));         /* the kernel can write a producer too */
    for (int m = 0; m < p->nmem; m++) {
        const ir_node *x = p->g->nodes[p->mem[m]];
        for (int k = 0; k < x->nsrc; k++) {
            const ir_node *s = x->src[k];
            int i = s->id;
            /* A producer does not depend on the group (a reader of the
             * anchor joins as an epilogue or not at all). */
            if (p->gid[i] >= 0 || !ew(s) || !ir_shape_eq(&s->shape, space) || reads_group(p, s)) continue;
            bool outside = false, late = true;
            for (int j = p->u.start[i]; j < p->u.start[i + 1]; j++) {
                int r = p->u.user[j];
                if (member(p, r)) continue;
                outside = true;
                late &= r > p->last;
            }
            outside |= fuse_flagged(s);
            if (!late || (outside && !writes_ok) || (row && !cheap(s)) || !within_limits(p, i)) continue;
            add_member(p, i);
        }
    }
}

static void group_from(grouper *p, int start)
{
    const ir_node *n = p->g->nodes[start];
    p->cur = p->ngroups;
    p->nmem = 0;
    p->last = start;
    p->anchor = anchor_op(n) ? n : NULL;
    add_member(p, start);
    add_consumers(p);
    add_producers(p);
    if (p->nmem < 2) {
        p->gid[start] = -1;
        return;
    }
    p->glast[p->ngroups++] = p->last;
}

static int by_position(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Each group's members move, in order, to just before its last node; the
 * groups are numbered in order of appearance. */
static void reorder(grouper *p)
{
    ir_graph *g = p->g;
    int n = g->nnodes;
    ir_node **order = xmalloc(((size_t)n + 1) * sizeof *order);
    int *members = xmalloc(((size_t)n + 1) * sizeof *members), *renum = xmalloc(((size_t)p->ngroups + 1) * sizeof *renum);
    int k = 0, next = 0;
    for (int i = 0; i < n; i++) {
        int gr = p->gid[i];
        if (gr < 0) { order[k++] = g->nodes[i]; continue; }
        if (p->glast[gr] != i) continue;
        int nm = 0;
        for (int j = 0; j <= i; j++)
            if (p->gid[j] == gr) members[nm++] = j;
        qsort(members, (size_t)nm, sizeof *members, by_position);
        renum[gr] = next++;
        for (int j = 0; j < nm; j++) {
            g->nodes[members[j]]->fuse = renum[gr];
            order[k++] = g->nodes[members[j]];
        }
    }
    memcpy(g->nodes, order, (size_t)n * sizeof *order);
    bool *keep = xmalloc(((size_t)n + 1) * sizeof *keep);
    for (int i = 0; i < n; i++) keep[i] = true;
    ir_graph_compact(g, keep); /* renumbers */
    free(keep);
    free(order);
    free(members);
    free(renum);
}

void fuse_groups(ir_graph *g)
{
    grouper p = {.g = g};
    int n = g->nnodes;
    fuse_uses_build(g, &p.u);
    p.gid = xmalloc(((size_t)n + 1) * sizeof *p.gid);
    p.glast = xmalloc(((size_t)n + 1) * sizeof *p.glast);
    p.mem = xmalloc(((size_t)n + 1) * sizeof *p.mem);
    for (int i = 0; i < n; i++) p.gid[i] = -1;
    /* Reductions first, so that they take their producers and epilogues;
     * then chains of elementwise ops among what is left. */
    for (int i = 0; i < n; i++)
        if (p.gid[i] < 0 && anchor_op(g->nodes[i])) group_from(&p, i);
    for (int i = 0; i < n; i++)
        if (p.gid[i] < 0 && ew(g->nodes[i])) group_from(&p, i);
    if (p.ngroups) reorder(&p);
    fuse_uses_free(&p.u);
    free(p.gid);
    free(p.glast);
    free(p.mem);
}
