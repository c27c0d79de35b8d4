/* Philox4x32-10 and the fills built on it: Random123's known-answer vectors,
 * values pinned from an independent implementation of the formulas in
 * runtime/philox.h, determinism, sharding invariance and the moments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/philox.h"

static void test_kat(void)
{
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        philox4x32_10(kat[i].ctr, kat[i].key, out);
        CHECK(memcmp(out, kat[i].out, sizeof out) == 0);
    }
    /* The uint64 form splits counter and key into lo/hi words. */
    uint32_t a[4], b[4];
    rng_philox_block(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull, a);
    philox4x32_10(kat[2].ctr, kat[2].key, b);
    CHECK(memcmp(a, b, sizeof a) == 0);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Expected values computed by a separate Python implementation of the
 * header's formulas: a change here breaks the GPU backend's agreement. */
static void test_pinned_values(void)
{
    CHECK(tgc_name_key("wte") == 0x318f9e625c9c8a5dull);
    CHECK(tgc_name_key("") == 0xefd01f60ba992926ull);
    CHECK(tgc_name_key("h.0.attn.qkv.weight") == 0x66a1005850fa8c90ull);
    uint64_t nk = tgc_name_key("wte");
    static const uint32_t normal32[6] = {0xbbd8c24e, 0x3a92f513, 0xbc0a8895, 0x3af135c5, 0xbc8eaf72, 0xba058df2};
    float f[6];
    rng_normal_fill(f, 0, 6, 42, nk, 0.0f, 0.02f);
    for (int i = 0; i < 6; i++) {
        CHECK(f32_bits(f[i]) == normal32[i]);
        CHECK(f32_bits(rng_normal_f32_at(42, nk, i, 0.0f, 0.02f)) == normal32[i]);
    }
    static const double normal64[3] = {0x1.91648ac178680p+0, 0x1.491d141b6509ap-1, 0x1.2e316b01e641dp+0};
    double g[3];
    rng_normal_fill_f64(g, 0, 3, 42, nk, 1.0, 2.0);
    for (int i = 0; i < 3; i++) CHECK(g[i] == normal64[i]);
    static const uint32_t unif32[5] = {0xbf7aa906, 0x3f065fc6, 0x3e4c3210, 0x3d9d70c0, 0xbedd35bc};
    rng_uniform_fill(f, 0, 5, 7, nk, -1.0f, 1.0f);
    for (int i = 0; i < 5; i++) CHECK(f32_bits(f[i]) == unif32[i]);
    static const double unif64[3] = {-0x1.f5520b7cf3408p-2, 0x1.986423f89d708p-4, -0x1.ba6b75f55499cp-3};
    rng_uniform_fill_f64(g, 0, 3, 7, nk, -0.5, 0.5);
    for (int i = 0; i < 3; i++) CHECK(g[i] == unif64[i]);
    static const uint32_t bits[5] = {0x055a8258, 0x481d3b16, 0xae8ef716, 0x1afaddd3, 0x0e5fa55d};
    uint64_t op = tgc_name_key("drop1");
    for (int i = 0; i < 5; i++) CHECK(rng_dropout_bits(1234, 5, op, i) == bits[i]);
}

/* Filling [start, start+n) at once equals filling it in uneven pieces and
 * equals the per-element functions, bit for bit. */
static void test_sharding(void)
{
    enum { N = 1003 };
    const int64_t start = 37;
    const int64_t cuts[] = {0, 1, 2, 7, 8, 9, 250, 251, 600, 1000, N};
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    double *c = malloc(N * sizeof *c), *e = malloc(N * sizeof *e);
    uint64_t nk = tgc_name_key("h.3.mlp.fc.weight");
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0) rng_normal_fill(a, start, N, 9, nk, 0.5f, 0.1f);
        else rng_uniform_fill(a, start, N, 9, nk, -2.0f, 3.0f);
        for (size_t k = 0; k + 1 < sizeof cuts / sizeof cuts[0]; k++) {
            int64_t lo = cuts[k], n = cuts[k + 1] - lo;
            if (kind == 0) rng_normal_fill(b + lo, start + lo, n, 9, nk, 0.5f, 0.1f);
            else rng_uniform_fill(b + lo, start + lo, n, 9, nk, -2.0f, 3.0f);
        }
        CHECK(memcmp(a, b, N * sizeof *a) == 0);
        int same = 1;
        for (int64_t i = 0; i < N; i++) {
            float v = kind == 0 ? rng_normal_f32_at(9, nk, start + i, 0.5f, 0.1f)
                                : rng_uniform_f32_at(9, nk, start + i, -2.0f, 3.0f);
            same &= f32_bits(v) == f32_bits(a[i]);
        }
        CHECK(same);
    }
    for (int kind = 0; kind < 2; kind++) {
        if (kind == 0) rng_normal_fill_f64(c, start, N, 9, nk, 0.0, 1.0);
        else rng_uniform_fill_f64(c, start, N, 9, nk, 0.0, 1.0);
        for (size_t k = 0; k + 1 < sizeof cuts / sizeof cuts[0]; k++) {
            int64_t lo = cuts[k], n = cuts[k + 1] - lo;
            if (kind == 0) rng_normal_fill_f64(e + lo, start + lo, n, 9, nk, 0.0, 1.0);
            else rng_uniform_fill_f64(e + lo, start + lo, n, 9, nk, 0.0, 1.0);
        }
        CHECK(memcmp(c, e, N * sizeof *c) == 0);
        int same = 1;
        for (int64_t i = 0; i < N; i++) {
            double v = kind == 0 ? rng_normal_f64_at(9, nk, start + i, 0.0, 1.0)
                                 : rng_uniform_f64_at(9, nk, start + i, 0.0, 1.0);
            same &= v == c[i];
        }
        CHECK(same);
    }
    free(a);
    free(b);
    free(c);
    free(e);
}

