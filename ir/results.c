/* Multi-result ops (ir/results.def): what their storage holds, and where. */
#include "ir.h"

#define RESULT_ALIGN 64

static int64_t align_up(int64_t v) { return (v + RESULT_ALIGN - 1) & ~(int64_t)(RESULT_ALIGN - 1); }

/* attention: the output, then the row log-sum-exp [b, n, s_q] in f32 (the
 * flash-attention residual; f32 whatever the storage precision, f64 in a
 * float64 model, whose gradient checks need it). */
static int results_attention(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    t[1] = n->dtype == IR_F64 ? IR_F64 : IR_F32;
    s[1] = (ir_shape){.rank = 3, .dim = {n->shape.dim[0], n->shape.dim[1], n->shape.dim[2]}};
    return 2;
}

/* attention_back: dq (the value), dk and dv (k's and v's type). */
static int results_attention_back(const ir_node *n, ir_dtype *t, ir_shape *s)
{
    t[1] = t[2] = n->src[2]->dtype;
    s[1] = n->src[2]->shape;
    s[2] = n->src[3]->shape;
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

static int64_t result_bytes(ir_dtype t, const ir_shape *s) { return align_up(ir_shape_numel(s) * ir_dtype_size(t)); }

int64_t ir_result_offset(const ir_node *n, int index)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(n, t, s);
    int64_t off = 0;
    for (int i = 0; i < index && i < count; i++) off += result_bytes(t[i], &s[i]);
    return off;
}

int64_t ir_node_storage_bytes(const ir_node *n)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    int count = ir_results(n, t, s);
    int64_t bytes = 0;
    for (int i = 0; i < count; i++) bytes += result_bytes(t[i], &s[i]);
    return bytes;
}
