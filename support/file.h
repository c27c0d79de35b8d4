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

/* Every output file is made one way (docs/runtime.md, "Files: what tgc
 * reads and writes"): a temporary file with an unpredictable name
 * (NAME.XXXXXXXX.tmp) created exclusively in the target's directory
 * (O_CREAT | O_EXCL | O_NOFOLLOW, so nothing planted there is followed or
 * reused), written, fsynced, renamed over the target and the directory
 * fsynced. A symlink at the target is replaced by the rename, never written
 * through. Any failure removes the temporary and leaves the target as it was.
 *
 * A target that exists and is a device or a FIFO (/dev/stdout, /dev/null)
 * is written in place instead; a symlink on the way there is followed only
 * when it belongs to root or to the caller (/dev/stdout is root's), so one
 * that someone else planted is replaced like any other. */
typedef struct file_out file_out;

/* Begins the output path. NULL with the reason in why (naming the path or
 * its temporary) and errno set. */
file_out *file_out_begin(const char *path, char *why, size_t cap);
FILE *file_out_stream(file_out *o);
/* The temporary's path (the target's for a device or FIFO). */
const char *file_out_tmp(const file_out *o);
/* Flushes, fsyncs and closes the temporary, not yet renamed: outputs that
 * go in together are all synced before the first is committed. false,
 * with the reason in why, after which the temporary is gone and o freed. */
bool file_out_sync(file_out *o, char *why, size_t cap);
/* Flushes, fsyncs (unless synced) and renames over the target; frees o. false, with the
 * reason in why, after which the temporary is gone. */
bool file_out_commit(file_out *o, char *why, size_t cap);
/* Closes and removes the temporary; frees o (NULL is nothing). */
void file_out_abort(file_out *o);

/* The whole output at once: begin, write, commit. */
bool file_write_atomic(const char *path, const void *data, size_t len, char *why, size_t cap);

/* Opens path for appending (a training log that a resumed run goes on
 * with), creating it if need be, without blocking on a FIFO. A symlink
 * there is followed only under file_out_begin's rule (root's or the
 * caller's), and what is appended to must be a regular file of the
 * caller's with one link, a device or a FIFO. The descriptor, or -1 with
 * the reason in why. */
int file_open_append(const char *path, char *why, size_t cap);

/* mkdir -p: path and every missing parent, each made with mode (before
 * the umask); one that exists is left as it is. false with errno set. */
bool file_mkdirs(const char *path, unsigned mode);

/* A private directory (mode 0700, made by mkdtemp) beside path for
 * temporaries another program writes (the C compiler's -o): PATH.XXXXXX.
 * Returns it (free it), or NULL with errno set. */
char *file_private_dir(const char *path);

/* fflush + ferror + fclose: false when any byte written to f was lost
 * (errno says why). */
bool file_close(FILE *f);

/* The end of every command: flushes and closes standard output. false,
 * with the reason in why, when any of its output was lost (a full disk,
 * /dev/full). */
bool file_close_stdout(char *why, size_t cap);

#endif
