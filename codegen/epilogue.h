/* Which GEMMs of a graph take a cuBLASLt epilogue (codegen.h, cg_epilogue),
 * decided before the program is built: the patterns are matched on the
 * whole graph, because an epilogue makes one GEMM compute several nodes
 * (a bias gradient, a fused activation), which then emit nothing of their
 * own, and the GEMM may run at the place of a later one of them. Internal
 * to codegen/. */
#ifndef TGC_CODEGEN_EPILOGUE_H
#define TGC_CODEGEN_EPILOGUE_H
#include "codegen/codegen.h"

typedef struct cg_epi_choice {
    cg_epilogue epi; /* CG_EPI_NONE: no epilogue GEMM runs here */
    int gemm;        /* the linear or matmul whose GEMM this is */
    int out;         /* the node whose buffer the GEMM writes as C */
    int bias;        /* the node bound as bias (a parameter read, or a gradient written) */
    int aux;         /* the node whose buffer holds aux, or -1 */
} cg_epi_choice;

typedef struct cg_epi_plan {
    int n;
    cg_epi_choice *at; /* per node id: the epilogue GEMM that runs at this node's place */
    int *absorbed;     /* per node id: the node at whose place the GEMM computing it runs
                          (itself, when that is its own place), or -1 */
} cg_epi_plan;

/* The choices for target t (none for the CPU, or when TGC_CUDA_EPILOGUES=0). */
cg_epi_plan *cg_epi_plan_new(const ir_graph *g, cg_target t);
void cg_epi_plan_free(cg_epi_plan *p);

#endif
