#ifndef TGC_API_KERNEL_REPORT_H
#define TGC_API_KERNEL_REPORT_H
#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h"
#include "support/diag.h"

/* `tgc compile MODEL --backend cuda --kernel-report`: renders the CUDA
 * kernels of a compiled graph, compiles them with NVRTC for `arch` (no GPU
 * needed) and prints one line per kernel (name, what it computes, launch
 * shape, registers, spill bytes, stack, shared memory) and a summary to
 * out. Returns 0, or 1 when a kernel spills, NVRTC warns, or compilation
 * fails (the error in d). */
int api_kernel_report(const ir_graph *g, const char *model, const char *arch, bool no_cache, FILE *out, diag *d);

#endif
