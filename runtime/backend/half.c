/* bf16 / IEEE half conversions and the CPU features they and the 16-bit
 * GEMMs use (runtime/backend/half.h). */
#include "runtime/backend/half.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include "support/env.h"
#define GEMM16_X86 1
#endif

/* ---- the CPU ------------------------------------------------------------------ */

typedef struct cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512dq, avx512vl, avx512_bf16, avx512_fp16;
    bool intel, amd;   /* the vendor string: GenuineIntel; AuthenticAMD or HygonGenuine */
    unsigned family;   /* cpuid 1's family, the extended family added */
    bool scalar_only; /* TGC_GEMM16_SCALAR: the conversions' scalar forms only */
    char model[64];
    char line[256];
} cpu_features;

#ifdef GEMM16_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_detect(void)
{
    cpu.scalar_only = env_flag("TGC_GEMM16_SCALAR");
#ifdef GEMM16_X86
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    bool os_avx = false, os_avx512 = false;
    {
        unsigned v[3];
        __get_cpuid(0, &a, &v[0], &v[2], &v[1]); /* the vendor: ebx, edx, ecx */
        char vendor[13];
        memcpy(vendor, v, 12);
        vendor[12] = 0;
        cpu.intel = !strcmp(vendor, "GenuineIntel");
        cpu.amd = !strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine");
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        cpu.family = (a >> 8) & 0xfu;
        if (cpu.family == 0xfu) cpu.family += (a >> 20) & 0xffu;
        bool osxsave = c & (1u << 27), avx = c & (1u << 28);
        cpu.f16c = c & (1u << 29);
        if (osxsave && avx) {
            uint64_t xcr0 = xgetbv0();
            os_avx = (xcr0 & 0x6) == 0x6;              /* XMM and YMM state */
            os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM0-15 high, ZMM16-31 */
        }
        cpu.f16c = cpu.f16c && os_avx;
        cpu.fma = os_avx && (c & (1u << 12));
    }
    if (max >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        cpu.avx2 = os_avx && (b & (1u << 5));
        cpu.avx512f = os_avx512 && (b & (1u << 16));
        cpu.avx512bw = cpu.avx512f && (b & (1u << 30));
        cpu.avx512dq = cpu.avx512f && (b & (1u << 17));
        cpu.avx512vl = cpu.avx512f && (b & (1u << 31));
        cpu.avx512_fp16 = cpu.avx512bw && (d & (1u << 23));
        unsigned sub = a;
        if (sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) cpu.avx512_bf16 = cpu.avx512bw && (a & (1u << 5));
    }
    unsigned brand[12] = {0};
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    }
    char raw[49];
    memcpy(raw, brand, 48);
    raw[48] = 0;
    const char *m = raw + strspn(raw, " ");
    snprintf(cpu.model, sizeof cpu.model, "%s", *m ? m : "unknown x86-64 CPU");
    for (size_t n = strlen(cpu.model); n > 0 && cpu.model[n - 1] == ' '; n--) cpu.model[n - 1] = 0;
#else
    snprintf(cpu.model, sizeof cpu.model, "a non-x86 CPU");
#endif
    snprintf(cpu.line, sizeof cpu.line, "%s (%savx2 %sf16c %savx512f %savx512_bf16 %savx512_fp16)", cpu.model,
             cpu.avx2 ? "" : "no ", cpu.f16c ? "" : "no ", cpu.avx512f ? "" : "no ", cpu.avx512_bf16 ? "" : "no ",
             cpu.avx512_fp16 ? "" : "no ");
}

static const cpu_features *features(void)
{
    pthread_once(&cpu_once, cpu_detect);
    return &cpu;
}

bool rt_cpu_has_avx512_bf16(void) { return features()->avx512_bf16; }
bool rt_cpu_has_avx512_fp16(void) { return features()->avx512_fp16; }
const char *rt_cpu_describe(void) { return features()->line; }

/* OpenBLAS's DYNAMIC_ARCH build picks its kernels from a table of CPU
 * models and falls back to Prescott (SSE3) for a model it does not know:
 * Debian 12's OpenBLAS 0.3.21 on a 5th-generation Xeon (family 6 model
 * 0xcf) ran sgemm at 40-58 GFLOP/s on 2 cores, against 250 with the
 * Cooperlake kernels. The kernels follow from the vector ISA, so tgc names
 * them from cpuid, as OpenBLAS's own names go: AVX-512 with BF16 Cooperlake,
 * AVX-512 (F, BW, DQ, VL) SkylakeX, AVX2 with FMA Haswell on Intel, Zen on
 * AMD from Zen 1 on (what OpenBLAS itself picks for Zen 1 to 4, AVX-512 or
 * not). NULL: none (an older or other CPU), OpenBLAS's choice stands. */
