/* The op table, attributes, nodes and graphs. */
#include "ir.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_internal.h"
#include "support/util.h"

/* ---- dtypes and shapes -------------------------------------------------- */

static const struct { const char *name; int size; } dtype_info[] = {
#define X(e, s, n) {s, n},
    IR_DTYPES(X)
#undef X
};

const char *ir_dtype_name(ir_dtype t) { return (unsigned)t < IR_DTYPE_COUNT ? dtype_info[t].name : "?"; }
int ir_dtype_size(ir_dtype t) { return (unsigned)t < IR_DTYPE_COUNT ? dtype_info[t].size : 0; }
bool ir_dtype_is_float(ir_dtype t) { return t == IR_F32 || t == IR_F16 || t == IR_BF16 || t == IR_F64; }

bool ir_dtype_lookup(const char *name, ir_dtype *out)
{
    for (int i = 0; i < IR_DTYPE_COUNT; i++)
        if (strcmp(dtype_info[i].name, name) == 0) { *out = (ir_dtype)i; return true; }
    return false;
}

int64_t ir_shape_numel(const ir_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->dim[i];
    return n;
}

bool ir_shape_numel_ok(const ir_shape *s, int64_t *numel)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] <= 0 || s->dim[i] > IR_MAX_NUMEL / n) return false;
        n *= s->dim[i];
    }
    if (numel) *numel = n;
    return true;
}

