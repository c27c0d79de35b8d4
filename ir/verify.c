/* The IR verifier: every invariant a graph must keep between passes.
 *
 * Structure: ids equal positions, operands are nodes of the graph that come
 * before their user, arity and attributes follow ops.def, types are valid
 * and the op's shape rule reproduces them, names are unique and printable.
 * Flags: IR_NF_PARAM exactly on param nodes, IR_NF_INPUT exactly on input
 * nodes, no_decay only on parameters, at most one loss and it is a float
 * scalar. Annotations: shard dimension within the rank and a real group,
 * stage, chunk, bucket and fusion group -1 or more, a known phase; a value the memory plan placed
 * lies inside its buffer. A graph that passes prints to text that reads back
 * into an identical graph. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "support/util.h"

/* As READ_MAX_NUMEL in ir/read.c: the largest tensor the text form takes. */
#define VERIFY_MAX_NUMEL IR_MAX_NUMEL

typedef struct verifier {
    const ir_graph *g;
    diag *d;
    const char **names; /* open-addressing set of node names */
    size_t cap;
    bool *type_ok; /* by position: the node's own type is valid */
    const ir_node *loss, *seed;
    int p, v; /* the pipeline's stages and chunks, as the pp pass recorded them */
} verifier;

static void node_error(verifier *v, const ir_node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void node_error(verifier *v, const ir_node *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *name = n->name ? n->name : "<unnamed>";
    const char *op = (unsigned)n->op < IR_OP_COUNT ? ir_op_name(n->op) : "?";
    if (n->loc.file) diag_error(v->d, n->loc, "IR node '%%%s' (%s): %s", name, op, msg);
    else diag_error_plain(v->d, "IR node '%%%s' (%s): %s", name, op, msg);
}

/* Names as the text form spells them: [A-Za-z_][A-Za-z0-9_.]* */
static bool name_ok(const char *s)
{
    if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '.'))
            return false;
    return true;
}

/* Adds name to the set; false if it was there already. */
static bool names_add(verifier *v, const char *name)
{
    size_t i = hash_bytes(name, strlen(name), HASH_SEED) & (v->cap - 1);
    for (; v->names[i]; i = (i + 1) & (v->cap - 1))
        if (strcmp(v->names[i], name) == 0) return false;
    v->names[i] = name;
    return true;
}

static void check_graph_header(verifier *v)
{
    const ir_graph *g = v->g;
    if (!g->model) diag_error_plain(v->d, "IR graph has no model name");
    if (g->num_layers < 0) diag_error_plain(v->d, "IR graph has %d layers", g->num_layers);
    for (int m = 0; m < IR_MEM_COUNT; m++)
        if (g->mem_size[m] < 0 || (m == IR_MEM_NONE && g->mem_size[m] != 0))
            diag_error_plain(v->d, "IR graph has mem_size %s = %lld", ir_mem_name((ir_mem)m), (long long)g->mem_size[m]);
    for (int i = 0; i < g->nhparams; i++) {
        const char *name = g->hparams[i].name;
        if (!name_ok(name)) {
            diag_error_plain(v->d, "IR hyperparameter name '%s' is not an identifier", name ? name : "");
            continue;
        }
        for (int k = 0; k < i; k++)
            if (g->hparams[k].name && strcmp(g->hparams[k].name, name) == 0) {
                diag_error_plain(v->d, "IR hyperparameter '%s' is given twice", name);
                break;
            }
    }
}

/* dtype, rank, dimensions. */
static bool check_type(verifier *v, const ir_node *n)
{
    if ((unsigned)n->dtype >= IR_DTYPE_COUNT) {
        node_error(v, n, "invalid dtype %d", (int)n->dtype);
        return false;
    }
    if (n->shape.rank < 0 || n->shape.rank > IR_MAX_RANK) {
        node_error(v, n, "rank %d is out of range (0 to %d)", n->shape.rank, IR_MAX_RANK);
        return false;
    }
    int64_t numel = 1;
    for (int i = 0; i < n->shape.rank; i++) {
        int64_t dim = n->shape.dim[i];
        if (dim <= 0) {
            node_error(v, n, "dimension %d is %lld, must be positive", i, (long long)dim);
            return false;
        }
        if (numel > VERIFY_MAX_NUMEL / dim) {
            node_error(v, n, "tensor too large: more than 2^48 elements");
            return false;
        }
        numel *= dim;
    }
    return true;
}

