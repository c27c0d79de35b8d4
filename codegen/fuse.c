/* Fused kernels (docs/fusion.md): a run of nodes with one fuse(N) (ir.h)
 * becomes one kernel by expression substitution.
 *
 * Every member is first emitted alone, by its ordinary emitter, into a
 * scratch program; each must give exactly one kernel: a map with identity
 * output index (out[i] = v(i)), or — for at most one member, the anchor — a
 * row or column reduction. The fused kernel has the anchor's loop shape (a
 * map without one) and is built by copying expressions:
 *
 *   - a load of a value a map member computes is replaced by that member's
 *     value expression with its index i replaced by the load's index: the
 *     value is recomputed where it is read, never stored;
 *   - an epilogue (a member that reads the anchor's result) reads it only
 *     at the element the reduction writes, where it is the anchor's own
 *     output expression;
 *   - loads of anything else become arguments of the fused kernel.
 *
 * Members whose value leaves the run (ir_graph_fuse_runs) are written as
 * extra outputs at the element the kernel writes. Whatever cannot be one
 * kernel is reported, naming the node; nothing is guessed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_util.h"
#include "support/util.h"

typedef struct fmember {
    const ir_node *n;
    const kernel *k;       /* its own kernel, in the scratch program */
    const cg_bind *binds;
    bool written;
    bool post;             /* reads the anchor: has a value at the written element only */
    kx *at_elem;           /* memo: its value at the written element */
} fmember;

typedef struct fuser {
    const ir_graph *g;
    cg_program *scratch;
    fmember *m;
    int nm, anchor;        /* anchor: index into m, or -1 */
    kernel *f;             /* the fused kernel */
    cg_bind *fb;           /* its arguments' bindings */
    kb b;
    kx *elem;              /* index of the element the kernel writes (NULL: a column reduction) */
    kx *anchor_val;        /* the anchor's value there */
    const ir_node *bad;    /* first failure: where, and why */
    char why[200];
} fuser;

/* Records the first reason the group cannot be one kernel. Returns a
 * placeholder of type t, so that building the expression goes on without
 * tripping a type check; the kernel is dropped. */
static kx *fail_as(fuser *z, const ir_node *at, const char *why, kx_type t)
{
    if (!z->bad) {
        z->bad = at;
        snprintf(z->why, sizeof z->why, "%s", why);
    }
    if (!z->b.k) return NULL;
    return t == KT_I ? kx_i(&z->b, 0) : kx_f(&z->b, 0.0);
}

static void fail(fuser *z, const ir_node *at, const char *why) { fail_as(z, at, why, KT_F); }

static int member_of(const fuser *z, int node)
{
    for (int i = 0; i < z->nm; i++)
        if (z->m[i].n->id == node) return i;
    return -1;
}

/* The fused kernel's input argument bound like `bd` (one per binding). */
static int input_arg(fuser *z, const fmember *mb, cg_bind bd, const karg *a)
{
    for (int i = 0; i < z->f->nargs; i++)
        if (!z->f->args[i].output && z->fb[i].kind == bd.kind && z->fb[i].node == bd.node &&
            z->fb[i].offset == bd.offset) {
            if (a->numel > z->f->args[i].numel) z->f->args[i].numel = a->numel;
            return i;
        }
    if (z->f->nargs == KMAX_ARGS) {
        fail(z, mb->n, "the fused kernel would need more than 16 arguments");
        return -1;
    }
    int i = kernel_add_arg(z->f, a->dtype, a->numel, false);
    z->fb[i] = bd;
    return i;
}

static kx *value_at(fuser *z, int mi, kx *idx);

/* Member mi's expression e in the fused kernel; idx0 replaces its loop
 * index i (NULL for the anchor, whose loops are the kernel's). */
static kx *tr(fuser *z, int mi, const kx *e, kx *idx0)
{
    fmember *mb = &z->m[mi];
    switch (e->kind) {
    case KX_CONST: return e->type == KT_F ? kx_f(&z->b, e->f) : kx_i(&z->b, e->i);
    case KX_IDX:
        if (!idx0) return kx_idx(&z->b, e->arg);
        return e->arg == 0 ? idx0 : fail_as(z, mb->n, "a map kernel uses a second loop index", KT_I);
    case KX_ACC:
        return mi == z->anchor ? kx_acc(&z->b, e->arg) : fail_as(z, mb->n, "a map kernel reads a reduction", KT_F);
    case KX_RT: return kx_rt(&z->b, (kx_rt_slot)e->arg);
    case KX_UN: return kx_un(&z->b, (kx_unop)e->op, tr(z, mi, e->a, idx0));
    case KX_BIN: return kx_bin(&z->b, (kx_binop)e->op, tr(z, mi, e->a, idx0), tr(z, mi, e->b, idx0));
    case KX_SEL: return kx_sel(&z->b, tr(z, mi, e->a, idx0), tr(z, mi, e->b, idx0), tr(z, mi, e->c, idx0));
    case KX_KEEP: return kx_keep(&z->b, tr(z, mi, e->a, idx0), e->f, e->i);
    case KX_LOAD: break;
    }
    cg_bind bd = mb->binds[e->arg];
    int src = bd.kind == CG_BIND_NODE ? member_of(z, bd.node) : -1;
    if (src == z->anchor && src >= 0) {
        /* An epilogue reads the reduction's result at its own element. */
        bool here = idx0 && idx0 == z->elem && e->a->kind == KX_IDX && e->a->arg == 0;
        return here ? z->anchor_val
                    : fail_as(z, mb->n, "it reads the reduction's result away from the element the kernel writes",
                              e->type);
    }
    kx *ix = tr(z, mi, e->a, idx0);
    if (src >= 0)
        return src < mi ? value_at(z, src, ix) : fail_as(z, mb->n, "it reads a later node of the group", e->type);
    int a = input_arg(z, mb, bd, &mb->k->args[e->arg]);
    return a < 0 ? fail_as(z, mb->n, "", e->type) /* input_arg said why */ : kx_load(&z->b, a, ix);
}

