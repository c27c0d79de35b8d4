/* From a memory-planned graph to a program: per node, nothing (views and
 * leaves), a library GEMM, or generated kernels from the emitter table. */
#include <stdlib.h>
#include <string.h>

#include "emit_util.h"
#include "epilogue.h"
#include "support/util.h"

bool cg_emit_copy(cg_ctx *c);
bool cg_emit_result_copy(cg_ctx *c);
/* codegen/fuse.c: nodes first..last, one fusion run (ir.h), as one kernel. */
bool cg_emit_fused(cg_program *p, const ir_graph *g, int first, int last, const bool *written, diag *d);

ir_dtype cg_ctype(const ir_node *n)
{
    if (ir_dtype_is_float(n->dtype)) return n->dtype;
    for (int i = 0; i < n->nsrc; i++)
        if (ir_dtype_is_float(n->src[i]->dtype)) return n->src[i]->dtype;
    return IR_F32;
}

static void push_instr(cg_program *p, cg_instr in);

static cg_bind *kernel_binds(cg_ctx *c) { return c->p->binds[c->p->nkernels - 1]; }

kernel *cg_kernel_bare(cg_ctx *c, kk_kind kind, int64_t n, int64_t cols)
{
    cg_program *p = c->p;
    if (p->nkernels == p->kcap) {
        p->kcap = p->kcap ? p->kcap * 2 : 64;
        p->kernels = xrealloc(p->kernels, (size_t)p->kcap * sizeof *p->kernels);
        p->binds = xrealloc(p->binds, (size_t)p->kcap * sizeof *p->binds);
    }
    kernel *k = arena_alloc(&p->mem, sizeof *k);
    k->kind = kind;
    k->n = n;
    k->cols = cols;
    k->ctype = cg_ctype(c->n);
    k->name = c->nk ? arena_printf(&p->mem, "k%d_%d", c->n->id, c->nk) : arena_printf(&p->mem, "k%d", c->n->id);
    k->comment = arena_printf(&p->mem, "%%%s = %s", c->n->name, ir_op_name(c->n->op));
    memset(p->binds[p->nkernels], 0, sizeof p->binds[p->nkernels]);
    p->kernels[p->nkernels++] = k;
    c->k = k;
    c->b = (kb){&p->mem, k};
    c->nk++;
    push_instr(p, (cg_instr){.kind = CG_KERNEL, .node = c->n->id, .kernel = p->nkernels - 1});
    return k;
}

/* Under mixed precision the model's parameters, activations and gradients
 * are stored in 16 bits: writes to them round (scalars such as the loss
 * and the gradient norm stay in fp32, as Megatron keeps them). */
static ir_dtype store_of(const cg_ctx *c, const ir_node *x)
{
    bool model_value = x->mem == IR_MEM_ACT || x->mem == IR_MEM_STASH || x->mem == IR_MEM_GRAD ||
                       x->mem == IR_MEM_PARAM;
    return c->g->precision != IR_F32 && x->dtype == IR_F32 && x->shape.rank > 0 && model_value ? c->g->precision
                                                                                              : x->dtype;
}

int cg_arg_node(cg_ctx *c, const ir_node *x, int64_t numel, bool output)
{
    int a = kernel_add_arg(c->k, x->dtype, numel, output);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_NODE, x->id, 0};
    if (output) c->k->args[a].store = store_of(c, x);
    return a;
}

int cg_arg_result(cg_ctx *c, const ir_node *x, int index, bool output)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    TGC_ASSERT(index < ir_results(x, t, s));
    int a = kernel_add_arg(c->k, t[index], ir_shape_numel(&s[index]), output);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_NODE, x->id, ir_result_offset(x, index)};
    /* The log-sum-exp of attention stays fp32 under mixed precision. */
    if (output) c->k->args[a].store = x->op == IR_OP_ATTENTION && index == 1 ? IR_F32 : store_of(c, x);
    return a;
}

/* A result (of a multi-result op) that is not a view: a gradient that must
 * land in the gradient buffer. A copy from its place in the operand's
 * storage. */
bool cg_emit_result_copy(cg_ctx *c)
{
    const ir_node *n = c->n;
    cg_kernel_bare(c, KK_MAP, NUMEL(n), 0);
    int from = cg_arg_result(c, n->src[0], (int)ir_attr_int(n, "index"), false);
    int to = cg_arg_node(c, n, NUMEL(n), true);
    kernel_add_out(c->k, to, kx_idx(&c->b, 0), kx_load(&c->b, from, kx_idx(&c->b, 0)), false);
    return true;
}

