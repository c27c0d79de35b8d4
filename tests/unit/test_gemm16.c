/* The CPU's 16-bit GEMMs (runtime/backend/gemm16.h): the conversions against
 * a reference written here from the formats' definitions (every 16-bit
 * pattern widened; narrowing checked against the nearest representable
 * value found by search, ties to even); bf16 and f16 GEMMs (ta/tb, batched
 * and strided, padded leading dimensions, alpha/beta, odd sizes) against
 * float64 on the 16-bit inputs within fp32 accumulation plus one rounding;
 * exact ties and f16 overflow; and the choice of path: oneDNN only where the
 * CPU has the instructions, TGC_CPU_BF16_GEMM / TGC_CPU_F16_GEMM forcing either path and
 * refusing oneDNN with the reason where it cannot run. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/calibrate.h"
#include "runtime/backend/gemm16.h"
#include "runtime/backend/onednn.h"
#include "runtime/exec.h"

/* ---- the formats, from their definitions -------------------------------- */

static double ref_decode(ir_dtype t, uint16_t h)
{
    int sign = h >> 15;
    int ebits = t == IR_BF16 ? 8 : 5, mbits = t == IR_BF16 ? 7 : 10;
    int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1), bias = (1 << (ebits - 1)) - 1;
    double v;
    if (e == (1 << ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mbits);
    else v = ldexp((double)((1 << mbits) + m), e - bias - mbits);
    return sign ? -v : v;
}

/* The positive finite values of a format in increasing order (patterns
 * 0 .. max finite). */
static int ref_max_finite(ir_dtype t) { return t == IR_BF16 ? 0x7f7f : 0x7bff; }

/* The nearest value to x (finite double), ties to the even pattern, beyond
 * the largest finite value by half an ulp: infinity (IEEE overflow). */