/* Map member mi's value at element idx of its own index space. */
static kx *value_at(fuser *z, int mi, kx *idx)
{
    fmember *mb = &z->m[mi];
    bool elem = idx == z->elem;
    if (mb->post && !elem)
        return fail_as(z, mb->n, "its value depends on the reduction and is read at another element",
                       mb->k->out[0].val->type);
    if (elem && mb->at_elem) return mb->at_elem;
    kx *v = tr(z, mi, mb->k->out[0].val, idx);
    if (elem) mb->at_elem = v;
    return v;
}

/* Emits each member alone into the scratch program and checks that it is
 * one kernel of a shape that fuses. */
static bool emit_members(fuser *z)
{
    for (int i = 0; i < z->nm; i++) {
        fmember *mb = &z->m[i];
        const ir_node *n = mb->n;
        unsigned f = ir_op_get(n->op)->flags;
        cg_emit_fn fn = cg_emitters[n->op];
        if (!fn || (f & (IR_OPF_LEAF | IR_OPF_COLLECTIVE))) {
            fail(z, n, "this op is not a generated kernel (a GEMM, view, leaf or collective)");
            return false;
        }
        int k0 = z->scratch->nkernels, i0 = z->scratch->ninstrs;
        cg_ctx c = {.p = z->scratch, .g = z->g, .n = n};
        if (!fn(&c) || z->scratch->nkernels != k0 + 1 || z->scratch->ninstrs != i0 + 1 || c.ws) {
            fail(z, n, "its op takes more than one kernel");
            return false;
        }
        const kernel *k = z->scratch->kernels[k0];
        mb->k = k;
        mb->binds = z->scratch->binds[k0];
        const kout *o = &k->out[0];
        if (k->nout != 1 || mb->binds[o->arg].kind != CG_BIND_NODE || mb->binds[o->arg].node != n->id) {
            fail(z, n, "its kernel does not write exactly its own value");
            return false;
        }
        if (k->args[o->arg].dtype != n->dtype) {
            fail(z, n, "its value is stored rounded to 16 bits, which registers would not be");
            return false;
        }
        if (k->kind != KK_MAP) {
            if (z->anchor >= 0 || (k->kind != KK_ROW && k->kind != KK_COL)) {
                fail(z, n, "a fused kernel holds at most one reduction");
                return false;
            }
            z->anchor = i;
        } else if (k->nacc || k->row_limit || o->idx->kind != KX_IDX || o->idx->arg != 0 || k->n != NUMEL(n)) {
            fail(z, n, "its map kernel does not write element i at index i");
            return false;
        }
        if (k->ctype != z->m[0].k->ctype) {
            fail(z, n, "its compute type differs from the rest of the group");
            return false;
        }
    }
    return true;
}

/* Marks the members whose value depends on the anchor's. */
static void mark_post(fuser *z)
{
    for (int i = 0; i < z->nm; i++) {
        fmember *mb = &z->m[i];
        mb->post = i == z->anchor;
        for (int a = 0; a < mb->k->nargs && !mb->post && z->anchor >= 0 && i != z->anchor; a++) {
            int s = mb->binds[a].kind == CG_BIND_NODE ? member_of(z, mb->binds[a].node) : -1;
            mb->post = s >= 0 && z->m[s].post;
        }
    }
}

/* True when e is 0 wherever the anchor's value is: what a causal softmax
 * writes past its row limit (zeros) is then right for e too. */
static bool zero_with_anchor(const fuser *z, const kx *e)
{
    if (e == z->anchor_val) return true;
    if (e->kind == KX_UN) return e->op == KU_NEG && zero_with_anchor(z, e->a);
    if (e->kind == KX_SEL) return zero_with_anchor(z, e->b) && zero_with_anchor(z, e->c);
    if (e->kind != KX_BIN) return false;
    if (e->op == KB_MUL) return zero_with_anchor(z, e->a) || zero_with_anchor(z, e->b);
    return e->op == KB_DIV && zero_with_anchor(z, e->a);
}

