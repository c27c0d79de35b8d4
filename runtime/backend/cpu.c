#include "cpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/backend/blas.h"
#include "runtime/backend/kcache.h"
#include "support/file.h"
#include "support/proc.h"
#include "support/env.h"
#include "support/util.h"

struct rt_so {
    void *handle;
    char path[1200];
};

static const char *const cc_flags[] = {"-std=c11", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared",
                                       "-fno-math-errno", "-Wno-unused"};
static const char *const cc_flags_debug[] = {"-std=c11", "-O1", "-g", "-fopenmp", "-fPIC", "-shared", "-Wno-unused"};
/* libmvec: the SIMD math functions the generated code declares (x86-64 glibc). */
#if defined(__x86_64__) && defined(__GLIBC__)
static const char *const cc_libs[] = {"-lmvec", "-lm"};
#else
static const char *const cc_libs[] = {"-lm"};
#endif

static const char *compiler(void)
{
    const char *cc = env_text("TGC_CC");
    return cc && *cc ? cc : "cc";
}

/* A directory tgc writes into: made (with its parents) when missing, then
 * a directory it can write. false with the reason in why. */
static bool cache_usable(const char *path, char *why, size_t cap)
{
    struct stat st;
    if (!file_mkdirs(path, 0755) && errno != ENOTDIR) {
        snprintf(why, cap, "cannot be created: %s", strerror(errno));
        return false;
    }
    if (stat(path, &st) != 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "is not a directory");
        return false;
    }
    if (access(path, W_OK | X_OK) != 0) {
        snprintf(why, cap, "is not writable: %s", strerror(errno));
        return false;
    }
    return true;
}

/* The per-user fallback in a shared temporary directory, which anyone may
 * have prepared: tgc-cache-UID made 0700, or refused unless it is a
 * directory (not a link) this user owns with mode 0700. */
static bool cache_tmp(char *out, size_t n, char *why, size_t cap)
{
    const char *t = getenv("TMPDIR");
    snprintf(out, n, "%s/tgc-cache-%u", t && t[0] == '/' ? t : "/tmp", (unsigned)getuid());
    struct stat st;
    if (mkdir(out, 0700) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot be created: %s", strerror(errno));
        return false;
    }
    if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 07777) != 0700) {
        snprintf(why, cap, "is not a directory of this user (uid %u) with mode 0700; another user may have made it",
                 (unsigned)getuid());
        return false;
    }
    return true;
}

/* HOME when it names an existing directory (tgc never creates it). */
static const char *home_dir(void)
{
    const char *h = getenv("HOME");
    struct stat st;
    return h && h[0] == '/' && stat(h, &st) == 0 && S_ISDIR(st.st_mode) ? h : NULL;
}

