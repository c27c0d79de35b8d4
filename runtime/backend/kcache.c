#include "runtime/backend/kcache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/file.h"
#include "support/util.h"

#define MANIFEST_MAGIC "tgc-cache 1\n"

static char *manifest_path(const char *path)
{
    size_t n = strlen(path) + sizeof ".manifest";
    char *m = xmalloc(n);
    snprintf(m, n, "%s.manifest", path);
    return m;
}

/* The size and hash a manifest records; false when it is not one. */
static bool manifest_parse(const char *text, uint64_t *size, uint64_t *hash)
{
    size_t ml = strlen(MANIFEST_MAGIC);
    if (strncmp(text, MANIFEST_MAGIC, ml) != 0) return false;
    unsigned long long s, h;
    int used = 0;
    if (sscanf(text + ml, "size %llu\nhash %16llx\n%n", &s, &h, &used) != 2 || used == 0) return false;
    *size = s;
    *hash = h;
    return true;
}

rt_cache_state rt_cache_check(const char *path, char **data, size_t *len, char *why, size_t cap)
{
    size_t n = 0, mn = 0;
    char *bytes = file_read(path, FILE_CACHE, &n, why, cap);
    if (!bytes && errno == ENOENT) return RT_CACHE_MISS;
    if (!bytes) return RT_CACHE_BAD;
    char *mpath = manifest_path(path), mwhy[256];
    char *mtext = file_read(mpath, FILE_SMALL, &mn, mwhy, sizeof mwhy);
    uint64_t want_size = 0, want_hash = 0, have_hash = hash_bytes(bytes, n, HASH_SEED);
    rt_cache_state st = RT_CACHE_BAD;
    if (!mtext) snprintf(why, cap, "its manifest %s: %s", mpath, mwhy);
    else if (!manifest_parse(mtext, &want_size, &want_hash)) snprintf(why, cap, "its manifest %s is malformed", mpath);
    else if (want_size != n)
        snprintf(why, cap, "it holds %zu bytes, its manifest says %" PRIu64, n, want_size);
    else if (want_hash != have_hash)
        snprintf(why, cap, "its hash %016" PRIx64 " differs from its manifest's %016" PRIx64, have_hash, want_hash);
    else st = RT_CACHE_OK;
    free(mtext);
    free(mpath);
    if (st == RT_CACHE_OK && data) {
        *data = bytes;
        if (len) *len = n;
    } else {
        free(bytes);
    }
    return st;
}

/* Writes text to path atomically (file_write_atomic). */
static bool write_renamed(const char *path, const char *text, char *why, size_t cap)
{
    char reason[256];
    bool ok = file_write_atomic(path, text, strlen(text), reason, sizeof reason);
    if (!ok) snprintf(why, cap, "cannot write '%s': %s", path, reason);
    return ok;
}

bool rt_cache_commit(const char *tmp, const char *path, const char *info, char *why, size_t cap)
{
    size_t n = 0;
    char *bytes = file_read(tmp, FILE_CACHE, &n, why, cap);
    if (!bytes) {
        remove(tmp);
        return false;
    }
    strbuf m;
    sb_init(&m);
    sb_printf(&m, MANIFEST_MAGIC "size %zu\nhash %016" PRIx64 "\n%s", n, hash_bytes(bytes, n, HASH_SEED),
              info ? info : "");
    free(bytes);
    char *mpath = manifest_path(path);
    bool ok = rename(tmp, path) == 0;
    if (!ok) {
        snprintf(why, cap, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        remove(tmp);
    }
    ok = ok && write_renamed(mpath, m.s, why, cap);
    free(mpath);
    sb_free(&m);
    return ok;
}

void rt_cache_remove(const char *path)
{
    char *m = manifest_path(path);
    remove(m);
    remove(path);
    free(m);
}
