/* Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011), bit-identical to
 * Random123's philox4x32_10, curand's Philox and PyTorch's philox.
 *
 * tgc's determinism invariant (DESIGN.md) rests on this file: an initial
 * parameter value is a function of (seed, name, global element index) and a
 * dropout decision a function of (seed, step, op, global element index), so
 * no partition of a tensor or a batch changes any value.
 *
 * The per-element core below is `static inline` and depends only on
 * <stdint.h> (and <math.h> for the normal transform), so generated C kernels
 * include this header and evaluate exactly the same formulas. A CUDA
 * renderer defines TGC_PHILOX_FN (e.g. `static __device__ __forceinline__`)
 * and TGC_PHILOX_NO_INCLUDES (its prelude supplies uint32_t, log, ...) before
 * including it.
 *
 * Exact definitions (lo(x) / hi(x): the low / high 32 bits of a uint64):
 *
 *   philox(c0, c1, key) = philox4x32_10({lo(c0), hi(c0), lo(c1), hi(c1)},
 *                                       {lo(key), hi(key)})   -> r[0..3]
 *   u24(x)      = (x >> 8) * 2^-24                  in [0, 1)   (exact in float)
 *   u24_pos(x)  = ((x >> 8) + 1) * 2^-24            in (0, 1]   (never log(0))
 *   u53(a, b)   = ((a << 21) ^ (b >> 11)) * 2^-53   in [0, 1)   (64-bit a)
 *   u53_pos(a, b) = (((a << 21) ^ (b >> 11)) + 1) * 2^-53  in (0, 1]
 *
 * Initialisation of element i (int64 global row-major index) of the tensor
 * named `name_key` (tgc_name_key) under `seed`:
 *
 *   normal f32:  r = philox(i >> 2, name_key, seed); j = i & 3;
 *                p = j >> 1 (pair); u1 = u24_pos(r[2p]); u2 = u24(r[2p+1]);
 *                z = sqrt(-2 log u1) * (j even ? cos(2 pi u2) : sin(2 pi u2));
 *                value = (float)(mean + std * z)
 *   normal f64:  r = philox(i >> 1, name_key, seed);
 *                u1 = u53_pos(r[0], r[1]); u2 = u53(r[2], r[3]);
 *                value = mean + std * sqrt(-2 log u1) * (i even ? cos : sin)(2 pi u2)
 *   uniform f32: r = philox(i >> 2, name_key, seed);
 *                value = (float)(lo + (hi - lo) * u24(r[i & 3]))     in [lo, hi]
 *   uniform f64: r = philox(i >> 1, name_key, seed); k = 2 * (i & 1);
 *                value = lo + (hi - lo) * u53(r[k], r[k+1])
 *
 * The normal transform is evaluated in double (2 pi = 6.283185307179586) and
 * rounded once, so the f32 normals agree bit for bit with any libm whose
 * double log/sqrt/sin/cos are correctly rounded (glibc's are, in practice);
 * the uniforms and dropout bits are exact integer/float arithmetic everywhere.
 *
 * Dropout, element i of the op named `op_key`, at training step `step`:
 *
 *   key  = seed ^ ((step + 1) * 0x9E3779B97F4A7C15)     (never equal to seed)
 *   bits = philox(i >> 2, op_key, key)[i & 3]
 *   keep = u24(bits) >= p                                (p = drop probability)
 *
 * Different tensors differ in the counter's upper half, different steps in the
 * key, so no two (name, index) or (step, op, index) share a Philox block. */
#ifndef TGC_PHILOX_H
#define TGC_PHILOX_H

#ifndef TGC_PHILOX_NO_INCLUDES
#include <math.h>
#include <stdint.h>
#endif

#ifndef TGC_PHILOX_FN
#define TGC_PHILOX_FN static inline
#endif

#define TGC_PHILOX_M0 0xD2511F53u
#define TGC_PHILOX_M1 0xCD9E8D57u
#define TGC_PHILOX_W0 0x9E3779B9u
#define TGC_PHILOX_W1 0xBB67AE85u
#define TGC_RNG_STEP_MUL 0x9E3779B97F4A7C15ull
#define TGC_RNG_TWO_PI 6.283185307179586

/* ---- the kernel-includable core ---------------------------------------- */

/* One Philox4x32 block, 10 rounds, the key bumped between rounds. */
TGC_PHILOX_FN void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)TGC_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)TGC_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += TGC_PHILOX_W0;
        k1 += TGC_PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* philox(c0, c1, key) of the header comment: 128-bit counter as two uint64. */
