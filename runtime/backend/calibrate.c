#include "calibrate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/blas.h"
#include "runtime/backend/gemm16.h"
#include "runtime/backend/half.h"
#include "support/util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Deterministic, non-trivial operands (denormals or zeros could take
 * other paths in the BLAS). */
static void fill(float *x, int64_t n, uint32_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
}

static void time_gemm(rt_gemm_point *pt, int64_t m, int64_t k, int64_t n, double min_seconds)
{
    float *a = xmalloc((size_t)(m * k) * sizeof *a), *b = xmalloc((size_t)(k * n) * sizeof *b);
    float *c = xmalloc((size_t)(m * n) * sizeof *c);
    fill(a, m * k, 1);
    fill(b, k * n, 2);
    pt->m = m, pt->k = k, pt->n = n;
    pt->flops = 2.0 * (double)m * (double)k * (double)n;
    pt->seconds = 0.0;
    rt_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f,
                c, (int)n); /* warm-up: threads started, pages touched */
    double start = now_s();
    for (int rep = 0; rep < 2 || now_s() - start < min_seconds; rep++) {
        double t0 = now_s();
        rt_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n,
                    0.0f, c, (int)n);
        double dt = now_s() - t0;
        if (pt->seconds == 0.0 || dt < pt->seconds) pt->seconds = dt;
    }
    pt->rate = pt->seconds > 0.0 ? pt->flops / pt->seconds : 0.0;
    free(a);
    free(b);
    free(c);
}

/* 1/rate = 1/r_max + (b_half/r_max) (1/b): a line in 1/b. */
static void fit(rt_gemm_calibration *c)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = RT_CALIB_SHAPED;
    for (int i = 0; i < RT_CALIB_SHAPED; i++) {
        double x = 1.0 / (double)(1 << i), y = 1.0 / c->shaped[i].rate;
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icept = (sy - slope * sx) / n;
    if (icept <= 0.0 || slope < 0.0) { /* flat or noisy: no b dependence */
        c->r_max = c->shaped[RT_CALIB_SHAPED - 1].rate;
        c->b_half = 0.0;
        return;
    }
    c->r_max = 1.0 / icept;
    c->b_half = slope / icept;
}

static double memory_bandwidth(double min_seconds)
{
    size_t n = (size_t)256 << 20;
    char *a = xmalloc(n), *b = xmalloc(n);
    memset(a, 1, n);
    memset(b, 2, n); /* pages touched before timing */
    double best = 0.0, start = now_s();
    for (int rep = 0; rep < 2 || now_s() - start < min_seconds; rep++) {
        double t0 = now_s();
        memcpy(rep % 2 ? a : b, rep % 2 ? b : a, n);
        double dt = now_s() - t0;
        if (dt > 0 && 2.0 * (double)n / dt > best) best = 2.0 * (double)n / dt;
    }
    free(a);
    free(b);
    return best;
}

void rt_gemm_calibrate(rt_gemm_calibration *c, int64_t s, int64_t h, double min_seconds)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < RT_CALIB_SQUARE; i++) {
        int64_t n = (int64_t)1024 << i;
        time_gemm(&c->square[i], n, n, n, min_seconds);
    }
    c->s = s < 1 ? 1 : s > 1024 ? 1024 : s;
    c->h = h < 1 ? 1 : h > 1024 ? 1024 : h;
    for (int i = 0; i < RT_CALIB_SHAPED; i++)
        time_gemm(&c->shaped[i], ((int64_t)1 << i) * c->s, c->h, 4 * c->h, min_seconds);
    for (int i = 0; i < RT_CALIB_SQUARE; i++)
        if (c->square[i].rate > c->peak) c->peak = c->square[i].rate;
    for (int i = 0; i < RT_CALIB_SHAPED; i++)
        if (c->shaped[i].rate > c->peak) c->peak = c->shaped[i].rate;
    fit(c);
    c->mem_bw = memory_bandwidth(min_seconds);
}

bool rt_gemm16_calibrate(rt_gemm_point *pt, int t, int64_t m, int64_t k, int64_t n, double min_seconds,
                         const char **path, char *why, size_t cap)
{
    ir_dtype dt = (ir_dtype)t;
    memset(pt, 0, sizeof *pt);
    cg_instr in;
    memset(&in, 0, sizeof in);
    in.kind = CG_GEMM;
    in.gemm = (cg_gemm){.dtype = dt, .m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n, .batch = 1, .alpha = 1.0,
                        .stride_a = m * k, .stride_b = k * n, .stride_c = m * n};
    cg_program prog;
    memset(&prog, 0, sizeof prog);
    prog.instrs = &in;
    prog.ninstrs = 1;
    rt_gemm16_path p;
    if (!rt_gemm16_choose(dt, &p, why, cap)) return false;
    diag d;
    diag_init(&d, NULL);
    d.max_errors = 0;
    rt_gemm16 *s = NULL;
    bool ok = rt_gemm16_new(&prog, &s, &d) && s;
    diag_free(&d);
    if (!ok) {
        snprintf(why, cap, "the %s GEMM's %s path could not be set up", ir_dtype_name(dt), rt_gemm16_path_name(p));
        return false;
    }
    *path = rt_gemm16_path_name(rt_gemm16_path_of(s, 0));
    float *fa = xmalloc((size_t)(m * k) * sizeof *fa), *fb = xmalloc((size_t)(k * n) * sizeof *fb);
    uint16_t *a = xmalloc((size_t)(m * k) * 2), *b = xmalloc((size_t)(k * n) * 2), *c = xmalloc((size_t)(m * n) * 2);
    fill(fa, m * k, 1);
    fill(fb, k * n, 2);
    if (dt == IR_BF16) rt_f32_to_bf16(fa, a, m * k), rt_f32_to_bf16(fb, b, k * n);
    else rt_f32_to_f16(fa, a, m * k), rt_f32_to_f16(fb, b, k * n);
    pt->m = m, pt->k = k, pt->n = n;
    pt->flops = 2.0 * (double)m * (double)k * (double)n;
    ok = rt_gemm16_run(s, 0, &in.gemm, a, b, c, why, cap); /* warm-up */
    double start = now_s();
    for (int rep = 0; ok && (rep < 2 || now_s() - start < min_seconds); rep++) {
        double t0 = now_s();
        ok = rt_gemm16_run(s, 0, &in.gemm, a, b, c, why, cap);
        double dt_s = now_s() - t0;
        if (pt->seconds == 0.0 || dt_s < pt->seconds) pt->seconds = dt_s;
    }
    pt->rate = ok && pt->seconds > 0.0 ? pt->flops / pt->seconds : 0.0;
    rt_gemm16_free(s);
    free(fa), free(fb), free(a), free(b), free(c);
    return ok;
}
