/* Multi-result ops (ir/results.def): what their storage holds, and where. */
#include "ir.h"
#include "support/util.h"

#define RESULT_ALIGN 64

static int64_t align_up(int64_t v) { return (v + RESULT_ALIGN - 1) & ~(int64_t)(RESULT_ALIGN - 1); }

/* attention: the output, then the row log-sum-exp [b, n, s_q] in f32 (the
 * flash-attention residual; f32 whatever the storage precision, f64 in a
 * float64 model, whose gradient checks need it). */
static int results_attention(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    ir_shape o = ir_attn_out_logical(n);
    t[1] = n->dtype == IR_F64 ? IR_F64 : IR_F32;
    s[1] = (ir_shape){.rank = 3, .dim = {o.dim[0], o.dim[1], o.dim[2]}};
    return 2;
}

/* attention_back: dq (the value), dk and dv (k's and v's type and shape);
 * with layout=packed the value d[q | k | v] alone. */
static int results_attention_back(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    if (ir_attn_in_layout(n) == IR_ATTN_PACKED) return 1;
    t[1] = t[2] = n->src[2]->dtype;
    s[1] = n->src[2]->shape;
    s[2] = n->src[3]->shape;
    return 3;
}

/* lm_head_ce: the mean loss, then each row's log-sum-exp [rows] (f32, f64
 * in a float64 model, as attention's). */
static int results_lm_head_ce(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    const ir_node *x = n->src[0];
    t[1] = n->dtype == IR_F64 ? IR_F64 : IR_F32;
    s[1] = (ir_shape){.rank = 1, .dim = {ir_shape_numel(&x->shape) / x->shape.dim[x->shape.rank - 1]}};
    return 2;
}

/* lm_head_ce_back: dx (the value), then dw (w's type and shape), then db
 * when the head has a bias. */
static int results_lm_head_ce_back(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    t[1] = n->src[2]->dtype;
    s[1] = n->src[2]->shape;
    if (n->nsrc < 6) return 2;
    t[2] = n->src[5]->dtype;
    s[2] = n->src[5]->shape;
    return 3;
}

int ir_results(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    t[0] = n->dtype;
    s[0] = n->shape;
    switch (n->op) {
#define RESULTS(e, rule) \
    case IR_OP_##e: return rule(n, t, s);
#include "results.def"
    default: return 1;
    }
}

/* Results that keep fp32 whatever the precision: attention's row
 * log-sum-exp, the flash-attention residual the backward recomputes the
 * probabilities from. */
static bool result_fixed(const ir_node *n, int index)
{
    return (n->op == IR_OP_ATTENTION || n->op == IR_OP_LM_HEAD_CE) && index == 1;
}

/* A data input or a KV cache (or a view of one) keeps its dtype. */
static bool model_value(const ir_node *n)
{
    return !(n->flags & IR_NF_INPUT) && n->op != IR_OP_KV_CACHE && n->mem != IR_MEM_INPUT && n->mem != IR_MEM_CACHE;
}

static ir_dtype stored(const ir_graph *g, const ir_node *n, int index, ir_dtype t, const ir_shape *s)
{
    bool half = g->precision == IR_BF16 || g->precision == IR_F16;
    return half && t == IR_F32 && s->rank > 0 && !result_fixed(n, index) && model_value(n) ? g->precision : t;
}

ir_dtype ir_result_storage(const ir_graph *g, const ir_node *n, int index)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(n, t, s);
    TGC_ASSERT(index >= 0 && index < count);
    return stored(g, n, index, t[index], &s[index]);
}

ir_dtype ir_storage_dtype(const ir_graph *g, const ir_node *n)
{
    if (n->op == IR_OP_RESULT) {
        /* A view of its operand's result takes that result's storage; a
         * copy of it (a gradient landing in the gradient buffer) is a value
         * of its own. */
        const ir_node *x = n->src[0];
        int index = (int)ir_attr_int(n, "index");
        bool view = n->mem == IR_MEM_NONE || (n->mem == x->mem && n->mem_offset == x->mem_offset +
                                                                                     ir_result_offset(g, x, index));
        if (view) return ir_result_storage(g, x, index);
    }
    return stored(g, n, 0, n->dtype, &n->shape);
}

int ir_storage_size(const ir_graph *g, const ir_node *n) { return ir_dtype_size(ir_storage_dtype(g, n)); }

int ir_state_elem_size(const ir_graph *g) { return g->precision == IR_F64 ? 8 : 4; }

int64_t ir_param_elems(const ir_graph *g)
{
    bool half = g->precision == IR_BF16 || g->precision == IR_F16;
    return g->mem_size[IR_MEM_PARAM] / (half ? 2 : ir_state_elem_size(g));
}

static int64_t result_bytes(ir_dtype t, const ir_shape *s) { return align_up(ir_shape_numel(s) * ir_dtype_size(t)); }

int64_t ir_result_offset(const ir_graph *g, const ir_node *n, int index)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(n, t, s);
    int64_t off = 0;
    for (int i = 0; i < index && i < count; i++) off += result_bytes(stored(g, n, i, t[i], &s[i]), &s[i]);
    return off;
}

int64_t ir_node_storage_bytes(const ir_graph *g, const ir_node *n)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(n, t, s);
    int64_t bytes = 0;
    for (int i = 0; i < count; i++) bytes += result_bytes(stored(g, n, i, t[i], &s[i]), &s[i]);
    return bytes;
}