const char *rt_cpu_openblas_core(void)
{
    const cpu_features *f = features();
    if (f->intel) {
        if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl)
            return f->avx512_bf16 ? "Cooperlake" : "SkylakeX";
        return f->avx2 && f->fma ? "Haswell" : NULL;
    }
    if (f->amd && f->family >= 0x17 && f->avx2 && f->fma) return "Zen";
    return NULL;
}

bool rt_cpu_has_avx2(void) { return features()->avx2 && features()->fma; }

/* ---- conversions ------------------------------------------------------------- */

/* Scalar forms: the reference the vector forms agree with bit for bit, and
 * the tails. */
static inline float bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN, sign kept */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f16_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) {
        float f = (float)m * 0x1p-24f; /* zero or subnormal, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What F16C's vcvtps2ph does under round-to-nearest-even. */
static inline uint16_t f32_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu)); /* quiet NaN */
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (u < 0x38800000u) { /* below 2^-14: a subnormal; the FPU rounds |f| + 0.5 at 2^-24 */
        float a, t;
        memcpy(&a, &u, 4);
        t = a + 0.5f;
        uint32_t v;
        memcpy(&v, &t, 4);
        return (uint16_t)(sign | (v - 0x3f000000u));
    }
    u += 0xc8000fffu + ((u >> 13) & 1u); /* exponent rebias (-112 << 23) and the rounding */
    return (uint16_t)(sign | (u >> 13));
}

static void bf16_f32_scalar(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = bf16_f32(x[i]);
}
static void f32_bf16_scalar(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_bf16(x[i]);
}
static void f16_f32_scalar(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f16_f32(x[i]);
}
static void f32_f16_scalar(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_f16(x[i]);
}

#ifdef GEMM16_X86
__attribute__((target("avx2"))) static void bf16_f32_avx2(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    bf16_f32_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx2"))) static inline __m256i rne_bf16_avx2(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, q, _mm256_castps_si256(nan));
}

__attribute__((target("avx2"))) static void f32_bf16_avx2(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i lo = rne_bf16_avx2(_mm256_loadu_ps(x + i)), hi = rne_bf16_avx2(_mm256_loadu_ps(x + i + 8));
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
        _mm256_storeu_si256((__m256i *)(y + i), p);
    }
    f32_bf16_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx512f"))) static void bf16_f32_avx512(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    bf16_f32_scalar(x + i, y + i, n - i);
}

/* Integer rounding, not vcvtneps2bf16 (which flushes subnormal inputs to
 * zero): every machine rounds the same. */
__attribute__((target("avx512f"))) static void f32_bf16_avx512(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512i u = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q)));
    }
    f32_bf16_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f16_f32_f16c(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    f16_f32_scalar(x + i, y + i, n - i);
}

__attribute__((target("avx,f16c"))) static void f32_f16_f16c(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    f32_f16_scalar(x + i, y + i, n - i);
}
#endif

/* Whether the vector forms may run: tests turn them off (TGC_GEMM16_SCALAR=1)
 * to compare the two bit for bit. */
static bool vector_ok(void) { return !features()->scalar_only; }

void rt_bf16_to_f32(const uint16_t *x, float *y, int64_t n)
{
#ifdef GEMM16_X86
    const cpu_features *f = features();
    if (vector_ok() && f->avx512f) { bf16_f32_avx512(x, y, n); return; }
    if (vector_ok() && f->avx2) { bf16_f32_avx2(x, y, n); return; }
#endif
    bf16_f32_scalar(x, y, n);
}

void rt_f32_to_bf16(const float *x, uint16_t *y, int64_t n)
{
#ifdef GEMM16_X86
    const cpu_features *f = features();
    if (vector_ok() && f->avx512f) { f32_bf16_avx512(x, y, n); return; }
    if (vector_ok() && f->avx2) { f32_bf16_avx2(x, y, n); return; }
#endif
    f32_bf16_scalar(x, y, n);
}

void rt_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
#ifdef GEMM16_X86
    if (vector_ok() && features()->f16c) { f16_f32_f16c(x, y, n); return; }
#endif
    f16_f32_scalar(x, y, n);
}

void rt_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
#ifdef GEMM16_X86
    if (vector_ok() && features()->f16c) { f32_f16_f16c(x, y, n); return; }
#endif
    f32_f16_scalar(x, y, n);
}