int64_t cg_ws_reserve(cg_ctx *c, int64_t bytes)
{
    int64_t at = c->ws;
    c->ws += (bytes + 63) & ~(int64_t)63;
    if (c->ws > c->p->workspace_bytes) c->p->workspace_bytes = c->ws;
    return at;
}

int cg_arg_ws(cg_ctx *c, ir_dtype t, int64_t numel, bool output)
{
    int a = kernel_add_arg(c->k, t, numel, output);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_WS, -1, cg_ws_reserve(c, numel * ir_dtype_size(t))};
    return a;
}

int cg_arg_ws_at(cg_ctx *c, ir_dtype t, int64_t numel, int64_t at)
{
    int a = kernel_add_arg(c->k, t, numel, false);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_WS, -1, at};
    return a;
}

int cg_arg_state(cg_ctx *c, int slot, const ir_node *first, int64_t numel)
{
    int a = kernel_add_arg(c->k, first->dtype, numel, false);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_STATE, slot, first->mem_offset};
    if (slot + 1 > c->p->state_slots) c->p->state_slots = slot + 1;
    return a;
}

kernel *cg_kernel(cg_ctx *c, kk_kind kind, int64_t n, int64_t cols)
{
    kernel *k = cg_kernel_bare(c, kind, n, cols);
    for (int i = 0; i < c->n->nsrc; i++) cg_arg_node(c, c->n->src[i], NUMEL(c->n->src[i]), false);
    cg_arg_node(c, c->n, NUMEL(c->n), true);
    return k;
}

bool cg_op_is_view(const ir_node *n)
{
    if (ir_op_get(n->op)->flags & IR_OPF_LEAF) return n->op == IR_OP_INPUT || n->op == IR_OP_PARAM;
    if (n->op == IR_OP_RESULT) /* a view of its multi-result operand's storage (ir/results.def) */
        return n->mem == n->src[0]->mem &&
               n->mem_offset == n->src[0]->mem_offset + ir_result_offset(n->src[0], (int)ir_attr_int(n, "index"));
    return n->op == IR_OP_RESHAPE && n->mem == n->src[0]->mem && n->mem_offset == n->src[0]->mem_offset;
}

/* ---- GEMMs ------------------------------------------------------------------ */

static cg_bind bnode(const ir_node *n) { return (cg_bind){CG_BIND_NODE, n->id, 0}; }

static void push_instr(cg_program *p, cg_instr in)
{
    if (p->ninstrs == p->icap) {
        p->icap = p->icap ? p->icap * 2 : 64;
        p->instrs = xrealloc(p->instrs, (size_t)p->icap * sizeof *p->instrs);
    }
    p->instrs[p->ninstrs++] = in;
}

void cg_comm_instr(cg_ctx *c, cg_comm_kind kind, int64_t count, cg_bind src, cg_bind dst)
{
    cg_comm m = {kind, cg_ctype(c->n), count, src, dst, false, false, false};
    push_instr(c->p, (cg_instr){.kind = CG_COMM, .node = c->n->id, .kernel = -1, .comm = m});
}

/* The GEMM accumulates in fp32; a 16-bit value it stores is the rounded
 * result (mixed precision): one in-place rounding kernel per node. */
static void round_stored(cg_ctx *c, const ir_node *x)
{
    if (store_of(c, x) == x->dtype) return;
    cg_kernel_bare(c, KK_MAP, NUMEL(x), 0);
    int y = cg_arg_node(c, x, NUMEL(x), false), o = cg_arg_node(c, x, NUMEL(x), true);
    kernel_add_out(c->k, o, IDX0, LD(y, IDX0), false);
}

static void push_gemm(cg_ctx *c, cg_gemm g)
{
    g.dtype = c->n->dtype;
    if (!g.batch) g.batch = 1;
    if (g.epilogue == CG_EPI_NONE) g.c = bnode(c->n);
    push_instr(c->p, (cg_instr){.kind = CG_GEMM, .node = c->n->id, .kernel = -1, .gemm = g});
    const ir_node *const *nodes = (const ir_node *const *)c->g->nodes;
    round_stored(c, nodes[g.c.node]);
    if (g.epilogue == CG_EPI_GELU_AUX_BIAS) round_stored(c, nodes[g.aux.node]);
    if (g.epilogue == CG_EPI_BGRADB || g.epilogue == CG_EPI_DGELU_BGRAD) round_stored(c, nodes[g.bias.node]);
}

