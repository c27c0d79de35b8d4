/* The sampler of `tgc sample` (runtime/train/sample.h): greedy and its ties,
 * top-k's candidates, the frequencies of many draws against the softmax,
 * temperature, determinism of the draws, non-finite logits. */
#include <math.h>
#include <stdint.h>

#include "../unit/check.h"
#include "runtime/train/sample.h"

#define V 8
#define DRAWS 200000

/* Frequencies of DRAWS draws (seed 11) into freq[V]. */
static void frequencies(const float *l, double t, int64_t k, double *freq)
{
    rt_sampler s;
    rt_sampler_init(&s, V, t, k, 11);
    int64_t count[V] = {0};
    for (int64_t d = 0; d < DRAWS; d++) count[rt_sampler_draw(&s, l, d)]++;
    for (int i = 0; i < V; i++) freq[i] = (double)count[i] / DRAWS;
    rt_sampler_free(&s);
}

/* The softmax of l / t over the k largest (k 0: all), into p. */
static void reference(const float *l, double t, int k, double *p)
{
    double total = 0;
    for (int i = 0; i < V; i++) {
        int above = 0; /* tokens ranked before i: a larger logit, or equal and a lower id */
        for (int j = 0; j < V; j++) above += l[j] > l[i] || (l[j] == l[i] && j < i);
        p[i] = k && above >= k ? 0.0 : exp(l[i] / t);
        total += p[i];
    }
    for (int i = 0; i < V; i++) p[i] /= total;
}

static double worst(const double *a, const double *b)
{
    double w = 0;
    for (int i = 0; i < V; i++) w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

int main(void)
{
    const float l[V] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f, -3.0f, 1.0f};
    /* Greedy: the argmax, the lowest id on a tie (1 and 4 tie). */
    CHECK(rt_sample_argmax(l, V) == 1);
    rt_sampler g;
    rt_sampler_init(&g, V, 0.0, 0, 5);
    for (int64_t d = 0; d < 10; d++) CHECK(rt_sampler_draw(&g, l, d) == 1);
    rt_sampler_free(&g);

    /* Frequencies against the softmax: all tokens, temperature 1 and 0.5;
     * top-3 (1, 4, 3) and top-2 (1, 4: the tie kept whole). */
    double f[V], p[V];
    frequencies(l, 1.0, 0, f), reference(l, 1.0, 0, p);
    CHECK(worst(f, p) < 0.005);
    frequencies(l, 0.5, 0, f), reference(l, 0.5, 0, p);
    CHECK(worst(f, p) < 0.005);
    frequencies(l, 1.0, 3, f), reference(l, 1.0, 3, p);
    CHECK(worst(f, p) < 0.005);
    CHECK(f[0] == 0 && f[2] == 0 && f[5] == 0 && f[6] == 0 && f[7] == 0 && f[3] > 0);
    frequencies(l, 1.0, 2, f);
    CHECK(f[1] > 0.45 && f[4] > 0.45 && fabs(f[1] + f[4] - 1.0) < 1e-12);
    /* top-k 1 is greedy; k >= vocab is every token. */
    frequencies(l, 1.0, 1, f);
    CHECK(f[1] == 1.0);
    frequencies(l, 1.0, 100, f), reference(l, 1.0, 0, p);
    CHECK(worst(f, p) < 0.005);
    /* A tiny temperature splits the tie and nothing else. */
    frequencies(l, 1e-3, 0, f);
    CHECK(fabs(f[1] + f[4] - 1.0) < 1e-12);

    /* The draws are a function of (seed, draw number): the same twice,
     * another seed another sequence. */
    rt_sampler a, b, c;
    rt_sampler_init(&a, V, 1.0, 0, 42);
    rt_sampler_init(&b, V, 1.0, 0, 42);
    rt_sampler_init(&c, V, 1.0, 0, 43);
    int same = 1, differ = 0;
    for (int64_t d = 0; d < 64; d++) {
        int32_t x = rt_sampler_draw(&a, l, d);
        same &= x == rt_sampler_draw(&b, l, d);
        differ |= x != rt_sampler_draw(&c, l, d);
    }
    CHECK(same && differ);
    CHECK(rt_sample_uniform(42, 7) == rt_sample_uniform(42, 7));
    CHECK(rt_sample_uniform(42, 7) != rt_sample_uniform(42, 8));
    CHECK(rt_sample_uniform(42, 7) >= 0.0 && rt_sample_uniform(42, 7) < 1.0);

    /* A non-finite logit: -1, greedy or not. */
    float bad[V] = {0, 1, NAN, 0, 0, 0, 0, 0};
    CHECK(rt_sampler_draw(&a, bad, 0) == -1);
    CHECK(rt_sample_argmax(bad, V) == -1);
    bad[2] = INFINITY;
    CHECK(rt_sample_argmax(bad, V) == -1);
    rt_sampler_free(&a);
    rt_sampler_free(&b);
    rt_sampler_free(&c);
    CHECK_DONE();
}
