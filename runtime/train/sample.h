/* Drawing the next token from a row of logits (`tgc sample`,
 * docs/sampling.md): temperature, top-k and a deterministic draw.
 *
 * A draw is a function of (seed, draw number, logits) only: the uniform of
 * draw number i is u53 of Philox block (i, tgc_name_key("tgc.sample"),
 * seed) (runtime/philox.h), so the same seed gives the same text on any
 * machine whose logits agree bit for bit.
 *
 *   temperature 0: greedy, the argmax (the lowest token id on a tie);
 *   else: the candidates are the top_k largest logits (ties: the lower id
 *   first; top_k 0 or >= vocab: every token, in id order), weighted by
 *   exp((logit - max) / temperature) in double; the token is the first
 *   candidate whose running sum of weights exceeds u * total.
 *
 * The sampler allocates its scratch once (rt_sampler_init); a draw
 * allocates nothing. */
#ifndef TGC_RT_SAMPLE_H
#define TGC_RT_SAMPLE_H
#include <stdint.h>

typedef struct rt_sampler {
    int64_t vocab;
    double temperature; /* 0: greedy */
    int64_t top_k;      /* candidates (0 or >= vocab: all) */
    uint64_t seed;
    uint64_t key;       /* tgc_name_key("tgc.sample") */
    int32_t *cand;      /* scratch: candidate ids (vocab entries) */
    double *w;          /* scratch: their weights */
} rt_sampler;

void rt_sampler_init(rt_sampler *s, int64_t vocab, double temperature, int64_t top_k, uint64_t seed);
void rt_sampler_free(rt_sampler *s);

/* The token of draw number `draw` from logits[0 .. vocab); -1 when some
 * logit is NaN or infinite. */
int32_t rt_sampler_draw(rt_sampler *s, const float *logits, int64_t draw);

/* The index of the largest of x[0 .. n) (the lowest on a tie); -1 when
 * some element is not finite. */
int32_t rt_sample_argmax(const float *x, int64_t n);

/* The uniform in [0, 1) of draw number `draw` under seed (above). */
double rt_sample_uniform(uint64_t seed, int64_t draw);

#endif