static int output_arg(fuser *z, const ir_node *n)
{
    if (z->f->nargs == KMAX_ARGS || z->f->nout == KMAX_OUT) {
        fail(z, n, "the fused kernel would write more than 4 values or need more than 16 arguments");
        return -1;
    }
    int a = kernel_add_arg(z->f, n->dtype, NUMEL(n), true);
    z->fb[a] = (cg_bind){CG_BIND_NODE, n->id, 0};
    return a;
}

/* The anchor's reductions and row limit, then every written value. */
static void build(fuser *z)
{
    kernel *f = z->f;
    if (z->anchor >= 0) {
        const kernel *ak = z->m[z->anchor].k;
        for (int j = 0; j < ak->nacc; j++) kernel_add_acc(f, ak->red[j], tr(z, z->anchor, ak->acc[j], NULL));
        if (ak->row_limit) f->row_limit = tr(z, z->anchor, ak->row_limit, NULL);
        const kout *o = &ak->out[0];
        kx *idx = tr(z, z->anchor, o->idx, NULL);
        z->anchor_val = tr(z, z->anchor, o->val, NULL);
        z->elem = ak->kind == KK_ROW && !o->per_row ? idx : NULL;
        if (z->m[z->anchor].written) {
            int a = output_arg(z, z->m[z->anchor].n);
            if (a >= 0) kernel_add_out(f, a, idx, z->anchor_val, o->per_row);
        }
    } else {
        z->elem = kx_idx(&z->b, 0);
    }
    int64_t elements = f->kind == KK_MAP ? f->n : f->n * f->cols;
    for (int i = 0; i < z->nm && !z->bad; i++) {
        fmember *mb = &z->m[i];
        if (i == z->anchor || !mb->written) continue;
        if (!z->elem || NUMEL(mb->n) != elements) {
            fail(z, mb->n, "it is read outside the group, and the kernel writes no element of its shape");
            return;
        }
        kx *v = value_at(z, i, z->elem);
        if (f->row_limit && !zero_with_anchor(z, v)) {
            fail(z, mb->n, "it is read outside the group, and the causal reduction writes zeros past each "
                           "row's limit where its value is not 0");
            return;
        }
        int a = output_arg(z, mb->n);
        if (a >= 0) kernel_add_out(f, a, z->elem, v, false);
    }
    /* A column reduction's loop stores its one output; none is dead code
     * (dce leaves none in a training graph). */
    if (!z->bad && f->nout == 0) fail(z, z->m[z->nm - 1].n, "nothing the group computes is read outside it");
}

/* The kernel's comment: what it computes, for readers of the generated C. */
static const char *group_comment(const fuser *z, arena *mem)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "fused kernel %d:", z->m[0].n->fuse);
    for (int i = 0; i < z->nm; i++) sb_printf(&sb, "%s %%%s = %s", i ? "," : "", z->m[i].n->name, ir_op_name(z->m[i].n->op));
    const char *s = arena_strdup(mem, sb.s);
    sb_free(&sb);
    return s;
}

bool cg_emit_fused(cg_program *p, const ir_graph *g, int first, int last, const bool *written, diag *d)
{
    fuser z = {.g = g, .nm = last - first + 1, .anchor = -1};
    z.m = xcalloc((size_t)z.nm, sizeof *z.m);
    z.scratch = xcalloc(1, sizeof *z.scratch);
    arena_init(&z.scratch->mem);
    z.scratch->master_slot = -1;
    for (int i = 0; i < z.nm; i++) z.m[i] = (fmember){.n = g->nodes[first + i], .written = written[first + i]};
    bool ok = emit_members(&z);
    if (ok) {
        for (int i = 0; i < z.nm && ok; i++)
            if (z.m[i].written && z.m[i].n->mem == IR_MEM_NONE) {
                diag_error(d, z.m[i].n->loc, "codegen: %%%s has no memory plan (run the memplan pass first)",
                           z.m[i].n->name);
                ok = false;
            }
    }
    if (ok) {
        mark_post(&z);
        const kernel *shape = z.anchor >= 0 ? z.m[z.anchor].k : z.m[z.nm - 1].k;
        cg_ctx c = {.p = p, .g = g, .n = g->nodes[last]};
        z.f = cg_kernel_bare(&c, shape->kind, shape->n, shape->cols);
        z.f->ctype = shape->ctype;
        z.f->comment = group_comment(&z, &p->mem);
        z.fb = p->binds[p->nkernels - 1];
        z.b = c.b;
        build(&z);
    }
    if (z.bad) {
        diag_error(d, z.bad->loc, "codegen: fused kernel %d cannot hold %%%s (%s): %s", z.bad->fuse, z.bad->name,
                   ir_op_name(z.bad->op), z.why);
        ok = false;
    }
    cg_program_free(z.scratch);
    free(z.m);
    return ok;
}
