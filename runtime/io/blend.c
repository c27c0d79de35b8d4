/* Blended datasets: Megatron's BlendedDataset index over tgc's datasets
 * (runtime/io/blend.h). */
#include "runtime/io/blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* Whether Python's float() takes `s` (Megatron's get_blend_from_list tells
 * a weight from a path by it), and its value: blanks around, a sign, then
 * "inf", "infinity" or "nan" in any case, or decimal digits (single
 * underscores between them) with an optional point and exponent. No hex,
 * unlike strtod. Out of range is +-inf or 0, as in Python. */
static bool py_float(const char *s, double *out)
{
    size_t n = strlen(s);
    char *buf = xmalloc(n + 1), *q = buf;
    const char *p = s, *e = s + n;
    while (p < e && (*p == ' ' || (*p >= '\t' && *p <= '\r'))) p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r'))) e--;
    const char *body = p;
    if (body < e && (*body == '+' || *body == '-')) *q++ = *body++;
    bool ok = false;
    size_t len = (size_t)(e - body);
    if ((len == 3 && (strncasecmp(body, "inf", 3) == 0 || strncasecmp(body, "nan", 3) == 0)) ||
        (len == 8 && strncasecmp(body, "infinity", 8) == 0)) {
        memcpy(q, body, len);
        q += len;
        ok = true;
    } else {
        /* digits ['.' digits] | '.' digits, then [e [sign] digits]; a
         * digit run may hold single underscores between digits. */
        int ndig = 0, part = 0; /* part 0: integer, 1: fraction, 2: exponent */
        bool any = false, prev_digit = false, exp_digits = false;
        ok = true;
        for (const char *c = body; ok && c < e; c++) {
            if (*c >= '0' && *c <= '9') {
                *q++ = *c;
                prev_digit = true;
                ndig++;
                if (part < 2) any = true;
                else exp_digits = true;
            } else if (*c == '_') {
                ok = prev_digit && c + 1 < e && c[1] >= '0' && c[1] <= '9';
                prev_digit = false;
            } else if (*c == '.' && part == 0) {
                *q++ = *c;
                part = 1;
                prev_digit = false;
            } else if ((*c == 'e' || *c == 'E') && part < 2 && any) {
                *q++ = *c;
                part = 2;
                prev_digit = false;
                if (c + 1 < e && (c[1] == '+' || c[1] == '-')) *q++ = *++c;
            } else {
                ok = false;
            }
        }
        ok = ok && any && (part < 2 || exp_digits) && ndig > 0;
    }
    *q = 0;
    if (ok) *out = strtod(buf, NULL);
    free(buf);
    return ok;
}

#define SPEC_ERROR(d, ...) diag_error_plain((d), "--data-path: " __VA_ARGS__)

static void spec_alloc(tgc_blend_spec *spec, int n)
{
    spec->n = n;
    spec->paths = xcalloc((size_t)n, sizeof *spec->paths);
    spec->weights = xcalloc((size_t)n, sizeof *spec->weights);
    spec->given = xcalloc((size_t)n, sizeof *spec->given);
}

