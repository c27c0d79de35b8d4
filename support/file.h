/* Every file tgc reads comes in through here, and every stream it writes is
 * checked when it is closed.
 *
 * Input files are opened without blocking (O_NONBLOCK | O_CLOEXEC, so a FIFO
 * with no writer cannot hang tgc), must be regular files (a FIFO, a device
 * or a directory is refused by name) and are read up to a size limit per
 * kind (docs/runtime.md, "Files: what tgc reads and writes"). "-" is standard input where a command
 * takes it: read as a stream, with the same limit. */
#ifndef TGC_FILE_H
#define TGC_FILE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

typedef enum file_kind {
    FILE_MODEL,  /* a .tg model or text IR */
    FILE_PLAN,   /* a compiled plan */
    FILE_LOG,    /* a JSON-lines training log (tgc plot) */
    FILE_TEXT,   /* one document of a text corpus, a vocabulary, merges */
    FILE_SMALL,  /* a checkpoint's `latest`, a cache manifest */
    FILE_CACHE,  /* a kernel cache entry, a compiler log */
    FILE_JSON,   /* config.json, a safetensors index, tokenizer.json */
    FILE_MAPPED, /* token data, safetensors: mapped, not read into memory */
    FILE_KIND_COUNT
} file_kind;

/* The kind's name in messages ("model source") and its limit in bytes
 * (UINT64_MAX for FILE_MAPPED). */
const char *file_kind_name(file_kind k);
uint64_t file_kind_limit(file_kind k);

/* Opens path read-only without blocking and refuses what is not a regular
 * file or is over the kind's limit. Returns the descriptor (in blocking
 * mode again) and fills *st, or -1 with the reason in why ("it is a FIFO,
 * not a regular file", strerror) and errno set (EISDIR, EINVAL for another
 * kind of file, EFBIG over the limit, else open's). */
int file_open(const char *path, file_kind k, struct stat *st, char *why, size_t cap);

/* The whole file, NUL-terminated (*len excludes the NUL); "-" reads
 * standard input. NULL with the reason in why. */
char *file_read(const char *path, file_kind k, size_t *len, char *why, size_t cap);

/* The first bytes file_read_head passes to its check: up to this many,
 * fewer when the file is shorter. */
#define FILE_HEAD_BYTES 4096
/* Returns false (after reporting, through ctx) to refuse a file by its
 * first bytes. */
typedef bool (*file_head_fn)(const char *head, size_t n, void *ctx);

/* file_read that calls head on the first bytes before reading on, so that
 * a file that cannot be what the caller expects (a JSON reader given a
 * gigabyte of NUL bytes) is refused without being read whole. NULL with
 * errno EILSEQ and why "refused by its first bytes" when head refused. */
char *file_read_head(const char *path, file_kind k, file_head_fn head, void *ctx, size_t *len, char *why,
                     size_t cap);

/* Output paths that name an existing file which is not a regular one (a
 * device such as /dev/stdout or /dev/full, a FIFO) are written in place,
 * never replaced by renaming a temporary file over them. Returns such a
 * path opened for writing; NULL with *special false for any other path
 * (write a temporary file and rename it); NULL with *special true and
 * errno set when it cannot be opened (a FIFO with no reader: ENXIO, at
 * once rather than a hang). */
FILE *file_open_special(const char *path, bool *special);

/* fopen(path, "wb") for an output written in place (no temporary file):
 * never blocks on a FIFO (file_open_special). NULL with errno set. */
FILE *file_create(const char *path);

/* fflush + ferror + fclose: false when any byte written to f was lost
 * (errno says why). */
bool file_close(FILE *f);

/* The end of every command: flushes and closes standard output. false,
 * with the reason in why, when any of its output was lost (a full disk,
 * /dev/full). */
bool file_close_stdout(char *why, size_t cap);

#endif