/* Binds an epilogue's operands: C goes to the node the epilogue computes. */
static void set_epilogue(cg_gemm *g, const cg_epi_choice *e)
{
    if (!e || e->epi == CG_EPI_NONE) return;
    g->epilogue = e->epi;
    g->c = (cg_bind){CG_BIND_NODE, e->out, 0};
    g->bias = (cg_bind){CG_BIND_NODE, e->bias, 0};
    if (e->aux >= 0) {
        g->aux = (cg_bind){CG_BIND_NODE, e->aux, 0};
        g->ldaux = g->n;
    }
}

/* y = x w^T (+ b): rows of x times the [out, in] weight. */
static void lower_linear(cg_ctx *c, const cg_epi_choice *e)
{
    const ir_node *n = c->n, *x = n->src[0], *w = n->src[1];
    int64_t out = w->shape.dim[0], in = w->shape.dim[1], rows = NUMEL(x) / in;
    cg_gemm g = {.tb = true, .m = rows, .n = out, .k = in, .lda = in, .ldb = in, .ldc = out,
                 .alpha = 1.0, .a = bnode(x), .b = bnode(w), .c = bnode(n)};
    set_epilogue(&g, e);
    push_gemm(c, g);
    if (n->nsrc == 3 && g.epilogue != CG_EPI_BIAS) {
        /* In place: y[i] += b[i % out]. */
        cg_kernel_bare(c, KK_MAP, NUMEL(n), 0);
        int ya = cg_arg_node(c, n, NUMEL(n), false), ba = cg_arg_node(c, n->src[2], out, false);
        int yo = cg_arg_node(c, n, NUMEL(n), true);
        kernel_add_out(c->k, yo, IDX0, ADD(LD(ya, IDX0), LD(ba, IMOD(IDX0, I(out)))), false);
    }
}

static void lower_matmul(cg_ctx *c, const cg_epi_choice *e)
{
    const ir_node *n = c->n, *a = n->src[0], *b = n->src[1];
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    cg_gemm g;
    if (ta) {
        int64_t m = LAST(a), nn = LAST(b), k = NUMEL(a) / m;
        g = (cg_gemm){.ta = true, .m = m, .n = nn, .k = k, .lda = m, .ldb = nn, .ldc = nn,
                      .alpha = 1.0, .a = bnode(a), .b = bnode(b), .c = bnode(n)};
    } else {
        int64_t k = LAST(a), rows = NUMEL(a) / k, nn = LAST(n);
        g = (cg_gemm){.tb = tb, .m = rows, .n = nn, .k = k, .lda = k, .ldb = tb ? k : nn, .ldc = nn,
                      .alpha = 1.0, .a = bnode(a), .b = bnode(b), .c = bnode(n)};
    }
    set_epilogue(&g, e);
    push_gemm(c, g);
}

static void lower_bmm(cg_ctx *c)
{
    const ir_node *n = c->n, *a = n->src[0], *b = n->src[1];
    int r = a->shape.rank;
    bool ta = ir_attr_bool(n, "transpose_a"), tb = ir_attr_bool(n, "transpose_b");
    int64_t m = n->shape.dim[r - 2], nn = n->shape.dim[r - 1];
    int64_t k = ta ? a->shape.dim[r - 2] : a->shape.dim[r - 1];
    push_gemm(c, (cg_gemm){.ta = ta, .tb = tb, .m = m, .n = nn, .k = k, .lda = a->shape.dim[r - 1],
                           .ldb = b->shape.dim[r - 1], .ldc = nn, .batch = NUMEL(n) / (m * nn),
                           .stride_a = m * k, .stride_b = k * nn, .stride_c = m * nn,
                           .alpha = ir_attr_float(n, "alpha"), .a = bnode(a), .b = bnode(b), .c = bnode(n)});
}

/* ---- the program ------------------------------------------------------------- */

