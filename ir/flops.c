/* Forward FLOP counts per op (multiply-add = 2 FLOPs). GEMMs dominate and
 * are exact; the constants for pointwise math are conventional estimates. */
#include <stdio.h>
#include <stdlib.h>

#include "ir_internal.h"
#include "support/util.h"

/* ---- the forward of a graph --------------------------------------------- */

/* Where the forward ends: at the backward's seed, the node autodiff emits
 * first and flags `seed` (every node after it is backward, recomputation or
 * the update), or at the end of a graph without one. */
static int forward_end(const ir_graph *g)
{
    const ir_node *s = ir_graph_seed(g);
    return s ? s->id : g->nnodes;
}

/* The degree has one source: the tp pass's record, tp(t=N) (the reader
 * checked it is a non-negative integer); the graph is never scanned for it. */
static int64_t recorded(const ir_graph *g, const char *pass, const char *key)
{
    const char *args = ir_graph_pass_args(g, pass);
    strbuf v;
    sb_init(&v);
    int64_t x = args && ir_pass_args_value(args, key, &v) ? strtoll(v.s, NULL, 10) : 1;
    sb_free(&v);
    return x > 1 ? x : 1;
}

int64_t ir_graph_tp_size(const ir_graph *g) { return recorded(g, "tp", "t"); }

/* Likewise p and v: the pp pass's record, pp(p=P v=V ...), v as the pass
 * resolved it (from --num-layers-per-virtual-pipeline-stage too). */
void ir_graph_pp_dims(const ir_graph *g, int *p, int *v)
{
    *p = (int)recorded(g, "pp", "p");
    *v = (int)recorded(g, "pp", "v");
}

static bool tp_split(const ir_node *n) { return n->shard.dim >= 0 && n->shard.group == IR_GROUP_TP; }

/* How many of a rank's copies of n make up the model's: t when n's work is
 * split over the TP ranks (its value or an operand is a TP shard), else 1
 * (a replicated op, which every rank computes alike). */
static int64_t model_copies(const ir_node *n, int64_t t)
{
    bool split = tp_split(n);
    for (int k = 0; !split && k < n->nsrc; k++) split = tp_split(n->src[k]);
    return split ? t : 1;
}

int64_t ir_graph_param_count(const ir_graph *g)
{
    int64_t total = 0, t = ir_graph_tp_size(g);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->flags & IR_NF_PARAM) total += ir_shape_numel(&g->nodes[i]->shape) * model_copies(g->nodes[i], t);
    return total;
}

/* The FLOPs of the model's forward, whatever passes the graph went
 * through: the nodes before the backward that the loss or a forward
 * output reads (what dce keeps of the forward; a graph with neither keeps
 * everything). Fused forward ops count as what they replace, so the IR
 * after autodiff, dce, fuse or the optimizer gives the figure of the
 * lowered model; the graph of one TP rank counts its split ops t times. */
int64_t ir_graph_forward_flops(const ir_graph *g)
{
    int64_t t = ir_graph_tp_size(g);
    int end = forward_end(g);
    bool *live = xcalloc((size_t)end + 1, sizeof *live), any_root = false;
    for (int i = end - 1; i >= 0; i--) {
        const ir_node *n = g->nodes[i];
        if (n->flags & (IR_NF_LOSS | IR_NF_OUTPUT)) live[i] = any_root = true;
    }
    int64_t total = 0;
    for (int i = end - 1; i >= 0; i--) {
        const ir_node *n = g->nodes[i];
        if (any_root && !live[i]) continue;
        for (int k = 0; k < n->nsrc; k++) live[n->src[k]->id] = true;
        double f = (double)ir_node_flops(n) * (double)model_copies(n, t);
        total = f >= (double)(INT64_MAX - total) ? INT64_MAX : total + (int64_t)f;
    }
    free(live);
    return total;
}

/* ---- per op --------------------------------------------------------------- */

static int64_t numel(const ir_node *n) { return ir_shape_numel(&n->shape); }

/* Products of up to three 2^48-bounded sizes: computed in double and
 * saturated, so no shape can overflow a count. */
static int64_t sat(double v) { return v >= 9.2e18 ? INT64_MAX : (int64_t)v; }