bool ir_shape_eq(const ir_shape *a, const ir_shape *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

void ir_type_str(ir_dtype t, const ir_shape *s, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "%s[", ir_dtype_name(t));
    for (int i = 0; i < s->rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

static const char *const mem_names[IR_MEM_COUNT] = {"none", "input", "param", "grad", "act", "stash", "cache"};

const char *ir_mem_name(ir_mem m) { return (unsigned)m < IR_MEM_COUNT ? mem_names[m] : "?"; }

bool ir_mem_lookup(const char *name, ir_mem *out)
{
    for (int i = 0; i < IR_MEM_COUNT; i++)
        if (strcmp(mem_names[i], name) == 0) { *out = (ir_mem)i; return true; }
    return false;
}

static const char *const phase_names[IR_PHASE_COUNT] = {"none", "begin", "fwd", "bwd", "end", "opt"};

const char *ir_phase_name(ir_phase p) { return (unsigned)p < IR_PHASE_COUNT ? phase_names[p] : "?"; }

bool ir_phase_lookup(const char *name, ir_phase *out)
{
    for (int i = 0; i < IR_PHASE_COUNT; i++)
        if (strcmp(phase_names[i], name) == 0) { *out = (ir_phase)i; return true; }
    return false;
}

/* ---- the op table ------------------------------------------------------- */

static ir_op_info op_table[IR_OP_COUNT] = {
#define NOGRAD
#define NOAXIS ir_axis_norule
#define OP(e, mn, lo, hi, attrs, shape, grad, flops, axis, flags) \
    [IR_OP_##e] = {mn, lo, hi, attrs, shape, flops, axis, flags, #grad, #axis, 0, NULL},
#include "ops.def"
#undef NOAXIS
#undef NOGRAD
};

/* Parses one `name:kind[=default]` item of an attribute spec. The specs
 * are ours (ops.def), so a malformed one is a programmer error. */
static void attr_def_parse(ir_attr_def *d, const char *item, size_t len)
{
    char buf[256];
    TGC_ASSERT(len < sizeof buf);
    memcpy(buf, item, len);
    buf[len] = 0;
    char *colon = strchr(buf, ':');
    TGC_ASSERT(colon);
    *colon = 0;
    d->name = xstrdup(buf);
    char *kind = colon + 1, *eq = NULL;
    if (kind[0] == '{') {
        char *close = strchr(kind, '}');
        TGC_ASSERT(close);
        eq = close[1] == '=' ? close + 1 : NULL;
        *close = 0;
        d->kind = IR_ATTR_SYM;
        for (char *s = strtok(kind + 1, "|"); s; s = strtok(NULL, "|")) {
            TGC_ASSERT(d->nsyms < IR_MAX_SYMS);
            d->syms[d->nsyms++] = xstrdup(s);
        }
    } else {
        eq = strchr(kind, '=');
        if (eq) *eq = 0;
        if (strcmp(kind, "int") == 0) d->kind = IR_ATTR_INT;
        else if (strcmp(kind, "float") == 0) d->kind = IR_ATTR_FLOAT;
        else if (strcmp(kind, "bool") == 0) d->kind = IR_ATTR_BOOL;
        else if (strcmp(kind, "ints") == 0) d->kind = IR_ATTR_INTS;
        else TGC_ASSERT(!"unknown attribute kind in ops.def");
    }
    if (!eq) return;
    const char *v = eq + 1;
    d->has_default = true;
    d->def.set = true;
    switch (d->kind) {
    case IR_ATTR_INT: TGC_ASSERT(parse_i64(v, &d->def.i)); break;
    case IR_ATTR_FLOAT: TGC_ASSERT(parse_double(v, &d->def.f)); break;
    case IR_ATTR_BOOL: d->def.i = strcmp(v, "true") == 0; break;
    case IR_ATTR_SYM:
        d->def.i = -1;
        for (int k = 0; k < d->nsyms; k++)
            if (strcmp(d->syms[k], v) == 0) d->def.i = k;
        TGC_ASSERT(d->def.i >= 0);
        break;
    case IR_ATTR_INTS: TGC_ASSERT(!"ints attributes take no default"); break;
    }
}

static void op_table_init(void)
{
    for (int op = 0; op < IR_OP_COUNT; op++) {
        ir_op_info *info = &op_table[op];
        const char *s = info->attr_spec;
        int count = 0;
        ir_attr_def *defs = xcalloc(16, sizeof *defs);
        while (*s) {
            while (*s == ' ') s++;
            if (!*s) break;
            size_t len = strcspn(s, " ");
            TGC_ASSERT(count < 16);
            attr_def_parse(&defs[count++], s, len);
            s += len;
        }
        info->nattrs = count;
        info->attrs = defs;
    }
}

static pthread_once_t op_table_once = PTHREAD_ONCE_INIT;

const ir_op_info *ir_op_get(ir_op op)
{
    TGC_ASSERT((unsigned)op < IR_OP_COUNT);
    pthread_once(&op_table_once, op_table_init);
    return &op_table[op];
}

const char *ir_op_name(ir_op op) { return ir_op_get(op)->name; }

bool ir_op_has(ir_op op, unsigned flags) { return (ir_op_get(op)->flags & flags) != 0; }

bool ir_node_is_update(const ir_node *n) { return ir_op_has(n->op, IR_OPF_UPDATE); }

const ir_node *ir_graph_seed(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->flags & IR_NF_SEED) return g->nodes[i];
    return NULL;
}

bool ir_op_lookup(const char *name, ir_op *out)
{
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (strcmp(op_table[op].name, name) == 0) { *out = (ir_op)op; return true; }
    return false;
}

int ir_op_attr_index(ir_op op, const char *name)
{
    const ir_op_info *info = ir_op_get(op);
    for (int i = 0; i < info->nattrs; i++)
        if (strcmp(info->attrs[i].name, name) == 0) return i;
    return -1;
}

/* ---- attributes --------------------------------------------------------- */

static int attr_slot(const ir_node *n, const char *name, ir_attr_kind kind)
{
    int i = ir_op_attr_index(n->op, name);
    if (i < 0 || ir_op_get(n->op)->attrs[i].kind != kind) {
        fprintf(stderr, "tgc: internal error: op '%s' has no %s attribute '%s'\n",
                ir_op_name(n->op), kind == IR_ATTR_SYM ? "symbol" : "such", name);
        abort();
    }
    return i;
}

int64_t ir_attr_int(const ir_node *n, const char *name) { return n->attrs[attr_slot(n, name, IR_ATTR_INT)].i; }
double ir_attr_float(const ir_node *n, const char *name) { return n->attrs[attr_slot(n, name, IR_ATTR_FLOAT)].f; }
bool ir_attr_bool(const ir_node *n, const char *name) { return n->attrs[attr_slot(n, name, IR_ATTR_BOOL)].i != 0; }

const char *ir_attr_sym(const ir_node *n, const char *name)
{
    int i = attr_slot(n, name, IR_ATTR_SYM);
    int64_t k = n->attrs[i].i;
    const ir_attr_def *d = &ir_op_get(n->op)->attrs[i];
    return k >= 0 && k < d->nsyms ? d->syms[k] : "";
}

const int64_t *ir_attr_ints(const ir_node *n, const char *name, int *count)
{
    const ir_attr_val *v = &n->attrs[attr_slot(n, name, IR_ATTR_INTS)];
    *count = v->n;
    return v->ints;
}

void ir_attr_set_int(ir_node *n, const char *name, int64_t v)
{
    ir_attr_val *a = &n->attrs[attr_slot(n, name, IR_ATTR_INT)];
    a->i = v;
    a->set = true;
}

void ir_attr_set_float(ir_node *n, const char *name, double v)
{
    ir_attr_val *a = &n->attrs[attr_slot(n, name, IR_ATTR_FLOAT)];
    a->f = v;
    a->set = true;
}

void ir_attr_set_bool(ir_node *n, const char *name, bool v)
{
    ir_attr_val *a = &n->attrs[attr_slot(n, name, IR_ATTR_BOOL)];
    a->i = v;
    a->set = true;
}

bool ir_attr_set_sym(ir_node *n, const char *name, const char *sym)
{
    int i = attr_slot(n, name, IR_ATTR_SYM);
    const ir_attr_def *d = &ir_op_get(n->op)->attrs[i];
    for (int k = 0; k < d->nsyms; k++)
        if (strcmp(d->syms[k], sym) == 0) {
            n->attrs[i].i = k;
            n->attrs[i].set = true;
            return true;
        }
    return false;
}

void ir_attr_set_ints(ir_node *n, const char *name, const int64_t *v, int count)
{
    ir_attr_val *a = &n->attrs[attr_slot(n, name, IR_ATTR_INTS)];
    TGC_ASSERT(count >= 0 && count <= IR_MAX_INTS);
    memcpy(a->ints, v, (size_t)count * sizeof *v);
    a->n = count;
    a->set = true;
}

/* ---- name and CSE maps: open addressing over node pointers --------------- */

struct ir_name_map { ir_node **slot; size_t cap, count; };
struct ir_cse_map { ir_node **slot; size_t cap, count; };

static uint64_t hash_str(const char *s) { return hash_bytes(s, strlen(s), HASH_SEED); }

static void name_map_put(ir_name_map *m, ir_node *n);

static void name_map_grow(ir_name_map *m)
{
    ir_node **old = m->slot;
    size_t oldcap = m->cap;
    m->cap = oldcap ? oldcap * 2 : 256;
    m->slot = xcalloc(m->cap, sizeof *m->slot);
    m->count = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i]) name_map_put(m, old[i]);
    free(old);
}