static uint16_t ref_encode(ir_dtype t, double x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    int top = ref_max_finite(t);
    double maxv = ref_decode(t, (uint16_t)top), ulp = maxv - ref_decode(t, (uint16_t)(top - 1));
    if (a >= maxv + ulp / 2) return sign | (uint16_t)(top + 1); /* the infinity pattern */
    int lo = 0, hi = top; /* the largest pattern with value <= a */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ref_decode(t, (uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    if (lo == top) return sign | (uint16_t)lo;
    double dl = a - ref_decode(t, (uint16_t)lo), dh = ref_decode(t, (uint16_t)(lo + 1)) - a;
    int pick = dl < dh ? lo : dh < dl ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
    return sign | (uint16_t)pick;
}

static uint32_t rng = 12345;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static float f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_widen(ir_dtype t)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = malloc(65536 * sizeof *f);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    if (t == IR_BF16) rt_bf16_to_f32(h, f, 65536);
    else rt_f16_to_f32(h, f, 65536);
    int bad = 0;
    for (int i = 0; i < 65536; i++) {
        double r = ref_decode(t, (uint16_t)i);
        bool same = isnan(r) ? isnan(f[i]) : (double)f[i] == r && !signbit(f[i]) == !signbit(r);
        if (!same && bad++ < 5) fprintf(stderr, "%s widen 0x%04x: %g, want %g\n", ir_dtype_name(t), i, f[i], r);
    }
    CHECK(bad == 0);
    free(h);
    free(f);
}

static void test_narrow(ir_dtype t)
{
    enum { N = 200003 }; /* odd: the vector loops' tails run too */
    float *x = malloc(N * sizeof *x);
    uint16_t *y = malloc(N * sizeof *y);
    int n = 0;
    /* Every tie and both neighbours of it across the range, the edges, then
     * random values of every magnitude. */
    for (int p = 0; p < ref_max_finite(t) && n + 3 < N / 2; p += t == IR_BF16 ? 7 : 3) {
        double mid = (ref_decode(t, (uint16_t)p) + ref_decode(t, (uint16_t)(p + 1))) / 2;
        float m = (float)mid;
        if ((double)m != mid) continue; /* not a float: no tie to test */
        x[n++] = m;
        x[n++] = nextafterf(m, 0);
        x[n++] = nextafterf(m, INFINITY);
    }
    const float edge[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e-8f, 5.9604645e-08f, 2.9802322e-08f,
                          2.9802326e-08f, 6.1035156e-05f, 3.3895314e38f, 3.4028235e38f, 1e-40f, -1e-45f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[n++] = edge[i];
    while (n < N) {
        uint32_t u = next_u32();
        if ((u & 0x7f800000u) == 0x7f800000u) continue; /* NaN and infinity below */
        x[n++] = f32_bits(u);
    }
    if (t == IR_BF16) rt_f32_to_bf16(x, y, N);
    else rt_f32_to_f16(x, y, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint16_t want = ref_encode(t, (double)x[i]);
        if (y[i] != want && bad++ < 5)
            fprintf(stderr, "%s narrow %.9g: 0x%04x, want 0x%04x\n", ir_dtype_name(t), x[i], y[i], want);
    }
    CHECK(bad == 0);
    /* Specials: infinities stay, NaN stays a NaN (quiet), sign kept. */
    float sp[3] = {INFINITY, -INFINITY, f32_bits(0x7fa00001u)}; /* the last a signalling NaN */
    uint16_t o[3];
    if (t == IR_BF16) rt_f32_to_bf16(sp, o, 3);
    else rt_f32_to_f16(sp, o, 3);
    CHECK(isinf(ref_decode(t, o[0])) && o[0] < 0x8000);
    CHECK(isinf(ref_decode(t, o[1])) && o[1] >= 0x8000);
    CHECK(isnan(ref_decode(t, o[2])));
    CHECK(o[2] & (t == IR_BF16 ? 0x0040 : 0x0200)); /* quiet */
    free(x);
    free(y);
}

/* ---- GEMMs ------------------------------------------------------------- */

typedef struct gcase {
    bool ta, tb;
    int64_t m, n, k, batch, pad; /* pad: extra elements per row of every operand */
    double alpha, beta;
} gcase;

static cg_gemm make_gemm(ir_dtype t, const gcase *c)
{
    cg_gemm g = {.dtype = t, .ta = c->ta, .tb = c->tb, .m = c->m, .n = c->n, .k = c->k, .batch = c->batch,
                 .alpha = c->alpha, .beta = c->beta};
    int64_t ac = c->ta ? c->m : c->k, bc = c->tb ? c->k : c->n;
    g.lda = ac + c->pad, g.ldb = bc + c->pad, g.ldc = c->n + c->pad;
    g.stride_a = (c->ta ? c->k : c->m) * g.lda + 3; /* batches apart by more than a matrix */
    g.stride_b = (c->tb ? c->n : c->k) * g.ldb + 5;
    g.stride_c = c->m * g.ldc + 1;
    return g;
}

static uint16_t *random16(ir_dtype t, int64_t n)
{
    uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = ref_encode(t, ((double)(next_u32() >> 8) / 16777216.0 - 0.5) * 4.0);
    return h;
}

/* i == -2: a oneDNN primitive made directly (whatever ISA oneDNN finds). */
static rt_onednn_gemm *direct;

/* Runs g through s (NULL: the plan-less conversion) as instruction i and
 * checks every element of C (and that C's padding is untouched). */
static void check_gemm(rt_gemm16 *s, int i, const cg_gemm *g, const char *what)
{
    ir_dtype t = g->dtype;
    int64_t na = g->stride_a * g->batch, nb = g->stride_b * g->batch, nc = g->stride_c * g->batch;
    uint16_t *a = random16(t, na), *b = random16(t, nb), *c = random16(t, nc), *c0 = malloc((size_t)(nc ? nc : 1) * 2);
    memcpy(c0, c, (size_t)nc * 2);
    char why[512] = "";
    bool ok = i == -2 ? rt_onednn_gemm_run(direct, g, a, b, c, why, sizeof why)
                      : rt_gemm16_run(s, i, g, a, b, c, why, sizeof why);
    CHECK(ok);
    if (!ok) fprintf(stderr, "%s: %s\n", what, why);
    int bad = 0;
    double worst = 0.0;
    for (int64_t q = 0; q < g->batch; q++)
        for (int64_t r = 0; r < g->m; r++) {
            for (int64_t col = 0; col < g->n; col++) {
                double sum = 0.0, mag = 0.0;
                for (int64_t p = 0; p < g->k; p++) {
                    double x = ref_decode(t, a[q * g->stride_a + (g->ta ? p * g->lda + r : r * g->lda + p)]);
                    double y = ref_decode(t, b[q * g->stride_b + (g->tb ? col * g->ldb + p : p * g->ldb + col)]);
                    sum += x * y;
                    mag += fabs(x * y);
                }
                int64_t ci = q * g->stride_c + r * g->ldc + col;
                double old = ref_decode(t, c0[ci]);
                double want = g->alpha * sum + (g->beta != 0.0 ? g->beta * old : 0.0);
                double got = ref_decode(t, c[ci]);
                /* fp32 accumulation: (k + 2) roundings of 2^-24 of the
                 * magnitudes; then one rounding to 16 bits (half an ulp). */
                double acc = (double)(g->k + 2) * 0x1p-24 * (fabs(g->alpha) * mag + fabs(g->beta * old));
                uint16_t w16 = ref_encode(t, want);
                double ulp = fabs(ref_decode(t, (uint16_t)((w16 & 0x7fff) + 1)) - ref_decode(t, w16 & 0x7fff));
                double err = fabs(got - want), tol = acc + ulp / 2 * (1 + 1e-9);
                if (err / (tol > 0 ? tol : 1) > worst) worst = err / (tol > 0 ? tol : 1);
                if (!(err <= tol) && bad++ < 3)
                    fprintf(stderr, "%s: C[%lld][%lld][%lld] = %.9g, want %.9g (tolerance %.3g)\n", what, (long long)q,
                            (long long)r, (long long)col, got, want, tol);
            }
            for (int64_t col = g->n; col < g->ldc; col++) { /* the padding stays */
                int64_t ci = q * g->stride_c + r * g->ldc + col;
                if (c[ci] != c0[ci] && bad++ < 3) fprintf(stderr, "%s: padding written\n", what);
            }
        }
    CHECK(bad == 0);
    printf("  %-48s max error %.2f of the tolerance\n", what, worst);
    free(a);
    free(b);
    free(c);
    free(c0);
}

static const gcase cases[] = {
    {false, false, 7, 13, 19, 1, 0, 1.0, 0.0},
    {true, false, 5, 9, 33, 1, 3, 1.0, 1.0},
    {false, true, 17, 3, 8, 2, 1, 0.5, 0.0},
    {true, true, 1, 31, 4, 3, 0, 1.0, 1.0},
    {false, false, 64, 48, 96, 2, 2, -1.0, 0.25},
    {false, true, 130, 70, 300, 1, 0, 1.0, 1.0}, /* large enough for the OpenMP conversions */
    {true, false, 1, 1, 1, 1, 0, 2.0, 1.0},
    {false, false, 3, 4, 0, 1, 0, 1.0, 1.0}, /* k = 0: C = beta C */
    {true, false, 40, 50, 60, 2, 1, 1.0, 1.0}, /* these three: several tiles each way under a small cap */
    {true, true, 33, 45, 70, 1, 0, 0.5, 0.0},
    {false, true, 50, 37, 41, 2, 2, 1.0, 1.0},
};

static void describe_case(char *buf, size_t cap, ir_dtype t, const gcase *c, const char *path)
{
    snprintf(buf, cap, "%s %s %c%c %lldx%lldx%lld b%lld beta %g", path, ir_dtype_name(t), c->ta ? 'T' : 'N',
             c->tb ? 'T' : 'N', (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->batch, c->beta);
}

/* C = A B with exact fp32 sums that are 16-bit ties: each must round to
 * the even neighbour; and f16's overflow to infinity. */
static void test_ties(rt_gemm16 *s, int base, ir_dtype t)
{
    /* bf16: 257 lies between 256 and 258 (even: 256), 259 between 258 and
     * 260 (even: 260). f16: 2049 -> 2048, 2051 -> 2052. */
    double big = t == IR_BF16 ? 256.0 : 2048.0;
    const double sums[2][2] = {{big, 1.0}, {big + 2.0, 1.0}};
    const double want[2] = {big, big + 4.0};
    for (int q = 0; q < 2; q++) {
        uint16_t a[2] = {ref_encode(t, 1.0), ref_encode(t, 1.0)}, b[2] = {ref_encode(t, sums[q][0]), ref_encode(t, sums[q][1])};
        uint16_t c = 0;
        cg_gemm g = {.dtype = t, .m = 1, .n = 1, .k = 2, .lda = 2, .ldb = 1, .ldc = 1, .batch = 1, .alpha = 1.0,
                     .stride_a = 2, .stride_b = 2, .stride_c = 1};
        char why[256];
        CHECK(rt_gemm16_run(s, s ? base : -1, &g, a, b, &c, why, sizeof why));
        CHECK(ref_decode(t, c) == want[q]);
    }
    if (t == IR_F16) { /* 65504 + 16 = 65520: halfway to the next binade, rounds to infinity */
        uint16_t a[2] = {ref_encode(t, 1.0), ref_encode(t, 1.0)}, b[2] = {ref_encode(t, 65504.0), ref_encode(t, 16.0)};
        uint16_t c = 0;
        cg_gemm g = {.dtype = t, .m = 1, .n = 1, .k = 2, .lda = 2, .ldb = 1, .ldc = 1, .batch = 1, .alpha = 1.0,
                     .stride_a = 2, .stride_b = 2, .stride_c = 1};
        char why[256];
        CHECK(rt_gemm16_run(s, s ? base : -1, &g, a, b, &c, why, sizeof why));
        CHECK(c == 0x7c00);
        b[1] = ref_encode(t, 8.0); /* 65512: below the halfway point, stays 65504 */
        CHECK(rt_gemm16_run(s, s ? base : -1, &g, a, b, &c, why, sizeof why));
        CHECK(c == 0x7bff);
    }
}

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* A program of every case for both dtypes (plus the tie GEMMs), made into a
 * plan under path `env`, each GEMM checked. */
static void test_plan(const char *env_bf16, const char *env_f16)
{
    setenv("TGC_CPU_BF16_GEMM", env_bf16, 1);
    setenv("TGC_CPU_F16_GEMM", env_f16, 1);
    cg_instr ins[2 * NCASES + 4];
    memset(ins, 0, sizeof ins);
    int n = 0;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NCASES; i++) {
            ins[n].kind = CG_GEMM;
            ins[n++].gemm = make_gemm(t ? IR_F16 : IR_BF16, &cases[i]);
        }
    for (int t = 0; t < 2; t++) { /* the ties' shape */
        ins[n].kind = CG_GEMM;
        ins[n++].gemm = (cg_gemm){.dtype = t ? IR_F16 : IR_BF16, .m = 1, .n = 1, .k = 2, .lda = 2, .ldb = 1, .ldc = 1,
                                  .batch = 1, .alpha = 1.0, .stride_a = 2, .stride_b = 2, .stride_c = 1};
    }
    ins[n++].kind = CG_KERNEL; /* not a GEMM: no path */
    cg_program p;
    memset(&p, 0, sizeof p);
    p.instrs = ins;
    p.ninstrs = n;
    diag d;
    diag_init(&d, stderr);
    rt_gemm16 *s = NULL;
    bool ok = rt_gemm16_new(&p, &s, &d);
    CHECK(ok && s);
    if (!s) return;
    rt_gemm16_path want_bf16, want_f16;
    char why[512];
    CHECK(rt_gemm16_choose(IR_BF16, &want_bf16, why, sizeof why));
    CHECK(rt_gemm16_choose(IR_F16, &want_f16, why, sizeof why));
    int64_t ws = 0;
    const char *capenv = getenv("TGC_GEMM16_WORKSPACE");
    int64_t cap = capenv ? atoll(capenv) : (int64_t)1 << 24;
    for (int i = 0; i < n - 1; i++) {
        const cg_gemm *g = &ins[i].gemm;
        rt_gemm16_path path = rt_gemm16_path_of(s, i);
        CHECK(path == (g->dtype == IR_BF16 ? want_bf16 : want_f16));
        if (path == RT_GEMM16_CONVERT) {
            int64_t f = g->m * g->k + g->k * g->n + g->m * g->n;
            if (f > cap) { /* tiled: under the cap but for the smallest tiles (16 x 16) */
                int64_t kk = g->k > 0 ? g->k : 1, nt = g->n < cap / 2 / kk ? g->n : cap / 2 / kk;
                nt = nt < 16 ? (g->n < 16 ? g->n : 16) : nt;
                int64_t mt = (cap - kk * nt) / (kk + nt);
                mt = mt < 16 ? 16 : mt;
                mt = mt > g->m ? g->m : mt;
                f = mt * g->k + g->k * nt + mt * nt;
                CHECK(f <= cap || mt == 16 || nt == 16);
            }
            if (4 * f > ws) ws = 4 * f;
        }
        if (i < 2 * NCASES) {
            char what[160];
            describe_case(what, sizeof what, g->dtype, &cases[i % NCASES], rt_gemm16_path_name(path));
            check_gemm(s, i, g, what);
        }
    }
    CHECK(rt_gemm16_workspace_bytes(s) == ws); /* the largest converted GEMM's, once */
    test_ties(s, 2 * NCASES, IR_BF16);
    test_ties(s, 2 * NCASES + 1, IR_F16);
    rt_gemm16_free(s);
    unsetenv("TGC_CPU_BF16_GEMM");
    unsetenv("TGC_CPU_F16_GEMM");
}

/* ---- the choice of path -------------------------------------------------- */

static void test_choice(void)
{
    char lib[256], why[512];
    bool have_lib = rt_onednn_available(lib, sizeof lib);
    printf("cpu: %s\n", rt_cpu_describe());
    printf("oneDNN: %s\n", have_lib ? rt_onednn_version() : lib);
    /* oneDNN's matmul where the instructions and the library are: made for a
     * small GEMM by a primitive of this test's own, the probe's answer. */
    bool offers[2];
    for (int t = 0; t < 2; t++) {
        ir_dtype dt = t ? IR_F16 : IR_BF16;
        bool isa = t ? rt_cpu_has_avx512_fp16() : rt_cpu_has_avx512_bf16();
        cg_gemm g = make_gemm(dt, &cases[0]);
        rt_onednn_gemm *mine = isa && have_lib ? rt_onednn_gemm_new(&g, why, sizeof why) : NULL;
        offers[t] = mine != NULL;
        rt_onednn_gemm_free(mine);
        CHECK(rt_gemm16_onednn_offers(dt, why, sizeof why) == offers[t]);
        if (!offers[t]) printf("oneDNN offers no %s matmul: %s\n", ir_dtype_name(dt), why);
        if (isa && have_lib && !offers[t]) CHECK(strstr(why, "makes no") != NULL);
    }
    rt_gemm16_path p;
    unsetenv("TGC_CPU_BF16_GEMM");
    unsetenv("TGC_CPU_F16_GEMM");
    CHECK(rt_gemm16_choose(IR_BF16, &p, why, sizeof why));
    CHECK((p == RT_GEMM16_ONEDNN) == offers[0]);
    printf("auto: bf16 GEMMs take the %s path\n", rt_gemm16_path_name(p));
    CHECK(rt_gemm16_choose(IR_F16, &p, why, sizeof why));
    CHECK((p == RT_GEMM16_ONEDNN) == offers[1]);
    printf("auto: f16 GEMMs take the %s path\n", rt_gemm16_path_name(p));

    setenv("TGC_CPU_BF16_GEMM", "convert", 1);
    setenv("TGC_CPU_F16_GEMM", "convert", 1);
    CHECK(rt_gemm16_choose(IR_BF16, &p, why, sizeof why) && p == RT_GEMM16_CONVERT);
    CHECK(rt_gemm16_choose(IR_F16, &p, why, sizeof why) && p == RT_GEMM16_CONVERT);

    setenv("TGC_CPU_BF16_GEMM", "onednn", 1);
    setenv("TGC_CPU_F16_GEMM", "onednn", 1);
    bool ok = rt_gemm16_choose(IR_BF16, &p, why, sizeof why);
    CHECK(ok == offers[0]);
    if (ok) CHECK(p == RT_GEMM16_ONEDNN);
    else if (!rt_cpu_has_avx512_bf16()) CHECK(strstr(why, "lacks AVX512_BF16") && strstr(why, "convert"));
    else CHECK(strstr(why, "TGC_CPU_BF16_GEMM=onednn: ") != NULL);
    if (!ok) printf("forced onednn refused: %s\n", why);
    ok = rt_gemm16_choose(IR_F16, &p, why, sizeof why);
    CHECK(ok == offers[1]);
    if (!ok) printf("forced onednn refused: %s\n", why);
    if (!ok && !rt_cpu_has_avx512_fp16())
        CHECK(strstr(why, "TGC_CPU_F16_GEMM=onednn") && strstr(why, "lacks AVX512_FP16") != NULL);

    /* A plan with a bf16 GEMM under a refused path is refused as a whole. */
    if (!offers[0]) {
        cg_instr in;
        memset(&in, 0, sizeof in);
        in.kind = CG_GEMM;
        in.gemm = make_gemm(IR_BF16, &cases[0]);
        cg_program prog;
        memset(&prog, 0, sizeof prog);
        prog.instrs = &in;
        prog.ninstrs = 1;
        diag d;
        diag_init(&d, stderr);
        rt_gemm16 *s = (rt_gemm16 *)1;
        CHECK(!rt_gemm16_new(&prog, &s, &d) && s == NULL);
        /* An f16 plan does not care what the bf16 GEMMs would take. */
        setenv("TGC_CPU_F16_GEMM", "convert", 1);
        in.gemm = make_gemm(IR_F16, &cases[0]);
        CHECK(rt_gemm16_new(&prog, &s, &d) && s && rt_gemm16_path_of(s, 0) == RT_GEMM16_CONVERT);
        rt_gemm16_free(s);
    }

    setenv("TGC_CPU_BF16_GEMM", "fast", 1);
    CHECK(!rt_gemm16_choose(IR_BF16, &p, why, sizeof why));
    CHECK(strstr(why, "TGC_CPU_BF16_GEMM='fast': expected onednn, convert or auto") != NULL);
    unsetenv("TGC_CPU_BF16_GEMM");
    unsetenv("TGC_CPU_F16_GEMM");
}

/* oneDNN's primitives made directly, on whatever ISA oneDNN finds here (where
 * it has no bf16 / f16 matmul for this CPU it says so and nothing runs):
 * the descriptors, strides, output scale and sum post-op checked on any
 * machine with the library. */
static void test_onednn_direct(void)
{
    char why[512];
    if (!rt_onednn_available(why, sizeof why)) {
        printf("oneDNN primitives: not run (%s)\n", why);
        return;
    }
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NCASES; i++) {
            cg_gemm g = make_gemm(t ? IR_F16 : IR_BF16, &cases[i]);
            char what[160];
            describe_case(what, sizeof what, g.dtype, &cases[i], "oneDNN direct");
            direct = rt_onednn_gemm_new(&g, why, sizeof why);
            if (!direct) {
                printf("  %-48s no primitive on this CPU: %s\n", what, why);
                continue;
            }
            check_gemm(NULL, -2, &g, what);
            rt_onednn_gemm_free(direct);
        }
}

/* The same descriptors in f32, which oneDNN runs on any x86-64 CPU. */
static void test_onednn_f32(void)
{
    char why[512];
    if (!rt_onednn_available(why, sizeof why)) return;
    for (int i = 0; i < NCASES; i++) {
        cg_gemm g = make_gemm(IR_F32, &cases[i]);
        rt_onednn_gemm *p = rt_onednn_gemm_new(&g, why, sizeof why);
        CHECK(p != NULL);
        if (!p) { fprintf(stderr, "oneDNN f32: %s\n", why); continue; }
        int64_t na = g.stride_a * g.batch, nb = g.stride_b * g.batch, nc = g.stride_c * g.batch;
        float *a = malloc((size_t)na * 4 + 4), *b = malloc((size_t)nb * 4 + 4), *c = malloc((size_t)nc * 4 + 4),
              *c0 = malloc((size_t)nc * 4 + 4);
        for (int64_t q = 0; q < na; q++) a[q] = (float)((next_u32() >> 8) / 16777216.0 - 0.5);
        for (int64_t q = 0; q < nb; q++) b[q] = (float)((next_u32() >> 8) / 16777216.0 - 0.5);
        for (int64_t q = 0; q < nc; q++) c0[q] = c[q] = (float)((next_u32() >> 8) / 16777216.0 - 0.5);
        CHECK(rt_onednn_gemm_run(p, &g, a, b, c, why, sizeof why));
        int bad = 0;
        for (int64_t q = 0; q < g.batch; q++)
            for (int64_t r = 0; r < g.m; r++)
                for (int64_t col = 0; col < g.ldc; col++) {
                    int64_t ci = q * g.stride_c + r * g.ldc + col;
                    double want = c0[ci], mag = fabs(c0[ci]);
                    if (col < g.n) {
                        double sum = 0.0;
                        for (int64_t k = 0; k < g.k; k++) {
                            double x = a[q * g.stride_a + (g.ta ? k * g.lda + r : r * g.lda + k)];
                            double y = b[q * g.stride_b + (g.tb ? col * g.ldb + k : k * g.ldb + col)];
                            sum += x * y;
                            mag += fabs(x * y);
                        }
                        want = g.alpha * sum + g.beta * c0[ci];
                    }
                    if (fabs(c[ci] - want) > (double)(g.k + 2) * 0x1p-23 * (mag + 1e-30) && bad++ < 3)
                        fprintf(stderr, "oneDNN f32 case %d: C[%lld] = %g, want %g\n", i, (long long)ci, c[ci], want);
                }
        CHECK(bad == 0);
        rt_onednn_gemm_free(p);
        free(a), free(b), free(c), free(c0);
    }
    printf("oneDNN f32 matmuls of the same descriptors: checked\n");
}

/* The host backends' reduce and scale on 16-bit elements: each element
 * widened, combined in f32, rounded once per call. */
static void test_backend_ops(void)
{
    static rt_exec e; /* the host operations use only e->err */
    for (int t = 0; t < 2; t++) {
        ir_dtype dt = t ? IR_F16 : IR_BF16;
        enum { N = 1001 };
        uint16_t a[N], x[N], m[N], sc[N];
        uint16_t *ra = random16(dt, N), *rx = random16(dt, N);
        memcpy(a, ra, sizeof a);
        memcpy(x, rx, sizeof x);
        free(ra);
        free(rx);
        a[0] = ref_encode(dt, t ? 2048.0 : 256.0), x[0] = ref_encode(dt, 1.0); /* a tie: stays */
        x[1] = (uint16_t)(t ? 0x7e01 : 0x7fc1);                                    /* NaN wins max */
        memcpy(m, a, sizeof a);
        memcpy(sc, a, sizeof a);
        uint16_t sum[N];
        memcpy(sum, a, sizeof a);
        CHECK(rt_backend_cpu.reduce(&e, sum, x, N, dt, RT_REDUCE_SUM));
        CHECK(rt_backend_cpu.reduce(&e, m, x, N, dt, RT_REDUCE_MAX));
        CHECK(rt_backend_cpu.scale(&e, sc, N, 1.0 / 3.0, dt));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float fa = (float)ref_decode(dt, a[i]), fx = (float)ref_decode(dt, x[i]);
            if (i != 1 && sum[i] != ref_encode(dt, (double)(fa + fx))) bad++;
            if (i != 1 && m[i] != (fx > fa ? x[i] : a[i])) bad++;
            if (sc[i] != ref_encode(dt, (double)(fa * (float)(1.0 / 3.0)))) bad++;
        }
        CHECK(bad == 0);
        CHECK(ref_decode(dt, sum[0]) == (t ? 2048.0 : 256.0));
        CHECK(m[1] == x[1] && isnan(ref_decode(dt, sum[1])));
    }
    CHECK(!rt_backend_cpu.reduce(&e, NULL, NULL, 0, IR_I32, RT_REDUCE_SUM) && strstr(e.err, "i32"));
}