TGC_PHILOX_FN void rng_philox_block(uint64_t c0, uint64_t c1, uint64_t key, uint32_t out[4])
{
    const uint32_t ctr[4] = {(uint32_t)c0, (uint32_t)(c0 >> 32), (uint32_t)c1, (uint32_t)(c1 >> 32)};
    const uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    philox4x32_10(ctr, k, out);
}

TGC_PHILOX_FN float rng_u24(uint32_t x) { return (float)(x >> 8) * 0x1p-24f; }
TGC_PHILOX_FN float rng_u24_pos(uint32_t x) { return (float)((x >> 8) + 1u) * 0x1p-24f; }
TGC_PHILOX_FN double rng_u53(uint32_t a, uint32_t b)
{
    return (double)(((uint64_t)a << 21) ^ (b >> 11)) * 0x1p-53;
}
TGC_PHILOX_FN double rng_u53_pos(uint32_t a, uint32_t b)
{
    return (double)((((uint64_t)a << 21) ^ (b >> 11)) + 1u) * 0x1p-53;
}

/* The Philox key of dropout at `step` (see the header comment). */
TGC_PHILOX_FN uint64_t rng_dropout_key(uint64_t seed, uint64_t step)
{
    return seed ^ ((step + 1u) * TGC_RNG_STEP_MUL);
}

/* The 32 random bits deciding element idx of dropout op op_key at step. */
TGC_PHILOX_FN uint32_t rng_dropout_bits(uint64_t seed, uint64_t step, uint64_t op_key, int64_t idx)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)idx >> 2, op_key, rng_dropout_key(seed, step), r);
    return r[idx & 3];
}

/* Keep (1) or drop (0) with drop probability p: keep iff u24(bits) >= p. */
TGC_PHILOX_FN int rng_dropout_keep(uint32_t bits, float p) { return rng_u24(bits) >= p; }

/* A standard normal from two uniforms; `sine` picks the second of the pair. */
TGC_PHILOX_FN double rng_box_muller(double u1_pos, double u2, int sine)
{
    double rad = sqrt(-2.0 * log(u1_pos));
    double theta = TGC_RNG_TWO_PI * u2;
    return rad * (sine ? sin(theta) : cos(theta));
}

TGC_PHILOX_FN float rng_normal_f32_at(uint64_t seed, uint64_t name_key, int64_t idx, float mean, float std)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)idx >> 2, name_key, seed, r);
    int j = (int)(idx & 3), p = j >> 1;
    double z = rng_box_muller((double)rng_u24_pos(r[2 * p]), (double)rng_u24(r[2 * p + 1]), j & 1);
    return (float)((double)mean + (double)std * z);
}

TGC_PHILOX_FN double rng_normal_f64_at(uint64_t seed, uint64_t name_key, int64_t idx, double mean, double std)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)idx >> 1, name_key, seed, r);
    return mean + std * rng_box_muller(rng_u53_pos(r[0], r[1]), rng_u53(r[2], r[3]), (int)(idx & 1));
}

TGC_PHILOX_FN float rng_uniform_f32_at(uint64_t seed, uint64_t name_key, int64_t idx, float lo, float hi)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)idx >> 2, name_key, seed, r);
    return (float)((double)lo + ((double)hi - (double)lo) * (double)rng_u24(r[idx & 3]));
}

TGC_PHILOX_FN double rng_uniform_f64_at(uint64_t seed, uint64_t name_key, int64_t idx, double lo, double hi)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)idx >> 1, name_key, seed, r);
    int k = 2 * (int)(idx & 1);
    return lo + (hi - lo) * rng_u53(r[k], r[k + 1]);
}

/* ---- library functions (runtime/philox.c) ------------------------------ */
#ifndef TGC_PHILOX_NO_INCLUDES

/* A stable 64-bit key of a parameter or op name: FNV-1a 64 over the bytes
 * (offset 0xcbf29ce484222325, prime 0x100000001b3), then MurmurHash3's
 * fmix64 finaliser so every output bit depends on every input bit. */
uint64_t tgc_name_key(const char *name);

/* out[k] = the value of global element start + k, k in [0, n), as defined in
 * the header comment; filling [a, c) at once or as [a, b) + [b, c) gives the
 * same bits. The fills evaluate each Philox block once for its neighbours. */
void rng_normal_fill(float *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key, float mean,
                     float std);
void rng_normal_fill_f64(double *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key,
                         double mean, double std);
void rng_uniform_fill(float *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key, float lo,
                      float hi);
void rng_uniform_fill_f64(double *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key,
                          double lo, double hi);

#endif
#endif
