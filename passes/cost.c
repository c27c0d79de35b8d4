/* The analytic models of cost.h and the measurements of a planned graph. */
#include "cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

static const char *const recompute_names[COST_RECOMPUTE_COUNT] = {"none", "selective", "full"};

const char *cost_recompute_name(cost_recompute r) { return recompute_names[r]; }

bool cost_recompute_from(const char *name, cost_recompute *out)
{
    for (int i = 0; i < COST_RECOMPUTE_COUNT; i++)
        if (strcmp(name, recompute_names[i]) == 0) {
            *out = (cost_recompute)i;
            return true;
        }
    return false;
}

static const ir_hparam *hparam(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nhparams; i++)
        if (strcmp(g->hparams[i].name, name) == 0 && !g->hparams[i].is_float) return &g->hparams[i];
    return NULL;
}

/* The index N of a name "layers.N.rest", or -1. */
static int layer_of(const char *name)
{
    if (strncmp(name, "layers.", 7) != 0) return -1;
    char *end;
    long v = strtol(name + 7, &end, 10);
    return end != name + 7 && *end == '.' && v >= 0 && v < (1 << 24) ? (int)v : -1;
}

bool cost_model_from_graph(const ir_graph *g, cost_model *m, char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    m->name = g->model;
    const char *need[] = {"hidden", "heads", "seq", "vocab"};
    int64_t *dst[] = {&m->h, &m->a, &m->s, &m->V};
    for (size_t i = 0; i < ARRAY_LEN(need); i++) {
        const ir_hparam *p = hparam(g, need[i]);
        if (!p || p->i <= 0) {
            snprintf(err, cap, "model '%s' has no positive integer hyperparameter '%s' (the analytic models read "
                     "layers, hidden, heads, seq and vocab)", g->model, need[i]);
            return false;
        }
        *dst[i] = p->i;
    }
    const ir_hparam *l = hparam(g, "layers"), *f = hparam(g, "ffn");
    m->l = g->num_layers > 0 ? g->num_layers : l ? l->i : 0;
    if (m->l <= 0) {
        snprintf(err, cap, "model '%s' has no transformer layers (a `for` loop of blocks, or hyperparameter "
                 "'layers')", g->model);
        return false;
    }
    m->ffn = f && f->i > 0 ? f->i : 4 * m->h;
    const ir_hparam *kv = hparam(g, "kv_heads");
    m->g = kv && kv->i > 0 ? kv->i : m->a;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        m->fused_attention |= n->op == IR_OP_ATTENTION;
        if (!(n->flags & IR_NF_PARAM)) continue;
        int64_t k = ir_shape_numel(&n->shape);
        m->params += k;
        if (layer_of(n->name) >= 0) m->layer_params += k;
    }
    return true;
}

/* ---- FLOPs ------------------------------------------------------------------ */

double tgc_model_flops(int64_t B, int64_t s, int64_t l, int64_t h, int64_t V, bool full_recompute)
{
    double Bd = (double)B, sd = (double)s, ld = (double)l, hd = (double)h, Vd = (double)V;
    double base = Bd * sd * ld * hd * hd;
    if (full_recompute) return 96.0 * base * (1.0 + sd / (6.0 * hd) + Vd / (16.0 * ld * hd));
    return 72.0 * base * (1.0 + sd / (6.0 * hd) + Vd / (12.0 * ld * hd));
}

double cost_train_flops(const cost_model *m, int64_t b, cost_recompute r)
{
    double bs = (double)b * (double)m->s, h = (double)m->h, s = (double)m->s, l = (double)m->l;
    double layer = 24.0 * bs * h * h + 4.0 * bs * s * h; /* one layer's forward (appendix, 2.3) */
    double head = 2.0 * bs * h * (double)m->V;           /* the LM head's forward */
    double f = 3.0 * (l * layer + head);                 /* forward + backward (2x) */
    if (r == COST_RECOMPUTE_FULL) f += l * layer;
    if (m->fused_attention) f += l * 2.0 * bs * s * h; /* attention_back recomputes q k^T */
    else if (r == COST_RECOMPUTE_SELECTIVE) f += l * 4.0 * bs * s * h;
    return f;
}