int main(void)
{
    test_widen(IR_BF16);
    test_widen(IR_F16);
    test_narrow(IR_BF16);
    test_narrow(IR_F16);
    test_choice();
    test_backend_ops();

    printf("plan-less conversion path:\n");
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < NCASES; i++) {
            cg_gemm g = make_gemm(t ? IR_F16 : IR_BF16, &cases[i]);
            char what[160];
            describe_case(what, sizeof what, g.dtype, &cases[i], "plan-less");
            check_gemm(NULL, -1, &g, what);
        }
    test_ties(NULL, -1, IR_BF16);
    test_ties(NULL, -1, IR_F16);
    test_onednn_direct();
    test_onednn_f32();

    printf("plan, both paths convert:\n");
    test_plan("convert", "convert");
    printf("plan, both paths auto:\n");
    test_plan("auto", "auto");
    /* A small workspace cap: the larger GEMMs run as tiles of C. */
    setenv("TGC_GEMM16_WORKSPACE", "3000", 1);
    printf("plan, convert, tiles under a 3000-float workspace:\n");
    test_plan("convert", "convert");
    printf("plan-less, tiles:\n");
    for (int i = 0; i < NCASES; i++) {
        cg_gemm g = make_gemm(IR_BF16, &cases[i]);
        char what[160];
        describe_case(what, sizeof what, g.dtype, &cases[i], "plan-less tiled");
        check_gemm(NULL, -1, &g, what);
    }
    unsetenv("TGC_GEMM16_WORKSPACE");
    char lib[256], why0[512];
    bool dnnl = rt_onednn_available(lib, sizeof lib);
    bool ob = rt_gemm16_onednn_offers(IR_BF16, why0, sizeof why0), of = rt_gemm16_onednn_offers(IR_F16, why0, sizeof why0);
    if (dnnl && (ob || of)) {
        const char *b = ob ? "onednn" : "convert", *f = of ? "onednn" : "convert";
        printf("plan, bf16 %s, f16 %s:\n", b, f);
        test_plan(b, f);
    } else {
        printf("plan on oneDNN: not run (%s)\n", dnnl ? "oneDNN offers neither a bf16 nor an f16 matmul here" : lib);
    }
    /* The planner's 16-bit calibration point: a rate through the plan's path. */
    rt_gemm_point pt;
    const char *path = NULL;
    char why[512];
    CHECK(rt_gemm16_calibrate(&pt, IR_BF16, 64, 96, 128, 0.01, &path, why, sizeof why));
    CHECK(pt.rate > 0 && pt.flops == 2.0 * 64 * 96 * 128 && path);
    printf("calibration: bf16 64x96x128 %.2f GFLOP/s (%s)\n", pt.rate * 1e-9, path ? path : "?");
    setenv("TGC_CPU_BF16_GEMM", "fast", 1);
    CHECK(!rt_gemm16_calibrate(&pt, IR_BF16, 64, 96, 128, 0.01, &path, why, sizeof why) && strstr(why, "'fast'"));
    unsetenv("TGC_CPU_BF16_GEMM");
    CHECK_DONE();
}