bool tgc_blend_spec_parse(int nwords, const char *const *words, tgc_blend_spec *spec, diag *d)
{
    memset(spec, 0, sizeof *spec);
    if (nwords < 1) {
        SPEC_ERROR(d, "no dataset given (expected PATH ..., or pairs WEIGHT PATH ...)");
        return false;
    }
    /* Megatron's get_blend_from_list: an odd count is paths alone; an even
     * count is WEIGHT PATH pairs if every weight's place holds a number,
     * paths alone if none does. */
    int numbers = 0, first_number = -1, first_word = -1;
    double v;
    for (int k = 0; nwords % 2 == 0 && k < nwords; k += 2) {
        bool num = py_float(words[k], &v);
        numbers += num;
        if (num && first_number < 0) first_number = k;
        if (!num && first_word < 0) first_word = k;
    }
    bool weighted = nwords % 2 == 0 && numbers == nwords / 2;
    if (nwords % 2 == 0 && numbers && !weighted) {
        SPEC_ERROR(d, "'%s' (argument %d) stands where a weight belongs but is not a number, while '%s' "
                   "(argument %d) is one: give WEIGHT PATH pairs, a weight before every path, or paths alone",
                   words[first_word], first_word + 1, words[first_number], first_number + 1);
        return false;
    }
    int n = weighted ? nwords / 2 : nwords;
    if (n > TGC_BLEND_MAX_DATASETS) {
        SPEC_ERROR(d, "%d datasets: at most %d can be blended (Megatron's int16 dataset index)", n,
                   TGC_BLEND_MAX_DATASETS);
        return false;
    }
    spec_alloc(spec, n);
    spec->weighted = weighted;
    if (!weighted) {
        /* One path: the dataset alone; several: weighted by their sizes
         * when the blend is opened. */
        for (int k = 0; k < n; k++) spec->paths[k] = words[k];
        if (n == 1) spec->weights[0] = spec->given[0] = 1.0;
        return true;
    }
    bool ok = true;
    for (int k = 0; k < n; k++) {
        const char *w = words[2 * k];
        spec->paths[k] = words[2 * k + 1];
        py_float(w, &v);
        if (!isfinite(v) || !(v > 0.0)) {
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

void tgc_blend_size_weights(const int64_t *count, int n, double *w)
{
    for (int k = 0; k < n; k++) w[k] = (double)count[k];
    double sum = numpy_sum(w, n);
    for (int k = 0; k < n; k++) w[k] /= sum;
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
    bool weighted; /* false: paths alone, each split weighted by its parts' sizes */
    const char **paths;
    double *weights;                  /* --data-path's, normalised (weighted) */
    double *w[TGC_BLEND_NSPLITS];     /* each split's: weights, or its parts' sizes normalised */
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
    tgc_blend_split whole = o->validation_only ? TGC_BLEND_VALID : TGC_BLEND_TRAIN;
    b->first[whole][k] = 0;
    b->count[whole][k] = n;
    if (!(o->split_valid > 0) || o->validation_only) return true;
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

static const char *const split_names[] = {"training", "validation"};

/* A split's index for `want` samples: with weights, sum_k ceil(want * w_k)
 * positions; for paths alone, min(want, the parts' samples) positions
 * (blended_megatron_dataset_builder.py), and a run that reads more than
 * that one pass over them is refused (Megatron's data loader would run
 * out). */
static bool blend_index_build(tgc_blend *b, tgc_blend_split sp, int64_t want, diag *d)
{
    blend_index *ix = &b->ix[sp];
    ix->want = want;
    ix->size = 0;
    double *w = b->w[sp] = xcalloc((size_t)b->n, sizeof *b->w[sp]);
    if (b->weighted) {
        memcpy(w, b->weights, (size_t)b->n * sizeof *w);
        for (int k = 0; k < b->n; k++) ix->size += tgc_blend_target(w[k], want);
    } else {
        int64_t total = 0;
        for (int k = 0; k < b->n; k++) total += b->count[sp][k];
        tgc_blend_size_weights(b->count[sp], b->n, w);
        if (want > total) {
            diag_error_plain(d, "--data-path: a blend of paths without weights is one pass over its datasets "
                             "(Megatron weighs them by their sizes): its %s split has %lld samples of %lld tokens, "
                             "but the run reads %lld (%s); give weights, or read fewer",
                             split_names[sp], (long long)total, (long long)b->s, (long long)want,
                             sp == TGC_BLEND_TRAIN ? "--train-iters x the global batch"
                                                   : "--eval-iters x the global batch");
            return false;
        }
        ix->size = want;
    }
    size_t bytes = (size_t)ix->size * (sizeof *ix->dataset + sizeof *ix->sample);
    ix->dataset = malloc((size_t)ix->size * sizeof *ix->dataset + 1);
    ix->sample = malloc((size_t)ix->size * sizeof *ix->sample + 1);
    if (!ix->dataset || !ix->sample) {
        diag_error_plain(d, "--data-path: the %s blend's index of %lld samples needs %zu bytes: cannot allocate them",
                         split_names[sp], (long long)ix->size, bytes);
        return false;
    }
    tgc_blend_indices(w, b->n, ix->size, ix->dataset, ix->sample);
    return true;
}

tgc_blend *tgc_blend_open(const tgc_blend_spec *spec, const tgc_blend_opts *o, diag *d)
{
    TGC_ASSERT(spec->n >= 1 && o->s >= 1 && o->valid_samples >= 0);
    TGC_ASSERT(o->validation_only ? o->valid_samples >= 1 && !(o->split_valid > 0) : o->train_samples >= 1);
    tgc_blend *b = xcalloc(1, sizeof *b);
    int n = b->n = spec->n;
    b->weighted = spec->weighted || n == 1; /* one path: the dataset, epoch after epoch */
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
    if (ok && o->shuffle && !o->validation_only) {
        b->order = xcalloc((size_t)n, sizeof *b->order);
        for (int k = 0; k < n; k++) b->order[k] = tgc_data_order_new(b->count[TGC_BLEND_TRAIN][k], o->seed);
    }
    if (o->validation_only) {
        ok = ok && blend_index_build(b, TGC_BLEND_VALID, o->valid_samples, d);
    } else {
        ok = ok && blend_index_build(b, TGC_BLEND_TRAIN, o->train_samples, d);
        if (ok && o->split_valid > 0 && o->valid_samples > 0)
            ok = blend_index_build(b, TGC_BLEND_VALID, o->valid_samples, d);
    }
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
        free(b->w[sp]);
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
    int64_t *given = xcalloc((size_t)b->n, sizeof *given);
    for (int sp = 0; sp < TGC_BLEND_NSPLITS; sp++) {
        const blend_index *ix = &b->ix[sp];
        if (!ix->dataset) continue;
        fprintf(out, "tgc: %s blend of %d datasets%s: %lld samples for %lld:", split_names[sp], b->n,
                b->weighted ? "" : " weighted by their sizes", (long long)ix->size, (long long)ix->want);
        memset(given, 0, (size_t)b->n * sizeof *given);
        for (int64_t i = 0; i < ix->size; i++) given[ix->dataset[i]]++;
        for (int k = 0; k < b->n; k++) {
            /* With weights, dataset k's target ceil(T w_k); paths alone, the
             * positions it is given. */
            int64_t take = b->weighted ? tgc_blend_target(b->w[sp][k], ix->want) : given[k];
            fprintf(out, "%s weight %.4g %s: %lld of its %lld", k ? ";" : "", b->w[sp][k], b->paths[k],
                    (long long)take, (long long)b->count[sp][k]);
            if (b->weighted && b->n > 1)
                fprintf(out, " (Megatron builds %lld)", (long long)tgc_blend_buffer(b->w[sp][k], ix->want, TGC_BLEND_SURPLUS));
        }
        fputc('\n', out);
    }
    free(given);
}
