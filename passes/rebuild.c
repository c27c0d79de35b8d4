#include "rebuild.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/arena.h"
#include "support/util.h"

void rb_begin(rb_ctx *c, ir_graph *g, int64_t t, const char *what, diag *d)
{
    memset(c, 0, sizeof *c);
    c->old = g;
    c->t = t;
    c->what = what;
    c->d = d;
    c->g = ir_graph_new_like(g);
    c->map = xcalloc((size_t)g->nnodes + 1, sizeof *c->map);
    c->aux = xcalloc((size_t)g->nnodes + 1, 1);
}

/* A location read from IR text names its file by a string in the old
 * graph's arena, which rb_end frees: the rebuilt graph gets its own copy. */
static void rb_keep_locs(ir_graph *g)
{
    const char *from = NULL, *to = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        src_loc *l = &g->nodes[i]->loc;
        if (!l->file) continue;
        if (l->file != from) from = l->file, to = arena_strdup(&g->mem, from);
        l->file = to;
    }
}

bool rb_end(rb_ctx *c, bool ok)
{
    if (ok) rb_keep_locs(c->g);
    if (ok) ir_graph_swap(c->old, c->g);
    ir_graph_free(c->g);
    free(c->map);
    free(c->aux);
    return ok;
}

bool rb_fail(rb_ctx *c, const ir_node *at, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(c->d, at->loc, "%s: %s", c->what, msg);
    return false;
}

bool rb_split(const ir_node *n) { return n->shard.dim >= 0; }

void rb_set_split(ir_node *n, int dim)
{
    n->shard.dim = (int8_t)dim;
    n->shard.group = dim >= 0 ? IR_GROUP_TP : IR_GROUP_NONE;
}

ir_node *rb_emit(rb_ctx *c, const ir_node *like, ir_op op, int nsrc, ir_node **srcs, const char *name, src_loc loc)
{
    ir_node *m = ir_node_begin(c->g, op, nsrc, srcs, loc);
    if (like && like->op == op) {
        memcpy(m->attrs, like->attrs, (size_t)ir_op_get(op)->nattrs * sizeof *m->attrs);
        m->flags = like->flags;
    }
    ir_node *r = ir_node_end(c->g, m, name, c->err, sizeof c->err);
    if (!r) diag_error(c->d, loc, "%s: %s", c->what, c->err);
    return r;
}

ir_node *rb_comm(rb_ctx *c, ir_op op, ir_node *x, const ir_node *at, int out_dim, const char *as)
{
    char name[1024];
    snprintf(name, sizeof name, "%s.%s", x->name, ir_op_name(op));
    if (as) snprintf(name, sizeof name, "%s", as);
    ir_node *m = ir_node_begin(c->g, op, 1, &x, at->loc);
    ir_attr_set_int(m, "size", c->t);
    ir_node *r = ir_node_end(c->g, m, name, c->err, sizeof c->err);
    if (!r) { rb_fail(c, at, "%s", c->err); return NULL; }
    rb_set_split(r, out_dim);
    return r;
}

bool rb_copy_leaf(rb_ctx *c, const ir_node *n, const ir_shape *s, int dim)
{
    ir_node *m = ir_leaf_new(c->g, n->op, n->name, n->dtype, s, n->loc);
    if (!m) return rb_fail(c, n, "duplicate name '%s'", n->name);
    memcpy(m->attrs, n->attrs, (size_t)ir_op_get(n->op)->nattrs * sizeof *m->attrs);
    m->flags = n->flags;
    rb_set_split(m, dim);
    c->map[n->id] = m;
    return true;
}

static bool follow_fail(rb_ctx *c, const ir_node *n, int i, int d, int m, const char *noun)
{
    const char *op = ir_op_name(n->op);
    if (m == IR_AXIS_SUMMED)
        return rb_fail(c, n, "%s '%%%s' sums over %s (dim %d of operand %d)", op, n->name, noun, d, i);
    if (m == IR_AXIS_NORULE)
        return rb_fail(c, n, "%s '%%%s' has no rule for %s (dim %d of operand %d): its axis rule in ir/ops.def is "
                       "NOAXIS%s", op, n->name, noun, d, i, c->hint ? c->hint : "");
    return rb_fail(c, n, "%s '%%%s' mixes or cuts the elements along %s (dim %d of operand %d)", op, n->name, noun,
                   d, i);
}

