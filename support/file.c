#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

#define MIB (1024ull * 1024ull)

static const struct {
    const char *name;
    uint64_t limit;
} kinds[FILE_KIND_COUNT] = {
    [FILE_MODEL] = {"model source", 64 * MIB},
    [FILE_PLAN] = {"plan", 1024 * MIB},
    [FILE_LOG] = {"training log", 1024 * MIB},
    [FILE_TEXT] = {"text file", 1024 * MIB},
    [FILE_SMALL] = {"small file", 4096},
    [FILE_CACHE] = {"kernel cache file", 256 * MIB},
    [FILE_JSON] = {"JSON file", 128 * MIB},
    [FILE_MAPPED] = {"mapped file", UINT64_MAX},
};

const char *file_kind_name(file_kind k) { return kinds[k].name; }
uint64_t file_kind_limit(file_kind k) { return kinds[k].limit; }

static const char *file_type_name(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

static void size_text(uint64_t n, char *out, size_t cap)
{
    if (n >= MIB && n % MIB == 0) snprintf(out, cap, "%llu MiB", (unsigned long long)(n / MIB));
    else snprintf(out, cap, "%llu bytes", (unsigned long long)n);
}

/* have: the file's size, or 0 for a stream stopped at the limit. */
static void over_limit(file_kind k, uint64_t have, char *why, size_t cap)
{
    char lim[32];
    size_text(kinds[k].limit, lim, sizeof lim);
    if (have) snprintf(why, cap, "it is %llu bytes, over the %s limit of a %s", (unsigned long long)have, lim,
                       kinds[k].name);
    else snprintf(why, cap, "it is over the %s limit of a %s", lim, kinds[k].name);
}

static int refuse(int fd, int err)
{
    close(fd);
    errno = err;
    return -1;
}

int file_open(const char *path, file_kind k, struct stat *st, char *why, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, st) != 0) {
        int err = errno;
        snprintf(why, cap, "%s", strerror(err));
        return fd < 0 ? (errno = err, -1) : refuse(fd, err);
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(why, cap, "it is %s, not a regular file", file_type_name(st->st_mode));
        return refuse(fd, S_ISDIR(st->st_mode) ? EISDIR : EINVAL);
    }
    if ((uint64_t)st->st_size > kinds[k].limit) {
        over_limit(k, (uint64_t)st->st_size, why, cap);
        return refuse(fd, EFBIG);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

/* Reads fd to its end, at most limit bytes (a file in /proc says size 0,
 * a stream says nothing: the limit is checked on what arrives); head, when
 * given, sees the first FILE_HEAD_BYTES (or all, when fewer) first. */
static char *read_fd(int fd, file_kind k, size_t hint, file_head_fn head, void *ctx, size_t *len, char *why,
                     size_t cap)
{
    uint64_t limit = kinds[k].limit;
    size_t size = hint + 1 > 4096 ? hint + 1 : 4096, n = 0;
    char *buf = malloc(size); /* the file's size: a failure is the caller's error, not an exit */
    for (;;) {
        if (buf && n + 1 >= size) {
            char *more = realloc(buf, size * 2);
            if (!more) free(buf);
            buf = more;
            size *= 2;
        }
        if (!buf) { snprintf(why, cap, "out of memory reading it (%zu bytes)", size); errno = ENOMEM; return NULL; }
        size_t want = size - n - 1;
        if (head && n < FILE_HEAD_BYTES && want > FILE_HEAD_BYTES - n) want = FILE_HEAD_BYTES - n;
        ssize_t got = read(fd, buf + n, want);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { snprintf(why, cap, "%s", strerror(errno)); free(buf); return NULL; }
        n += (size_t)got;
        if (head && (n >= FILE_HEAD_BYTES || got == 0)) {
            bool ok = head(buf, n, ctx);
            head = NULL;
            if (!ok) { snprintf(why, cap, "refused by its first bytes"); free(buf); errno = EILSEQ; return NULL; }
        }
        if (got == 0) break;
        if ((uint64_t)n > limit) { over_limit(k, 0, why, cap); free(buf); return NULL; }
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *file_read_head(const char *path, file_kind k, file_head_fn head, void *ctx, size_t *len, char *why,
                     size_t cap)
{
    if (strcmp(path, "-") == 0) return read_fd(STDIN_FILENO, k, 0, head, ctx, len, why, cap);
    struct stat st;
    int fd = file_open(path, k, &st, why, cap);
    if (fd < 0) return NULL;
    char *buf = read_fd(fd, k, (size_t)st.st_size, head, ctx, len, why, cap);
    close(fd);
    return buf;
}

char *file_read(const char *path, file_kind k, size_t *len, char *why, size_t cap)
{
    return file_read_head(path, k, NULL, NULL, len, why, cap);
}

FILE *file_open_special(const char *path, bool *special)
{
    struct stat st;
    *special = stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
    if (!*special) return NULL;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "wb");
    if (!f) close(fd);
    return f;
}

FILE *file_create(const char *path)
{
    bool special;
    FILE *f = file_open_special(path, &special);
    return f || special ? f : fopen(path, "wb");
}

bool file_close(FILE *f)
{
    bool ok = fflush(f) == 0 && !ferror(f);
    int err = errno;
    if (fclose(f) != 0) return false;
    if (!ok) errno = err ? err : EIO;
    return ok;
}

bool file_close_stdout(char *why, size_t cap)
{
    errno = 0;
    bool ok = fflush(stdout) == 0 && !ferror(stdout);
    int err = errno;
    /* A closed descriptor 1 (tgc >&-) is no lost output when nothing was
     * written to it. */
    if (fclose(stdout) != 0 && ok && errno != EBADF) {
        ok = false;
        err = errno;
    }
    if (!ok) snprintf(why, cap, "%s", err ? strerror(err) : "write error");
    return ok;
}
