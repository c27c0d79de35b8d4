/* The cuBLASLt GEMM report of `tgc compile --backend cuda --gemm-report`
 * (api/gemm_report.h, docs/cuda.md "GEMMs (cuBLASLt)"). */
#include "api/gemm_report.h"

#include "codegen/codegen.h"
#include "runtime/backend/cublaslt.h"

/* "%node", or "-" for an unbound operand. */
static const char *node_name(const ir_graph *g, cg_bind b)
{
    return b.kind == CG_BIND_NODE && b.node >= 0 && b.node < g->nnodes ? g->nodes[b.node]->name : "-";
}

int api_gemm_report(const ir_graph *g, const char *model, FILE *out, diag *d)
{
    if (!rt_lt_load(d)) return 1;
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, d);
    if (!p) return 1;
    int count[CG_EPI_COUNT] = {0}, n = 0, rc = 0;
    for (int i = 0; i < p->ninstrs && rc == 0; i++) {
        const cg_instr *in = &p->instrs[i];
        if (in->kind != CG_GEMM) continue;
        const cg_gemm *m = &in->gemm;
        rt_lt_gemm *lt = rt_lt_gemm_new(m, d);
        if (!lt) {
            rc = 1;
            break;
        }
        fprintf(out, "gemm %-3d %%%s", n++, g->nodes[in->node]->name);
        if (m->epilogue == CG_EPI_NONE) {
            fputc('\n', out);
        } else {
            /* C, the bias (read or written) and aux, where the epilogue moved them. */
            fprintf(out, " [%s: c=%%%s bias=%%%s", cg_epilogue_name(m->epilogue), node_name(g, m->c),
                    node_name(g, m->bias));
            if (m->epilogue == CG_EPI_GELU_AUX_BIAS || m->epilogue == CG_EPI_DGELU_BGRAD)
                fprintf(out, " aux=%%%s", node_name(g, m->aux));
            fputs("]\n", out);
        }
        fputs("    ", out);
        rt_lt_gemm_describe(lt, out);
        count[m->epilogue]++;
        rt_lt_gemm_free(lt);
    }
    if (rc == 0) {
        fprintf(out, "%s: %d cuBLASLt GEMMs per step:", model, n);
        for (int e = 0; e < CG_EPI_COUNT; e++) fprintf(out, " %d %s%s", count[e], cg_epilogue_name((cg_epilogue)e),
                                                        e + 1 < CG_EPI_COUNT ? "," : "\n");
    }
    cg_program_free(p);
    return rc;
}
