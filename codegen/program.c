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

/* Kernel arguments bound to graph values have the value's storage dtype
 * (ir_storage_dtype: 16 bits under mixed precision): the renderers load
 * them into the compute type and store them rounded to nearest even. */
int cg_arg_node(cg_ctx *c, const ir_node *x, int64_t numel, bool output)
{
    int a = kernel_add_arg(c->k, ir_storage_dtype(c->g, x), numel, output);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_NODE, x->id, 0};
    return a;
}

int cg_arg_result(cg_ctx *c, const ir_node *x, int index, bool output)
{
    ir_dtype t[IR_MAX_RESULTS];
    ir_shape s[IR_MAX_RESULTS];
    TGC_ASSERT(index < ir_results(x, t, s));
    /* The log-sum-exp of attention stays fp32 under mixed precision (ir.h). */
    int a = kernel_add_arg(c->k, ir_result_storage(c->g, x, index), ir_shape_numel(&s[index]), output);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_NODE, x->id, ir_result_offset(c->g, x, index)};
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
    /* The state is in the parameters' dtype (fp32 masters and moments
     * beside 16-bit parameters), element for element: its byte offset is
     * the parameter's element offset times its size. */
    int a = kernel_add_arg(c->k, first->dtype, numel, false);
    int64_t at = first->mem_offset / ir_storage_size(c->g, first) * ir_dtype_size(first->dtype);
    kernel_binds(c)[a] = (cg_bind){CG_BIND_STATE, slot, at};
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

bool cg_op_is_view(const ir_graph *g, const ir_node *n)
{
    if (ir_op_get(n->op)->flags & IR_OPF_LEAF) return n->op == IR_OP_INPUT || n->op == IR_OP_PARAM;
    if (n->op == IR_OP_RESULT) /* a view of its multi-result operand's storage (ir/results.def) */
        return n->mem == n->src[0]->mem &&
               n->mem_offset == n->src[0]->mem_offset + ir_result_offset(g, n->src[0], (int)ir_attr_int(n, "index"));
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

/* Whether the communicators reduce and move 16-bit values (cg_comm.dtype
 * bf16 / f16: they widen to fp32, reduce in group order and round once,
 * runtime/comm/comm.h). They do; the staged form below -- widened into the
 * workspace, communicated in fp32, rounded into the destination, the same
 * values with twice the traffic -- is the reference path, one switch away.
 * Pipeline sends and receives move the stored bytes and are never staged. */
static const bool comm16_native = true;

static int push_comm(cg_ctx *c, cg_comm m)
{
    push_instr(c->p, (cg_instr){.kind = CG_COMM, .node = c->n->id, .kernel = -1, .comm = m});
    return c->p->ninstrs - 1;
}

/* A MAP kernel from one binding to another (a load widens, a store rounds). */
static void convert_bind(cg_ctx *c, int64_t numel, cg_bind from, ir_dtype tf, cg_bind to, ir_dtype tt)
{
    cg_kernel_bare(c, KK_MAP, numel, 0);
    int a = kernel_add_arg(c->k, tf, numel, false), o = kernel_add_arg(c->k, tt, numel, true);
    kernel_binds(c)[a] = from;
    kernel_binds(c)[o] = to;
    kernel_add_out(c->k, o, IDX0, LD(a, IDX0), false);
}

const char *cg_group_name(cg_group g)
{
    static const char *const names[CG_GROUP_COUNT] = {"tp", "dp", "pp"};
    return (unsigned)g < CG_GROUP_COUNT ? names[g] : "?";
}

cg_instr *cg_comm_push(cg_ctx *c, cg_comm_kind kind, int64_t count, cg_bind src, cg_bind dst)
{
    int at = cg_comm_instr(c, kind, count, src, dst);
    return &c->p->instrs[at];
}

int cg_comm_instr(cg_ctx *c, cg_comm_kind kind, int64_t count, cg_bind src, cg_bind dst)
{
    /* The values communicated are in their storage dtype (16 bits under
     * mixed precision; the gradient norm's fp32 scalar stays fp32). */
    const ir_node *const *nodes = (const ir_node *const *)c->g->nodes;
    cg_bind v = src.kind == CG_BIND_NODE ? src : dst;
    ir_dtype t = v.kind == CG_BIND_NODE ? ir_storage_dtype(c->g, nodes[v.node]) : cg_ctype(c->n);
    cg_comm m = {kind, t, count, src, dst, false, kind == CG_SEND || kind == CG_RECV ? CG_GROUP_PP : CG_GROUP_TP};
    bool half = t == IR_BF16 || t == IR_F16;
    if (!half || comm16_native || kind == CG_SEND || kind == CG_RECV) return push_comm(c, m);
    ir_dtype wide = c->n->dtype;
    int64_t nsrc = NUMEL(nodes[src.node]), ndst = dst.kind == CG_BIND_NODE ? NUMEL(nodes[dst.node]) : NUMEL(c->n);
    cg_bind ws = {CG_BIND_WS, -1, cg_ws_reserve(c, nsrc * ir_dtype_size(wide))};
    convert_bind(c, nsrc, src, t, ws, wide);
    cg_bind wd = ws;
    if (kind != CG_ALL_REDUCE) wd.offset = cg_ws_reserve(c, ndst * ir_dtype_size(wide));
    m.dtype = wide;
    m.src = ws;
    m.dst = wd;
    int at = push_comm(c, m);
    convert_bind(c, ndst, wd, wide, dst, t);
    return at;
}

/* Whether a target's GEMM takes 16-bit A, B and C (cg_gemm.dtype bf16 or
 * f16: fp32 accumulation, C rounded to nearest even). Where it does not,
 * codegen stages a 16-bit GEMM through fp32: the operands widened into the
 * workspace, an fp32 GEMM, its result rounded into C -- the same values,
 * the reference path. */
static const bool gemm16_native[] = {[CG_TARGET_CPU] = true, [CG_TARGET_CUDA] = true};

bool cg_gemm16_native(cg_target t) { return gemm16_native[t]; }

/* A MAP kernel copying numel elements from one argument to another of
 * other dtypes (a load converts, a store rounds). */
static void convert(cg_ctx *c, int from, int to) { kernel_add_out(c->k, to, IDX0, LD(from, IDX0), false); }

/* Operand *b of a GEMM of dtype t (numel elements from the bound node's
 * start): one of another storage dtype (a data input of fp32 beside
 * 16-bit weights; or every 16-bit operand of a staged GEMM) is converted
 * into the workspace first, and *b points there. */
static void gemm_operand(cg_ctx *c, cg_bind *b, ir_dtype t, int64_t numel)
{
    const ir_node *x = c->g->nodes[b->node];
    if (b->kind != CG_BIND_NODE || ir_storage_dtype(c->g, x) == t) return;
    int64_t at = cg_ws_reserve(c, numel * ir_dtype_size(t));
    cg_kernel_bare(c, KK_MAP, numel, 0);
    int from = cg_arg_node(c, x, numel, false);
    int to = kernel_add_arg(c->k, t, numel, true);
    kernel_binds(c)[to] = (cg_bind){CG_BIND_WS, -1, at};
    convert(c, from, to);
    *b = (cg_bind){CG_BIND_WS, -1, at};
}

/* Elements of A, B and C a GEMM touches (from their starts). */
static int64_t gemm_extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride)
{
    return (batch - 1) * stride + (rows - 1) * ld + cols;
}