bool rt_cache_dir(char *out, size_t n, const char *sub, diag *d)
{
    const char *c = env_text("TGC_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = home_dir();
    const char *from = c && *c ? "TGC_CACHE_DIR" : x && x[0] == '/' ? "XDG_CACHE_HOME" : h ? "HOME" : NULL;
    char base[1024], why[256];
    bool ok = true;
    int len = 0;
    if (!from) {
        from = "the per-user temporary cache: HOME is unset, relative or missing";
        ok = cache_tmp(base, sizeof base, why, sizeof why);
    } else if (strcmp(from, "TGC_CACHE_DIR") == 0) len = snprintf(base, sizeof base, "%s", c);
    else if (strcmp(from, "XDG_CACHE_HOME") == 0) len = snprintf(base, sizeof base, "%s/tgc", x);
    else len = snprintf(base, sizeof base, "%s/.cache/tgc", h);
    /* The entries' names go after it in buffers of the caller's size plus
     * 64 (cc_paths, the NVRTC cache): a longer path is refused before
     * anything is made, never cut short into another directory's name. */
    size_t total = (ok && !len ? strlen(base) : (size_t)len) + strlen(sub);
    if ((size_t)len >= sizeof base || total + 64 > n) {
        diag_error_plain(d, "the kernel cache path (%s%s) is %zu bytes, longer than tgc's limit of %zu: set "
                         "TGC_CACHE_DIR to a shorter one", strchr(from, ' ') ? "" : "from ", from, total, n - 64);
        return false;
    }
    if (len) ok = cache_usable(base, why, sizeof why);
    snprintf(out, n, "%s%s", base, sub);
    if (ok && *sub) ok = cache_usable(out, why, sizeof why);
    if (!ok) diag_error_plain(d, "the kernel cache '%s' (%s%s) %s", out, strchr(from, ' ') ? "" : "from ", from, why);
    return ok;
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

/* Extra compiler flags: the options', else $TGC_KERNEL_CFLAGS (a sanitizer
 * build compiles the generated kernels with the same sanitizers). */
static const char *extra_flags(const rt_cc_options *o)
{
    const char *env = env_text("TGC_KERNEL_CFLAGS");
    return o->extra_flags ? o->extra_flags : env ? env : "";
}

/* The compiler command up to its output and input: $TGC_CC's words, the
 * flags, the extra flags' words; split like a shell's words, never run
 * through one. */
static bool cc_base(proc_argv *a, const rt_cc_options *o, diag *d)
{
    char why[128];
    proc_argv_init(a);
    if (!proc_argv_split(a, compiler(), why, sizeof why) || a->n == 0) {
        diag_error_plain(d, "TGC_CC '%s': %s", compiler(), a->n ? why : "no compiler named");
        return false;
    }
    const char *const *f = o->debug ? cc_flags_debug : cc_flags;
    size_t nf = o->debug ? ARRAY_LEN(cc_flags_debug) : ARRAY_LEN(cc_flags);
    for (size_t i = 0; i < nf; i++) proc_argv_add(a, f[i]);
    if (!proc_argv_split(a, extra_flags(o), why, sizeof why)) {
        diag_error_plain(d, "%s '%s': %s", o->extra_flags ? "the kernel compiler flags" : "TGC_KERNEL_CFLAGS",
                         extra_flags(o), why);
        return false;
    }
    return true;
}

/* Runs base + more, its output into out_path: the output and the exit
 * status in *rc; NULL with the reason in why when it could not run. */
static char *cc_output(const proc_argv *base, const char *const *more, size_t nmore, const char *out_path, int *rc,
                       char *why, size_t cap)
{
    proc_argv a;
    proc_argv_init(&a);
    for (int i = 0; i < base->n; i++) proc_argv_add(&a, base->v[i]);
    for (size_t i = 0; i < nmore; i++) proc_argv_add(&a, more[i]);
    *rc = proc_run(&a, out_path, why, cap);
    proc_argv_free(&a);
    size_t n;
    char *out = *rc < 0 ? NULL : file_read(out_path, FILE_CACHE, &n, why, cap);
    remove(out_path);
    return out;
}

/* Who compiles and for what: the compiler's --version and what its flags
 * (-march=native above all) resolve to on this machine, from
 * `-Q --help=target` (GCC; other compilers: the CPU's model and flags). */
typedef struct cc_identity {
    uint64_t hash;
    char version[160], march[64];
} cc_identity;

static uint64_t cpu_hash(uint64_t h)
{
    size_t len = 0;
    char why[256];
    char *info = file_read("/proc/cpuinfo", FILE_CACHE, &len, why, sizeof why);
    if (info) {
        char *m = strstr(info, "model name");
        char *f = strstr(info, "flags");
        if (m) h = hash_bytes(m, strcspn(m, "\n"), h);
        if (f) h = hash_bytes(f, strcspn(f, "\n"), h);
        free(info);
    }
    return h;
}

static void first_value(const char *text, const char *key, char *out, size_t cap)
{
    const char *p = text ? strstr(text, key) : NULL;
    if (!p) { snprintf(out, cap, "unknown"); return; }
    p += strlen(key);
    p += strspn(p, " \t");
    snprintf(out, cap, "%.*s", (int)strcspn(p, "\n"), p);
}

static bool cc_identify(const proc_argv *base, const char *dir, cc_identity *id, diag *d)
{
    char out[1200], *priv = NULL;
    {
        char stem[1100];
        snprintf(stem, sizeof stem, "%s/identify", dir);
        priv = file_private_dir(stem); /* the compiler's output goes where nothing can be planted */
        if (!priv) {
            diag_error_plain(d, "cannot create a directory in the kernel cache '%s': %s", dir, strerror(errno));
            return false;
        }
        snprintf(out, sizeof out, "%s/out.txt", priv);
    }
    proc_argv cc; /* the compiler's own words (cc_base checked them) */
    char why[128];
    proc_argv_init(&cc);
    proc_argv_split(&cc, compiler(), why, sizeof why);
    static const char *const version[] = {"--version"}, *const target[] = {"-Q", "--help=target"};
    int rc;
    char *v = cc_output(&cc, version, 1, out, &rc, why, sizeof why);
    proc_argv_free(&cc);
    if (!v || rc != 0) {
        rmdir(priv);
        free(priv);
        diag_error_plain(d, "the C compiler (%s) does not run: %s", compiler(),
                         v ? "its --version failed" : why);
        free(v);
        return false;
    }
    char *t = cc_output(base, target, 2, out, &rc, why, sizeof why);
    if (t && rc != 0) { free(t); t = NULL; }
    rmdir(priv);
    free(priv);
    id->hash = hash_bytes(v, strlen(v), cpu_hash(HASH_SEED));
    if (t) id->hash = hash_bytes(t, strlen(t), id->hash);
    snprintf(id->version, sizeof id->version, "%.*s", (int)strcspn(v, "\n"), v);
    first_value(t, "-march=", id->march, sizeof id->march);
    free(v);
    free(t);
    return true;
}

/* cc_identify, once per process and command (the compiler is asked twice). */
static bool cc_identity_of(const proc_argv *base, const char *dir, cc_identity *id, diag *d)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct cc_memo {
        uint64_t key;
        cc_identity id;
    } memo[8];
    static int nmemo;
    uint64_t key = HASH_SEED;
    for (int i = 0; i < base->n; i++) key = hash_bytes(base->v[i], strlen(base->v[i]) + 1, key);
    pthread_mutex_lock(&lock);
    bool ok = true, found = false;
    for (int i = 0; i < nmemo && !found; i++)
        if (memo[i].key == key) { *id = memo[i].id; found = true; }
    if (!found) {
        ok = cc_identify(base, dir, id, d);
        if (ok && nmemo < (int)ARRAY_LEN(memo)) memo[nmemo++] = (struct cc_memo){key, *id};
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

uint64_t rt_cc_key(const char *src, const char *const *words, int nwords, uint64_t identity)
{
    uint64_t h = hash_bytes(src, strlen(src), identity);
    for (int i = 0; i < nwords; i++) h = hash_bytes(words[i], strlen(words[i]) + 1, h);
    return h;
}

static void report_failure(diag *d, const char *src, const char *log)
{
    diag_error_plain(d, "the C compiler (%s) failed on the generated kernels:\n%s", compiler(), log ? log : "");
    /* The numbered source, so the log's line numbers can be followed. */
    rt_print_numbered(d->out, src);
}

/* path is in this compilation's private directory. */
static bool write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wbx");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return file_close(f) && ok;
}

/* Paths of one compilation: the entry, and this compilation's temporaries
 * in a private directory beside it (file_private_dir: nothing planted in a
 * shared cache can be followed by the compiler's -o or the log). */
typedef struct cc_paths {
    char base[1100], so[1200], priv[1200], src[1300], tmp_so[1300], log[1300];
} cc_paths;

static void cc_paths_init(cc_paths *p, const char *dir, uint64_t key)
{
    snprintf(p->base, sizeof p->base, "%s/k%016" PRIx64, dir, key);
    snprintf(p->so, sizeof p->so, "%s.so", p->base);
    p->priv[0] = 0;
}

/* Makes the private directory, when the entry is to be built. */
static bool cc_paths_priv(cc_paths *p, diag *d)
{
    char *priv = file_private_dir(p->base);
    if (!priv) {
        diag_error_plain(d, "cannot create a directory in the kernel cache for '%s': %s", p->so, strerror(errno));
        return false;
    }
    snprintf(p->priv, sizeof p->priv, "%s", priv);
    free(priv);
    const char *k = strrchr(p->base, '/') + 1;
    snprintf(p->src, sizeof p->src, "%s/%s.c", p->priv, k);
    snprintf(p->tmp_so, sizeof p->tmp_so, "%s/%s.so", p->priv, k);
    snprintf(p->log, sizeof p->log, "%s/%s.log", p->priv, k);
    return true;
}

/* Removes what is left of the private directory. */
static void cc_paths_free(const cc_paths *p)
{
    if (!p->priv[0]) return;
    remove(p->src);
    remove(p->tmp_so);
    remove(p->log);
    rmdir(p->priv);
}

/* Compiles src to p->tmp_so and loads that (so a concurrent tgc that
 * replaces or removes the entry cannot take it away), then makes it the
 * cache entry p->so with its manifest. The handle; NULL after an error. */
static void *cc_build(const char *src, const proc_argv *base, const cc_identity *id, cc_paths *p, bool keep,
                      diag *d)
{
    if (!cc_paths_priv(p, d)) return NULL;
    if (!write_text(p->src, src)) {
        diag_error_plain(d, "cannot write '%s': %s", p->src, strerror(errno));
        remove(p->src);
        return NULL;
    }
    const char *more[2 + 1 + ARRAY_LEN(cc_libs)] = {"-o", p->tmp_so, p->src};
    for (size_t i = 0; i < ARRAY_LEN(cc_libs); i++) more[3 + i] = cc_libs[i];
    int rc;
    char why[512];
    char *log = cc_output(base, more, ARRAY_LEN(more), p->log, &rc, why, sizeof why);
    if (rc != 0 && !log) diag_error_plain(d, "the C compiler (%s): %s", compiler(), why);
    else if (rc != 0) report_failure(d, src, log);
    free(log);
    if (keep) {
        char kept[1200];
        snprintf(kept, sizeof kept, "%s.c", p->base);
        rename(p->src, kept);
    } else {
        remove(p->src);
    }
    void *h = rc == 0 ? dlopen(p->tmp_so, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (rc == 0 && !h) diag_error_plain(d, "cannot load the kernels just compiled: %s", dlerror());
    if (!h) { remove(p->tmp_so); return NULL; }
    strbuf info;
    sb_init(&info);
    sb_printf(&info, "compiler %s\nmarch %s\n", id->version, id->march);
    /* A cache that cannot be written costs the next run a compilation, no
     * more: the kernels in hand are loaded. */
    if (!rt_cache_commit(p->tmp_so, p->so, info.s, why, sizeof why))
        fprintf(d->out, "tgc: note: kernel cache: %s\n", why);
    sb_free(&info);
    return h;
}

/* A cache entry that is not what its manifest says is rebuilt. */
static void cc_discard(const char *path, const char *why, diag *d)
{
    fprintf(d->out, "tgc: note: the kernel cache entry '%s' is damaged (%s); rebuilding it\n", path, why);
    rt_cache_remove(path);
}

static bool cc_dir(char *dir, size_t n, bool no_cache, diag *d)
{
    if (no_cache) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, n, "%s/tgc-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) { diag_error_plain(d, "cannot create a temporary directory: %s", strerror(errno)); return false; }
    } else {
        if (!rt_cache_dir(dir, n, "", d)) return false;
    }
    return true;
}

/* The entry p->so, validated and loaded, or built; NULL after an error. */
static void *cc_open(const char *src, const proc_argv *base, const cc_identity *id, cc_paths *p, bool keep,
                     diag *d)
{
    char why[512];
    rt_cache_state st = rt_cache_check(p->so, NULL, NULL, why, sizeof why);
    void *h = st == RT_CACHE_OK ? dlopen(p->so, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (st == RT_CACHE_OK && !h) snprintf(why, sizeof why, "%s", dlerror()); /* whole, but not loadable */
    if (st != RT_CACHE_MISS && !h) cc_discard(p->so, why, d);
    return h ? h : cc_build(src, base, id, p, keep, d);
}

rt_so *rt_cc_load(const char *src, const rt_cc_options *o, diag *d)
{
    /* The kernels' OpenMP runtime (libgomp) comes with OpenBLAS, which is
     * opened for good first: otherwise the first kernel object loaded brings
     * libgomp and, closed, takes it down with it, its threads and
     * allocations outliving it (LeakSanitizer saw them in unit.test_proc). */
    char why[512];
    if (!rt_blas_load(why, sizeof why)) {
        diag_error_plain(d, "%s", why);
        return NULL;
    }
    bool no_cache = o->no_cache || env_flag("TGC_NO_CACHE");
    bool keep = o->keep_source || env_flag("TGC_KEEP_SOURCE");
    char dir[1024];
    proc_argv base;
    cc_identity id;
    cc_paths p;
    if (!cc_base(&base, o, d) || !cc_dir(dir, sizeof dir, no_cache, d)) { proc_argv_free(&base); return NULL; }
    void *h = NULL;
    if (cc_identity_of(&base, dir, &id, d)) {
        cc_paths_init(&p, dir, rt_cc_key(src, (const char *const *)base.v, base.n, id.hash));
        h = cc_open(src, &base, &id, &p, keep, d);
        cc_paths_free(&p);
    }
    proc_argv_free(&base);
    if (no_cache && !keep) {
        if (h) rt_cache_remove(p.so);
        rmdir(dir);
    }
    if (!h) return NULL;
    rt_so *so = xcalloc(1, sizeof *so);
    snprintf(so->path, sizeof so->path, "%s", p.so);
    so->handle = h;
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