static void test_determinism(void)
{
    enum { N = 256 };
    float a[N], b[N];
    uint64_t w = tgc_name_key("w"), v = tgc_name_key("v");
    rng_normal_fill(a, 0, N, 1, w, 0.0f, 1.0f);
    rng_normal_fill(b, 0, N, 1, w, 0.0f, 1.0f);
    CHECK(memcmp(a, b, sizeof a) == 0);
    rng_normal_fill(b, 0, N, 2, w, 0.0f, 1.0f); /* another seed */
    CHECK(memcmp(a, b, sizeof a) != 0);
    rng_normal_fill(b, 0, N, 1, v, 0.0f, 1.0f); /* another tensor */
    CHECK(memcmp(a, b, sizeof a) != 0);
    rng_normal_fill(b, N, N, 1, w, 0.0f, 1.0f); /* other elements */
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK(tgc_name_key("w") == w && tgc_name_key("w") != v);
    int finite = 1;
    for (int i = 0; i < N; i++) finite &= isfinite(a[i]);
    CHECK(finite);
}

static void test_moments(void)
{
    enum { N = 1000000 };
    float *x = malloc(N * sizeof *x);
    const float means[] = {0.0f, 0.5f, -3.0f}, stds[] = {1.0f, 2.0f, 0.02f};
    for (int k = 0; k < 3; k++) {
        rng_normal_fill(x, 0, N, 1234 + (uint64_t)k, tgc_name_key("moments"), means[k], stds[k]);
        double s = 0, s2 = 0;
        for (int i = 0; i < N; i++) s += x[i];
        double m = s / N;
        for (int i = 0; i < N; i++) s2 += (x[i] - m) * (x[i] - m);
        double sd = sqrt(s2 / (N - 1));
        CHECK(fabs(m - means[k]) < 0.01);
        CHECK(fabs(sd - stds[k]) < 0.01);
        CHECK(fabs(sd / stds[k] - 1) < 0.01);
    }
    double *y = malloc(N * sizeof *y);
    rng_normal_fill_f64(y, 0, N, 5, tgc_name_key("f64"), 0.0, 1.0);
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++) { s += y[i]; s2 += y[i] * y[i]; }
    CHECK(fabs(s / N) < 0.01 && fabs(sqrt(s2 / N) - 1) < 0.01);
    rng_uniform_fill(x, 0, N, 5, tgc_name_key("u"), -1.0f, 3.0f);
    int inside = 1;
    s = 0;
    for (int i = 0; i < N; i++) { inside &= x[i] >= -1.0f && x[i] <= 3.0f; s += x[i]; }
    CHECK(inside && fabs(s / N - 1.0) < 0.01);
    free(x);
    free(y);
}

static void test_dropout(void)
{
    uint64_t op = tgc_name_key("block.0.drop");
    int64_t kept = 0, all = 0, none = 0, differ = 0;
    const int64_t n = 1000000;
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = rng_dropout_bits(77, 3, op, i);
        kept += rng_dropout_keep(bits, 0.1f);
        all += rng_dropout_keep(bits, 0.0f);
        none += rng_dropout_keep(bits, 1.0f);
        differ += bits != rng_dropout_bits(77, 4, op, i);
    }
    CHECK(fabs((double)kept / n - 0.9) < 0.002);
    CHECK(all == n && none == 0);
    CHECK(differ > n - 10);
    /* Dropout never shares a stream with initialisation under the same seed. */
    CHECK(rng_dropout_key(77, 0) != 77 && rng_dropout_key(77, 0) != rng_dropout_key(77, 1));
}

int main(void)
{
    test_kat();
    test_pinned_values();
    test_sharding();
    test_determinism();
    test_moments();
    test_dropout();
    CHECK_DONE();
}