int rb_follow(rb_ctx *c, const ir_node *n, const int *dims, bool sum_ok, const char *noun)
{
    int j = -1, from = -1;
    for (int i = 0; i < n->nsrc; i++) {
        if (dims[i] < 0) continue;
        int m = ir_axis_map(n, i, dims[i]);
        if (m == IR_AXIS_UNUSED || (m == IR_AXIS_SUMMED && sum_ok)) continue;
        if (m < 0) return follow_fail(c, n, i, dims[i], m, noun), -2;
        if (j >= 0 && m != j)
            return rb_fail(c, n, "%s '%%%s': %s of operand %d lands on dim %d of the result, that of operand %d on "
                           "dim %d", ir_op_name(n->op), n->name, noun, from, j, i, m), -2;
        j = m, from = i;
    }
    return j;
}

bool rb_copy(rb_ctx *c, const ir_node *n, int dim)
{
    ir_node *srcs[64];
    if (n->nsrc > 64) return rb_fail(c, n, "%s has too many operands", ir_op_name(n->op));
    for (int i = 0; i < n->nsrc; i++) srcs[i] = c->map[n->src[i]->id];
    ir_node *m = rb_emit(c, n, n->op, n->nsrc, srcs, n->name, n->loc);
    if (!m) return false;
    rb_set_split(m, dim);
    c->map[n->id] = m;
    return true;
}

/* ---- the sequence axes -------------------------------------------------------------------- */

const ir_node *rb_seq_tokens(const ir_graph *g)
{
    const ir_node *t = ir_graph_find(g, "tokens");
    return t && rb_seq_source(t).q == 0 ? t : NULL;
}

rb_seq rb_seq_source(const ir_node *leaf)
{
    rb_seq a = {RB_SEQ_NONE, RB_SEQ_NONE, NULL};
    if ((leaf->flags & IR_NF_INPUT) && leaf->dtype == IR_I32 && leaf->shape.rank >= 1 &&
        (!strcmp(leaf->name, "tokens") || !strcmp(leaf->name, "labels")))
        a.q = 0;
    int64_t axis = leaf->op == IR_OP_ARANGE ? ir_attr_int(leaf, "axis") : -1;
    if (axis >= 0 && axis < leaf->shape.rank) a.q = (int8_t)axis; /* (the verifier's to refuse another) */
    return a;
}

static void seq_lose(int8_t *ax, const ir_node **lost, const ir_node *at)
{
    if (*ax != RB_SEQ_LOST && !*lost) *lost = at;
    *ax = RB_SEQ_LOST;
}

/* Positions (q, or k when `key`) of an operand landing on dim m of the
 * result: q unless the result's q is on another dim, then k. */
static void seq_land(rb_seq *r, bool key, int m, const ir_node *n)
{
    if (!key) {
        if (r->q == RB_SEQ_LOST) return;
        if (r->q == RB_SEQ_NONE || r->q == m) {
            r->q = (int8_t)m;
            return;
        }
    }
    if (m == r->q || r->k == RB_SEQ_LOST) return;
    if (r->k == RB_SEQ_NONE || r->k == m) r->k = (int8_t)m;
    else seq_lose(&r->k, &r->lost, n);
}

rb_seq rb_seq_follow(const ir_node *n, const rb_seq *in)
{
    rb_seq r = {RB_SEQ_NONE, RB_SEQ_NONE, NULL};
    for (int i = 0; i < n->nsrc; i++) {
        int8_t ax[2] = {in[i].q, in[i].k};
        for (int w = 0; w < 2; w++) {
            if (ax[w] == RB_SEQ_NONE) continue;
            int8_t *to = w ? &r.k : &r.q;
            if (ax[w] == RB_SEQ_LOST) {
                if (!r.lost) r.lost = in[i].lost;
                *to = RB_SEQ_LOST;
                continue;
            }
            int m = ir_axis_index(n, i, ax[w]);
            if (m == IR_AXIS_UNUSED || m == IR_AXIS_SUMMED) continue;
            if (m < 0) seq_lose(to, &r.lost, n);
            else seq_land(&r, w == 1, m, n);
        }
    }
    return r;
}
