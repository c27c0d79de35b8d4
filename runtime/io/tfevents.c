/* TensorBoard event files: TFRecord framing with CRC32C, the Event
 * protobuf by hand, and an append-only writer (runtime/io/tfevents.h). */
#define _DEFAULT_SOURCE /* gethostname */
#include "runtime/io/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "support/file.h"
#include "support/util.h"

/* ---- CRC32C ------------------------------------------------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tgc_crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_table_init);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

uint32_t tgc_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

size_t tgc_tfrecord_frame(const void *data, size_t n, uint8_t *out, size_t cap)
{
    if (cap < 16 || n > cap - 16) return 0;
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, tgc_crc32c_mask(tgc_crc32c(0, out, 8)));
    memcpy(out + 12, data, n);
    put_le32(out + 12 + n, tgc_crc32c_mask(tgc_crc32c(0, data, n)));
    return n + 16;
}

/* ---- the Event protobuf ------------------------------------------------------- */

/* A protobuf writer into out[0..cap): ok false once something did not fit. */
typedef struct pb {
    uint8_t *out;
    size_t cap, len;
    bool ok;
} pb;

static void pb_bytes(pb *b, const void *p, size_t n)
{
    if (!b->ok || n > b->cap - b->len) {
        b->ok = false;
        return;
    }
    memcpy(b->out + b->len, p, n);
    b->len += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, tmp, n);
}

/* Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit. */
static void pb_key(pb *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_double(pb *b, int field, double v)
{
    uint64_t bits;
    uint8_t le[8];
    memcpy(&bits, &v, 8);
    put_le64(le, bits);
    pb_key(b, field, 1);
    pb_bytes(b, le, 8);
}

static void pb_float(pb *b, int field, float v)
{
    uint32_t bits;
    uint8_t le[4];
    memcpy(&bits, &v, 4);
    put_le32(le, bits);
    pb_key(b, field, 5);
    pb_bytes(b, le, 4);
}

static void pb_string(pb *b, int field, const char *s, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, s, n);
}

/* Event fields: wall_time 1, step 2 (int64: a negative step takes ten
 * bytes, as protobuf encodes it), file_version 3, summary 5. */
static void event_head(pb *b, double wall_time, int64_t step)
{
    pb_double(b, 1, wall_time);
    if (step != 0) {
        pb_key(b, 2, 0);
        pb_varint(b, (uint64_t)step);
    }
}

size_t tgc_tfevents_encode_version(double wall_time, uint8_t *out, size_t cap)
{
    pb b = {out, cap, 0, true};
    event_head(&b, wall_time, 0);
    pb_string(&b, 3, "brain.Event:2", 13);
    return b.ok ? b.len : 0;
}

size_t tgc_tfevents_encode_scalar(double wall_time, int64_t step, const char *tag, float value, uint8_t *out,
                                  size_t cap)
{
    size_t ntag = strlen(tag);
    /* Summary.Value {tag 1, simple_value 2}: its length first. */
    uint8_t vbuf[TGC_TFEVENTS_TAG_MAX + 16];
    pb v = {vbuf, sizeof vbuf, 0, ntag <= TGC_TFEVENTS_TAG_MAX};
    pb_string(&v, 1, tag, ntag);
    pb_float(&v, 2, value);
    if (!v.ok) return 0;
    uint8_t sbuf[sizeof vbuf + 8];
    pb s = {sbuf, sizeof sbuf, 0, true}; /* Summary {repeated Value value = 1} */
    pb_string(&s, 1, (const char *)vbuf, v.len);
    pb b = {out, cap, 0, s.ok};
    event_head(&b, wall_time, step);
    pb_string(&b, 5, (const char *)sbuf, s.len);
    return b.ok ? b.len : 0;
}

/* ---- the writer --------------------------------------------------------------- */

/* Room for the records of a few steps: a scalar's is under 160 bytes. */
#define TFEVENTS_BUF (32 * 1024)