static void name_map_put(ir_name_map *m, ir_node *n)
{
    if ((m->count + 1) * 2 > m->cap) name_map_grow(m);
    size_t i = hash_str(n->name) & (m->cap - 1);
    while (m->slot[i]) i = (i + 1) & (m->cap - 1);
    m->slot[i] = n;
    m->count++;
}

ir_node *ir_graph_find(const ir_graph *g, const char *name)
{
    const ir_name_map *m = g->names;
    if (!m->cap) return NULL;
    size_t i = hash_str(name) & (m->cap - 1);
    for (; m->slot[i]; i = (i + 1) & (m->cap - 1))
        if (strcmp(m->slot[i]->name, name) == 0) return m->slot[i];
    return NULL;
}

static uint64_t cse_hash(const ir_node *n)
{
    uint64_t h = hash_u64((uint64_t)n->op, HASH_SEED);
    for (int i = 0; i < n->nsrc; i++) h = hash_u64((uint64_t)n->src[i]->id, h);
    const ir_op_info *info = ir_op_get(n->op);
    for (int i = 0; i < info->nattrs; i++) {
        const ir_attr_val *a = &n->attrs[i];
        h = hash_u64((uint64_t)a->i, h);
        h = hash_bytes(&a->f, sizeof a->f, h);
        h = hash_bytes(a->ints, (size_t)a->n * sizeof a->ints[0], h);
    }
    return h;
}

