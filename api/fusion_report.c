/* The fusion report: kernel launches and activation traffic of one training
 * step, counted from the built programs (codegen.h), so the figures are what
 * the executor runs, not an estimate from the graph.
 *
 * Activation bytes are those of values in the activation arena, the inputs
 * and the per-node workspace, each counted once per kernel or GEMM that
 * reads or writes it (a row reduction that passes over its input three
 * times counts it once: the model is that repeated passes over a row hit
 * the cache). Parameters, gradients and optimizer state move the same with
 * or without fusion and are left out; so are the bytes collectives send. */
#include "api/fusion_report.h"

#include <string.h>

#include "codegen/codegen.h"

typedef struct step_stats {
    int kernels, gemms, comms;
    int64_t read, written, arena;
} step_stats;

static bool activation(const ir_graph *g, cg_bind b)
{
    if (b.kind == CG_BIND_WS) return true;
    if (b.kind != CG_BIND_NODE || b.node < 0 || b.node >= g->nnodes) return false;
    ir_mem m = g->nodes[b.node]->mem;
    return m == IR_MEM_ACT || m == IR_MEM_INPUT;
}

static void gemm_bytes(const ir_graph *g, const cg_gemm *m, step_stats *s)
{
    int64_t esz = ir_dtype_size(m->dtype);
    if (activation(g, m->a)) s->read += m->batch * m->m * m->k * esz;
    if (activation(g, m->b)) s->read += m->batch * m->k * m->n * esz;
    if (activation(g, m->c)) {
        s->written += m->batch * m->m * m->n * esz;
        if (m->beta != 0.0) s->read += m->batch * m->m * m->n * esz;
    }
}

static void stats_of(const ir_graph *g, const cg_program *p, step_stats *s)
{
    memset(s, 0, sizeof *s);
    s->arena = g->mem_size[IR_MEM_ACT];
    for (int i = 0; i < p->ninstrs; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind == CG_COMM) { s->comms++; continue; }
        if (in->kind == CG_GEMM) { s->gemms++; gemm_bytes(g, &in->gemm, s); continue; }
        s->kernels++;
        const kernel *k = p->kernels[in->kernel];
        for (int a = 0; a < k->nargs; a++) {
            if (!activation(g, p->binds[in->kernel][a])) continue;
            int64_t bytes = k->args[a].numel * ir_dtype_size(k->args[a].dtype);
            if (k->args[a].output) s->written += bytes;
            else s->read += bytes;
        }
    }
}

static void row(FILE *out, const char *what, int64_t before, int64_t after)
{
    double pct = before ? 100.0 * (double)(after - before) / (double)before : 0.0;
    fprintf(out, "  %-26s %14lld %14lld %+8.1f%%\n", what, (long long)before, (long long)after, pct);
}

static int count_op(const ir_graph *g, ir_op op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++) n += g->nodes[i]->op == op;
    return n;
}

/* What the fuse pass made: the named fusions' ops and the generic runs. */
static void fusions(FILE *out, const ir_graph *g)
{
    int runs = 0, ops = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (n->fuse < 0) continue;
        ops++;
        runs += i == 0 || g->nodes[i - 1]->fuse != n->fuse;
    }
    fprintf(out, "  named fusions: %d bias_gelu (%d bias_gelu_back), %d bias_dropout_add, %d scale-mask-softmax "
                 "(%d softmax_back)\n", count_op(g, IR_OP_BIAS_GELU), count_op(g, IR_OP_BIAS_GELU_BACK),
            count_op(g, IR_OP_BIAS_DROPOUT_ADD), count_op(g, IR_OP_SOFTMAX), count_op(g, IR_OP_SOFTMAX_BACK));
    fprintf(out, "  generic fusion: %d kernels hold %d ops\n", runs, ops);
}

int api_fusion_report(const ir_graph *unfused, const ir_graph *fused, FILE *out, diag *d)
{
    cg_program *p0 = cg_build(unfused, d), *p1 = p0 ? cg_build(fused, d) : NULL;
    if (!p1) {
        cg_program_free(p0);
        return 1;
    }
    step_stats a, b;
    stats_of(unfused, p0, &a);
    stats_of(fused, p1, &b);
    fprintf(out, "fusion report for %s, per training step and rank (docs/fusion.md):\n", fused->model);
    fprintf(out, "  %-26s %14s %14s %9s\n", "", "unfused", "fused", "change");
    row(out, "generated kernels", a.kernels, b.kernels);
    row(out, "GEMMs", a.gemms, b.gemms);
    row(out, "collectives", a.comms, b.comms);
    row(out, "activation bytes read", a.read, b.read);
    row(out, "activation bytes written", a.written, b.written);
    row(out, "activation bytes moved", a.read + a.written, b.read + b.written);
    row(out, "activation arena (peak)", a.arena, b.arena);
    fusions(out, fused);
    cg_program_free(p0);
    cg_program_free(p1);
    return 0;
}
