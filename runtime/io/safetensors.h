/* The Hugging Face safetensors format, read and written without
 * dependencies (checkpoints, initial weights, exchange with PyTorch).
 *
 * Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
 *   {"__metadata__": {"format": "pt", ...str: str},
 *    "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, ...}
 * (padded with spaces), then the data buffer: each tensor row-major and
 * little-endian at [BEGIN, END) relative to the buffer's start, the tensors
 * packed without gaps or overlaps and covering the buffer exactly.
 *
 * tgc_st_write sorts the header's entries by name, pads the header so the
 * buffer starts at a multiple of 8, and orders the data by element size
 * (largest first) and then name, so every tensor of a file it wrote is
 * naturally aligned in a mapping. The output is a function of its inputs
 * only (byte-identical for the same tensors and metadata). */
#ifndef TGC_RUNTIME_SAFETENSORS_H
#define TGC_RUNTIME_SAFETENSORS_H
#include <stdbool.h>
#include <stdint.h>

#include "support/diag.h"
#include "support/file.h"

#define TGC_ST_MAX_RANK 8
/* The largest header accepted (as the reference implementation). */
#define TGC_ST_MAX_HEADER 100000000ull

/* Every dtype of the format; the names are the header's spellings. */
#define TGC_ST_DTYPES(X)                                                       \
    X(BOOL, 1) X(U8, 1) X(I8, 1) X(F8_E5M2, 1) X(F8_E4M3, 1)                   \
    X(I16, 2) X(U16, 2) X(F16, 2) X(BF16, 2)                                   \
    X(I32, 4) X(U32, 4) X(F32, 4) X(F64, 8) X(I64, 8) X(U64, 8)

typedef enum tgc_st_dtype {
#define TGC_ST_ENUM(name, size) TGC_ST_##name,
    TGC_ST_DTYPES(TGC_ST_ENUM)
#undef TGC_ST_ENUM
    TGC_ST_DTYPE_COUNT
} tgc_st_dtype;

const char *tgc_st_dtype_name(tgc_st_dtype t);
int tgc_st_dtype_size(tgc_st_dtype t);
bool tgc_st_dtype_lookup(const char *name, tgc_st_dtype *out);

/* ---- writing ------------------------------------------------------------ */

typedef struct tgc_st_tensor {
    const char *name;
    tgc_st_dtype dtype;
    int rank;             /* 0 .. TGC_ST_MAX_RANK; 0 = a scalar */
    const int64_t *shape; /* rank dims, each >= 0 */
    const void *data;     /* prod(shape) * dtype size bytes, little-endian */
} tgc_st_tensor;

typedef struct tgc_st_kv {
    const char *key, *value;
} tgc_st_kv;

/* Writes the tensors and metadata (plus "format": "pt" unless meta sets
 * "format") to PATH.tmp, fsyncs it and renames it to path, so a reader sees
 * the old file or the whole new one. Names and keys must be unique. On
 * failure reports `PATH: error: ...`, removes its temporary and returns false
 * (the file is written as support/file.h's file_out_begin says: an
 * exclusive temporary beside PATH renamed over it). */
bool tgc_st_write(const char *path, const tgc_st_tensor *tensors, int n, const tgc_st_kv *meta, int nmeta,
                  diag *d);

/* The same file written tensor by tensor, for tensors that are not all in
 * memory at once (`tgc import hf` of a checkpoint larger than memory):
 * open computes the header from the tensors' names, dtypes and shapes
 * (their data is not read) and writes it to PATH's temporary; the data then comes
 * one tensor at a time in the file's data order, tgc_st_writer_next naming
 * the index (into `tensors`, which must outlive the writer) of the tensor
 * put expects next, -1 when all have been put. finish(w, true) after the
 * last put syncs and renames as tgc_st_write does (false after reporting a
 * write error); finish(w, false) abandons the file silently, removing
 * the temporary. close(w) is finish(w, true) without the rename: it
 * returns the synced temporary for file_out_commit (several files that go
 * in together: a sharded export), NULL after reporting an error. The bytes equal tgc_st_write's for the same tensors and
 * metadata (which is open, put, finish). NULL-safe finish. */
typedef struct tgc_st_writer tgc_st_writer;
tgc_st_writer *tgc_st_writer_open(const char *path, const tgc_st_tensor *tensors, int n, const tgc_st_kv *meta,
                                  int nmeta, diag *d);
int tgc_st_writer_next(const tgc_st_writer *w);
bool tgc_st_writer_put(tgc_st_writer *w, const void *data);
bool tgc_st_writer_finish(tgc_st_writer *w, bool keep);
file_out *tgc_st_writer_close(tgc_st_writer *w);

/* ---- reading ------------------------------------------------------------ */

typedef struct tgc_st_info {
    const char *name;
    tgc_st_dtype dtype;
    int rank;
    int64_t shape[TGC_ST_MAX_RANK];
    int64_t nbytes;
    uint64_t begin;   /* data_offsets[0], relative to the data buffer */
    const void *data; /* in the mapping; aligned only if the writer aligned it */
} tgc_st_info;

typedef struct tgc_st_file tgc_st_file;

/* Maps and validates the whole file: the header length, strict JSON (UTF-8,
 * no duplicate keys, no trailing garbage but spaces), known dtypes,
 * non-negative integer shapes of rank <= TGC_ST_MAX_RANK, offsets that
 * match shape * dtype size, lie in
 * the file and tile the buffer. NULL after reporting on any error. */
tgc_st_file *tgc_st_open(const char *path, diag *d);
void tgc_st_close(tgc_st_file *f);

/* Drops the memory pages holding t's data from the mapping (they are read
 * again from the file on the next access): a reader that goes through a
 * file larger than memory tensor by tensor keeps only the current one. */
void tgc_st_release(const tgc_st_file *f, const tgc_st_info *t);

const char *tgc_st_path(const tgc_st_file *f);
/* The tensors, sorted by name. */
int tgc_st_count(const tgc_st_file *f);
const tgc_st_info *tgc_st_at(const tgc_st_file *f, int i);
const tgc_st_info *tgc_st_find(const tgc_st_file *f, const char *name);
/* __metadata__, sorted by key; tgc_st_meta returns NULL when absent. */
int tgc_st_meta_count(const tgc_st_file *f);
tgc_st_kv tgc_st_meta_at(const tgc_st_file *f, int i);
const char *tgc_st_meta(const tgc_st_file *f, const char *key);

/* The data of tensor `name`, checked to have this dtype and shape; reports
 * (naming the file and the tensor, with both shapes on a mismatch) and
 * returns NULL when it is missing or differs. */
const void *tgc_st_expect(const tgc_st_file *f, const char *name, tgc_st_dtype dtype, int rank,
                          const int64_t *shape, diag *d);

#endif