struct tgc_tfevents {
    int fd;
    char *path;
    size_t len; /* queued bytes of buf */
    uint8_t buf[TFEVENTS_BUF];
    uint8_t event[TGC_TFEVENTS_TAG_MAX + 64]; /* one Event's protobuf */
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* dir as a directory (made when missing); false after reporting. */
static bool tfevents_dir(const char *dir, const char *opt, diag *d)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || !file_mkdirs(dir, 0755) || stat(dir, &st) != 0) {
            diag_error_plain(d, "%s: cannot create the directory '%s': %s", opt, dir, strerror(errno));
            return false;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        struct stat lst;
        bool link = lstat(dir, &lst) == 0 && S_ISLNK(lst.st_mode);
        diag_error_plain(d, "%s %s: is %s, not a directory", opt, dir,
                         link ? "a symbolic link to a file" : "a file");
        return false;
    }
    return true;
}

/* Creates dir/events.out.tfevents.SECONDS.HOST.PID.N exclusively, N the
 * first free; the descriptor, or -1 with errno set (*path: the last name tried). */
static int tfevents_create(const char *dir, char **path)
{
    char host[256] = "localhost", name[512];
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    long long secs = (long long)time(NULL);
    for (int n = 0; n < 1000; n++) {
        snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%ld.%d", secs, host, (long)getpid(), n);
        free(*path);
        *path = path_join(dir, name);
        int fd = open(*path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

tgc_tfevents *tgc_tfevents_open(const char *dir, const char *opt, diag *d)
{
    if (!tfevents_dir(dir, opt, d)) return NULL;
    char *path = NULL;
    int fd = tfevents_create(dir, &path);
    if (fd < 0) {
        diag_error_plain(d, "%s: cannot create '%s': %s", opt, path, strerror(errno));
        free(path);
        return NULL;
    }
    tgc_tfevents *w = xcalloc(1, sizeof *w);
    w->fd = fd;
    w->path = path;
    size_t n = tgc_tfevents_encode_version(wall_now(), w->event, sizeof w->event);
    w->len = tgc_tfrecord_frame(w->event, n, w->buf, sizeof w->buf);
    if (!tgc_tfevents_flush(w)) {
        diag_error_plain(d, "%s: cannot write '%s': %s", opt, path, strerror(errno));
        close(fd);
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

const char *tgc_tfevents_path(const tgc_tfevents *w) { return w->path; }

bool tgc_tfevents_scalar(tgc_tfevents *w, const char *tag, int64_t step, double value)
{
    size_t n = tgc_tfevents_encode_scalar(wall_now(), step, tag, (float)value, w->event, sizeof w->event);
    TGC_ASSERT(n > 0); /* tags are tgc's constants */
    if (n + 16 > sizeof w->buf - w->len && !tgc_tfevents_flush(w)) return false;
    w->len += tgc_tfrecord_frame(w->event, n, w->buf + w->len, sizeof w->buf - w->len);
    return true;
}

bool tgc_tfevents_flush(tgc_tfevents *w)
{
    size_t at = 0;
    while (at < w->len) {
        ssize_t k = write(w->fd, w->buf + at, w->len - at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            /* What was not written is dropped: a later record must not
             * follow a partial one (the reader would stop there anyway). */
            w->len = 0;
            return false;
        }
        at += (size_t)k;
    }
    w->len = 0;
    return true;
}

bool tgc_tfevents_close(tgc_tfevents *w, diag *d)
{
    if (!w) return true;
    bool ok = tgc_tfevents_flush(w);
    /* fsync: EINVAL where the file cannot be synced (a special file). */
    ok = ok && (fsync(w->fd) == 0 || errno == EINVAL);
    int err = errno;
    if (close(w->fd) != 0 && errno != EINTR && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) diag_error_plain(d, "cannot write the TensorBoard events '%s': %s", w->path, strerror(err));
    free(w->path);
    free(w);
    return ok;
}
