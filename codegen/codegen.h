/* Code generation: turns a memory-planned graph into a program of
 * instructions (library GEMMs and generated kernels) and renders the
 * kernels as C for the CPU backend.
 *
 * Every non-GEMM op has an emitter (emit.c, a table indexed by op) that
 * builds kernel IR; an op with no emitter is unsupported on this backend and
 * cg_build says so, naming the op and the node's source location. */
#ifndef TGC_CODEGEN_H
#define TGC_CODEGEN_H
#include <stdbool.h>
#include <stdint.h>

#include "codegen/kir.h"
#include "ir/ir.h"
#include "support/diag.h"

/* Where a kernel argument or GEMM operand points at run time. */
typedef enum cg_bind_kind {
    CG_BIND_NODE,  /* the buffer of graph node `node` (mem kind + offset) */
    CG_BIND_WS,    /* the shared workspace at byte `offset` */
    CG_BIND_STATE, /* optimizer state slot `node` (0 = first moment, 1 = second), at `offset` bytes */
} cg_bind_kind;

typedef struct cg_bind {
    cg_bind_kind kind;
    int node;
    int64_t offset;
} cg_bind;

typedef struct cg_gemm {
    ir_dtype dtype;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c; /* elements */
    double alpha, beta;
    cg_bind a, b, c;
} cg_gemm;

/* A collective over the tensor-parallel group; count is the elements each
 * rank contributes (all_gather, reduce_scatter: a block; all_reduce: all). */
typedef enum cg_comm_kind { CG_ALL_REDUCE, CG_ALL_GATHER, CG_REDUCE_SCATTER } cg_comm_kind;

typedef struct cg_comm {
    cg_comm_kind kind;
    ir_dtype dtype;
    int64_t count;
    cg_bind src, dst; /* all_reduce: in place on dst */
    bool max;         /* all_reduce: max instead of sum */
} cg_comm;

typedef enum cg_instr_kind { CG_KERNEL, CG_GEMM, CG_COMM } cg_instr_kind;

typedef struct cg_instr {
    cg_instr_kind kind;
    int node;   /* the IR node it computes (for traces and errors) */
    int kernel; /* CG_KERNEL: index into kernels */
    cg_gemm gemm;
    cg_comm comm;
} cg_instr;

typedef struct cg_program {
    arena mem;
    kernel **kernels;
    cg_bind (*binds)[KMAX_ARGS];
    int nkernels, kcap;
    cg_instr *instrs;
    int ninstrs, icap;
    int64_t workspace_bytes;
    int64_t state_slots;  /* optimizer state buffers (each the size of the params) */
    int master_slot;      /* mixed precision: the slot of the fp32 master weights, else -1 */
} cg_program;

/* Builds the program of a memory-planned graph. NULL after reporting an
 * unsupported op or an unplanned value. */
cg_program *cg_build(const ir_graph *g, diag *d);
void cg_program_free(cg_program *p);

/* Renders every kernel as C (one translation unit, malloc'd). */
char *cg_render_c(const cg_program *p);

/* Ops that the CPU backend computes without a generated kernel. */
bool cg_op_is_view(const ir_node *n);
/* Lists the ops with no emitter and no GEMM lowering (for the test that
 * shows what the backend lacks). */
int cg_unsupported_ops(ir_op *out, int max);

#endif