int64_t flops_zero(const ir_node *n) { (void)n; return 0; }
int64_t flops_ew1(const ir_node *n) { return n->shape.rank ? numel(n) : ir_shape_numel(&n->src[0]->shape); }
int64_t flops_gelu(const ir_node *n) { return 8 * numel(n); }
int64_t flops_silu(const ir_node *n) { return 4 * numel(n); }
int64_t flops_swiglu(const ir_node *n) { return 5 * numel(n); }
int64_t flops_softmax(const ir_node *n) { return 5 * numel(n); }
int64_t flops_rope(const ir_node *n) { return 3 * numel(n); }
int64_t flops_layernorm(const ir_node *n) { return 8 * numel(n); }
int64_t flops_rmsnorm(const ir_node *n) { return 5 * numel(n); }
int64_t flops_cross_entropy(const ir_node *n) { return 4 * ir_shape_numel(&n->src[0]->shape); }

int64_t flops_linear(const ir_node *n)
{
    const ir_node *w = n->src[1];
    double rows = (double)numel(n) / (double)w->shape.dim[0];
    double f = 2.0 * rows * (double)w->shape.dim[0] * (double)w->shape.dim[1];
    if (n->nsrc == 3) f += (double)numel(n);
    return sat(f);
}

int64_t flops_bmm(const ir_node *n)
{
    const ir_node *a = n->src[0];
    int r = a->shape.rank;
    int64_t k = ir_attr_bool(n, "transpose_a") ? a->shape.dim[r - 2] : a->shape.dim[r - 1];
    return sat(2.0 * (double)numel(n) * (double)k);
}

int64_t flops_ew1_src(const ir_node *n) { return ir_shape_numel(&n->src[0]->shape); }
/* repeats - 1 adds per result element. */
int64_t flops_repeat_interleave_back(const ir_node *n)
{
    return numel(n) * (ir_attr_int(n, "repeats") - 1);
}
int64_t flops_ew1_src1(const ir_node *n) { return ir_shape_numel(&n->src[1]->shape); }
int64_t flops_layernorm_dw(const ir_node *n) { return 4 * ir_shape_numel(&n->src[0]->shape); }
int64_t flops_cross_entropy_back(const ir_node *n) { return 4 * numel(n); }

int64_t flops_matmul(const ir_node *n)
{
    const ir_node *a = n->src[0];
    int64_t k = ir_attr_bool(n, "transpose_a") ? ir_shape_numel(&a->shape) / a->shape.dim[a->shape.rank - 1]
                                               : a->shape.dim[a->shape.rank - 1];
    return sat(2.0 * (double)numel(n) * (double)k);
}

int64_t flops_global_norm(const ir_node *n)
{
    int64_t f = 0;
    for (int i = 0; i < n->nsrc; i++) f += 2 * ir_shape_numel(&n->src[i]->shape);
    return f;
}

int64_t flops_optimizer(const ir_node *n)
{
    int64_t f = 0;
    for (int i = 0; i < n->nsrc / 2; i++) f += 12 * ir_shape_numel(&n->src[i]->shape);
    return f;
}

/* attention: q k^T and P v, 2 * b * n * s_q * s_k * d FLOPs each (every
 * score counted, as the FLOPs model counts the attention matmuls, causal or
 * not). As a fused op it counts as what it replaces (the attention pass's
 * chain, ir_graph_forward_flops): the softmax's 5 per score and, with
 * p > 0, the dropout's 1. */
static double attention_matmul_flops(const ir_node *n, const ir_node *xq, const ir_node *xk)
{
    char err[256];
    ir_shape q, k;
    if (!ir_attn_view(n, xq, 0, &q, err, sizeof err) || !ir_attn_view(n, xk, 1, &k, err, sizeof err)) return 0;
    return 2.0 * (double)ir_shape_numel(&q) * (double)k.dim[2];
}

int64_t flops_attention(const ir_node *n)
{
    const ir_node *q = n->src[0], *k = n->src[1];
    char err[256];
    ir_shape qs, ks;
    if (!ir_attn_view(n, q, 0, &qs, err, sizeof err) || !ir_attn_view(n, k, 1, &ks, err, sizeof err)) return 0;
    double scores = (double)ir_shape_numel(&qs) / (double)qs.dim[3] * (double)ks.dim[2];
    return sat(2.0 * attention_matmul_flops(n, q, k) + (ir_attr_float(n, "p") > 0 ? 6.0 : 5.0) * scores);
}

/* Its backward: the scores recomputed, then dP = dO v^T, dv = P^T dO,
 * dq = dS k and dk = dS^T q: five products of the forward's size. */
int64_t flops_attention_back(const ir_node *n)
{
    return sat(5.0 * attention_matmul_flops(n, n->src[1], n->src[2]));
}
