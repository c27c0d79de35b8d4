/* bf16 and IEEE half (binary16) as uint16 bit patterns: vectorised
 * conversions to and from fp32 (AVX-512, AVX2 or F16C chosen by cpuid;
 * every form gives the same bits), and the CPU's features. The 16-bit CPU
 * GEMMs (runtime/backend/gemm16.h) and the communicators' 16-bit
 * reductions (runtime/comm/comm.h) use them. */
#ifndef TGC_RT_HALF_H
#define TGC_RT_HALF_H
#include <stdbool.h>
#include <stdint.h>

/* What this CPU offers (cpuid, and the OS saving the AVX-512 state). */
bool rt_cpu_has_avx512_bf16(void);
bool rt_cpu_has_avx512_fp16(void);
bool rt_cpu_has_avx2(void); /* AVX2 and FMA */
/* The OpenBLAS core (its OPENBLAS_CORETYPE name) for this CPU's vector ISA,
 * or NULL where tgc leaves OpenBLAS's own choice (runtime/backend/blas.h). */
const char *rt_cpu_openblas_core(void);
/* One line naming the CPU model and the flags the 16-bit GEMMs care about,
 * e.g. "AMD EPYC 7B13 (avx2 f16c no avx512f no avx512_bf16 no avx512_fp16)". */
const char *rt_cpu_describe(void);

/* The conversions (n elements, vectorised, on the calling thread):
 * widening is exact; narrowing rounds to nearest even, NaN stays a (quiet)
 * NaN, f16 overflows to infinity. */
void rt_bf16_to_f32(const uint16_t *x, float *y, int64_t n);
void rt_f32_to_bf16(const float *x, uint16_t *y, int64_t n);
void rt_f16_to_f32(const uint16_t *x, float *y, int64_t n);
void rt_f32_to_f16(const float *x, uint16_t *y, int64_t n);

#endif
