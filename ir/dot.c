/* Graphviz output (`tgc dump-ir --format dot`, render with `dot -Tsvg`).
 *
 * One box per node labelled with its name, op and type; inputs are blue
 * ellipses, parameters yellow boxes, other leaves grey ellipses, collectives
 * purple hexagons, the loss a red octagon and outputs bold. Edges run from
 * operand to user, except into a node with more than DOT_MAX_FANIN operands
 * (the gradient norm and the optimizer update take every gradient and
 * parameter): its label gives the count instead, as hundreds of edges that
 * span the whole graph say nothing and make Graphviz take minutes. The
 * nodes of one block instance (the first two name segments, when the second
 * is a number: layers.3) share a cluster. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "support/util.h"

#define DOT_MAX_FANIN 16

/* Appends s for use inside a double-quoted DOT string. */
static void dot_escape(strbuf *b, const char *s)
{
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)c); }
        else if (c < 0x20 || c == 0x7f) sb_putc(b, ' ');
        else sb_putc(b, (char)c);
    }
}

/* Length of the cluster key of a name ("layers.3" of "layers.3.mlp.fc1"),
 * or 0 when the node belongs to no block instance. */
static size_t cluster_key_len(const char *name)
{
    if (!name) return 0;
    const char *dot = strchr(name, '.');
    if (!dot || dot == name) return 0;
    const char *p = dot + 1;
    size_t digits = strspn(p, "0123456789");
    if (!digits || (p[digits] != '.' && p[digits] != 0)) return 0;
    return (size_t)(p + digits - name);
}

static const char *node_style(const ir_node *n)
{
    unsigned opf = ir_op_get(n->op)->flags;
    if (n->flags & IR_NF_LOSS) return "shape=octagon, fillcolor=\"#ffa8a8\", penwidth=2";
    if (n->op == IR_OP_INPUT) return "shape=ellipse, fillcolor=\"#cfe2ff\"";
    if (n->op == IR_OP_PARAM) return "shape=box, style=filled, fillcolor=\"#fff3bf\"";
    if (opf & IR_OPF_LEAF) return "shape=ellipse, fillcolor=\"#e9ecef\"";
    if (opf & IR_OPF_COLLECTIVE) return "shape=hexagon, fillcolor=\"#e5dbff\"";
    return NULL;
}

static void put_dot_node(strbuf *b, const ir_node *n, const char *indent)
{
    char type[96];
    ir_type_str(n->dtype, &n->shape, type, sizeof type);
    sb_printf(b, "%sn%d [label=\"", indent, n->id);
    dot_escape(b, n->name);
    sb_puts(b, "\\n");
    dot_escape(b, ir_op_name(n->op));
    sb_puts(b, "\\n");
    dot_escape(b, type);
    if (n->nsrc > DOT_MAX_FANIN) sb_printf(b, "\\n(%d operands)", n->nsrc);
    sb_putc(b, '"');
    const char *style = node_style(n);
    if (style) sb_printf(b, ", %s", style);
    if ((n->flags & IR_NF_OUTPUT) && !(n->flags & IR_NF_LOSS)) sb_puts(b, ", penwidth=2");
    sb_puts(b, "];\n");
}

/* Groups nodes by cluster key in order of first appearance: cluster[i] is
 * node i's cluster (-1: none); first[c] / next[i] chain each cluster's nodes. */
typedef struct clusters {
    int *of, *next, *first, *last, count;
} clusters;

static void clusters_build(clusters *c, const ir_graph *g)
{
    int n = g->nnodes;
    c->of = xmalloc(((size_t)n + 1) * sizeof *c->of);
    c->next = xmalloc(((size_t)n + 1) * sizeof *c->next);
    c->first = xmalloc(((size_t)n + 1) * sizeof *c->first);
    c->last = xmalloc(((size_t)n + 1) * sizeof *c->last);
    c->count = 0;
    for (int i = 0; i < n; i++) {
        const char *name = g->nodes[i]->name;
        size_t len = cluster_key_len(name);
        c->of[i] = -1;
        c->next[i] = -1;
        if (!len) continue;
        int k = c->count - 1; /* block instances are mostly contiguous: try the latest first */
        const char *kname = k >= 0 ? g->nodes[c->first[k]]->name : NULL;
        if (!kname || cluster_key_len(kname) != len || memcmp(kname, name, len) != 0)
            for (k = 0; k < c->count; k++) {
                kname = g->nodes[c->first[k]]->name;
                if (cluster_key_len(kname) == len && memcmp(kname, name, len) == 0) break;
            }
        if (k == c->count) c->first[c->count++] = i;
        else c->next[c->last[k]] = i;
        c->last[k] = i;
        c->of[i] = k;
    }
}

static void clusters_free(clusters *c)
{
    free(c->of);
    free(c->next);
    free(c->first);
    free(c->last);
}

char *ir_graph_dot(const ir_graph *g)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "digraph \"");
    dot_escape(&b, g->model);
    sb_puts(&b, "\" {\n"
                "  graph [rankdir=TB, nslimit=1, fontname=\"Helvetica\", fontsize=11, nodesep=0.25, ranksep=0.35];\n"
                "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\", "
                "fontsize=9];\n"
                "  edge [arrowsize=0.6, color=\"#555555\"];\n");
    clusters c;
    clusters_build(&c, g);
    for (int k = 0; k < c.count; k++) {
        const char *name = g->nodes[c.first[k]]->name;
        size_t len = cluster_key_len(name);
        sb_puts(&b, "  subgraph \"cluster_");
        strbuf key;
        sb_init(&key);
        sb_putn(&key, name, len);
        dot_escape(&b, key.s);
        sb_puts(&b, "\" {\n    label=\"");
        dot_escape(&b, key.s);
        sb_puts(&b, "\"; style=\"rounded,dashed\"; color=\"#868e96\";\n");
        sb_free(&key);
        for (int i = c.first[k]; i >= 0; i = c.next[i]) put_dot_node(&b, g->nodes[i], "    ");
        sb_puts(&b, "  }\n");
    }
    for (int i = 0; i < g->nnodes; i++)
        if (c.of[i] < 0) put_dot_node(&b, g->nodes[i], "  ");
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        for (int s = 0; s < n->nsrc; s++)
            if (n->src[s] && n->nsrc <= DOT_MAX_FANIN) sb_printf(&b, "  n%d -> n%d;\n", n->src[s]->id, n->id);
    }
    sb_puts(&b, "}\n");
    clusters_free(&c);
    return b.s;
}
