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

/* Work fused into a GEMM by cuBLASLt's epilogues (CUDA target only: the
 * CPU target never sets one). In the program's row-major terms, with
 * P = alpha op(A) op(B) of shape [m, n]:
 *   CG_EPI_BIAS           C = P + bias[n] on every row (a linear's bias)
 *   CG_EPI_GELU_AUX_BIAS  aux = P + bias[n]; C = gelu_tanh(aux)
 *   CG_EPI_DGELU_BGRAD    C = P * gelu_tanh'(aux); bias[n] = column sums of C
 *   CG_EPI_BGRADB         C = A^T B (ta); bias[m] = column sums of A [k, m],
 *                         the sum over the contraction (a bias gradient)
 * The names are cuBLASLt's: cuBLASLt is column-major, so it computes
 * C^T = op(B)^T op(A)^T and the program's A is its B (the bias gradient
 * of the program's A is cuBLASLt's BGRADB). The GELU epilogues are the
 * tanh approximation, and aux holds the pre-activation including the bias
 * (row-major [m, n], leading dimension ldaux, a multiple of 8). */
typedef enum cg_epilogue {
    CG_EPI_NONE,
    CG_EPI_BIAS,
    CG_EPI_GELU_AUX_BIAS,
    CG_EPI_DGELU_BGRAD,
    CG_EPI_BGRADB,
    CG_EPI_COUNT
} cg_epilogue;

/* "none", "bias", "gelu_aux_bias", "dgelu_bgrad", "bgradb". */
const char *cg_epilogue_name(cg_epilogue e);

typedef struct cg_gemm {
    ir_dtype dtype;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t batch, stride_a, stride_b, stride_c; /* elements */
    double alpha, beta;
    cg_bind a, b, c;
    cg_epilogue epilogue;
    cg_bind bias;   /* epilogue != NONE: the bias (read) or bias gradient (written) */
    cg_bind aux;    /* GELU epilogues: the pre-activation (written forward, read backward) */
    int64_t ldaux;  /* elements between rows of aux */
} cg_gemm;

/* The group of ranks a collective runs over, in Megatron's order of the
 * parallel dimensions (tp fastest, then dp, then pp; cp and ep take their
 * places between tp and dp when they are built). */
typedef enum cg_group { CG_GROUP_TP, CG_GROUP_DP, CG_GROUP_PP, CG_GROUP_COUNT } cg_group;

const char *cg_group_name(cg_group g);

/* A collective over its group (the tensor-parallel group unless said);
 * count is the elements each
 * rank contributes (all_gather, reduce_scatter: a block; all_reduce: all).
 * CG_SEND / CG_RECV are a pipeline stage boundary (pp_send of src, pp_recv
 * into dst): the pipeline runtime runs them where the schedule says
 * (runtime/train/pipe.c), never as part of a plain step. */
typedef enum cg_comm_kind { CG_ALL_REDUCE, CG_ALL_GATHER, CG_REDUCE_SCATTER, CG_SEND, CG_RECV } cg_comm_kind;

typedef struct cg_comm {
    cg_comm_kind kind;
    ir_dtype dtype;
    int64_t count;
    cg_bind src, dst; /* all_reduce: in place on dst */
    bool max;         /* all_reduce: max instead of sum */
    cg_group group;   /* tp; the gradient norm's: pp (a pipeline rank's), dp (the distributed optimizer's) */
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
    bool sharded_state;   /* the distributed optimizer: each state slot holds only this rank's shard */
} cg_program;

/* Builds the program of a memory-planned graph. NULL after reporting an
 * unsupported op or an unplanned value. */
cg_program *cg_build(const ir_graph *g, diag *d);

/* What the program is for. The CUDA target differs only in its GEMMs: fp32
 * GEMMs take cuBLASLt epilogues (cg_epilogue) where the graph has the
 * patterns, and the bias kernels or bias-gradient reductions they replace
 * are not emitted (docs/cuda.md, "GEMMs (cuBLASLt)"). TGC_CUDA_EPILOGUES=0
 * in the environment turns the epilogues off. */
typedef enum cg_target { CG_TARGET_CPU, CG_TARGET_CUDA } cg_target;
cg_program *cg_build_target(const ir_graph *g, cg_target t, diag *d);
void cg_program_free(cg_program *p);

/* Renders every kernel as C (one translation unit, malloc'd). */
char *cg_render_c(const cg_program *p);
/* C: a MAP kernel indexing operands by i % C runs as rows x columns of C,
 * its expressions rendered with `mc` for i % C and `mo` for i / C (cg_rx's
 * mod_c); the C, or 0 when it runs as one loop. */
struct kernel;
int64_t cg_render_c_modulus(const struct kernel *k);
/* C: whether a MAP kernel (its arguments bound as binds) runs as uniform
 * loops: a loop-invariant select on every output tested once, and the
 * selects on i < S resolved per segment of the range (render_c.c). Its
 * outputs' expressions then appear in the C source only resolved. */
bool cg_render_c_split(const struct kernel *k, const cg_bind *binds);

/* Renders every kernel as CUDA C++ for NVRTC (one translation unit,
 * malloc'd; docs/cuda.md): kernel k is `extern "C" __global__ void
 * NAME(T0 *a0, const T1 *a1, ..., const tgc_rt *tgc_rtp)`, launched with the
 * argument pointers {&ptr0, ..., &ptr(n-1), &rt_dev} (rt_dev: the device
 * copy of the rt_scalars, which a captured CUDA graph reads at replay). */
char *cg_render_cuda(const cg_program *p);
/* The launch geometry of a kernel as cg_render_cuda renders it (1-D grids
 * and blocks, but for the attention kernels' 3-D grids of (tiles, heads,
 * batch); the block size is the kernel's __launch_bounds__). Dynamic
 * shared memory is always 0: the kernels use static arrays. */
void cg_cuda_launch_dims(const kernel *k, unsigned grid[3], unsigned block[3], unsigned *dyn_shmem);
/* The same for a device of `sms` multiprocessors (0: unknown): a MAP
 * kernel's grid is capped at the blocks the device holds at once, the
 * grid-stride loop covering the rest; the other kinds' grids do not depend
 * on it (a one-row reduction's partials are fixed in its text). */
void cg_cuda_launch_dims_for(const kernel *k, int sms, unsigned grid[3], unsigned block[3], unsigned *dyn_shmem);
/* A MAP kernel's vector lanes (render_cuda.c): 0 where it runs scalar
 * only, else the elements a thread moves at once (16 bytes of its
 * narrowest vector argument, at most 8), with vec[a] set for each argument
 * moved in vectors (its outputs and its loads at index i). */
int cg_cuda_map_vec(const kernel *k, bool vec[KMAX_ARGS]);

/* Whether target t's GEMMs take 16-bit A, B and C (cg_gemm.dtype bf16 /
 * f16, fp32 accumulation); where not, codegen stages them through fp32. */
bool cg_gemm16_native(cg_target t);

/* Ops that the CPU backend computes without a generated kernel. */
bool cg_op_is_view(const ir_graph *g, const ir_node *n);
/* Lists the ops with no emitter and no GEMM lowering (for the test that
 * shows what the backend lacks). */
int cg_unsupported_ops(ir_op *out, int max);

#endif