static bool cse_equal(const ir_node *a, const ir_node *b)
{
    if (a->op != b->op || a->nsrc != b->nsrc || a->dtype != b->dtype) return false;
    for (int i = 0; i < a->nsrc; i++)
        if (a->src[i] != b->src[i]) return false;
    const ir_op_info *info = ir_op_get(a->op);
    for (int i = 0; i < info->nattrs; i++) {
        const ir_attr_val *x = &a->attrs[i], *y = &b->attrs[i];
        if (x->i != y->i || x->f != y->f || x->n != y->n ||
            memcmp(x->ints, y->ints, (size_t)x->n * sizeof x->ints[0]) != 0)
            return false;
    }
    return true;
}

static void cse_put(ir_cse_map *m, ir_node *n);

static void cse_grow(ir_cse_map *m)
{
    ir_node **old = m->slot;
    size_t oldcap = m->cap;
    m->cap = oldcap ? oldcap * 2 : 256;
    m->slot = xcalloc(m->cap, sizeof *m->slot);
    m->count = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i]) cse_put(m, old[i]);
    free(old);
}

static void cse_put(ir_cse_map *m, ir_node *n)
{
    if ((m->count + 1) * 2 > m->cap) cse_grow(m);
    size_t i = cse_hash(n) & (m->cap - 1);
    while (m->slot[i]) i = (i + 1) & (m->cap - 1);
    m->slot[i] = n;
    m->count++;
}

static ir_node *cse_find(const ir_cse_map *m, const ir_node *n)
{
    if (!m->cap) return NULL;
    size_t i = cse_hash(n) & (m->cap - 1);
    for (; m->slot[i]; i = (i + 1) & (m->cap - 1))
        if (cse_equal(m->slot[i], n)) return m->slot[i];
    return NULL;
}

static bool op_is_pure(ir_op op)
{
    unsigned f = ir_op_get(op)->flags;
    return !(f & (IR_OPF_LEAF | IR_OPF_SIDE_EFFECT | IR_OPF_COLLECTIVE));
}

/* ---- graphs and nodes --------------------------------------------------- */

ir_graph *ir_graph_new(const char *model)
{
    ir_graph *g = xcalloc(1, sizeof *g);
    arena_init(&g->mem);
    g->model = arena_strdup(&g->mem, model ? model : "model");
    g->precision = IR_F32;
    g->names = xcalloc(1, sizeof *g->names);
    g->cse_map = xcalloc(1, sizeof *g->cse_map);
    return g;
}

void ir_graph_free(ir_graph *g)
{
    if (!g) return;
    free(g->nodes);
    free(g->hparams);
    free(g->names->slot);
    free(g->names);
    free(g->cse_map->slot);
    free(g->cse_map);
    arena_free(&g->mem);
    free(g);
}

void ir_graph_add_hparam(ir_graph *g, const char *name, bool is_float, int64_t i, double f)
{
    if (g->nhparams == g->hcap) {
        g->hcap = g->hcap ? g->hcap * 2 : 16;
        g->hparams = xrealloc(g->hparams, (size_t)g->hcap * sizeof *g->hparams);
    }
    g->hparams[g->nhparams++] = (ir_hparam){arena_strdup(&g->mem, name), is_float, i, f};
}

ir_node *ir_node_alloc(ir_graph *g, ir_op op, int nsrc)
{
    const ir_op_info *info = ir_op_get(op);
    ir_node *n = arena_alloc(&g->mem, sizeof *n);
    n->id = -1;
    n->op = op;
    n->nsrc = nsrc;
    n->src = nsrc ? arena_alloc(&g->mem, (size_t)nsrc * sizeof *n->src) : NULL;
    n->attrs = arena_alloc(&g->mem, (size_t)(info->nattrs ? info->nattrs : 1) * sizeof *n->attrs);
    for (int i = 0; i < info->nattrs; i++)
        if (info->attrs[i].has_default) n->attrs[i] = info->attrs[i].def;
    n->shard.dim = -1;
    n->stage = -1;
    n->chunk = -1;
    n->fuse = -1;
    n->bucket = -1;
    return n;
}

static void graph_push(ir_graph *g, ir_node *n)
{
    if (g->nnodes == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        g->nodes = xrealloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
    }
    n->id = g->nnodes;
    g->nodes[g->nnodes++] = n;
    name_map_put(g->names, n);
}

