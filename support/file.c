#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
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

bool file_mkdirs(const char *path, unsigned mode)
{
    char *p = xstrdup(path);
    bool ok = true;
    for (char *s = p + 1; ok && *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        ok = mkdir(p, (mode_t)mode) == 0 || errno == EEXIST;
        *s = '/';
    }
    ok = ok && (mkdir(p, (mode_t)mode) == 0 || errno == EEXIST);
    int saved = errno;
    free(p);
    errno = saved;
    return ok;
}

/* ---- output files -------------------------------------------------------------- */

struct file_out {
    char *path, *tmp; /* tmp NULL: a device or FIFO written in place */
    FILE *f;
};

/* A symlink at path may be followed to a device only if root or the
 * caller made it (/dev/stdout is root's; one planted by another user is
 * not followed). */
static bool link_trusted(const char *path)
{
    struct stat ls;
    if (lstat(path, &ls) != 0) return false;
    return !S_ISLNK(ls.st_mode) || ls.st_uid == 0 || ls.st_uid == geteuid();
}

/* path opened for writing in place when it is an existing device or FIFO
 * (never created, never truncated); NULL with *special false otherwise,
 * NULL with *special true and errno set when it cannot be opened (a FIFO
 * with no reader: ENXIO at once, not a hang). */
static FILE *open_special(const char *path, bool *special)
{
    struct stat st;
    *special = stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && link_trusted(path);
    if (!*special) return NULL;
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return NULL;
    if (fstat(fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
        close(fd); /* replaced by a regular file since: make a temporary after all */
        *special = false;
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "wb");
    if (!f) close(fd);
    return f;
}

/* n unpredictable letters and digits. */
static void random_name(char *out, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static _Atomic unsigned long seq;
    unsigned char r[32];
    TGC_ASSERT(n <= sizeof r);
    if (getrandom(r, n, GRND_NONBLOCK) != (ssize_t)n) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t h = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 12) ^ ++seq;
        for (size_t i = 0; i < n; i++) {
            h = h * 6364136223846793005ull + 1442695040888963407ull;
            r[i] = (unsigned char)(h >> 33);
        }
    }
    for (size_t i = 0; i < n; i++) out[i] = abc[r[i] % (sizeof abc - 1)];
    out[n] = 0;
}

/* Creates path's temporary exclusively: returns its descriptor and *tmp
 * (free it), or -1 with errno set. */
static int create_tmp(const char *path, char **tmp)
{
    size_t cap = strlen(path) + 32;
    *tmp = xmalloc(cap);
    for (int tries = 0; tries < 100; tries++) {
        char r[9];
        random_name(r, 8);
        snprintf(*tmp, cap, "%s.%s.tmp", path, r);
        int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0666);
        if (fd >= 0 || errno != EEXIST) {
            if (fd < 0) {
                int err = errno;
                free(*tmp);
                *tmp = NULL;
                errno = err;
            }
            return fd;
        }
    }
    free(*tmp);
    *tmp = NULL;
    errno = EEXIST;
    return -1;
}

file_out *file_out_begin(const char *path, char *why, size_t cap)
{
    file_out *o = xcalloc(1, sizeof *o);
    o->path = xstrdup(path);
    bool special;
    struct stat ls;
    o->f = open_special(path, &special);
    if (!special && lstat(path, &ls) == 0 && S_ISDIR(ls.st_mode)) {
        errno = EISDIR; /* a rename could not replace it: fail before the work */
    } else if (!special) {
        int fd = create_tmp(path, &o->tmp);
        o->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (fd >= 0 && !o->f) {
            int err = errno;
            close(fd);
            errno = err;
        }
    }
    if (!o->f) {
        int err = errno;
        snprintf(why, cap, "%s", strerror(err));
        file_out_abort(o);
        errno = err;
        return NULL;
    }
    return o;
}

FILE *file_out_stream(file_out *o) { return o->f; }
const char *file_out_tmp(const file_out *o) { return o->tmp ? o->tmp : o->path; }

static void out_free(file_out *o)
{
    free(o->path);
    free(o->tmp);
    free(o);
}

void file_out_abort(file_out *o)
{
    if (!o) return;
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    out_free(o);
}

/* fsync of path's directory, so the rename survives a crash (a file
 * system that cannot sync a directory is no error). */
static void fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = xstrdup(slash ? path : ".");
    if (slash) dir[slash == path ? 1 : slash - path] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

/* Flush, fsync, close; the reason in why on failure (o->f is then NULL). */
static bool out_close(file_out *o, char *why, size_t cap)
{
    errno = 0;
    bool ok = fflush(o->f) == 0 && !ferror(o->f) && (!o->tmp || fsync(fileno(o->f)) == 0);
    int err = errno ? errno : EIO;
    if (fclose(o->f) != 0 && ok) { ok = false; err = errno; }
    o->f = NULL;
    if (!ok) {
        snprintf(why, cap, "%s", strerror(err));
        errno = err;
    }
    return ok;
}

bool file_out_sync(file_out *o, char *why, size_t cap)
{
    if (!o->f || out_close(o, why, cap)) return true;
    int err = errno;
    file_out_abort(o);
    errno = err;
    return false;
}

bool file_out_commit(file_out *o, char *why, size_t cap)
{
    bool ok = !o->f || out_close(o, why, cap);
    int err = errno;
    if (ok && o->tmp && rename(o->tmp, o->path) != 0) {
        ok = false;
        err = errno;
        snprintf(why, cap, "%s", strerror(err));
    }
    if (ok && o->tmp) fsync_parent(o->path);
    if (!ok && o->tmp) unlink(o->tmp);
    out_free(o);
    if (!ok) errno = err;
    return ok;
}

bool file_write_atomic(const char *path, const void *data, size_t len, char *why, size_t cap)
{
    file_out *o = file_out_begin(path, why, cap);
    if (!o) return false;
    if (len && fwrite(data, 1, len, o->f) != len) {
        int err = errno ? errno : EIO;
        snprintf(why, cap, "%s", strerror(err));
        file_out_abort(o);
        errno = err;
        return false;
    }
    return file_out_commit(o, why, cap);
}

int file_open_append(const char *path, char *why, size_t cap)
{
    int nofollow = link_trusted(path) ? 0 : O_NOFOLLOW;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | nofollow, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, cap, "%s", errno == ELOOP ? "it is a symbolic link another user made; tgc does not follow it"
                                                : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    const char *bad = S_ISDIR(st.st_mode) ? "it is a directory"
                      : S_ISREG(st.st_mode) && (st.st_nlink != 1 || st.st_uid != geteuid())
                          ? "it is a regular file of another user or with other hard links"
                          : NULL;
    if (bad) {
        snprintf(why, cap, "%s", bad);
        close(fd);
        errno = EPERM;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

char *file_private_dir(const char *path)
{
    size_t cap = strlen(path) + 16;
    char *dir = xmalloc(cap);
    snprintf(dir, cap, "%s.XXXXXX", path);
    if (!mkdtemp(dir)) {
        int err = errno;
        free(dir);
        errno = err;
        return NULL;
    }
    return dir;
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
