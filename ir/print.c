/* The text form of the IR (docs/ir.md): one instruction per line,
 *
 *   %NAME = OP(%a, %b) attr=value ... : DTYPE[d0, d1] flags... loc("FILE":L:C)
 *
 * Output is a pure function of the graph (no pointers, no timestamps), and
 * ir_graph_read gives back a graph that prints identically. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "support/util.h"

static void put_type(strbuf *b, ir_dtype t, const ir_shape *s)
{
    sb_puts(b, ir_dtype_name(t));
    sb_putc(b, '[');
    for (int i = 0; i < s->rank; i++) sb_printf(b, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    sb_putc(b, ']');
}

/* Floats compare by their bits, so that only a value the reader turns back
 * into the very same double is left out as the default (not -0.0 for 0.0). */
static bool attr_is_default(const ir_attr_def *d, const ir_attr_val *v)
{
    if (!d->has_default || !v->set) return false;
    switch (d->kind) {
    case IR_ATTR_FLOAT: return memcmp(&v->f, &d->def.f, sizeof v->f) == 0;
    case IR_ATTR_INTS: return false;
    default: return v->i == d->def.i;
    }
}

static void put_attr_value(strbuf *b, const ir_attr_def *d, const ir_attr_val *v)
{
    switch (d->kind) {
    case IR_ATTR_INT: sb_printf(b, "%lld", (long long)v->i); break;
    case IR_ATTR_FLOAT: sb_put_double(b, v->f); break;
    case IR_ATTR_BOOL: sb_puts(b, v->i ? "true" : "false"); break;
    case IR_ATTR_SYM:
        /* An out-of-range index is invalid IR (the verifier says so); print
         * something that cannot be mistaken for a symbol. */
        sb_puts(b, v->i >= 0 && v->i < d->nsyms ? d->syms[v->i] : "<invalid>");
        break;
    case IR_ATTR_INTS:
        sb_putc(b, '[');
        for (int k = 0; k < v->n && k < IR_MAX_INTS; k++)
            sb_printf(b, "%s%lld", k ? ", " : "", (long long)v->ints[k]);
        sb_putc(b, ']');
        break;
    }
}

static const char *group_name(int g)
{
    switch (g) {
    case IR_GROUP_TP: return "tp";
    case IR_GROUP_DP: return "dp";
    case IR_GROUP_PP: return "pp";
    default: return "none";
    }
}

static void put_annotations(strbuf *b, const ir_node *n)
{
    if (n->flags & IR_NF_OUTPUT) sb_puts(b, " output");
    if (n->flags & IR_NF_LOSS) sb_puts(b, " loss");
    if (n->flags & IR_NF_NO_DECAY) sb_puts(b, " no_decay");
    if (n->flags & IR_NF_SEED) sb_puts(b, " seed");
    if (n->shard.dim >= 0) sb_printf(b, " shard(%d, %s)", n->shard.dim, group_name(n->shard.group));
    if (n->stage >= 0) sb_printf(b, " stage(%d)", n->stage);
    if (n->chunk >= 0) sb_printf(b, " chunk(%d)", n->chunk);
    if (n->phase != IR_PHASE_NONE) sb_printf(b, " phase(%s)", ir_phase_name(n->phase));
    if (n->bucket >= 0) sb_printf(b, " bucket(%d)", n->bucket);
    if (n->fuse >= 0) sb_printf(b, " fuse(%d)", n->fuse);
    if (n->mem != IR_MEM_NONE) sb_printf(b, " mem(%s, %lld)", ir_mem_name(n->mem), (long long)n->mem_offset);
    if (n->loc.file) {
        sb_puts(b, " loc(");
        sb_put_quoted(b, n->loc.file);
        sb_printf(b, ":%d:%d)", n->loc.line, n->loc.col);
    }
}