/* ---- activation memory ------------------------------------------------------------ */

double cost_act_layer(const cost_model *m, int64_t b, int64_t t, bool sp, cost_recompute r)
{
    double sbh = (double)m->s * (double)b * (double)m->h, td = (double)t;
    double core = 5.0 * (double)m->a * (double)m->s / (double)m->h; /* softmax out 2, mask 1, dropout out 2 */
    if (r == COST_RECOMPUTE_FULL) return sp ? 2.0 * sbh / td : 2.0 * sbh;
    if (r == COST_RECOMPUTE_SELECTIVE) core = 0.0;
    if (m->fused_attention) core = 4.0 * (double)m->a / (double)m->h; /* the f32 row log-sum-exp, kept */
    /* 10 sbh stay whole under TP without SP: the two norms' inputs (4), the
     * inputs of the QKV and first MLP GEMMs (4), the two dropout masks (2). */
    if (sp) return sbh * (34.0 + core) / td;
    return sbh * (10.0 + 24.0 / td + core / td);
}

double cost_act_layer_masks(const cost_model *m, int64_t b, int64_t t, bool sp, cost_recompute r)
{
    if (r == COST_RECOMPUTE_FULL) return 0.0;
    double sbh = (double)m->s * (double)b * (double)m->h, td = (double)t;
    double hidden = sp ? 2.0 * sbh / td : 2.0 * sbh; /* after attention and after the MLP */
    double core = r == COST_RECOMPUTE_SELECTIVE || m->fused_attention
                      ? 0.0 /* fused: the mask is drawn again in the backward, never stored */
                      : (double)m->a * (double)m->s * (double)m->s * (double)b / td;
    return hidden + core;
}

double cost_checkpoints(double l, double a_input, double a_intermediate)
{
    if (a_input <= 0.0) return l;
    return sqrt(l * a_intermediate / a_input);
}

double cost_checkpoint_memory(double c, double l, double a_input, double a_intermediate)
{
    return c * a_input + (l / c) * a_intermediate;
}

/* ---- measuring a planned graph ------------------------------------------------------ */

/* As memplan sizes it: the storage (16 bits under mixed precision, every
 * result of a multi-result op), 64-byte aligned. */
static int64_t bytes_of(const ir_graph *g, const ir_node *n)
{
    return (ir_node_storage_bytes(g, n) + 63) & ~(int64_t)63;
}

/* The value whose buffer n shares: a reshape placed on its operand, or a
 * result of a multi-result op placed inside its storage, is a view. */
static const ir_node *base_of(const ir_graph *g, const ir_node *n)
{
    for (;;) {
        const ir_node *x = n->nsrc > 0 ? n->src[0] : NULL;
        if (n->op == IR_OP_RESHAPE && x && n->mem == x->mem && n->mem_offset == x->mem_offset) n = x;
        else if (n->op == IR_OP_RESULT && x && n->mem == x->mem &&
                 n->mem_offset == x->mem_offset + ir_result_offset(g, x, (int)ir_attr_int(n, "index")))
            n = x;
        else return n;
    }
}

static bool is_buffer(const ir_graph *g, const ir_node *n) { return n->mem == IR_MEM_ACT && base_of(g, n) == n; }

/* last[i]: the position after which node i's buffer is free, as the memory
 * plan computes it (a fused kernel reads at the end of its run; outputs and
 * the loss stay to the end). */
static void last_uses(const ir_graph *g, int *last)
{
    int n = g->nnodes;
    int *run_end = xmalloc(((size_t)n + 1) * sizeof *run_end);
    ir_graph_fuse_runs(g, run_end, NULL);
    for (int i = 0; i < n; i++) last[i] = i;
    for (int i = 0; i < n; i++) {
        const ir_node *u = g->nodes[i], *self = base_of(g, u);
        if (u->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) last[self->id] = n;
        for (int k = 0; k < u->nsrc; k++) {
            const ir_node *b = base_of(g, u->src[k]);
            if (last[b->id] < run_end[i]) last[b->id] = run_end[i];
        }
        if (self != u && last[self->id] < last[u->id]) last[self->id] = last[u->id];
    }
    free(run_end);
}

