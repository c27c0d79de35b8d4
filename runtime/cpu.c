#include "cpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/util.h"

struct rt_so {
    void *handle;
    char path[1200];
};

#define CC_FLAGS "-std=c11 -O3 -march=native -fopenmp -fPIC -shared -fno-math-errno -Wno-unused"
/* libmvec: the SIMD math functions the generated code declares (x86-64 glibc). */
#if defined(__x86_64__) && defined(__GLIBC__)
#define CC_LIBS "-lmvec -lm"
#else
#define CC_LIBS "-lm"
#endif
#define CC_FLAGS_DEBUG "-std=c11 -O1 -g -fopenmp -fPIC -shared -Wno-unused"

static const char *compiler(void)
{
    const char *cc = getenv("TGC_CC");
    return cc && *cc ? cc : "cc";
}

bool rt_mkdir_p(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return false;
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

void rt_cache_dir(char *out, size_t n, const char *sub)
{
    const char *d = getenv("TGC_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    const char *t = getenv("TMPDIR");
    if (d && *d) snprintf(out, n, "%s%s", d, sub);
    else if (x && *x) snprintf(out, n, "%s/tgc%s", x, sub);
    else if (h && *h) snprintf(out, n, "%s/.cache/tgc%s", h, sub);
    else snprintf(out, n, "%s/tgc-cache-%d%s", t && *t ? t : "/tmp", (int)getuid(), sub);
}

void rt_print_numbered(FILE *out, const char *src)
{
    int line = 1;
    fprintf(out, "%5d  ", line);
    for (const char *p = src; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1]) fprintf(out, "%5d  ", ++line);
    }
}

/* The CPU model is part of the key: -march=native code is only valid there. */
static uint64_t cpu_hash(void)
{
    size_t len = 0;
    char *info = read_file("/proc/cpuinfo", &len);
    uint64_t h = HASH_SEED;
    if (info) {
        char *m = strstr(info, "model name");
        char *f = strstr(info, "flags");
        if (m) h = hash_bytes(m, strcspn(m, "\n"), h);
        if (f) h = hash_bytes(f, strcspn(f, "\n"), h);
        free(info);
    }
    return h;
}

/* Extra compiler flags: the options', else $TGC_KERNEL_CFLAGS (a sanitizer
 * build compiles the generated kernels with the same sanitizers). */
static const char *extra_flags(const rt_cc_options *o)
{
    const char *env = getenv("TGC_KERNEL_CFLAGS");
    return o->extra_flags ? o->extra_flags : env ? env : "";
}

static bool run_cc(const char *src_path, const char *so_path, const char *log_path, const rt_cc_options *o)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s -o '%s' '%s' " CC_LIBS " > '%s' 2>&1", compiler(),
             o->debug ? CC_FLAGS_DEBUG : CC_FLAGS, extra_flags(o), so_path, src_path,
             log_path);
    int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

static void report_failure(diag *d, const char *src, const char *log_path)
{
    size_t n = 0;
    char *log = read_file(log_path, &n);
    diag_error_plain(d, "the C compiler (%s) failed on the generated kernels:\n%s", compiler(), log ? log : "");
    free(log);
    /* The numbered source, so the log's line numbers can be followed. */
    rt_print_numbered(d->out, src);
}

static bool write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    return (fclose(f) == 0) && ok;
}

rt_so *rt_cc_load(const char *src, const rt_cc_options *o, diag *d)
{
    bool no_cache = o->no_cache || (getenv("TGC_NO_CACHE") && strcmp(getenv("TGC_NO_CACHE"), "0") != 0);
    bool keep = o->keep_source || (getenv("TGC_KEEP_SOURCE") && strcmp(getenv("TGC_KEEP_SOURCE"), "0") != 0);
    char dir[1024], base[1100], src_path[1200], so_path[1200], tmp_so[1200], log_path[1200];
    if (no_cache) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tgc-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) { diag_error_plain(d, "cannot create a temporary directory: %s", strerror(errno)); return NULL; }
    } else {
        rt_cache_dir(dir, sizeof dir, "");
        if (!rt_mkdir_p(dir)) { diag_error_plain(d, "cannot create the kernel cache '%s': %s", dir, strerror(errno)); return NULL; }
    }
    uint64_t h = hash_bytes(src, strlen(src), cpu_hash());
    h = hash_bytes(compiler(), strlen(compiler()), h);
    h = hash_bytes(o->debug ? CC_FLAGS_DEBUG : CC_FLAGS, strlen(CC_FLAGS), h);
    h = hash_bytes(extra_flags(o), strlen(extra_flags(o)), h);
    snprintf(base, sizeof base, "%s/k%016llx", dir, (unsigned long long)h);
    snprintf(so_path, sizeof so_path, "%s.so", base);
    snprintf(src_path, sizeof src_path, "%s.%d.c", base, (int)getpid());
    snprintf(tmp_so, sizeof tmp_so, "%s.%d.so.tmp", base, (int)getpid());
    snprintf(log_path, sizeof log_path, "%s.%d.log", base, (int)getpid());
    if (access(so_path, R_OK) != 0) {
        if (!write_text(src_path, src)) { diag_error_plain(d, "cannot write '%s': %s", src_path, strerror(errno)); return NULL; }
        bool ok = run_cc(src_path, tmp_so, log_path, o);
        if (!ok) report_failure(d, src, log_path);
        /* rename is atomic: a concurrent tgc sees no half-written object. */
        if (ok && rename(tmp_so, so_path) != 0) { diag_error_plain(d, "cannot rename '%s': %s", tmp_so, strerror(errno)); ok = false; }
        if (keep) { char kept[1200]; snprintf(kept, sizeof kept, "%s.c", base); rename(src_path, kept); }
        else remove(src_path);
        remove(log_path);
        remove(tmp_so);
        if (!ok) return NULL;
    }
    rt_so *so = xcalloc(1, sizeof *so);
    snprintf(so->path, sizeof so->path, "%s", so_path);
    so->handle = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!so->handle) {
        diag_error_plain(d, "cannot load the kernels '%s': %s", so_path, dlerror());
        free(so);
        return NULL;
    }
    if (no_cache && !keep) { remove(so_path); rmdir(dir); }
    return so;
}

void *rt_so_sym(rt_so *so, const char *name) { return dlsym(so->handle, name); }
const char *rt_so_path(const rt_so *so) { return so->path; }

void rt_so_close(rt_so *so)
{
    if (!so) return;
    dlclose(so->handle);
    free(so);
}