static bool check_operands(verifier *v, const ir_node *n, int pos)
{
    const ir_op_info *info = ir_op_get(n->op);
    if (n->nsrc < info->min_src || n->nsrc > info->max_src) {
        if (info->min_src == info->max_src)
            node_error(v, n, "has %d operands, and '%s' takes %d", n->nsrc, info->name, info->min_src);
        else
            node_error(v, n, "has %d operands, and '%s' takes %d to %d", n->nsrc, info->name, info->min_src,
                       info->max_src);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < n->nsrc; i++) {
        const ir_node *s = n->src[i];
        if (!s) {
            node_error(v, n, "operand %d is NULL", i);
            ok = false;
        } else if (s->id < 0 || s->id >= v->g->nnodes || v->g->nodes[s->id] != s) {
            node_error(v, n, "operand %d ('%%%s') is not a node of this graph", i, s->name ? s->name : "");
            ok = false;
        } else if (s->id >= pos) {
            node_error(v, n, "operand %d ('%%%s', node %d) does not precede its user (node %d)", i,
                       s->name ? s->name : "", s->id, pos);
            ok = false;
        }
    }
    return ok;
}

static bool check_attrs(verifier *v, const ir_node *n)
{
    const ir_op_info *info = ir_op_get(n->op);
    bool ok = true;
    for (int i = 0; i < info->nattrs; i++) {
        const ir_attr_def *def = &info->attrs[i];
        const ir_attr_val *a = &n->attrs[i];
        if (!a->set) {
            node_error(v, n, "required attribute '%s' is not set", def->name);
            ok = false;
        } else if (def->kind == IR_ATTR_SYM && (a->i < 0 || a->i >= def->nsyms)) {
            node_error(v, n, "attribute '%s' has symbol index %lld, out of range", def->name, (long long)a->i);
            ok = false;
        } else if (def->kind == IR_ATTR_BOOL && a->i != 0 && a->i != 1) {
            node_error(v, n, "bool attribute '%s' holds %lld", def->name, (long long)a->i);
            ok = false;
        } else if (def->kind == IR_ATTR_INTS && (a->n < 0 || a->n > IR_MAX_INTS)) {
            node_error(v, n, "attribute '%s' holds %d values (at most %d)", def->name, a->n, IR_MAX_INTS);
            ok = false;
        }
    }
    return ok;
}

/* The backward's seed: one scalar `full` per graph. */
static void check_seed(verifier *v, const ir_node *n)
{
    if (v->seed)
        node_error(v, n, "a second seed (the first is '%%%s')", v->seed->name ? v->seed->name : "");
    else
        v->seed = n;
    if (n->op != IR_OP_FULL || n->shape.rank != 0) node_error(v, n, "the seed must be a scalar full");
}

static void check_flags(verifier *v, const ir_node *n)
{
    unsigned known = IR_NF_INPUT | IR_NF_PARAM | IR_NF_OUTPUT | IR_NF_LOSS | IR_NF_NO_DECAY | IR_NF_SEED;
    if (n->flags & ~known) node_error(v, n, "unknown flag bits 0x%x", n->flags & ~known);
    bool is_param = n->op == IR_OP_PARAM, is_input = n->op == IR_OP_INPUT;
    if (is_param != !!(n->flags & IR_NF_PARAM))
        node_error(v, n, is_param ? "a param node lacks the PARAM flag" : "the PARAM flag is set on a non-param node");
    if (is_input != !!(n->flags & IR_NF_INPUT))
        node_error(v, n, is_input ? "an input node lacks the INPUT flag" : "the INPUT flag is set on a non-input node");
    if ((n->flags & IR_NF_NO_DECAY) && !is_param) node_error(v, n, "no_decay is set on a node that is not a param");
    if (n->flags & IR_NF_SEED) check_seed(v, n);
    if (!(n->flags & IR_NF_LOSS)) return;
    if (v->loss)
        node_error(v, n, "a second loss (the first is '%%%s')", v->loss->name ? v->loss->name : "");
    else
        v->loss = n;
    if ((unsigned)n->dtype < IR_DTYPE_COUNT && (!ir_dtype_is_float(n->dtype) || n->shape.rank != 0))
        node_error(v, n, "the loss must be a floating-point scalar");
}