bool ir_graph_append_raw(ir_graph *g, ir_node *n)
{
    if (!n->name || ir_graph_find(g, n->name)) return false;
    graph_push(g, n);
    return true;
}

static const char *unique_name(ir_graph *g, const char *base)
{
    if (!ir_graph_find(g, base)) return arena_strdup(&g->mem, base);
    for (int k = 1;; k++) {
        char *s = arena_printf(&g->mem, "%s.%d", base, k);
        if (!ir_graph_find(g, s)) return s;
    }
}

/* loc with its file name in g's arena (see ir_graph.loc_file). Compared
 * by content: a name of another graph may be gone and its address reused. */
static src_loc graph_loc(ir_graph *g, src_loc loc)
{
    if (!loc.file) return loc;
    if (!g->loc_file || (loc.file != g->loc_file && strcmp(loc.file, g->loc_file) != 0))
        g->loc_file = arena_strdup(&g->mem, loc.file);
    loc.file = g->loc_file;
    return loc;
}

ir_node *ir_node_begin(ir_graph *g, ir_op op, int nsrc, ir_node *const *src, src_loc loc)
{
    ir_node *n = ir_node_alloc(g, op, nsrc);
    for (int i = 0; i < nsrc; i++) {
        TGC_ASSERT(src[i] && src[i]->id >= 0);
        n->src[i] = src[i];
    }
    n->loc = graph_loc(g, loc);
    return n;
}

ir_node *ir_node_end(ir_graph *g, ir_node *n, const char *name, char *err, size_t errlen)
{
    const ir_op_info *info = ir_op_get(n->op);
    TGC_ASSERT(n->nsrc >= info->min_src && n->nsrc <= info->max_src);
    for (int i = 0; i < info->nattrs; i++)
        if (!n->attrs[i].set) {
            snprintf(err, errlen, "%s: missing attribute '%s'", info->name, info->attrs[i].name);
            return NULL;
        }
    if (!info->shape(n, err, errlen)) return NULL;
    if (!ir_shape_numel_ok(&n->shape, NULL)) {
        snprintf(err, errlen, "%s: the result would have more than 2^48 elements", info->name);
        return NULL;
    }
    if (g->cse && op_is_pure(n->op)) {
        ir_node *same = cse_find(g->cse_map, n);
        if (same) return same;
    }
    n->name = unique_name(g, name && *name ? name : info->name);
    graph_push(g, n);
    if (g->cse && op_is_pure(n->op)) cse_put(g->cse_map, n);
    return n;
}

ir_node *ir_leaf_new(ir_graph *g, ir_op op, const char *name, ir_dtype t,
                     const ir_shape *shape, src_loc loc)
{
    TGC_ASSERT(ir_op_get(op)->flags & IR_OPF_LEAF);
    if (ir_graph_find(g, name)) return NULL;
    ir_node *n = ir_node_alloc(g, op, 0);
    n->dtype = t;
    n->shape = *shape;
    n->loc = graph_loc(g, loc);
    n->name = arena_strdup(&g->mem, name);
    if (op == IR_OP_INPUT) n->flags |= IR_NF_INPUT;
    if (op == IR_OP_PARAM) n->flags |= IR_NF_PARAM;
    graph_push(g, n);
    return n;
}

void ir_graph_renumber(ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) g->nodes[i]->id = i;
}

/* ---- model facts -------------------------------------------------------- */

int64_t ir_node_flops(const ir_node *n) { return ir_op_get(n->op)->flops(n); }

int64_t ir_graph_tokens(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if ((n->flags & IR_NF_INPUT) && !ir_dtype_is_float(n->dtype)) return ir_shape_numel(&n->shape);
    }
    return 0;
}

const ir_node *ir_graph_loss(const ir_graph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->flags & IR_NF_LOSS) return g->nodes[i];
    return NULL;
}

const char *ir_graph_untrainable(const ir_graph *g)
{
    if (!ir_graph_loss(g)) return "has no loss: nothing to train (add `minimize NAME`)";
    if (ir_graph_param_count(g) == 0) return "has no parameters: nothing to train (declare one with `param`)";
    return NULL;
}

/* ---- rewriting ---------------------------------------------------------- */

