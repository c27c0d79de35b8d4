#include "plan.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/file.h"
#include "support/util.h"

/* A device or FIFO named as the output is written in place. */
static bool write_special(FILE *f, bool special, const char *path, const void *data, size_t len, diag *d)
{
    bool ok = f && fwrite(data, 1, len, f) == len;
    if (f && !file_close(f)) ok = false;
    if (!ok) diag_error_plain(d, "cannot write '%s': %s", path, strerror(errno));
    return ok;
}

bool rt_write_atomic(const char *path, const void *data, size_t len, diag *d)
{
    bool special;
    FILE *f = file_open_special(path, &special);
    if (special) return write_special(f, special, path, data, len, d);
    size_t n = strlen(path) + 8;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bool ok = fd >= 0;
    for (size_t off = 0; ok && off < len;) {
        ssize_t w = write(fd, (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        off += w > 0 ? (size_t)w : 0;
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0) ok = false;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        diag_error_plain(d, "cannot write '%s': %s", path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return ok;
}

static src_loc at(const char *path) { return (src_loc){diag_intern(path), 0, 0}; }

static void section(strbuf *b, const char *name, const char *body)
{
    sb_printf(b, "section %s %zu\n", name, strlen(body));
    sb_puts(b, body);
}

bool rt_plan_write(const char *path, const rt_plan *p, diag *d)
{
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "tgc-plan %d\n", TGC_PLAN_VERSION);
    section(&b, "config", p->config);
    section(&b, "ir", p->ir);
    section(&b, "kernels", p->kernels);
    uint64_t h = hash_bytes(b.s, b.len, HASH_SEED);
    sb_printf(&b, "checksum %016llx\n", (unsigned long long)h);
    bool ok = rt_write_atomic(path, b.s, b.len, d);
    sb_free(&b);
    return ok;
}

bool rt_plan_sniff(const char *path)
{
    struct stat st;
    char why[256];
    int fd = file_open(path, FILE_PLAN, &st, why, sizeof why);
    if (fd < 0) return false;
    char head[9] = {0};
    ssize_t n = read(fd, head, 8);
    close(fd);
    return n == 8 && memcmp(head, "tgc-plan", 8) == 0;
}

/* Reads "section NAME BYTES\n" + body at *pos. */
static char *read_section(const char *text, size_t len, size_t *pos, const char *name, const char *path, diag *d)
{
    char want[64];
    int wl = snprintf(want, sizeof want, "section %s ", name);
    if (*pos + (size_t)wl > len || strncmp(text + *pos, want, (size_t)wl) != 0) {
        diag_error(d, at(path), "corrupt plan: expected section '%s' at byte %zu", name, *pos);
        return NULL;
    }
    char *end;
    errno = 0;
    const char *digits = text + *pos + wl;
    unsigned long long n = strtoull(digits, &end, 10);
    /* strtoull would also take spaces and a sign ("-1" is ULLONG_MAX). */
    if (errno || !isdigit((unsigned char)*digits) || *end != '\n') {
        diag_error(d, at(path), "corrupt plan: bad length of section '%s'", name);
        return NULL;
    }
    size_t start = (size_t)(end + 1 - text);
    if (n > len - start) { /* not start + n > len: that sum can wrap */
        diag_error(d, at(path), "truncated plan: section '%s' needs %llu bytes, %zu remain", name, n, len - start);
        return NULL;
    }
    *pos = start + n;
    char *body = xmalloc(n + 1);
    memcpy(body, text + start, n);
    body[n] = 0;
    return body;
}

static bool check_header(const char *text, size_t len, size_t *pos, const char *path, diag *d)
{
    int version = 0, used = 0;
    if (len < 10 || sscanf(text, "tgc-plan %d\n%n", &version, &used) != 1 || used == 0) {
        diag_error(d, at(path), "not a tgc plan (no 'tgc-plan' header)");
        return false;
    }
    if (version != TGC_PLAN_VERSION) {
        diag_error(d, at(path), "plan format version %d, but this tgc reads version %d; recompile the model",
                   version, TGC_PLAN_VERSION);
        return false;
    }
    *pos = (size_t)used;
    return true;
}

static bool check_sum(const char *text, size_t len, size_t pos, const char *path, diag *d)
{
    unsigned long long want;
    int used = 0;
    if (sscanf(text + pos, "checksum %16llx\n%n", &want, &used) != 1 || pos + (size_t)used != len) {
        diag_error(d, at(path), "corrupt plan: missing or malformed checksum line");
        return false;
    }
    uint64_t h = hash_bytes(text, pos, HASH_SEED);
    if (h != want) {
        diag_error(d, at(path), "corrupt plan: checksum %016llx does not match the contents (%016llx)", want,
                         (unsigned long long)h);
        return false;
    }
    return true;
}

rt_plan *rt_plan_read(const char *path, diag *d)
{
    size_t len = 0;
    char why[256];
    char *text = file_read(path, FILE_PLAN, &len, why, sizeof why);
    if (!text) {
        diag_error_plain(d, "cannot read '%s': %s", path, why);
        return NULL;
    }
    rt_plan *p = xcalloc(1, sizeof *p);
    size_t pos = 0;
    bool ok = check_header(text, len, &pos, path, d) &&
              (p->config = read_section(text, len, &pos, "config", path, d)) &&
              (p->ir = read_section(text, len, &pos, "ir", path, d)) &&
              (p->kernels = read_section(text, len, &pos, "kernels", path, d)) &&
              check_sum(text, len, pos, path, d);
    free(text);
    if (!ok) { rt_plan_free(p); return NULL; }
    return p;
}

void rt_plan_free(rt_plan *p)
{
    if (!p) return;
    free(p->config);
    free(p->ir);
    free(p->kernels);
    free(p);
}