static bool lower_node(cg_ctx *c, const cg_epi_plan *epi, diag *d)
{
    const ir_node *n = c->n;
    if (cg_op_is_view(n)) return true;
    if (n->op == IR_OP_PP_SEND) { /* sends its operand's buffer; has none of its own */
        cg_comm_instr(c, CG_SEND, NUMEL(n), bnode(n->src[0]), bnode(n->src[0]));
        return true;
    }
    if (n->mem == IR_MEM_NONE) {
        diag_error(d, n->loc, "codegen: %%%s has no memory plan (run the memplan pass first)", n->name);
        return false;
    }
    const cg_epi_choice *e = &epi->at[n->id];
    if (e->epi != CG_EPI_NONE) { /* a GEMM with an epilogue runs here: maybe another node's */
        cg_ctx gc = *c;
        gc.n = c->g->nodes[e->gemm];
        if (gc.n->op == IR_OP_LINEAR) lower_linear(&gc, e);
        else lower_matmul(&gc, e);
        return true;
    }
    if (epi->absorbed[n->id] >= 0) return true; /* a GEMM's epilogue computes it */
    switch (n->op) {
    case IR_OP_LINEAR: lower_linear(c, NULL); return true;
    case IR_OP_MATMUL: lower_matmul(c, NULL); return true;
    case IR_OP_BMM: lower_bmm(c); return true;
    case IR_OP_RESHAPE: return cg_emit_copy(c);
    case IR_OP_RESULT: return cg_emit_result_copy(c);
    case IR_OP_TP_COPY: return cg_emit_copy(c);
    case IR_OP_TP_REDUCE:
        cg_emit_copy(c);
        cg_comm_instr(c, CG_ALL_REDUCE, NUMEL(n), bnode(n), bnode(n));
        return true;
    case IR_OP_ALL_REDUCE:
        if (strcmp(ir_attr_sym(n, "group"), "tp") != 0) break;
        cg_emit_copy(c);
        cg_comm_instr(c, CG_ALL_REDUCE, NUMEL(n), bnode(n), bnode(n));
        c->p->instrs[c->p->ninstrs - 1].comm.max = strcmp(ir_attr_sym(n, "reduce"), "max") == 0;
        return true;
    case IR_OP_SP_GATHER:
        cg_comm_instr(c, CG_ALL_GATHER, NUMEL(n->src[0]), bnode(n->src[0]), bnode(n));
        return true;
    case IR_OP_SP_SCATTER:
        cg_comm_instr(c, CG_REDUCE_SCATTER, NUMEL(n), bnode(n->src[0]), bnode(n));
        return true;
    case IR_OP_PP_RECV:
        cg_comm_instr(c, CG_RECV, NUMEL(n), bnode(n), bnode(n));
        return true;
    default: break;
    }
    cg_emit_fn fn = cg_emitters[n->op];
    if (!fn) {
        diag_error(d, n->loc, "the CPU backend cannot run op '%s' (%%%s)", ir_op_name(n->op), n->name);
        return false;
    }
    return fn(c);
}

cg_program *cg_build(const ir_graph *g, diag *d) { return cg_build_target(g, CG_TARGET_CPU, d); }

cg_program *cg_build_target(const ir_graph *g, cg_target t, diag *d)
{
    cg_program *p = xcalloc(1, sizeof *p);
    arena_init(&p->mem);
    p->master_slot = -1;
    cg_epi_plan *epi = cg_epi_plan_new(g, t);
    bool ok = true;
    /* A fused kernel runs at the last node of its run (ir.h); a run that a
     * GEMM epilogue computes is absorbed whole (epilogue.c). */
    int *run_end = xmalloc(((size_t)g->nnodes + 1) * sizeof *run_end);
    bool *written = xmalloc(((size_t)g->nnodes + 1) * sizeof *written);
    ir_graph_fuse_runs(g, run_end, written);
    for (int i = 0, first = 0; i < g->nnodes && ok; i++) {
        if (i == 0 || run_end[i - 1] == i - 1) first = i;
        if (run_end[i] != i) continue;
        if (first < i && epi->absorbed[first] < 0) {
            ok = cg_emit_fused(p, g, first, i, written, d);
            continue;
        }
        for (int j = first; j <= i && ok; j++) {
            cg_ctx c = {.p = p, .g = g, .n = g->nodes[j]};
            ok = lower_node(&c, epi, d);
        }
    }
    free(run_end);
    free(written);
    cg_epi_plan_free(epi);
    if (!ok) {
        cg_program_free(p);
        return NULL;
    }
    return p;
}

void cg_program_free(cg_program *p)
{
    if (!p) return;
    free(p->kernels);
    free(p->binds);
    free(p->instrs);
    arena_free(&p->mem);
    free(p);
}

int cg_unsupported_ops(ir_op *out, int max)
{
    int n = 0;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        unsigned f = ir_op_get((ir_op)op)->flags;
        bool handled = cg_emitters[op] || op == IR_OP_LINEAR || op == IR_OP_MATMUL || op == IR_OP_BMM ||
                       op == IR_OP_RESHAPE || op == IR_OP_INPUT || op == IR_OP_PARAM || op == IR_OP_TP_COPY ||
                       op == IR_OP_TP_REDUCE || op == IR_OP_SP_GATHER || op == IR_OP_SP_SCATTER ||
                       op == IR_OP_ALL_REDUCE || op == IR_OP_PP_SEND || op == IR_OP_PP_RECV;
        (void)f;
        if (!handled && n < max) out[n++] = (ir_op)op;
    }
    return n;
}
