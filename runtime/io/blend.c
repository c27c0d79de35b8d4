/* Blended datasets: Megatron's BlendedDataset index over tgc's datasets
 * (runtime/io/blend.h). */
#include "runtime/io/blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

/* ---- --data-path ------------------------------------------------------------ */

/* numpy's sum of a float64 array (Megatron normalises the weights with
 * numpy.sum): numpy's pairwise summation (8 partial sums in blocks of up
 * to 128 elements, halves above) of each 8192-element buffer, the buffers
 * added in order, so that the normalised weights are Megatron's to the
 * last bit (tests/data/blend.py checks this against numpy). */
static double pairwise_sum(const double *a, int64_t n)
{
    if (n < 8) {
        double r = 0.0;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i;
        for (i = 8; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

static double numpy_sum(const double *a, int64_t n)
{
    double r = 0.0;
    for (int64_t i = 0; i < n; i += 8192) r += pairwise_sum(a + i, n - i < 8192 ? n - i : 8192);
    return r;
}

#define SPEC_ERROR(d, ...) diag_error_plain((d), "--data-path: " __VA_ARGS__)

bool tgc_blend_spec_parse(int nwords, const char *const *words, tgc_blend_spec *spec, diag *d)
{
    memset(spec, 0, sizeof *spec);
    if (nwords < 1) {
        SPEC_ERROR(d, "no dataset given (expected PATH, or pairs WEIGHT PATH)");
        return false;
    }
    if (nwords > 1 && nwords % 2) {
        SPEC_ERROR(d, "%d arguments: expected one PATH, or pairs WEIGHT PATH (e.g. 0.3 A 0.7 B); the last, '%s', "
                   "has no partner", nwords, words[nwords - 1]);
        return false;
    }
    int n = nwords == 1 ? 1 : nwords / 2;
    if (n > TGC_BLEND_MAX_DATASETS) {
        SPEC_ERROR(d, "%d datasets: at most %d can be blended (Megatron's int16 dataset index)", n,
                   TGC_BLEND_MAX_DATASETS);
        return false;
    }
    spec->n = n;
    spec->paths = xcalloc((size_t)n, sizeof *spec->paths);
    spec->weights = xcalloc((size_t)n, sizeof *spec->weights);
    spec->given = xcalloc((size_t)n, sizeof *spec->given);
    if (nwords == 1) {
        spec->paths[0] = words[0];
        spec->weights[0] = spec->given[0] = 1.0;
        return true;
    }
    bool ok = true;
    for (int k = 0; k < n; k++) {
        const char *w = words[2 * k];
        double v;
        spec->paths[k] = words[2 * k + 1];
        if (!parse_double(w, &v) || !isfinite(v) || !(v > 0.0)) {
            SPEC_ERROR(d, "weight '%s' (argument %d, before '%s') is not a positive number", w, 2 * k + 1,
                       words[2 * k + 1]);
            ok = false;
        }
        spec->given[k] = v;
    }
    double sum = ok ? numpy_sum(spec->given, n) : 0.0;
    if (ok && !(sum > 0.0 && isfinite(sum))) {
        SPEC_ERROR(d, "the weights sum to %g: expected a positive finite sum to normalise by", sum);
        ok = false;
    }
    for (int k = 0; ok && k < n; k++) spec->weights[k] = spec->given[k] / sum;
    if (!ok) tgc_blend_spec_free(spec);
    return ok;
}

void tgc_blend_spec_free(tgc_blend_spec *spec)
{
    free(spec->paths);
    free(spec->weights);
    free(spec->given);
    memset(spec, 0, sizeof *spec);
}

/* ---- the index -------------------------------------------------------------- */

void tgc_blend_indices(const double *w, int n, int64_t size, int16_t *dataset, int64_t *sample)
{
    TGC_ASSERT(n >= 1 && n <= TGC_BLEND_MAX_DATASETS && size >= 0);
    int64_t *count = xcalloc((size_t)n, sizeof *count);
    for (int64_t i = 0; i < size; i++) {
        /* The largest deficit w_k * i - c_k (i at least 1), the first on a tie. */
        double x = i >= 1 ? (double)i : 1.0;
        int best = 0;
        double most = w[0] * x - (double)count[0];
        for (int k = 1; k < n; k++) {
            double e = w[k] * x - (double)count[k];
            if (e > most) {
                most = e;
                best = k;
            }
        }
        dataset[i] = (int16_t)best;
        sample[i] = count[best]++;
    }
    free(count);
}

int64_t tgc_blend_target(double w, int64_t size) { return (int64_t)ceil((double)size * w); }

int64_t tgc_blend_buffer(double w, int64_t size, double surplus)
{
    return (int64_t)ceil((double)tgc_blend_target(w, size) * (1.0 + surplus));
}

/* ---- the blend -------------------------------------------------------------- */

typedef struct blend_index {
    int64_t size, want; /* want: the samples the run asked for */
    int16_t *dataset;
    int64_t *sample;
} blend_index;

struct tgc_blend {
    int n;
    const char **paths;
    double *weights;
    tgc_data **data;
    int64_t *first[TGC_BLEND_NSPLITS], *count[TGC_BLEND_NSPLITS];
    tgc_data_order **order; /* the training parts' --shuffle orders, or NULL */
    blend_index ix[TGC_BLEND_NSPLITS];
    int64_t s;
};

/* Dataset k's --split parts. false after naming it. */
static bool blend_parts(tgc_blend *b, int k, const tgc_blend_opts *o, diag *d)
{
    int64_t n = tgc_data_nsamples(b->data[k], o->s);
    b->first[TGC_BLEND_TRAIN][k] = 0;
    b->count[TGC_BLEND_TRAIN][k] = n;
    if (!(o->split_valid > 0)) return true;
    int64_t train = (int64_t)floor((double)n * o->split_train);
    int64_t valid = (int64_t)floor((double)n * (o->split_train + o->split_valid)) - train;
    b->count[TGC_BLEND_TRAIN][k] = train;
    b->first[TGC_BLEND_VALID][k] = train;
    b->count[TGC_BLEND_VALID][k] = valid;
    if (train >= 1 && valid >= 1) return true;
    diag_error((d), (src_loc){.file = b->paths[k]},
               "--split gives %lld training and %lld validation samples of %lld tokens (of %lld) of this blended "
               "dataset; each part needs at least one", (long long)train, (long long)valid, (long long)o->s,
               (long long)n);
    return false;
}

/* A split's index for `want` samples: sum_k ceil(want * w_k) positions. */
static bool blend_index_build(tgc_blend *b, tgc_blend_split sp, int64_t want, diag *d)
{
    blend_index *ix = &b->ix[sp];
    ix->want = want;
    ix->size = 0;
    for (int k = 0; k < b->n; k++) ix->size += tgc_blend_target(b->weights[k], want);
    size_t bytes = (size_t)ix->size * (sizeof *ix->dataset + sizeof *ix->sample);
    ix->dataset = malloc((size_t)ix->size * sizeof *ix->dataset + 1);
    ix->sample = malloc((size_t)ix->size * sizeof *ix->sample + 1);
    if (!ix->dataset || !ix->sample) {
        diag_error_plain(d, "--data-path: the %s blend's index of %lld samples needs %zu bytes: cannot allocate them",
                         sp == TGC_BLEND_TRAIN ? "training" : "validation", (long long)ix->size, bytes);
        return false;
    }
    tgc_blend_indices(b->weights, b->n, ix->size, ix->dataset, ix->sample);
    return true;
}

tgc_blend *tgc_blend_open(const tgc_blend_spec *spec, const tgc_blend_opts *o, diag *d)
{
    TGC_ASSERT(spec->n >= 1 && o->s >= 1 && o->train_samples >= 1 && o->valid_samples >= 0);
    tgc_blend *b = xcalloc(1, sizeof *b);
    int n = b->n = spec->n;
    b->s = o->s;
    b->paths = xcalloc((size_t)n, sizeof *b->paths);
    b->weights = xcalloc((size_t)n, sizeof *b->weights);
    b->data = xcalloc((size_t)n, sizeof *b->data);
    for (int sp = 0; sp < TGC_BLEND_NSPLITS; sp++) {
        b->first[sp] = xcalloc((size_t)n, sizeof **b->first);
        b->count[sp] = xcalloc((size_t)n, sizeof **b->count);
    }
    bool ok = true;
    for (int k = 0; k < n; k++) {
        b->paths[k] = spec->paths[k];
        b->weights[k] = spec->weights[k];
        b->data[k] = tgc_data_open_tokenized(spec->paths[k], o->vocab, o->tokenizer, d);
        ok = ok && b->data[k] && tgc_data_check_seq(b->data[k], o->s, d) && blend_parts(b, k, o, d);
    }
    if (ok && o->shuffle) {
        b->order = xcalloc((size_t)n, sizeof *b->order);
        for (int k = 0; k < n; k++) b->order[k] = tgc_data_order_new(b->count[TGC_BLEND_TRAIN][k], o->seed);
    }
    ok = ok && blend_index_build(b, TGC_BLEND_TRAIN, o->train_samples, d);
    if (ok && o->split_valid > 0 && o->valid_samples > 0) ok = blend_index_build(b, TGC_BLEND_VALID, o->valid_samples, d);
    if (!ok) {
        tgc_blend_close(b);
        return NULL;
    }
    return b;
}

void tgc_blend_close(tgc_blend *b)
{
    if (!b) return;
    for (int k = 0; k < b->n; k++) {
        tgc_data_close(b->data[k]);
        if (b->order) tgc_data_order_free(b->order[k]);
    }
    for (int sp = 0; sp < TGC_BLEND_NSPLITS; sp++) {
        free(b->first[sp]);
        free(b->count[sp]);
        free(b->ix[sp].dataset);
        free(b->ix[sp].sample);
    }
    free(b->order);
    free(b->data);
    free(b->paths);
    free(b->weights);
    free(b);
}

int tgc_blend_ndatasets(const tgc_blend *b) { return b->n; }
const tgc_data *tgc_blend_data(const tgc_blend *b, int k) { return b->data[k]; }
int64_t tgc_blend_size(const tgc_blend *b, tgc_blend_split sp) { return b->ix[sp].size; }
const int16_t *tgc_blend_dataset_index(const tgc_blend *b, tgc_blend_split sp) { return b->ix[sp].dataset; }
const int64_t *tgc_blend_sample_index(const tgc_blend *b, tgc_blend_split sp) { return b->ix[sp].sample; }

void tgc_blend_part(const tgc_blend *b, tgc_blend_split sp, int k, int64_t *first, int64_t *count)
{
    *first = b->first[sp][k];
    *count = b->count[sp][k];
}

void tgc_blend_batch_rows(tgc_blend *b, tgc_blend_split sp, int64_t step, int64_t B, int64_t b0, int64_t nb,
                          int32_t *tokens, int32_t *labels)
{
    const blend_index *ix = &b->ix[sp];
    TGC_ASSERT(step >= 0 && B >= 1 && b0 >= 0 && nb >= 0 && b0 + nb <= B);
    TGC_ASSERT(ix->dataset && (step + 1) * B <= ix->size);
    tgc_data_order *const *order = sp == TGC_BLEND_TRAIN ? b->order : NULL;
    for (int64_t r = 0; r < nb; r++) {
        int64_t j = step * B + b0 + r;
        int k = ix->dataset[j];
        int64_t c = ix->sample[j], count = b->count[sp][k];
        int64_t sample = b->first[sp][k] + (order ? tgc_data_order_sample(order[k], c) : c % count);
        tgc_data_sample(b->data[k], sample, b->s, nb, tokens + r, labels + r);
    }
}

void tgc_blend_describe(const tgc_blend *b, FILE *out)
{
    static const char *const names[] = {"training", "validation"};
    for (int sp = 0; sp < TGC_BLEND_NSPLITS; sp++) {
        const blend_index *ix = &b->ix[sp];
        if (!ix->dataset) continue;
        fprintf(out, "tgc: %s blend of %d datasets: %lld samples for %lld:", names[sp], b->n, (long long)ix->size,
                (long long)ix->want);
        for (int k = 0; k < b->n; k++)
            fprintf(out, "%s weight %.4g %s: %lld of its %lld (Megatron builds %lld)", k ? ";" : "", b->weights[k],
                    b->paths[k], (long long)tgc_blend_target(b->weights[k], ix->want),
                    (long long)b->count[sp][k], (long long)tgc_blend_buffer(b->weights[k], ix->want, TGC_BLEND_SURPLUS));
        fputc('\n', out);
    }
}
