/* Token files mapped read-only, validated once at open, cut into [s, B]
 * batches without allocation. */
#include "runtime/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/philox.h"
#include "support/util.h"

/* The Philox key of the shuffle is seed ^ this ("SHUFFLE!"), so the shuffle
 * never shares a stream with parameter initialisation under the same seed. */
#define DATA_SHUFFLE_DOMAIN 0x53485546464c4521ull

struct tgc_data {
    const char *path; /* points into the allocation after the struct */
    void *map;
    size_t size;
    tgc_data_format format;
    const unsigned char *tok; /* first token: a byte, or a little-endian uint16 */
    int64_t ntokens;
};

struct tgc_data_order {
    int64_t nsamples;
    uint64_t seed;
    int64_t epoch[2]; /* the epoch held in perm[e & 1], -1 = none */
    int64_t *perm[2];
};

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Every message has the form `PATH: error: ...`. */
#define DATA_ERROR(d, path, ...) diag_error((d), (src_loc){.file = (path)}, __VA_ARGS__)

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads the llm.c header and checks it against the file size. */
static bool data_parse_llmc(tgc_data *data, diag *d)
{
    const unsigned char *p = data->map;
    const char *path = data->path;
    if (data->size < 4) {
        DATA_ERROR(d, path, "not an llm.c token file: only %zu bytes", data->size);
        return false;
    }
    if (le32(p) != TGC_LLMC_MAGIC) {
        DATA_ERROR(d, path, "not an llm.c token file: magic %ld (expected %d)", (long)(int32_t)le32(p),
                   TGC_LLMC_MAGIC);
        return false;
    }
    if (data->size < TGC_LLMC_HEADER_BYTES) {
        DATA_ERROR(d, path, "truncated llm.c header: %zu bytes (expected at least %d)", data->size,
                   TGC_LLMC_HEADER_BYTES);
        return false;
    }
    int32_t version = (int32_t)le32(p + 4), count = (int32_t)le32(p + 8);
    if (version != TGC_LLMC_VERSION) {
        DATA_ERROR(d, path, "unsupported llm.c token file version %ld (expected %d)", (long)version,
                   TGC_LLMC_VERSION);
        return false;
    }
    if (count <= 0) {
        DATA_ERROR(d, path, "llm.c header declares %ld tokens (expected at least 1)", (long)count);
        return false;
    }
    int64_t expect = TGC_LLMC_HEADER_BYTES + 2 * (int64_t)count;
    if ((int64_t)data->size != expect) {
        DATA_ERROR(d, path,
                   "file size %zu bytes does not match the llm.c header: %ld tokens need 1024 + 2 * %ld = %lld bytes",
                   data->size, (long)count, (long)count, (long long)expect);
        return false;
    }
    data->tok = p + TGC_LLMC_HEADER_BYTES;
    data->ntokens = count;
    return true;
}

/* Finds the first token >= vocab with a plain loop over the mapped bytes. */
static bool data_check_vocab(const tgc_data *data, int64_t vocab, diag *d)
{
    const unsigned char *p = data->tok;
    int64_t n = data->ntokens, bad = -1, value = 0;
    if (data->format == TGC_DATA_TEXT) {
        if (vocab >= 256) return true;
        for (int64_t i = 0; i < n; i++)
            if (p[i] >= vocab) { bad = i; value = p[i]; break; }
    } else {
        if (vocab >= 65536) return true;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)p[2 * i] | (int64_t)p[2 * i + 1] << 8;
            if (v >= vocab) { bad = i; value = v; break; }
        }
    }
    if (bad < 0) return true;
    DATA_ERROR(d, data->path, "token %lld at position %lld is out of range for vocabulary %lld",
               (long long)value, (long long)bad, (long long)vocab);
    return false;
}

/* Opens and maps the file; NULL after reporting on failure. */
static tgc_data *data_map(const char *path, diag *d)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        DATA_ERROR(d, path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    const char *err = NULL;
    if (fstat(fd, &st) != 0) err = strerror(errno);
    else if (!S_ISREG(st.st_mode)) err = "not a regular file";
    else if (st.st_size == 0) {
        close(fd);
        DATA_ERROR(d, path, "empty token file");
        return NULL;
    }
    void *map = NULL;
    if (!err) {
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) err = strerror(errno);
    }
    close(fd);
    if (err) {
        DATA_ERROR(d, path, "cannot read token file: %s", err);
        return NULL;
    }
    size_t n = strlen(path) + 1;
    tgc_data *data = xcalloc(1, sizeof *data + n);
    data->path = memcpy((char *)(data + 1), path, n);
    data->map = map;
    data->size = (size_t)st.st_size;
    return data;
}

tgc_data *tgc_data_open(const char *path, int64_t vocab, diag *d)
{
    tgc_data *data = data_map(path, d);
    if (!data) return NULL;
    const unsigned char *p = data->map;
    bool ok = true;
    if ((data->size >= 4 && le32(p) == TGC_LLMC_MAGIC) || has_suffix(path, ".bin")) {
        data->format = TGC_DATA_LLMC;
        ok = data_parse_llmc(data, d);
    } else {
        data->format = TGC_DATA_TEXT;
        data->tok = p;
        data->ntokens = (int64_t)data->size;
    }
    if (ok && data->ntokens < 2) {
        DATA_ERROR(d, path, "only %lld token: one sample needs at least 2 (seq + 1)",
                   (long long)data->ntokens);
        ok = false;
    }
    if (ok && vocab > 0) ok = data_check_vocab(data, vocab, d);
    if (!ok) {
        tgc_data_close(data);
        return NULL;
    }
    return data;
}