static void check_annotations(verifier *v, const ir_node *n)
{
    if (n->shard.dim < -1 || n->shard.dim >= n->shape.rank)
        node_error(v, n, "shard dimension %d is out of range for rank %d", n->shard.dim, n->shape.rank);
    else if (n->shard.dim >= 0 && n->shard.group != IR_GROUP_TP && n->shard.group != IR_GROUP_DP &&
             n->shard.group != IR_GROUP_PP)
        node_error(v, n, "shard of dimension %d names no group (tp, dp or pp)", n->shard.dim);
    if (n->stage < -1) node_error(v, n, "stage %d (must be -1 or more)", n->stage);
    else if (n->stage >= v->p)
        node_error(v, n, "stage %d, but the pp pass's record gives %d stage%s (passes ... pp(p=%d))", n->stage, v->p,
                   v->p == 1 ? "" : "s", v->p);
    if (n->chunk < -1) node_error(v, n, "chunk %d (must be -1 or more)", n->chunk);
    else if (n->chunk >= v->v)
        node_error(v, n, "chunk %d, but the pp pass's record gives %d model chunk%s per rank (passes ... pp(v=%d))",
                   n->chunk, v->v, v->v == 1 ? "" : "s", v->v);
    if ((unsigned)n->phase >= IR_PHASE_COUNT) node_error(v, n, "phase %d (not a phase)", (int)n->phase);
    if (n->bucket < -1) node_error(v, n, "bucket %d (must be -1 or more)", n->bucket);
    if (n->fuse < -1) node_error(v, n, "fusion group %d (must be -1 or more)", n->fuse);
    if (n->loc.file && (n->loc.line < 0 || n->loc.col < 0))
        node_error(v, n, "negative source position %d:%d", n->loc.line, n->loc.col);
}

/* A value the memory plan placed lies inside its buffer. */
static void check_mem(verifier *v, const ir_node *n)
{
    if (n->mem == IR_MEM_NONE) return;
    if ((unsigned)n->mem >= IR_MEM_COUNT) {
        node_error(v, n, "invalid buffer kind %d", (int)n->mem);
        return;
    }
    int64_t bytes = ir_shape_numel(&n->shape) * ir_storage_size(v->g, n), size = v->g->mem_size[n->mem];
    if (n->mem_offset < 0 || bytes > size || n->mem_offset > size - bytes)
        node_error(v, n, "%lld bytes at offset %lld do not fit in the %s buffer (%lld bytes)", (long long)bytes,
                   (long long)n->mem_offset, ir_mem_name(n->mem), (long long)size);
}

/* The op's shape rule, on a scratch copy, must give the node's type. */
static void check_shape_rule(verifier *v, const ir_node *n)
{
    ir_node tmp = *n;
    char err[512], have[96], want[96];
    if (!ir_op_get(n->op)->shape(&tmp, err, sizeof err)) {
        node_error(v, n, "%s", err);
        return;
    }
    if (tmp.dtype == n->dtype && ir_shape_eq(&tmp.shape, &n->shape)) return;
    ir_type_str(n->dtype, &n->shape, have, sizeof have);
    ir_type_str(tmp.dtype, &tmp.shape, want, sizeof want);
    node_error(v, n, "has type %s but its shape rule gives %s", have, want);
}

static void check_node(verifier *v, int pos)
{
    const ir_node *n = v->g->nodes[pos];
    if (!n) {
        diag_error_plain(v->d, "IR node %d is NULL", pos);
        return;
    }
    if (n->id != pos) node_error(v, n, "has id %d but sits at position %d", n->id, pos);
    if ((unsigned)n->op >= IR_OP_COUNT) {
        node_error(v, n, "invalid op %d", (int)n->op);
        return;
    }
    if (!name_ok(n->name))
        node_error(v, n, "the name is not of the form [A-Za-z_][A-Za-z0-9_.]*");
    else if (!names_add(v, n->name))
        node_error(v, n, "the name is used by an earlier node");
    bool type_ok = v->type_ok[pos] = check_type(v, n);
    bool src_ok = check_operands(v, n, pos);
    bool attrs_ok = check_attrs(v, n);
    check_flags(v, n);
    if (type_ok) {
        check_annotations(v, n);
        check_mem(v, n);
    }
    if (!type_ok || !src_ok || !attrs_ok) return;
    for (int i = 0; i < n->nsrc; i++)
        if (!v->type_ok[n->src[i]->id]) return; /* reported at the operand */
    check_shape_rule(v, n);
}

bool ir_graph_verify(const ir_graph *g, diag *d)
{
    int errors0 = d->nerrors;
    verifier v = {g, d, NULL, 16, NULL, NULL, NULL, 1, 1};
    ir_graph_pp_dims(g, &v.p, &v.v);
    while (v.cap < 2 * (size_t)g->nnodes + 2) v.cap *= 2;
    v.names = xcalloc(v.cap, sizeof *v.names);
    v.type_ok = xcalloc((size_t)g->nnodes + 1, sizeof *v.type_ok);
    check_graph_header(&v);
    for (int i = 0; i < g->nnodes; i++) check_node(&v, i);
    free(v.names);
    free(v.type_ok);
    return d->nerrors == errors0;
}
