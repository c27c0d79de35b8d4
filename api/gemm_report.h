#ifndef TGC_API_GEMM_REPORT_H
#define TGC_API_GEMM_REPORT_H
#include <stdio.h>

#include "ir/ir.h"
#include "support/diag.h"

/* `tgc compile MODEL --backend cuda --gemm-report`: builds the CUDA program
 * of a compiled graph, creates every GEMM's cuBLASLt descriptors (no GPU
 * needed, libcublasLt must load) and prints one line per GEMM: the node,
 * the epilogue with the nodes it reads or writes, and the descriptors'
 * values read back (runtime/backend/cublaslt.h); then a count per epilogue.
 * Returns 0, or 1 after reporting to d. */
int api_gemm_report(const ir_graph *g, const char *model, FILE *out, diag *d);

#endif