static void push_gemm(cg_ctx *c, cg_gemm g)
{
    const ir_node *const *nodes = (const ir_node *const *)c->g->nodes;
    if (!g.batch) g.batch = 1;
    if (g.epilogue == CG_EPI_NONE) g.c = bnode(c->n);
    /* Mixed precision: a GEMM of 16-bit operands, accumulating in fp32. */
    ir_dtype out = ir_storage_dtype(c->g, nodes[g.c.node]);
    bool half = out == IR_BF16 || out == IR_F16;
    g.dtype = half && !gemm16_native[c->target] ? c->n->dtype : out;
    int64_t ea = g.ta ? gemm_extent(g.k, g.m, g.lda, g.batch, g.stride_a) : gemm_extent(g.m, g.k, g.lda, g.batch, g.stride_a);
    int64_t eb = g.tb ? gemm_extent(g.n, g.k, g.ldb, g.batch, g.stride_b) : gemm_extent(g.k, g.n, g.ldb, g.batch, g.stride_b);
    int64_t ec = gemm_extent(g.m, g.n, g.ldc, g.batch, g.stride_c);
    gemm_operand(c, &g.a, g.dtype, ea);
    gemm_operand(c, &g.b, g.dtype, eb);
    cg_bind dst = g.c;
    bool staged = out != g.dtype;
    if (staged) g.c = (cg_bind){CG_BIND_WS, -1, cg_ws_reserve(c, ec * ir_dtype_size(g.dtype))};
    push_instr(c->p, (cg_instr){.kind = CG_GEMM, .node = c->n->id, .kernel = -1, .gemm = g});
    if (!staged) return;
    TGC_ASSERT(g.epilogue == CG_EPI_NONE); /* a staged GEMM has none (epilogue.c) */
    cg_kernel_bare(c, KK_MAP, ec, 0);
    int from = kernel_add_arg(c->k, g.dtype, ec, false);
    kernel_binds(c)[from] = g.c;
    convert(c, from, cg_arg_node(c, nodes[dst.node], ec, true));
}

/* A GEMM whose operands the emitter has bound itself (workspace scratch,
 * rows of a weight at a byte offset) and whose dtype it has chosen: no
 * conversion, no staging (codegen/emit_lmhead.c). The target must take
 * that dtype natively. */
void cg_gemm_bound(cg_ctx *c, cg_gemm g)
{
    if (!g.batch) g.batch = 1;
    TGC_ASSERT(g.epilogue == CG_EPI_NONE && (ir_dtype_size(g.dtype) >= 4 || gemm16_native[c->target]));
    push_instr(c->p, (cg_instr){.kind = CG_GEMM, .node = c->n->id, .kernel = -1, .gemm = g});
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
    if (cg_op_is_view(c->g, n)) return true;
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
    case IR_OP_ALL_REDUCE: {
        if (strcmp(ir_attr_sym(n, "group"), "tp") != 0) break;
        cg_emit_copy(c);
        int at = cg_comm_instr(c, CG_ALL_REDUCE, NUMEL(n), bnode(n), bnode(n));
        c->p->instrs[at].comm.max = strcmp(ir_attr_sym(n, "reduce"), "max") == 0;
        return true;
    }
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
            cg_ctx c = {.p = p, .g = g, .target = t, .n = g->nodes[j]};
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