static void maps_rebuild(ir_graph *g)
{
    free(g->names->slot);
    memset(g->names, 0, sizeof *g->names);
    free(g->cse_map->slot);
    memset(g->cse_map, 0, sizeof *g->cse_map);
    for (int i = 0; i < g->nnodes; i++) {
        name_map_put(g->names, g->nodes[i]);
        if (g->cse && op_is_pure(g->nodes[i]->op)) cse_put(g->cse_map, g->nodes[i]);
    }
}

void ir_graph_compact(ir_graph *g, const bool *keep)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (!keep[i]) continue;
        g->nodes[k] = g->nodes[i];
        g->nodes[k]->id = k;
        k++;
    }
    g->nnodes = k;
    maps_rebuild(g);
}

ir_graph *ir_graph_new_like(const ir_graph *g)
{
    ir_graph *h = ir_graph_new(g->model);
    for (int i = 0; i < g->nhparams; i++)
        ir_graph_add_hparam(h, g->hparams[i].name, g->hparams[i].is_float, g->hparams[i].i, g->hparams[i].f);
    h->num_layers = g->num_layers;
    h->precision = g->precision;
    for (int i = 0; i < g->npasses_run; i++) ir_graph_pass_record(h, g->passes_run[i], g->passes_args[i]);
    return h;
}

bool ir_graph_pass_ran(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->npasses_run; i++)
        if (strcmp(g->passes_run[i], name) == 0) return true;
    return false;
}

void ir_graph_pass_record(ir_graph *g, const char *name, const char *args)
{
    TGC_ASSERT(g->npasses_run < IR_MAX_PASSES && !ir_graph_pass_ran(g, name));
    g->passes_args[g->npasses_run] = args ? arena_strdup(&g->mem, args) : NULL;
    g->passes_run[g->npasses_run++] = name;
}

const char *ir_graph_pass_args(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->npasses_run; i++)
        if (strcmp(g->passes_run[i], name) == 0) return g->passes_args[i];
    return NULL;
}

const ir_pass_key ir_pass_keys[] = {
#define PASS_OPT(pass, key, kind, field, choices) {#pass, #key, IR_PKEY_##kind, choices},
#include "passes/pass_record.def"
};
const int ir_pass_nkeys = (int)ARRAY_LEN(ir_pass_keys);

bool ir_pass_choice(const char *choices, int i, strbuf *out)
{
    const char *w = choices;
    for (; i > 0 && w; i--) {
        w = strchr(w, '|');
        if (w) w++;
    }
    if (!w) return false;
    const char *bar = strchr(w, '|');
    sb_putn(out, w, bar ? (size_t)(bar - w) : strlen(w));
    return true;
}

void ir_pass_set_write(const char *choices, unsigned bits, strbuf *out)
{
    int nwords = 1;
    for (const char *c = choices; *c; c++) nwords += *c == '|';
    unsigned all = (1u << nwords) - 1;
    bits &= all;
    if (bits == 0 || bits == all) {
        sb_puts(out, bits ? "all" : "none");
        return;
    }
    for (int i = 0, n = 0; i < nwords; i++)
        if (bits & (1u << i)) {
            if (n++) sb_putc(out, '+');
            ir_pass_choice(choices, i, out);
        }
}

/* The end of a value at s: past a quoted string's closing quote, or at
 * the next space. */
static const char *args_value_end(const char *s)
{
    if (*s != '"') return s + strcspn(s, " ");
    for (s++; *s && *s != '"'; s++)
        if (*s == '\\' && s[1]) s++;
    return *s ? s + 1 : s;
}

bool ir_pass_args_value(const char *args, const char *key, strbuf *out)
{
    size_t klen = strlen(key);
    for (const char *s = args; s && *s;) {
        const char *eq = strchr(s, '='), *end;
        if (!eq) return false;
        end = args_value_end(eq + 1);
        if ((size_t)(eq - s) == klen && memcmp(s, key, klen) == 0) {
            sb_putn(out, eq + 1, (size_t)(end - eq - 1));
            return true;
        }
        s = *end ? end + 1 : end;
    }
    return false;
}

void ir_graph_swap(ir_graph *a, ir_graph *b)
{
    ir_graph t = *a;
    *a = *b;
    *b = t;
}
