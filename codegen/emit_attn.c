/* Emitters of the fused attention ops (ir/ops.def: attention,
 * attention_back): KK_ATTN kernels (kir.h) that attn_c.c and attn_cuda.c
 * render, and for the backward the ROW kernel of D_i = dO_i . O_i.
 * docs/attention.md, "Kernels". */
#include "emit_util.h"
#include "support/util.h"

/* The sizes, attributes and dropout index of attention node a (the
 * forward, also for its backward: the mask is the forward's). */
static void attn_params(kattn *A, const ir_node *a, katt_pass pass)
{
    ir_shape q, k, v; /* [b, heads, s, d], whatever the layout */
    char err[512];
    TGC_ASSERT(ir_attn_view(a, a->src[0], 0, &q, err, sizeof err) && ir_attn_view(a, a->src[1], 1, &k, err, sizeof err) &&
               ir_attn_view(a, a->src[2], 2, &v, err, sizeof err));
    *A = (kattn){.pass = pass, .b = q.dim[0], .n = q.dim[1], .g = k.dim[1],
                 .sq = q.dim[2], .sk = k.dim[2], .d = q.dim[3], .dv = v.dim[3],
                 .layout = ir_attn_in_layout(a), .out_sbnd = ir_attn_out_sbnd(a),
                 .scale = ir_attr_float(a, "scale"), .p = ir_attr_float(a, "p"),
                 .causal = ir_attr_bool(a, "causal"), .pos_offset = ir_attr_bool(a, "pos_offset"),
                 .q = -1, .k = -1, .v = -1, .mask = -1, .out = -1, .lse = -1, .dy = -1, .dd = -1, .dq = -1,
                 .dk = -1, .dvo = -1};
    A->key = A->p > 0 ? cg_dropout_key(a) : 0;
    /* Dropout draws by the global index of the [b, n, s_q, s_k]
     * probabilities (emit.c's global_index): a split along batch, heads or
     * queries (the output's dims 0-2, the probabilities' too) keeps this
     * rank's block of each outer row. */
    int sd = a->shard.dim;
    if (sd >= 0 && A->out_sbnd) sd = sd == 0 ? 2 : sd <= 2 ? sd - 1 : sd; /* [s, b, n, d] -> [b, n, s, d] */
    if (A->p > 0 && sd >= 0) {
        TGC_ASSERT(sd <= 2); /* the head dim of the output is never split */
        int64_t dims[4] = {A->b, A->n, A->sq, A->sk}, block = 1;
        for (int i = sd; i < 4; i++) block *= dims[i];
        A->shard_block = block;
    }
}

/* The q, k and v arguments: one under layout=packed. */
static void attn_qkv_args(cg_ctx *c, kattn *A, const ir_node *q, const ir_node *k, const ir_node *v)
{
    A->q = cg_arg_node(c, q, NUMEL(q), false);
    A->k = A->layout == IR_ATTN_PACKED ? A->q : cg_arg_node(c, k, NUMEL(k), false);
    A->v = A->layout == IR_ATTN_PACKED ? A->q : cg_arg_node(c, v, NUMEL(v), false);
}

/* Element c of row r ([b, n, s_q] order) of the output or dy. */
static kx *out_at(cg_ctx *c, const kattn *A, kx *r, kx *col)
{
    if (!A->out_sbnd) return RC(r, A->dv, col);
    kx *row = ADD(MUL(IMOD(r, I(A->sq)), I(A->b * A->n)), IDIV(r, I(A->sq)));
    return RC(row, A->dv, col);
}

bool cg_emit_attention(cg_ctx *c)
{
    const ir_node *n = c->n;
    kattn A;
    attn_params(&A, n, KATT_FWD);
    kernel *k = cg_kernel_bare(c, KK_ATTN, A.b * A.n * A.sq, A.sk);
    attn_qkv_args(c, &A, n->src[0], n->src[1], n->src[2]);
    if (n->nsrc > 3) A.mask = cg_arg_node(c, n->src[3], NUMEL(n->src[3]), false);
    A.out = cg_arg_node(c, n, NUMEL(n), true);
    A.lse = cg_arg_result(c, n, 1, true);
    k->attn = A;
    return true;
}

/* (dy, q, k, v, a[, mask]) -> dq (the value), dk, dv (results 1, 2). */
bool cg_emit_attention_back(cg_ctx *c)
{
    const ir_node *n = c->n, *dy = n->src[0], *q = n->src[1], *kk = n->src[2], *v = n->src[3], *a = n->src[4];
    const ir_node *m = n->nsrc > 5 ? n->src[5] : NULL;
    kattn A;
    attn_params(&A, a, KATT_DKV);
    int64_t rows = A.b * A.n * A.sq;
    ir_dtype t = cg_ctype(n);

    /* D_i = dO_i . O_i into the workspace (with dropout too: O holds the
     * dropped probabilities, so D_i = sum_j P_ij keep_ij dP_ij). */
    cg_kernel_bare(c, KK_ROW, rows, A.dv);
    int dya = cg_arg_node(c, dy, NUMEL(dy), false), oa = cg_arg_node(c, a, NUMEL(a), false);
    int64_t dd_at = c->ws;
    int dd = cg_arg_ws(c, t, rows, true);
    int s = kernel_add_acc(c->k, KRED_SUM, MUL(LD(dya, out_at(c, &A, IDX0, IDX1)), LD(oa, out_at(c, &A, IDX0, IDX1))));
    kernel_add_out(c->k, dd, IDX0, ACC(s), true);

    for (int pass = 0; pass < 2; pass++) {
        kattn P = A;
        P.pass = pass == 0 ? KATT_DKV : KATT_DQ;
        kernel *k = pass == 0 ? cg_kernel_bare(c, KK_ATTN, A.b * A.g * A.sk, A.sq)
                              : cg_kernel_bare(c, KK_ATTN, rows, A.sk);
        P.dy = cg_arg_node(c, dy, NUMEL(dy), false);
        attn_qkv_args(c, &P, q, kk, v);
        P.lse = cg_arg_result(c, a, 1, false);
        P.dd = cg_arg_ws_at(c, t, rows, dd_at);
        if (m) P.mask = cg_arg_node(c, m, NUMEL(m), false);
        if (pass == 0) {
            if (A.layout == IR_ATTN_PACKED) { /* d[q | k | v] is the value */
                P.dk = P.dvo = cg_arg_node(c, n, NUMEL(n), true);
            } else {
                P.dk = cg_arg_result(c, n, 1, true);
                P.dvo = cg_arg_result(c, n, 2, true);
            }
        } else {
            P.dq = cg_arg_node(c, n, NUMEL(n), true);
        }
        k->attn = P;
    }
    return true;
}