static void live_peak(const ir_graph *g, const int *last, cost_plan_mem *out)
{
    int n = g->nnodes;
    int64_t *freed = xcalloc((size_t)n + 1, sizeof *freed), live = 0;
    for (int i = 0; i < n; i++) {
        const ir_node *v = g->nodes[i];
        if (is_buffer(g, v)) {
            live += bytes_of(g, v);
            freed[last[i] < n ? last[i] : n] += bytes_of(g, v);
            if (live > out->act_live_peak) {
                out->act_live_peak = live;
                out->peak_at = v;
            }
        }
        live -= freed[i];
    }
    free(freed);
}

static void add_by_op(cost_plan_mem *out, ir_op op, int64_t bytes)
{
    int k = 0;
    while (k < out->nops && out->by_op[k].op != op) k++;
    if (k == out->nops) {
        if (out->nops == COST_MAX_OPS) k = COST_MAX_OPS - 1; /* the rest share the last row */
        else out->by_op[out->nops++].op = op;
    }
    out->by_op[k].count++;
    out->by_op[k].bytes += bytes;
}

static int by_op_cmp(const void *a, const void *b)
{
    const cost_op_bytes *x = a, *y = b; /* largest first; ties in op order, so the listing is deterministic */
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return (int)x->op - (int)y->op;
}

/* Whether n's two last dims are both the sequence: an attention score.
 * Not a layout copy (a permuted Q, K or V, no FLOPs) nor fused attention's
 * output, which are [b, n, s, d] however d compares with s. */
static bool is_core(const ir_node *n, int64_t seq)
{
    if (n->op == IR_OP_ATTENTION || ir_node_flops(n) == 0) return false;
    int r = n->shape.rank;
    return seq > 0 && r >= 3 && n->shape.dim[r - 1] == seq && n->shape.dim[r - 2] == seq;
}

/* The forward values live past the loss (what the backward pass reads),
 * and layer 0's share. */
static void kept_values(const ir_graph *g, const int *last, int64_t seq, cost_plan_mem *out)
{
    const ir_node *loss = ir_graph_loss(g);
    if (!loss) return;
    for (int i = 0; i < loss->id; i++) {
        const ir_node *v = g->nodes[i];
        if (!is_buffer(g, v) || last[i] <= loss->id || (v->flags & (IR_NF_LOSS | IR_NF_OUTPUT))) continue;
        out->saved += bytes_of(g, v);
        if (layer_of(v->name) != 0) continue;
        out->layer_saved += bytes_of(g, v);
        if (is_core(v, seq)) out->layer_core += bytes_of(g, v);
        add_by_op(out, v->op, bytes_of(g, v));
    }
    qsort(out->by_op, (size_t)out->nops, sizeof out->by_op[0], by_op_cmp);
}

void cost_plan_measure(const ir_graph *g, int64_t seq, cost_plan_mem *out)
{
    memset(out, 0, sizeof *out);
    int *last = xmalloc(((size_t)g->nnodes + 1) * sizeof *last);
    last_uses(g, last);
    live_peak(g, last, out);
    kept_values(g, last, seq, out);
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *v = g->nodes[i];
        int layer = layer_of(v->name);
        if (layer + 1 > out->nlayers) out->nlayers = layer + 1;
        if ((v->flags & IR_NF_PARAM) && layer >= 0) out->layer_params += bytes_of(g, v);
        if (ir_op_get(v->op)->flags & IR_OPF_COLLECTIVE) {
            out->ncollectives++;
            if (v->mem == IR_MEM_ACT) out->collective_bytes += bytes_of(g, v);
        }
        /* Layer 0's input: the largest activation it reads from outside. */
        if (layer != 0 || (ir_op_get(v->op)->flags & IR_OPF_LEAF)) continue;
        for (int k = 0; k < v->nsrc; k++) {
            const ir_node *s = base_of(g, v->src[k]);
            if (layer_of(s->name) != 0 && s->mem == IR_MEM_ACT && ir_dtype_is_float(s->dtype) &&
                bytes_of(g, s) > out->layer_input) {
                out->layer_input = bytes_of(g, s);
                out->elem_bytes = ir_storage_size(g, s);
            }
        }
    }
    free(last);
}
