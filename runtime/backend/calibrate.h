/* GEMM calibration: this machine's single-precision GEMM rate (CBLAS
 * sgemm, the CPU backend's GEMMs) at square and transformer-shaped sizes,
 * the compute rate `tgc plan` uses when no --peak-tflops is given, and the
 * peak `tgc run` reports MFU against (docs/planner.md). */
#ifndef TGC_RT_CALIBRATE_H
#define TGC_RT_CALIBRATE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_gemm_point {
    int64_t m, k, n;   /* C[m, n] = A[m, k] B[k, n] */
    double flops;      /* 2 m k n */
    double seconds;    /* the best of the timed repetitions */
    double rate;       /* FLOP/s */
} rt_gemm_point;

#define RT_CALIB_SQUARE 3 /* 1024, 2048, 4096 */
#define RT_CALIB_SHAPED 4 /* b = 1, 2, 4, 8 */

typedef struct rt_gemm_calibration {
    rt_gemm_point square[RT_CALIB_SQUARE];
    /* A transformer's first MLP GEMM, [b s, h] x [h, 4h], for b = 1, 2, 4, 8. */
    int64_t s, h;
    rt_gemm_point shaped[RT_CALIB_SHAPED];
    double peak;    /* the best rate measured */
    /* The least-squares fit of the shaped rates to rate(b) = r_max b / (b +
     * b_half): 1/rate is linear in 1/b. */
    double r_max, b_half;
    /* Memory bandwidth (bytes read + written per second) of a 256 MiB
     * memcpy on one thread: the rate of the non-GEMM kernels' traffic. */
    double mem_bw;
} rt_gemm_calibration;

/* Times cblas_sgemm at the square sizes and at [b s, h] x [h, 4h] (s and h
 * capped at 1024 to keep the calibration to seconds). Each size runs once
 * to warm up, then until min_seconds have passed (at least twice). */
void rt_gemm_calibrate(rt_gemm_calibration *c, int64_t s, int64_t h, double min_seconds);

/* The rate of one 16-bit (t: IR_BF16 or IR_F16) GEMM [m, k] x [k, n] on
 * this machine through the path a plan would take (runtime/backend/gemm16.h:
 * oneDNN where the CPU has the instructions, else fp32 conversion around
 * sgemm; TGC_CPU_BF16_GEMM / TGC_CPU_F16_GEMM honoured), timed like the
 * sgemm points; *path names it. false with the reason in why when that path
 * cannot run (a forced path refused). Opt-in: rt_gemm_calibrate does not
 * call it (the planner's 16-bit compute rate for `tgc plan --bf16`). */
bool rt_gemm16_calibrate(rt_gemm_point *pt, int t, int64_t m, int64_t k, int64_t n, double min_seconds,
                         const char **path, char *why, size_t cap);

#endif