void tgc_data_close(tgc_data *data)
{
    if (!data) return;
    munmap(data->map, data->size);
    free(data);
}

tgc_data_format tgc_data_format_of(const tgc_data *data) { return data->format; }
int64_t tgc_data_ntokens(const tgc_data *data) { return data->ntokens; }

int32_t tgc_data_token(const tgc_data *data, int64_t i)
{
    TGC_ASSERT(i >= 0 && i < data->ntokens);
    const unsigned char *p = data->tok;
    if (data->format == TGC_DATA_TEXT) return p[i];
    return (int32_t)p[2 * i] | (int32_t)p[2 * i + 1] << 8;
}

int64_t tgc_data_nsamples(const tgc_data *data, int64_t s)
{
    TGC_ASSERT(s >= 1);
    return (data->ntokens - 1) / s;
}

bool tgc_data_check_seq(const tgc_data *data, int64_t s, diag *d)
{
    if (s >= 1 && tgc_data_nsamples(data, s) >= 1) return true;
    DATA_ERROR(d, data->path, "%lld tokens are too few for one sample of sequence length %lld "
               "(needs seq + 1 = %lld)", (long long)data->ntokens, (long long)s, (long long)s + 1);
    return false;
}

/* ---- sample order ------------------------------------------------------- */

tgc_data_order *tgc_data_order_new(int64_t nsamples, uint64_t seed)
{
    TGC_ASSERT(nsamples >= 1);
    tgc_data_order *o = xcalloc(1, sizeof *o);
    o->nsamples = nsamples;
    o->seed = seed;
    for (int k = 0; k < 2; k++) {
        o->epoch[k] = -1;
        o->perm[k] = xmalloc((size_t)nsamples * sizeof(int64_t));
    }
    return o;
}

void tgc_data_order_free(tgc_data_order *order)
{
    if (!order) return;
    free(order->perm[0]);
    free(order->perm[1]);
    free(order);
}

/* Fisher-Yates from the back: for i = n-1 .. 1, r = philox(i, epoch,
 * seed ^ DATA_SHUFFLE_DOMAIN), j = (r[0] | r[1] << 32) mod (i + 1), swap
 * perm[i] and perm[j], starting from the identity. */
static void data_order_shuffle(const tgc_data_order *o, int64_t epoch, int64_t *perm)
{
    int64_t n = o->nsamples;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t r[4];
        rng_philox_block((uint64_t)i, (uint64_t)epoch, o->seed ^ DATA_SHUFFLE_DOMAIN, r);
        int64_t j = (int64_t)(((uint64_t)r[0] | (uint64_t)r[1] << 32) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int64_t tgc_data_order_sample(tgc_data_order *order, int64_t j)
{
    TGC_ASSERT(j >= 0);
    int64_t e = j / order->nsamples;
    int slot = (int)(e & 1);
    if (order->epoch[slot] != e) {
        data_order_shuffle(order, e, order->perm[slot]);
        order->epoch[slot] = e;
    }
    return order->perm[slot][j % order->nsamples];
}

/* ---- batches ------------------------------------------------------------ */

/* Writes sample `sample` into column 0 of a [s, stride] layout. */
static void data_fill_sample(const tgc_data *data, int64_t sample, int64_t s, int64_t stride, int32_t *tokens,
                             int32_t *labels)
{
    if (data->format == TGC_DATA_TEXT) {
        const unsigned char *p = data->tok + sample * s;
        for (int64_t t = 0; t < s; t++) {
            tokens[t * stride] = p[t];
            labels[t * stride] = p[t + 1];
        }
        return;
    }
    const unsigned char *p = data->tok + 2 * sample * s;
    int32_t prev = (int32_t)p[0] | (int32_t)p[1] << 8;
    for (int64_t t = 0; t < s; t++) {
        int32_t next = (int32_t)p[2 * t + 2] | (int32_t)p[2 * t + 3] << 8;
        tokens[t * stride] = prev;
        labels[t * stride] = next;
        prev = next;
    }
}

void tgc_data_batch_rows(const tgc_data *data, tgc_data_order *order, int64_t step, int64_t s, int64_t B,
                         int64_t b0, int64_t nb, int32_t *tokens, int32_t *labels)
{
    TGC_ASSERT(step >= 0 && s >= 1 && B >= 1 && b0 >= 0 && nb >= 0 && b0 + nb <= B);
    int64_t n = tgc_data_nsamples(data, s);
    TGC_ASSERT(n >= 1);
    TGC_ASSERT(!order || order->nsamples == n);
    for (int64_t b = 0; b < nb; b++) {
        int64_t j = step * B + b0 + b;
        int64_t sample = order ? tgc_data_order_sample(order, j) : j % n;
        data_fill_sample(data, sample, s, nb, tokens + b, labels + b);
    }
}

void tgc_data_batch(const tgc_data *data, int64_t step, int64_t s, int64_t B, int32_t *tokens, int32_t *labels)
{
    tgc_data_batch_rows(data, NULL, step, s, B, 0, B, tokens, labels);
}
