/* GEMMs through cuBLASLt (docs/cuda.md, "GEMMs (cuBLASLt)").
 *
 * tgc links no CUDA library: libcublasLt is opened with dlopen on first
 * use (the soname, then $CUDA_HOME/lib64, $CUDA_PATH/lib64 and the
 * toolkit's library directory found at configure time) and the functions
 * used are resolved into a table. The toolkit's headers give only types
 * and enums. Built without the toolkit, every call reports "built without
 * the CUDA toolkit".
 *
 * A program's GEMM (cg_gemm) is row-major; cuBLASLt is column-major, so an
 * rt_lt_gemm describes C^T = op(B)^T op(A)^T: cuBLASLt's A is the
 * program's B and vice versa, m and n swap, and the leading dimensions
 * stay. Descriptors are plain host objects: rt_lt_gemm_new needs no GPU. */
#ifndef TGC_RT_CUBLASLT_H
#define TGC_RT_CUBLASLT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "codegen/codegen.h"
#include "support/diag.h"

typedef struct rt_lt rt_lt;           /* library handle, workspace, stream */
typedef struct rt_lt_gemm rt_lt_gemm; /* the descriptors of one cg_gemm; built without a GPU */

/* dlopen cuBLASLt once (thread-safe); false + error if missing. */
bool rt_lt_load(diag *d);

/* The matmul descriptor (compute type, scale type, transposes, epilogue)
 * and the A/B/C/D layouts (+ batch count and strides) of g. fp32 GEMMs
 * compute in exact fp32 (CUBLAS_COMPUTE_32F; TGC_CUDA_TF32=1 in the
 * environment allows TF32 tensor cores), fp64 in fp64. NULL + error for
 * another dtype, a bad shape or a library failure. */
rt_lt_gemm *rt_lt_gemm_new(const cg_gemm *g, diag *d);

/* One line: m n k, transposes, leading dimensions, batch (and strides),
 * dtype, compute type, epilogue — in cuBLASLt's column-major terms, every
 * value read back from the descriptors with the GetAttribute calls. */
void rt_lt_gemm_describe(const rt_lt_gemm *m, FILE *out);
void rt_lt_gemm_free(rt_lt_gemm *m);

/* cudaStream_t, device workspace (cuBLASLt asks 32 MiB on Hopper); needs a GPU. */
rt_lt *rt_lt_new(void *stream, void *workspace, size_t workspace_bytes, diag *d);

/* Runs the GEMM; the algorithm is chosen by cublasLtMatmulAlgoGetHeuristic
 * on first use and cached in m (per shape; chosen again only if the
 * operands' alignment changes). bias and aux are the epilogue's (NULL when
 * it has none). 0 on success, else nonzero with rt_lt_error. Asynchronous
 * on the stream; allocates nothing. */
int rt_lt_run(rt_lt *lt, rt_lt_gemm *m, const void *a, const void *b, void *c, const void *bias, void *aux);
const char *rt_lt_error(const rt_lt *lt);
void rt_lt_free(rt_lt *lt);

/* ---- inspection (tests, --gemm-report) ----------------------------------- */

/* What the descriptors hold, read back with the GetAttribute calls. Enum
 * values are cuBLASLt's (cublasOperation_t, cublasComputeType_t,
 * cudaDataType_t, cublasLtEpilogue_t). Layouts are indexed A, B, C, D. */
typedef struct rt_lt_info {
    int transa, transb;
    int compute, scale_type;
    int epilogue;
    cg_epilogue cg_epi;  /* the epilogue mapped back to the program's name */
    int type[4];
    uint64_t rows[4], cols[4];
    int64_t ld[4];
    int32_t batch[4];
    int64_t stride[4];
    int64_t aux_ld;
    const void *bias, *aux; /* the epilogue pointers (set by rt_lt_gemm_bind / rt_lt_run) */
} rt_lt_info;

/* false + error if the library is missing or a GetAttribute call fails. */
bool rt_lt_gemm_info(const rt_lt_gemm *m, rt_lt_info *out, diag *d);
/* Sets the epilogue's pointers in the matmul descriptor (a host call, no
 * GPU; rt_lt_run does it). false + error if the epilogue needs one that is
 * NULL. */
bool rt_lt_gemm_bind(rt_lt_gemm *m, const void *bias, void *aux, diag *d);

/* Opens a CUDA library by its sonames (NULL-terminated), then in
 * $CUDA_HOME/lib64, $CUDA_PATH/lib64 and the configure-time toolkit
 * directory. NULL with a message naming what was tried in err. */
void *rt_cuda_dlopen(const char *const *sonames, const char *what, char *err, size_t cap);

#endif