static void put_node(strbuf *b, const ir_node *n)
{
    const ir_op_info *info = ir_op_get(n->op);
    sb_printf(b, "%%%s = %s", n->name ? n->name : "<unnamed>", info->name);
    if (n->nsrc > 0) {
        sb_putc(b, '(');
        for (int i = 0; i < n->nsrc; i++) {
            const ir_node *s = n->src[i];
            sb_printf(b, "%s%%%s", i ? ", " : "", s && s->name ? s->name : "<null>");
        }
        sb_putc(b, ')');
    }
    for (int i = 0; i < info->nattrs; i++) {
        const ir_attr_def *d = &info->attrs[i];
        const ir_attr_val *v = &n->attrs[i];
        if (!v->set || attr_is_default(d, v)) continue;
        sb_printf(b, " %s=", d->name);
        put_attr_value(b, d, v);
    }
    sb_puts(b, " : ");
    put_type(b, n->dtype, &n->shape);
    put_annotations(b, n);
    sb_putc(b, '\n');
}

/* Before the first node of a fused kernel (a run of nodes with the same
 * fuse(N)), a comment says what the kernel computes and which of its values
 * it writes to memory; the others never leave registers. The reader skips
 * comments and the printer derives them from the nodes, so print -> read ->
 * print stays identical. */
static void put_group_comment(strbuf *b, const ir_graph *g, int first, int last, const bool *outside)
{
    int id = g->nodes[first]->fuse;
    sb_printf(b, "# fused kernel %d: %d ops:", id, last - first + 1);
    for (int i = first; i <= last; i++) sb_printf(b, "%s %s", i > first ? "," : "", ir_op_name(g->nodes[i]->op));
    sb_puts(b, "; writes");
    int written = 0;
    for (int i = first; i <= last; i++)
        if (outside[i]) sb_printf(b, "%s %%%s", written++ ? "," : "", g->nodes[i]->name);
    if (!written) sb_puts(b, " nothing");
    sb_putc(b, '\n');
}

char *ir_graph_print(const ir_graph *g)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "tgc-ir 1\nmodel ");
    sb_put_quoted(&b, g->model ? g->model : "");
    sb_putc(&b, '\n');
    for (int i = 0; i < g->nhparams; i++) {
        const ir_hparam *h = &g->hparams[i];
        sb_printf(&b, "hparam %s = ", h->name ? h->name : "<unnamed>");
        if (h->is_float) sb_put_double(&b, h->f);
        else sb_printf(&b, "%lld", (long long)h->i);
        sb_putc(&b, '\n');
    }
    sb_printf(&b, "num_layers %d\n", g->num_layers);
    if (g->precision != IR_F32) sb_printf(&b, "precision %s\n", ir_dtype_name(g->precision));
    if (g->npasses_run) {
        sb_puts(&b, "passes");
        for (int i = 0; i < g->npasses_run; i++) {
            sb_printf(&b, "%s %s", i ? "," : "", g->passes_run[i]);
            if (g->passes_args[i]) sb_printf(&b, "(%s)", g->passes_args[i]);
        }
        sb_putc(&b, '\n');
    }
    for (int m = IR_MEM_NONE + 1; m < IR_MEM_COUNT; m++)
        if (g->mem_size[m]) sb_printf(&b, "mem_size %s = %lld\n", ir_mem_name((ir_mem)m), (long long)g->mem_size[m]);
    /* outside[i]: node i's value leaves its fused kernel (ir_graph_fuse_runs). */
    bool *outside = NULL;
    int *end = NULL;
    for (int i = 0; i < g->nnodes && !outside; i++)
        if (g->nodes[i]->fuse >= 0) {
            outside = xmalloc((size_t)g->nnodes * sizeof *outside);
            end = xmalloc((size_t)g->nnodes * sizeof *end);
            ir_graph_fuse_runs(g, end, outside);
        }
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (outside && n->fuse >= 0 && (i == 0 || g->nodes[i - 1]->fuse != n->fuse))
            put_group_comment(&b, g, i, end[i], outside);
        put_node(&b, n);
    }
    free(outside);
    free(end);
    return b.s;
}
