/* 16-bit floats on the host: the conversions of the generated kernels'
 * preludes (codegen/render_expr.c, cg_rx_half_prelude), the same integer
 * code, so a value the host rounds has the bits a kernel would store.
 * To 16 bits: round to nearest even, NaN stays NaN (quiet), f16 overflows
 * to inf from 65520 on and keeps subnormals; from 16 bits: exact. */
#ifndef TGC_RT_HALF_H
#define TGC_RT_HALF_H
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

static inline uint32_t rt_f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float rt_u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline float rt_ld_bf16(uint16_t h) { return rt_u2f((uint32_t)h << 16); }

static inline uint16_t rt_st_bf16(float x)
{
    const uint32_t u = rt_f2u(x);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

static inline float rt_ld_f16(uint16_t h)
{
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const uint32_t n = e == 0x1fu ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13);
    return e ? rt_u2f(s | n) : rt_u2f(s | rt_f2u((float)m * 5.9604644775390625e-8f));
}

static inline uint16_t rt_st_f16(float x)
{
    const uint32_t u = rt_f2u(x), s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    const uint32_t m = a - 0x38000000u, nr = (m + 0xfffu + ((m >> 13) & 1u)) >> 13;
    const uint32_t e = a >> 23, sh = 126u - (e < 102u ? 102u : e > 112u ? 112u : e);
    const uint32_t f = (a & 0x7fffffu) | 0x800000u;
    const uint32_t sr = (f + (1u << (sh - 1u)) - 1u + ((f >> sh) & 1u)) >> sh;
    const uint32_t r = a > 0x7f800000u ? 0x7e00u : a >= 0x477ff000u ? 0x7c00u : a >= 0x38800000u ? nr
                     : e < 102u ? 0u : sr;
    return (uint16_t)(s | r);
}

/* n values between fp32 and t (IR_BF16 or IR_F16). */
static inline void rt_half_pack(ir_dtype t, uint16_t *restrict dst, const float *restrict src, int64_t n)
{
    if (t == IR_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = rt_st_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = rt_st_f16(src[i]);
}

static inline void rt_half_unpack(ir_dtype t, float *restrict dst, const uint16_t *restrict src, int64_t n)
{
    if (t == IR_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = rt_ld_bf16(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = rt_ld_f16(src[i]);
}

/* Whether a 16-bit value is inf or NaN. */
static inline int rt_half_nonfinite(ir_dtype t, uint16_t h)
{
    return t == IR_BF16 ? (h & 0x7f80u) == 0x7f80u : (h & 0x7c00u) == 0x7c00u;
}

#endif
