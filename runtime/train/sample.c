/* Temperature and top-k sampling with a counter-based draw (sample.h). */
#include "runtime/train/sample.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/philox.h"
#include "support/util.h"

void rt_sampler_init(rt_sampler *s, int64_t vocab, double temperature, int64_t top_k, uint64_t seed)
{
    s->vocab = vocab;
    s->temperature = temperature;
    s->top_k = top_k <= 0 || top_k >= vocab ? 0 : top_k;
    s->seed = seed;
    s->key = tgc_name_key("tgc.sample");
    s->cand = xcalloc((size_t)vocab, sizeof *s->cand);
    s->w = xcalloc((size_t)vocab, sizeof *s->w);
}

void rt_sampler_free(rt_sampler *s)
{
    free(s->cand);
    free(s->w);
    s->cand = NULL;
    s->w = NULL;
}

double rt_sample_uniform(uint64_t seed, int64_t draw)
{
    uint32_t r[4];
    rng_philox_block((uint64_t)draw, tgc_name_key("tgc.sample"), seed, r);
    return rng_u53(r[0], r[1]);
}

int32_t rt_sample_argmax(const float *x, int64_t n)
{
    int32_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return -1;
        if (best < 0 || x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

/* a ranks below b: a smaller logit, or the same logit and a larger id. */
static int worse(const float *l, int32_t a, int32_t b) { return l[a] < l[b] || (l[a] == l[b] && a > b); }

/* Restores the min-heap (the worst at h[0]) below position i. */
static void sift_down(int32_t *h, int64_t n, int64_t i, const float *l)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && worse(l, h[c + 1], h[c])) c++;
        if (!worse(l, h[c], h[i])) return;
        int32_t t = h[c];
        h[c] = h[i];
        h[i] = t;
        i = c;
    }
}

/* The k best ids of l into h[0 .. k), best first: a min-heap of the best
 * seen so far, then a heap sort. O(vocab log k), no allocation. */
static void top_k(const float *l, int64_t vocab, int64_t k, int32_t *h)
{
    for (int64_t i = 0; i < k; i++) h[i] = (int32_t)i;
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(h, k, i, l);
    for (int64_t i = k; i < vocab; i++)
        if (worse(l, h[0], (int32_t)i)) {
            h[0] = (int32_t)i;
            sift_down(h, k, 0, l);
        }
    for (int64_t n = k - 1; n > 0; n--) {
        int32_t t = h[0];
        h[0] = h[n];
        h[n] = t;
        sift_down(h, n, 0, l);
    }
}

int32_t rt_sampler_draw(rt_sampler *s, const float *logits, int64_t draw)
{
    int32_t best = rt_sample_argmax(logits, s->vocab);
    if (best < 0 || s->temperature == 0.0) return best;
    int64_t n = s->top_k ? s->top_k : s->vocab;
    if (s->top_k) top_k(logits, s->vocab, n, s->cand);
    else
        for (int64_t i = 0; i < n; i++) s->cand[i] = (int32_t)i;
    double m = logits[best], total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s->w[i] = exp(((double)logits[s->cand[i]] - m) / s->temperature);
        total += s->w[i];
    }
    uint32_t r[4];
    rng_philox_block((uint64_t)draw, s->key, s->seed, r);
    double target = rng_u53(r[0], r[1]) * total, run = 0.0;
    for (int64_t i = 0; i < n; i++) {
        run += s->w[i];
        if (run > target) return s->cand[i];
    }
    /* Rounding left the running sum at or below the target: the last
     * candidate with a weight. */
    for (int64_t i = n - 1; i > 0; i--)
        if (s->w[i] > 0.0) return s->cand[i];
    return s->cand[0];
}
