/* 16-bit GEMMs on the CPU (docs/runtime.md, "16-bit GEMMs"): A, B and C are
 * bf16 or IEEE half (uint16 bit patterns), C = alpha op(A) op(B) + beta C with
 * fp32 accumulation and C rounded to nearest even once (f16: overflow to inf),
 * batched and strided like the fp32 GEMMs (codegen/codegen.h, cg_gemm).
 *
 * Two paths, chosen at run time per dtype:
 *   onednn   oneDNN's matmul primitive on the 16-bit buffers (libdnnl.so.2,
 *            opened with dlopen), where the CPU has the instructions: bf16
 *            needs AVX512_BF16, f16 AVX512_FP16; one primitive per GEMM
 *            shape, made when the plan is loaded;
 *   convert  A, B (and C when beta != 0) converted to fp32 in a workspace
 *            allocated once for the plan (the largest 16-bit GEMM's, up to
 *            64 MiB: larger ones run as tiles of C), OpenBLAS cblas_sgemm,
 *            C converted back with round-to-nearest-even.
 * TGC_CPU_BF16_GEMM=onednn|convert|auto forces the bf16 GEMMs' path,
 * TGC_CPU_F16_GEMM the f16 GEMMs' (unset or "auto": onednn where it can
 * run, else convert); onednn where the CPU lacks the instructions or the
 * library does not open is refused with the reason.
 * The conversions are vectorised (F16C / AVX2 / AVX-512 chosen by cpuid) and
 * run on the calling thread's OpenMP team between the BLAS calls, so the
 * kernels, the conversions and the BLAS share one pool. */
#ifndef TGC_RT_GEMM16_H
#define TGC_RT_GEMM16_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codegen/codegen.h"
#include "runtime/backend/half.h"
#include "support/diag.h"

typedef enum rt_gemm16_path { RT_GEMM16_CONVERT, RT_GEMM16_ONEDNN } rt_gemm16_path;

/* The path of dtype t's GEMMs (IR_BF16 or IR_F16) on this machine under
 * $TGC_CPU_BF16_GEMM / $TGC_CPU_F16_GEMM; false with the reason in why when the variable names
 * a path that cannot run here or is not a path at all. */
bool rt_gemm16_choose(ir_dtype t, rt_gemm16_path *path, char *why, size_t cap);
/* Whether oneDNN's t matmul runs here (the CPU's instructions, libdnnl, and
 * a primitive made for a small GEMM: oneDNN 2.6 has no f16 matmul even on
 * AVX512_FP16 CPUs), else false with why. auto takes onednn exactly then. */
bool rt_gemm16_onednn_offers(ir_dtype t, char *why, size_t cap);
const char *rt_gemm16_path_name(rt_gemm16_path p); /* "onednn", "convert" */

/* A plan's 16-bit GEMMs: the workspace of the conversion path and the oneDNN
 * primitives, made once. *out is NULL when the program has none. false
 * after reporting to d (a forced path that cannot run, a primitive oneDNN
 * refused to make, no memory). */
typedef struct rt_gemm16 rt_gemm16;
bool rt_gemm16_new(const cg_program *p, rt_gemm16 **out, diag *d);
void rt_gemm16_free(rt_gemm16 *s);
/* The path instruction i's GEMM takes (i a 16-bit GEMM of the program). */
rt_gemm16_path rt_gemm16_path_of(const rt_gemm16 *s, int i);
/* Bytes of the conversion workspace (0 where every GEMM runs on oneDNN). */
int64_t rt_gemm16_workspace_bytes(const rt_gemm16 *s);

/* Instruction i's 16-bit GEMM g on a, b, c (host memory). s NULL (callers
 * outside a plan, such as tests): the conversion path with a workspace of
 * the calling thread, grown on demand. false with the reason in why (a
 * oneDNN execution error). */
bool rt_gemm16_run(rt_gemm16 *s, int i, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                   size_t cap);

#endif
