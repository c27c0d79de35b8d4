/* Philox-based fills: the formulas of philox.h, evaluated once per Philox
 * block and spread over the block's 2 or 4 neighbouring elements. */
#include "runtime/philox.h"

uint64_t tgc_name_key(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

/* Runs the body for every element start..start+n-1 with `k` its offset in
 * out, `lane` its position in its Philox block (idx >> shift) and r[] the
 * block's four words, computed once per block. */
#define RNG_FOR_BLOCKS(start, n, shift, ...)                                   \
    do {                                                                        \
        const int64_t per_ = (int64_t)1 << (shift);                             \
        int64_t idx_ = (start), end_ = (start) + (n);                           \
        while (idx_ < end_) {                                                   \
            uint64_t block = (uint64_t)idx_ >> (shift);                         \
            int64_t stop_ = ((int64_t)block + 1) * per_;                        \
            if (stop_ > end_) stop_ = end_;                                     \
            uint32_t r[4];                                                      \
            rng_philox_block(block, name_key, seed, r);                         \
            for (; idx_ < stop_; idx_++) {                                      \
                int lane = (int)(idx_ & (per_ - 1));                            \
                int64_t k = idx_ - (start);                                     \
                __VA_ARGS__                                                     \
            }                                                                   \
        }                                                                       \
    } while (0)

void rng_normal_fill(float *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key, float mean,
                     float std)
{
    RNG_FOR_BLOCKS(start, n, 2, {
        int p = lane >> 1;
        double z = rng_box_muller((double)rng_u24_pos(r[2 * p]), (double)rng_u24(r[2 * p + 1]), lane & 1);
        out[k] = (float)((double)mean + (double)std * z);
    });
}

void rng_normal_fill_f64(double *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key,
                         double mean, double std)
{
    RNG_FOR_BLOCKS(start, n, 1, {
        out[k] = mean + std * rng_box_muller(rng_u53_pos(r[0], r[1]), rng_u53(r[2], r[3]), lane);
    });
}

void rng_uniform_fill(float *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key, float lo,
                      float hi)
{
    const double a = lo, w = (double)hi - (double)lo;
    RNG_FOR_BLOCKS(start, n, 2, { out[k] = (float)(a + w * (double)rng_u24(r[lane])); });
}

void rng_uniform_fill_f64(double *out, int64_t start, int64_t n, uint64_t seed, uint64_t name_key,
                          double lo, double hi)
{
    const double w = hi - lo;
    RNG_FOR_BLOCKS(start, n, 1, { out[k] = lo + w * rng_u53(r[2 * lane], r[2 * lane + 1]); });
}
