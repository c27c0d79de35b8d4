/* Token files mapped read-only, validated once at open, cut into [s, B]
 * batches without allocation. */
#include "runtime/io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/philox.h"
#include "support/file.h"
#include "support/util.h"
#include "tokenizer/tokenizer.h"

/* The Philox key of the shuffle is seed ^ this ("SHUFFLE!"), so the shuffle
 * never shares a stream with parameter initialisation under the same seed. */
#define DATA_SHUFFLE_DOMAIN 0x53485546464c4521ull

struct tgc_data {
    const char *path;     /* as given; points into the allocation after the struct */
    const char *bin_path; /* the token file (== path except for Megatron) */
    const char *idx_path; /* Megatron's index, else NULL */
    void *map;            /* the token file */
    size_t size;
    void *idx_map; /* Megatron's index */
    size_t idx_size;
    tgc_data_format format;
    tgc_data_dtype dtype;
    int width;                /* bytes per token */
    const unsigned char *tok; /* first token of the stream (little-endian, `width` bytes each) */
    int64_t ntokens;
    int32_t *ids; /* text through a tokenizer (tgc_data_open_tokenized): the tokens, else NULL */
    /* Megatron: the arrays of the index (unaligned little-endian, read
     * through ld_*), and start[k], the stream index of sequence k's first
     * token (nseq + 1 entries), only when the sequences do not lie back to
     * back in the .bin file (else tok covers the whole stream). */
    int64_t nseq, ndoc_idx;
    const unsigned char *lens, *ptrs, *docs;
    int64_t *start;
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

/* Little-endian loads of every integer token dtype (byte loads, so the
 * unaligned arrays of a Megatron index read the same on any host). */
static inline int64_t ld_u8(const unsigned char *p) { return p[0]; }
static inline int64_t ld_i8(const unsigned char *p) { return p[0] < 128 ? p[0] : (int64_t)p[0] - 256; }
static inline int64_t ld_u16(const unsigned char *p) { return (int64_t)p[0] | (int64_t)p[1] << 8; }
static inline int64_t ld_i16(const unsigned char *p)
{
    int64_t v = ld_u16(p);
    return v < 32768 ? v : v - 65536;
}
static inline int64_t ld_i32(const unsigned char *p) { return (int64_t)(int32_t)le32(p); }
static inline uint64_t ld_u64(const unsigned char *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }
static inline int64_t ld_i64(const unsigned char *p) { return (int64_t)ld_u64(p); }

/* BODY(LOAD, WIDTH) once per integer dtype, for loops with the load inlined. */
#define DATA_DISPATCH(dtype, BODY)                                                  \
    switch (dtype) {                                                                \
    case TGC_DTYPE_UINT8: BODY(ld_u8, 1); break;                                    \
    case TGC_DTYPE_INT8: BODY(ld_i8, 1); break;                                     \
    case TGC_DTYPE_INT16: BODY(ld_i16, 2); break;                                   \
    case TGC_DTYPE_UINT16: BODY(ld_u16, 2); break;                                  \
    case TGC_DTYPE_INT32: BODY(ld_i32, 4); break;                                   \
    case TGC_DTYPE_INT64: BODY(ld_i64, 8); break;                                   \
    default: TGC_ASSERT(!"float token dtypes are rejected at open");                \
    }

static int64_t data_ld(const unsigned char *p, tgc_data_dtype dtype)
{
    int64_t v = 0;
#define DATA_LD_ONE(LOAD, WIDTH) v = LOAD(p)
    DATA_DISPATCH(dtype, DATA_LD_ONE)
#undef DATA_LD_ONE
    return v;
}

static const struct {
    const char *name;
    int size;
} data_dtypes[9] = {
    [TGC_DTYPE_UINT8] = {"uint8", 1},   [TGC_DTYPE_INT8] = {"int8", 1},       [TGC_DTYPE_INT16] = {"int16", 2},
    [TGC_DTYPE_INT32] = {"int32", 4},   [TGC_DTYPE_INT64] = {"int64", 8},     [TGC_DTYPE_FLOAT64] = {"float64", 8},
    [TGC_DTYPE_FLOAT32] = {"float32", 4}, [TGC_DTYPE_UINT16] = {"uint16", 2},
};

const char *tgc_data_dtype_name(int code) { return code >= 1 && code <= 8 ? data_dtypes[code].name : NULL; }
int tgc_data_dtype_size(int code) { return code >= 1 && code <= 8 ? data_dtypes[code].size : 0; }

tgc_data_dtype tgc_data_optimal_dtype(int64_t vocab) { return vocab < 65500 ? TGC_DTYPE_UINT16 : TGC_DTYPE_INT32; }

const char *tgc_data_format_name(tgc_data_format f)
{
    return f == TGC_DATA_MEGATRON ? "megatron" : f == TGC_DATA_LLMC ? "llm.c" : "text";
}

/* Every message has the form `PATH: error: ...`. */
#define DATA_ERROR(d, path, ...) diag_error((d), (src_loc){.file = (path)}, __VA_ARGS__)

static bool has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static bool file_is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *str_cat(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    char *s = xmalloc(alen + blen + 1);
    memcpy(s, a, alen);
    memcpy(s + alen, b, blen + 1);
    return s;
}

/* The prefix of the Megatron dataset that `path` names (malloc'd), or NULL
 * when path is a single token file: PREFIX.idx; PREFIX.bin when PREFIX.idx
 * exists; a path that is not a regular file (none, or a directory of
 * that name) while PATH.idx or PATH.bin exists. */
static char *data_megatron_prefix(const char *path)
{
    size_t n = strlen(path);
    if (has_suffix(path, ".idx")) return str_cat(path, n - 4, "");
    if (has_suffix(path, ".bin")) {
        char *idx = str_cat(path, n - 4, ".idx");
        bool megatron = file_exists(idx);
        free(idx);
        return megatron ? str_cat(path, n - 4, "") : NULL;
    }
    if (file_is_regular(path)) return NULL;
    char *idx = str_cat(path, n, ".idx"), *bin = str_cat(path, n, ".bin");
    bool megatron = file_exists(idx) || file_exists(bin);
    free(idx);
    free(bin);
    return megatron ? str_cat(path, n, "") : NULL;
}

static bool data_check_count(const tgc_data *data, diag *d)
{
    if (data->ntokens >= 2) return true;
    DATA_ERROR(d, data->path, "only %lld token%s: one sample needs at least 2 (seq + 1)",
               (long long)data->ntokens, data->ntokens == 1 ? "" : "s");
    return false;
}

/* Megatron: the stream index of sequence k's first token (k = nseq gives
 * ntokens), and the sequence holding stream index i (binary search; the
 * last of several sequences starting at i, so never an empty one). */
static int64_t data_seq_start(const tgc_data *data, int64_t k)
{
    if (k == data->nseq) return data->ntokens;
    if (data->start) return data->start[k];
    return (ld_i64(data->ptrs + 8 * k) - ld_i64(data->ptrs)) / data->width;
}

static int64_t data_seq_find(const tgc_data *data, int64_t i)
{
    int64_t lo = 0, hi = data->nseq - 1; /* start[lo] <= i */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (data_seq_start(data, mid) <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
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
    if (data->ids) {
        for (int64_t i = 0; i < n; i++)
            if (data->ids[i] >= vocab) { bad = i; value = data->ids[i]; break; }
    } else if (data->format == TGC_DATA_TEXT) {
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

/* Maps `path` read-only into *map / *size. An empty file is an error
 * ("empty token file") unless allow_empty, which gives map NULL, size 0. */
static bool data_map_file(const char *path, bool allow_empty, void **map, size_t *size, diag *d)
{
    *map = NULL;
    *size = 0;
    struct stat st;
    char why[256];
    int fd = file_open(path, FILE_MAPPED, &st, why, sizeof why);
    if (fd < 0) {
        DATA_ERROR(d, path, "cannot open: %s", why);
        return false;
    }
    const char *err = NULL;
    if (st.st_size == 0) {
        close(fd);
        if (allow_empty) return true;
        DATA_ERROR(d, path, "empty token file");
        return false;
    }
    void *m = NULL;
    if (!err) {
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) err = strerror(errno);
    }
    close(fd);
    if (err) {
        DATA_ERROR(d, path, "cannot read token file: %s", err);
        return false;
    }
    *map = m;
    *size = (size_t)st.st_size;
    return true;
}

/* A data object holding copies of the names (after the struct); with a
 * Megatron prefix, also PREFIX.bin and PREFIX.idx. */
static tgc_data *data_new(const char *path, const char *prefix)
{
    size_t n = strlen(path) + 1, m = prefix ? strlen(prefix) + 5 : 0;
    tgc_data *data = xcalloc(1, sizeof *data + n + 2 * m);
    char *at = (char *)(data + 1);
    data->path = memcpy(at, path, n);
    data->bin_path = data->path;
    if (prefix) {
        snprintf(at + n, m, "%s.bin", prefix);
        snprintf(at + n + m, m, "%s.idx", prefix);
        data->bin_path = at + n;
        data->idx_path = at + n + m;
    }
    return data;
}

/* ---- Megatron-LM indexed datasets ---------------------------------------- */

/* The 9-byte magic as C-escaped text for messages (at most 9 bytes shown). */
static void data_escape(const unsigned char *p, size_t n, char *out, size_t cap)
{
    size_t at = 0;
    for (size_t i = 0; i < n && i < TGC_MEGATRON_MAGIC_BYTES && at + 5 < cap; i++) {
        if (p[i] >= 32 && p[i] < 127 && p[i] != '"' && p[i] != '\\') out[at++] = (char)p[i];
        else at += (size_t)snprintf(out + at, cap - at, "\\x%02x", p[i]);
    }
    out[at] = 0;
}

/* The header: magic, version, dtype, counts, and the index's size. */
static bool data_megatron_header(tgc_data *data, diag *d)
{
    const unsigned char *p = data->idx_map;
    size_t size = data->idx_size;
    const char *ip = data->idx_path;
    char shown[64];
    if (size < TGC_MEGATRON_MAGIC_BYTES || memcmp(p, TGC_MEGATRON_MAGIC, TGC_MEGATRON_MAGIC_BYTES) != 0) {
        data_escape(p, size, shown, sizeof shown);
        DATA_ERROR(d, ip, "not a Megatron index file: it starts with \"%s\" (expected \"MMIDIDX\\x00\\x00\")", shown);
        return false;
    }
    if (size < TGC_MEGATRON_HEADER_BYTES) {
        DATA_ERROR(d, ip, "truncated Megatron index header: %zu bytes (expected at least %d)", size,
                   TGC_MEGATRON_HEADER_BYTES);
        return false;
    }
    uint64_t version = ld_u64(p + 9), nseq = ld_u64(p + 18), ndoc = ld_u64(p + 26);
    int code = p[17];
    if (version != TGC_MEGATRON_VERSION) {
        DATA_ERROR(d, ip, "unsupported Megatron index version %llu (expected %d)", (unsigned long long)version,
                   TGC_MEGATRON_VERSION);
        return false;
    }
    if (!tgc_data_dtype_name(code)) {
        DATA_ERROR(d, ip, "unknown token dtype code %d (expected 1..8: uint8, int8, int16, int32, int64, "
                   "float64, float32, uint16)", code);
        return false;
    }
    if (code == TGC_DTYPE_FLOAT32 || code == TGC_DTYPE_FLOAT64) {
        DATA_ERROR(d, ip, "token dtype code %d (%s) is not an integer type: tokens must be integers", code,
                   tgc_data_dtype_name(code));
        return false;
    }
    /* 12 bytes per sequence (int32 length, int64 pointer), 8 per document
     * index; a multimodal index adds an int8 mode per sequence (ignored). */
    uint64_t body = size - TGC_MEGATRON_HEADER_BYTES;
    if (nseq > body / 12 || ndoc > (body - 12 * nseq) / 8) {
        DATA_ERROR(d, ip, "the Megatron index header declares %llu sequences and %llu document indices: more than "
                   "its %zu bytes hold (34 + 12 per sequence + 8 per document index)", (unsigned long long)nseq,
                   (unsigned long long)ndoc, size);
        return false;
    }
    if (body != 12 * nseq + 8 * ndoc && body != 13 * nseq + 8 * ndoc) {
        DATA_ERROR(d, ip, "file size %zu bytes does not match the Megatron index header: %llu sequences and %llu "
                   "document indices need 34 + 12 * %llu + 8 * %llu = %llu bytes", size, (unsigned long long)nseq,
                   (unsigned long long)ndoc, (unsigned long long)nseq, (unsigned long long)ndoc,
                   (unsigned long long)(TGC_MEGATRON_HEADER_BYTES + 12 * nseq + 8 * ndoc));
        return false;
    }
    data->dtype = (tgc_data_dtype)code;
    data->width = tgc_data_dtype_size(code);
    data->nseq = (int64_t)nseq;
    data->ndoc_idx = (int64_t)ndoc;
    data->lens = p + TGC_MEGATRON_HEADER_BYTES;
    data->ptrs = data->lens + 4 * nseq;
    data->docs = data->ptrs + 8 * nseq;
    return true;
}

/* Document indices: sequence indices from 0, never decreasing, up to nseq. */
static bool data_megatron_documents(const tgc_data *data, diag *d)
{
    const char *ip = data->idx_path;
    if (data->ndoc_idx < 1) {
        DATA_ERROR(d, ip, "the document index is empty (expected at least its leading 0)");
        return false;
    }
    int64_t prev = 0;
    for (int64_t k = 0; k < data->ndoc_idx; k++) {
        int64_t v = ld_i64(data->docs + 8 * k);
        const char *why = k == 0 && v != 0 ? "expected 0"
                        : v < prev ? "below the previous entry: document indices must not decrease"
                        : v > data->nseq ? "beyond the sequence count" : NULL;
        if (why) {
            DATA_ERROR(d, ip, "document index %lld is sequence %lld (%s; %lld sequences)", (long long)k,
                       (long long)v, why, (long long)data->nseq);
            return false;
        }
        prev = v;
    }
    if (prev != data->nseq) {
        DATA_ERROR(d, ip, "the last document index is %lld (expected the sequence count %lld)", (long long)prev,
                   (long long)data->nseq);
        return false;
    }
    return true;
}

/* Lengths and byte pointers against each other and the .bin file; sets
 * ntokens, tok and, when the sequences do not lie back to back, start. */
static bool data_megatron_sequences(tgc_data *data, diag *d)
{
    const char *ip = data->idx_path, *bp = data->bin_path;
    int64_t w = data->width, bin = (int64_t)data->size, end = 0, total = 0;
    bool contiguous = true;
    for (int64_t k = 0; k < data->nseq; k++) {
        int64_t len = ld_i32(data->lens + 4 * k), ptr = ld_i64(data->ptrs + 8 * k);
        if (len < 0) {
            DATA_ERROR(d, ip, "sequence %lld has a negative length %lld", (long long)k, (long long)len);
            return false;
        }
        if (ptr < end) {
            DATA_ERROR(d, ip, "sequence %lld: byte pointer %lld %s", (long long)k, (long long)ptr,
                       ptr < 0 ? "is negative" : "overlaps the previous sequence (pointers must increase)");
            return false;
        }
        if (ptr % w != 0) {
            DATA_ERROR(d, ip, "sequence %lld: byte pointer %lld is not a multiple of the token size (%lld bytes, %s)",
                       (long long)k, (long long)ptr, (long long)w, tgc_data_dtype_name(data->dtype));
            return false;
        }
        if (ptr > bin || len * w > bin - ptr) {
            DATA_ERROR(d, bp, "truncated: %s puts sequence %lld at bytes %lld..%lld, but the file has %lld bytes",
                       ip, (long long)k, (long long)ptr, (long long)(ptr + len * w), (long long)bin);
            return false;
        }
        if (k > 0 && ptr != end) contiguous = false;
        end = ptr + len * w;
        total += len;
    }
    if (end != bin) {
        DATA_ERROR(d, bp, "file size %lld bytes does not match %s: its sequences end at byte %lld", (long long)bin,
                   ip, (long long)end);
        return false;
    }
    data->ntokens = total;
    const unsigned char *base = data->map;
    data->tok = base && data->nseq ? base + ld_i64(data->ptrs) : base; /* base NULL: an empty .bin */
    if (!contiguous) {
        data->start = xmalloc((size_t)(data->nseq + 1) * sizeof(int64_t));
        data->start[0] = 0;
        for (int64_t k = 0; k < data->nseq; k++) data->start[k + 1] = data->start[k] + ld_i32(data->lens + 4 * k);
    }
    return true;
}

/* The first token of p[0 .. n) outside [0, limit), its index or -1. */
static int64_t data_scan_run(const unsigned char *p, tgc_data_dtype dtype, int64_t n, int64_t limit, int64_t *value)
{
    int64_t bad = -1;
#define DATA_SCAN(LOAD, WIDTH)                                      \
    for (int64_t i = 0; i < n; i++) {                               \
        int64_t v = LOAD(p + i * (WIDTH));                          \
        if (v < 0 || v >= limit) { bad = i; *value = v; break; }    \
    }
    DATA_DISPATCH(dtype, DATA_SCAN)
#undef DATA_SCAN
    return bad;
}

/* Every token in [0, vocab) (vocab <= 0: [0, INT32_MAX]); skipped when the
 * dtype cannot hold anything else. Names the document of the first bad one. */
static bool data_megatron_tokens(const tgc_data *data, int64_t vocab, diag *d)
{
    int64_t limit = vocab > 0 ? vocab : (int64_t)INT32_MAX + 1, bad = -1, value = 0;
    if ((data->dtype == TGC_DTYPE_UINT8 && limit >= 256) || (data->dtype == TGC_DTYPE_UINT16 && limit >= 65536))
        return true;
    if (!data->start) bad = data_scan_run(data->tok, data->dtype, data->ntokens, limit, &value);
    for (int64_t k = 0; data->start && bad < 0 && k < data->nseq; k++) {
        const unsigned char *p = (const unsigned char *)data->map + ld_i64(data->ptrs + 8 * k);
        int64_t i = data_scan_run(p, data->dtype, data->start[k + 1] - data->start[k], limit, &value);
        if (i >= 0) bad = data->start[k] + i;
    }
    if (bad < 0) return true;
    int64_t doc = 0;
    while (doc + 1 < data->ndoc_idx - 1 && tgc_data_document_start(data, doc + 1) <= bad) doc++;
    if (vocab > 0)
        DATA_ERROR(d, data->bin_path, "token %lld at position %lld (document %lld) is out of range for vocabulary %lld",
                   (long long)value, (long long)bad, (long long)doc, (long long)vocab);
    else
        DATA_ERROR(d, data->bin_path, "token %lld at position %lld (document %lld) is not in 0..%d",
                   (long long)value, (long long)bad, (long long)doc, INT32_MAX);
    return false;
}

/* Maps PREFIX.idx and PREFIX.bin and checks everything; frees data and
 * returns NULL after reporting. */
static tgc_data *data_open_megatron(tgc_data *data, int64_t vocab, diag *d)
{
    data->format = TGC_DATA_MEGATRON;
    bool ok = data_map_file(data->idx_path, true, &data->idx_map, &data->idx_size, d) &&
              data_megatron_header(data, d) && data_megatron_documents(data, d) &&
              data_map_file(data->bin_path, true, &data->map, &data->size, d) &&
              data_megatron_sequences(data, d) && data_check_count(data, d) && data_megatron_tokens(data, vocab, d);
    if (!ok) {
        tgc_data_close(data);
        return NULL;
    }
    return data;
}

/* Text through a non-byte tokenizer: the mapped bytes encoded into
 * data->ids (int32) and unmapped. */
static bool data_tokenize_text(tgc_data *data, const tgc_tokenizer *tk, diag *d)
{
    int64_t n = 0, cap = 0;
    if (!tokenizer_encode(tk, data->map, data->size, &data->ids, &n, &cap, data->path, d)) return false;
    munmap(data->map, data->size);
    data->map = NULL;
    data->size = 0;
    data->dtype = TGC_DTYPE_INT32;
    data->width = 4;
    data->tok = NULL;
    data->ntokens = n;
    return true;
}

tgc_data *tgc_data_open(const char *path, int64_t vocab, diag *d) { return tgc_data_open_tokenized(path, vocab, NULL, d); }

tgc_data *tgc_data_open_tokenized(const char *path, int64_t vocab, const tgc_tokenizer *tk, diag *d)
{
    char *prefix = data_megatron_prefix(path);
    if (prefix) {
        tgc_data *data = data_new(path, prefix);
        free(prefix);
        return data_open_megatron(data, vocab, d);
    }
    tgc_data *data = data_new(path, NULL);
    if (!data_map_file(path, false, &data->map, &data->size, d)) {
        free(data);
        return NULL;
    }
    const unsigned char *p = data->map;
    bool ok = true;
    if ((data->size >= 4 && le32(p) == TGC_LLMC_MAGIC) || has_suffix(path, ".bin")) {
        data->format = TGC_DATA_LLMC;
        data->dtype = TGC_DTYPE_UINT16;
        data->width = 2;
        ok = data_parse_llmc(data, d);
    } else {
        data->format = TGC_DATA_TEXT;
        data->dtype = TGC_DTYPE_UINT8;
        data->width = 1;
        data->tok = p;
        data->ntokens = (int64_t)data->size;
        if (tk && tgc_tokenizer_kind_of(tk) != TGC_TOKENIZER_BYTES) ok = data_tokenize_text(data, tk, d);
    }
    if (ok) ok = data_check_count(data, d);
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
    if (data->map) munmap(data->map, data->size);
    if (data->idx_map) munmap(data->idx_map, data->idx_size);
    free(data->start);
    free(data->ids);
    free(data);
}

tgc_data_format tgc_data_format_of(const tgc_data *data) { return data->format; }
tgc_data_dtype tgc_data_dtype_of(const tgc_data *data) { return data->dtype; }
int64_t tgc_data_ntokens(const tgc_data *data) { return data->ntokens; }
const char *tgc_data_bin_path(const tgc_data *data) { return data->bin_path; }
const char *tgc_data_idx_path(const tgc_data *data) { return data->idx_path; }

int64_t tgc_data_ndocuments(const tgc_data *data)
{
    return data->format == TGC_DATA_MEGATRON ? data->ndoc_idx - 1 : 1;
}

int64_t tgc_data_nsequences(const tgc_data *data)
{
    return data->format == TGC_DATA_MEGATRON ? data->nseq : 1;
}

int64_t tgc_data_document_start(const tgc_data *data, int64_t k)
{
    TGC_ASSERT(k >= 0 && k <= tgc_data_ndocuments(data));
    if (data->format != TGC_DATA_MEGATRON) return k ? data->ntokens : 0;
    return data_seq_start(data, ld_i64(data->docs + 8 * k));
}

int32_t tgc_data_token(const tgc_data *data, int64_t i)
{
    TGC_ASSERT(i >= 0 && i < data->ntokens);
    const unsigned char *p = data->tok;
    if (data->format == TGC_DATA_TEXT) return data->ids ? data->ids[i] : p[i];
    if (data->format == TGC_DATA_LLMC) return (int32_t)p[2 * i] | (int32_t)p[2 * i + 1] << 8;
    if (data->start) {
        int64_t k = data_seq_find(data, i);
        p = (const unsigned char *)data->map + ld_i64(data->ptrs + 8 * k);
        i -= data->start[k];
    }
    return (int32_t)data_ld(p + i * data->width, data->dtype);
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
/* Tokens t0 .. t0+n-1 of a sample (s + 1 tokens) from p[0 .. n): token t
 * is input t (t < s) and label t - 1 (t > 0), in a [s, stride] layout. */
static void data_put_run(const unsigned char *p, tgc_data_dtype dtype, int64_t t0, int64_t n, int64_t s,
                         int64_t stride, int32_t *tokens, int32_t *labels)
{
#define DATA_PUT(LOAD, WIDTH)                                       \
    for (int64_t i = 0; i < n; i++) {                               \
        int32_t v = (int32_t)LOAD(p + i * (WIDTH));                 \
        int64_t t = t0 + i;                                         \
        if (t < s) tokens[t * stride] = v;                          \
        if (t > 0) labels[(t - 1) * stride] = v;                    \
    }
    DATA_DISPATCH(dtype, DATA_PUT)
#undef DATA_PUT
}

/* Megatron: the sample's s + 1 tokens as one run, or, when the sequences
 * do not lie back to back, one run per sequence it spans. */
static void data_fill_megatron(const tgc_data *data, int64_t sample, int64_t s, int64_t stride, int32_t *tokens,
                               int32_t *labels)
{
    int64_t a = sample * s;
    if (!data->start) {
        data_put_run(data->tok + a * data->width, data->dtype, 0, s + 1, s, stride, tokens, labels);
        return;
    }
    const unsigned char *base = data->map;
    for (int64_t k = data_seq_find(data, a), t = 0; t <= s; k++) {
        int64_t off = a + t - data->start[k], n = data->start[k + 1] - data->start[k] - off;
        if (n > s + 1 - t) n = s + 1 - t;
        data_put_run(base + ld_i64(data->ptrs + 8 * k) + off * data->width, data->dtype, t, n, s, stride, tokens,
                     labels);
        t += n;
    }
}

static void data_fill_sample(const tgc_data *data, int64_t sample, int64_t s, int64_t stride, int32_t *tokens,
                             int32_t *labels)
{
    if (data->format == TGC_DATA_MEGATRON) {
        data_fill_megatron(data, sample, s, stride, tokens, labels);
        return;
    }
    if (data->ids) {
        const int32_t *q = data->ids + sample * s;
        for (int64_t t = 0; t < s; t++) {
            tokens[t * stride] = q[t];
            labels[t * stride] = q[t + 1];
        }
        return;
    }
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

void tgc_data_sample(const tgc_data *data, int64_t sample, int64_t s, int64_t stride, int32_t *tokens,
                     int32_t *labels)
{
    TGC_ASSERT(s >= 1 && stride >= 1 && sample >= 0 && sample < tgc_data_nsamples(data, s));
    data_fill_sample(data, sample, s, stride, tokens, labels);
}

void tgc_data_batch_range(const tgc_data *data, tgc_data_order *order, int64_t first, int64_t count, int64_t step,
                          int64_t s, int64_t B, int64_t b0, int64_t nb, int32_t *tokens, int32_t *labels)
{
    TGC_ASSERT(step >= 0 && s >= 1 && B >= 1 && b0 >= 0 && nb >= 0 && b0 + nb <= B);
    TGC_ASSERT(first >= 0 && count >= 1 && first + count <= tgc_data_nsamples(data, s));
    TGC_ASSERT(!order || order->nsamples == count);
    for (int64_t b = 0; b < nb; b++) {
        int64_t j = step * B + b0 + b;
        int64_t sample = first + (order ? tgc_data_order_sample(order, j) : j % count);
        data_fill_sample(data, sample, s, nb, tokens + b, labels + b);
    }
}

void tgc_data_batch_rows(const tgc_data *data, tgc_data_order *order, int64_t step, int64_t s, int64_t B,
                         int64_t b0, int64_t nb, int32_t *tokens, int32_t *labels)
{
    tgc_data_batch_range(data, order, 0, tgc_data_nsamples(data, s), step, s, B, b0, nb, tokens, labels);
}

void tgc_data_batch(const tgc_data *data, int64_t step, int64_t s, int64_t B, int32_t *tokens, int32_t *labels)
{
    tgc_data_batch_rows(data, NULL, step, s, B, 0, B, tokens, labels);
}
