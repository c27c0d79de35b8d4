/* oneDNN's matmul for the 16-bit CPU GEMMs (runtime/backend/gemm16.h):
 * libdnnl.so.2 opened with dlopen on first use (the build needs only its
 * headers, and not even those: without them this path reports itself
 * unavailable), one primitive per GEMM made at plan load. */
#ifndef TGC_RT_ONEDNN_H
#define TGC_RT_ONEDNN_H
#include <stdbool.h>
#include <stddef.h>

#include "codegen/codegen.h"

/* Whether libdnnl opens here (and its version), else false with why. */
bool rt_onednn_available(char *why, size_t cap);
/* The library's version, "2.6.3", or "" when it does not open. */
const char *rt_onednn_version(void);

typedef struct rt_onednn_gemm rt_onednn_gemm;
/* A matmul computing g (16-bit A, B, C; alpha an output scale, beta a sum
 * post-op), or NULL with why. An f32 g makes an f32 matmul: the tests check
 * the descriptors with it on CPUs without the 16-bit instructions. */
rt_onednn_gemm *rt_onednn_gemm_new(const cg_gemm *g, char *why, size_t cap);
bool rt_onednn_gemm_run(rt_onednn_gemm *p, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                        size_t cap);
void rt_onednn_gemm_free(rt_onednn_gemm *p);

#endif
