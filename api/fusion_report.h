/* `tgc compile --fusion-report` (docs/fusion.md): what fusion saves. */
#ifndef TGC_API_FUSION_REPORT_H
#define TGC_API_FUSION_REPORT_H
#include <stdio.h>

#include "ir/ir.h"
#include "support/diag.h"

/* Builds the programs of the same model compiled without fusion (unfused)
 * and with it (fused) and prints, per training step and rank, the kernels,
 * GEMMs and collectives launched, the activation bytes they read and write,
 * the activation arena, and what the fuse pass fused. Returns 0, or 1 after
 * reporting why a program could not be built. */
int api_fusion_report(const ir_graph *unfused, const ir_graph *fused, FILE *out, diag *d);

#endif
