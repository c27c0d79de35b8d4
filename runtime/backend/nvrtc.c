/* NVRTC through dlopen, the cubin cache and the ptxas -v parser
 * (runtime/backend/nvrtc.h). */
#include "runtime/backend/nvrtc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend/cpu.h"
#include "runtime/backend/kcache.h"
#include "support/file.h"
#include "support/env.h"
#include "support/util.h"

struct rt_cubin {
    unsigned char *data;
    size_t size;
    char *log;
    int warnings;
    bool cached;
    int nkernels;
    rt_kernel_info *kernels;
};

/* ---- the cubin and its report (no toolkit needed) ------------------------------ */

void rt_cubin_free(rt_cubin *c)
{
    if (!c) return;
    free(c->data);
    free(c->log);
    free(c->kernels);
    free(c);
}

const void *rt_cubin_data(const rt_cubin *c) { return c->data; }
size_t rt_cubin_size(const rt_cubin *c) { return c->size; }
const char *rt_cubin_log(const rt_cubin *c) { return c->log; }
int rt_cubin_warnings(const rt_cubin *c) { return c->warnings; }
bool rt_cubin_cached(const rt_cubin *c) { return c->cached; }
int rt_cubin_nkernels(const rt_cubin *c) { return c->nkernels; }
const rt_kernel_info *rt_cubin_kernel_at(const rt_cubin *c, int i) { return &c->kernels[i]; }

const rt_kernel_info *rt_cubin_kernel(const rt_cubin *c, const char *name)
{
    for (int i = 0; i < c->nkernels; i++)
        if (strcmp(c->kernels[i].name, name) == 0) return &c->kernels[i];
    return NULL;
}

int rt_nvrtc_count_warnings(const char *log)
{
    int n = 0;
    for (const char *p = log; (p = strstr(p, "warning")) != NULL; p++) n++;
    return n;
}

/* The number before `what` on a line ("24 registers", "8 bytes spill
 * stores"), or -1. */
static int64_t number_before(const char *line, size_t len, const char *what)
{
    size_t wl = strlen(what);
    for (size_t i = 0; i + wl <= len; i++) {
        if (strncmp(line + i, what, wl) != 0) continue;
        size_t j = i;
        while (j > 0 && line[j - 1] == ' ') j--;
        size_t end = j;
        while (j > 0 && line[j - 1] >= '0' && line[j - 1] <= '9') j--;
        if (j == end) return -1;
        int64_t v = 0;
        for (size_t k = j; k < end; k++) v = v * 10 + (line[k] - '0');
        return v;
    }
    return -1;
}

/* The name between the first pair of quotes after `after`, or after it up
 * to the end of the line ("Function properties for k12"). */
static void name_after(const char *line, size_t len, const char *after, char *out, size_t cap)
{
    const char *p = strstr(line, after);
    out[0] = 0;
    if (!p || p >= line + len) return;
    p += strlen(after);
    const char *end = line + len;
    if (*p == '\'') {
        p++;
        const char *q = memchr(p, '\'', (size_t)(end - p));
        if (q) end = q;
    }
    while (end > p && (end[-1] == ' ' || end[-1] == '\r')) end--;
    snprintf(out, cap, "%.*s", (int)(end - p), p);
}

static bool has(const char *line, size_t len, const char *what)
{
    size_t wl = strlen(what);
    for (size_t i = 0; i + wl <= len; i++)
        if (memcmp(line + i, what, wl) == 0) return true;
    return false;
}

static rt_kernel_info *find_info(rt_kernel_info *k, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(k[i].name, name) == 0) return &k[i];
    return NULL;
}

/* ptxas -v prints, per function:
 *   ptxas info    : Compiling entry function 'k3' for 'sm_90'
 *   ptxas info    : Function properties for k3
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 24 registers, used 1 barriers, 132 bytes smem, ...
 * and the same "Function properties" for device functions that were not
 * inlined (not kernels: their stack lines are attributed to no kernel). */
int rt_nvrtc_parse_ptxas(const char *log, rt_kernel_info **out)
{
    rt_kernel_info *k = NULL;
    int n = 0, cap = 0;
    rt_kernel_info *entry = NULL, *props = NULL;
    char name[sizeof k->name];
    for (const char *line = log; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (has(line, len, "Compiling entry function")) {
            name_after(line, len, "Compiling entry function ", name, sizeof name);
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                k = xrealloc(k, (size_t)cap * sizeof *k);
            }
            k[n] = (rt_kernel_info){.registers = -1};
            memcpy(k[n].name, name, sizeof name);
            entry = &k[n++];
            props = NULL;
        } else if (has(line, len, "Function properties for")) {
            name_after(line, len, "Function properties for ", name, sizeof name);
            props = find_info(k, n, name);
        } else if (has(line, len, "bytes stack frame")) {
            if (props) {
                props->stack_bytes = number_before(line, len, "bytes stack frame");
                props->spill_stores = number_before(line, len, "bytes spill stores");
                props->spill_loads = number_before(line, len, "bytes spill loads");
            }
        } else if (entry && has(line, len, "registers")) {
            entry->registers = (int)number_before(line, len, "registers");
            int64_t smem = number_before(line, len, "bytes smem");
            entry->shared_bytes = smem < 0 ? 0 : smem;
        }
        line = nl ? nl + 1 : NULL;
    }
    *out = k;
    return n;
}

static rt_cubin *cubin_new(unsigned char *data, size_t size, char *log, bool cached)
{
    rt_cubin *c = xcalloc(1, sizeof *c);
    c->data = data;
    c->size = size;
    c->log = log;
    c->cached = cached;
    c->warnings = rt_nvrtc_count_warnings(log);
    c->nkernels = rt_nvrtc_parse_ptxas(log, &c->kernels);
    return c;
}

#ifndef TGC_HAVE_CUDA

/* ---- built without the toolkit ------------------------------------------------- */

static const char no_toolkit[] = "NVRTC: this tgc was built without the CUDA toolkit (configure with the "
                                 "toolkit installed to compile CUDA kernels)";

bool rt_nvrtc_available(diag *d)
{
    if (d) diag_error_plain(d, "%s", no_toolkit);
    return false;
}

bool rt_nvrtc_version(int *major, int *minor)
{
    *major = *minor = 0;
    return false;
}

char *rt_nvrtc_ptx(const char *src, const char *arch, diag *d)
{
    (void)src, (void)arch;
    diag_error_plain(d, "%s", no_toolkit);
    return NULL;
}

rt_cubin *rt_nvrtc_compile(const char *src, const rt_nvrtc_options *o, diag *d)
{
    (void)src, (void)o, (void)cubin_new;
    diag_error_plain(d, "%s", no_toolkit);
    return NULL;
}

#else

#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>

/* ---- loading libnvrtc ----------------------------------------------------------- */

static struct {
    bool ok, bad_lib;
    char path[512]; /* the library that was opened */
    int major, minor;
    nvrtcResult (*Version)(int *, int *);
    nvrtcResult (*GetNumSupportedArchs)(int *);
    nvrtcResult (*GetSupportedArchs)(int *);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                                 const char *const *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    const char *(*GetErrorString)(nvrtcResult);
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

/* Opens libnvrtc: $TGC_NVRTC (a path: another toolkit's NVRTC), the
 * sonames (LD_LIBRARY_PATH and the loader cache decide, as for a linked
 * library), then the lib64 of $CUDA_HOME, $CUDA_PATH and of the toolkit
 * CMake found. `tried` gets what was tried, for the error; the last of
 * it is the library opened. */
static void *nv_open(strbuf *tried)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#ifdef TGC_CUDA_LIBDIR
    const char *configured = TGC_CUDA_LIBDIR;
#else
    const char *configured = NULL;
#endif
    const char *env = env_text("TGC_NVRTC");
    const char *dirs[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), configured};
    const char *sub[] = {"/lib64", "/lib64", ""};
    void *h = NULL;
    if (env && *env) {
        sb_printf(tried, "%s", env);
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t i = 0; i < ARRAY_LEN(names) && !h; i++) {
        sb_printf(tried, "%s%s", tried->len ? ", " : "", names[i]);
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
    for (size_t k = 0; k < ARRAY_LEN(dirs) && !h; k++)
        for (size_t i = 0; i < ARRAY_LEN(names) && !h && dirs[k] && *dirs[k]; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s%s/%s", dirs[k], sub[k], names[i]);
            sb_printf(tried, ", %s", path);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
    return h;
}

static void nv_load(void)
{
    strbuf tried;
    sb_init(&tried);
    void *h = nv_open(&tried);
    const char *last = tried.s ? strrchr(tried.s, ' ') : NULL;
    snprintf(nv.path, sizeof nv.path, "%s", last ? last + 1 : tried.s ? tried.s : "");
    sb_free(&tried);
    if (!h) return;
#define NV_SYM(f) (*(void **)&nv.f = dlsym(h, "nvrtc" #f)) != NULL
    bool all = NV_SYM(Version) && NV_SYM(GetNumSupportedArchs) && NV_SYM(GetSupportedArchs) &&
               NV_SYM(CreateProgram) && NV_SYM(DestroyProgram) && NV_SYM(CompileProgram) &&
               NV_SYM(GetProgramLogSize) && NV_SYM(GetProgramLog) && NV_SYM(GetCUBINSize) && NV_SYM(GetCUBIN) &&
               NV_SYM(GetPTXSize) && NV_SYM(GetPTX) && NV_SYM(GetErrorString);
#undef NV_SYM
    if (!all || nv.Version(&nv.major, &nv.minor) != NVRTC_SUCCESS) {
        nv.bad_lib = true;
        dlclose(h);
        return;
    }
    nv.ok = true; /* the handle stays open for the process */
}

bool rt_nvrtc_available(diag *d)
{
    pthread_once(&nv_once, nv_load);
    if (nv.ok || !d) return nv.ok;
    if (nv.bad_lib) {
        diag_error_plain(d, "'%s' is not a usable NVRTC: it lacks nvrtcGetCUBIN or nvrtcGetPTX, or does not answer "
                            "nvrtcVersion (the NVRTC of CUDA 11.1 or later is needed)", nv.path);
    } else {
        /* Searched again to say what was tried. */
        strbuf tried;
        sb_init(&tried);
        void *h = nv_open(&tried);
        const char *why = h ? NULL : dlerror();
        if (h) dlclose(h);
        diag_error_plain(d, "cannot load NVRTC (tried %s)%s%s; install the CUDA toolkit, set CUDA_HOME or TGC_NVRTC",
                         tried.s, why ? ": " : "", why ? why : "");
        sb_free(&tried);
    }
    return false;
}

bool rt_nvrtc_version(int *major, int *minor)
{
    *major = *minor = 0;
    if (!rt_nvrtc_available(NULL)) return false;
    *major = nv.major;
    *minor = nv.minor;
    return true;
}

/* ---- compiling ------------------------------------------------------------------- */

#define NV_OPTS "-std=c++17", "--ptxas-options=-v", "-lineinfo"

/* "sm_90" -> 90; the architectures this NVRTC compiles for are checked so
 * that a wrong --cuda-arch gets a list instead of NVRTC's terse error. */
static bool arch_check(const char *arch, diag *d)
{
    int num = 0;
    const char *p = arch + 3;
    bool form = strncmp(arch, "sm_", 3) == 0 && *p;
    for (; form && *p; p++) {
        if (*p >= '0' && *p <= '9') num = num * 10 + (*p - '0');
        else if (!((*p == 'a' || *p == 'f') && p[1] == 0)) form = false;
    }
    int n = 0;
    nv.GetNumSupportedArchs(&n);
    int *list = xcalloc((size_t)n + 1, sizeof *list);
    nv.GetSupportedArchs(list);
    bool ok = false;
    for (int i = 0; i < n; i++) ok |= list[i] == num;
    if (!form || !ok) {
        strbuf all;
        sb_init(&all);
        for (int i = 0; i < n; i++) sb_printf(&all, "%ssm_%d", i ? ", " : "", list[i]);
        diag_error_plain(d, "--cuda-arch '%s': %s; NVRTC %d.%d compiles for %s", arch,
                         form ? "not an architecture this NVRTC supports" : "expected sm_NN (e.g. sm_90)", nv.major,
                         nv.minor, all.s ? all.s : "nothing");
        sb_free(&all);
    }
    free(list);
    return form && ok;
}

static char *program_log(nvrtcProgram prog)
{
    size_t n = 0;
    if (nv.GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
    char *log = xcalloc(n + 1, 1);
    if (n) nv.GetProgramLog(prog, log);
    return log;
}

/* Runs NVRTC on src for `target` (--gpu-architecture=sm_XX for a cubin,
 * compute_XX for PTX); returns the program (the caller destroys it) with
 * its log in *log, or NULL after reporting the failure with the log and
 * the numbered source. */
static nvrtcProgram nv_run(const char *src, const char *target, char **log, diag *d)
{
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", target);
    const char *opts[] = {archopt, NV_OPTS};
    nvrtcProgram prog;
    *log = NULL;
    nvrtcResult rc = nv.CreateProgram(&prog, src, "tgc_kernels.cu", 0, NULL, NULL);
    if (rc != NVRTC_SUCCESS) {
        diag_error_plain(d, "nvrtcCreateProgram: %s", nv.GetErrorString(rc));
        return NULL;
    }
    rc = nv.CompileProgram(prog, (int)ARRAY_LEN(opts), opts);
    *log = program_log(prog);
    if (rc != NVRTC_SUCCESS) {
        diag_error_plain(d, "NVRTC %d.%d failed on the generated CUDA kernels (%s, %s):\n%s", nv.major, nv.minor,
                         target, nv.GetErrorString(rc), *log);
        rt_print_numbered(d->out, src);
        nv.DestroyProgram(&prog);
        free(*log);
        *log = NULL;
        return NULL;
    }
    return prog;
}

/* The compilation itself, in memory. */
static rt_cubin *nv_compile(const char *src, const char *arch, diag *d)
{
    char *log;
    nvrtcProgram prog = nv_run(src, arch, &log, d);
    if (!prog) return NULL;
    size_t size = 0;
    unsigned char *bin = NULL;
    nvrtcResult rc = nv.GetCUBINSize(prog, &size);
    if (rc == NVRTC_SUCCESS && size) {
        bin = xmalloc(size);
        rc = nv.GetCUBIN(prog, (char *)bin);
    }
    nv.DestroyProgram(&prog);
    if (rc != NVRTC_SUCCESS || !size) {
        diag_error_plain(d, "nvrtcGetCUBIN (%s): %s", arch, rc != NVRTC_SUCCESS ? nv.GetErrorString(rc) : "empty");
        free(bin);
        free(log);
        return NULL;
    }
    return cubin_new(bin, size, log, false);
}

char *rt_nvrtc_ptx(const char *src, const char *arch, diag *d)
{
    if (!rt_nvrtc_available(d) || !arch_check(arch, d)) return NULL;
    char target[64], *log;
    snprintf(target, sizeof target, "compute_%s", arch + 3);
    nvrtcProgram prog = nv_run(src, target, &log, d);
    if (!prog) return NULL;
    free(log);
    size_t size = 0;
    char *ptx = NULL;
    nvrtcResult rc = nv.GetPTXSize(prog, &size);
    if (rc == NVRTC_SUCCESS) {
        ptx = xcalloc(size + 1, 1);
        rc = nv.GetPTX(prog, ptx);
    }
    nv.DestroyProgram(&prog);
    if (rc != NVRTC_SUCCESS) {
        diag_error_plain(d, "nvrtcGetPTX (%s): %s", target, nv.GetErrorString(rc));
        free(ptx);
        return NULL;
    }
    return ptx;
}

/* ---- the cache ------------------------------------------------------------------- */

/* A cache entry: "tgc-cubin 1 LOGBYTES CUBINBYTES\n", the log, the cubin;
 * validated against its manifest (runtime/backend/kcache.h). */
#define CACHE_MAGIC "tgc-cubin 1"

static rt_cubin *cache_parse(char *buf, size_t len)
{
    unsigned long long nlog = 0, nbin = 0;
    int at = 0;
    rt_cubin *c = NULL;
    if (sscanf(buf, CACHE_MAGIC " %llu %llu\n%n", &nlog, &nbin, &at) == 2 && at > 0 && nlog <= len &&
        nbin <= len && (size_t)at + nlog + nbin == len && nbin > 0) {
        char *log = xmalloc(nlog + 1);
        memcpy(log, buf + at, nlog);
        log[nlog] = 0;
        unsigned char *bin = xmalloc(nbin);
        memcpy(bin, buf + at + nlog, nbin);
        c = cubin_new(bin, nbin, log, true);
    }
    return c;
}

/* The entry at path; NULL when there is none or it was damaged (then it
 * is removed, to be compiled again). */
static rt_cubin *cache_read(const char *path, diag *d)
{
    size_t len = 0;
    char *buf = NULL, why[512];
    rt_cache_state st = rt_cache_check(path, &buf, &len, why, sizeof why);
    rt_cubin *c = st == RT_CACHE_OK ? cache_parse(buf, len) : NULL;
    free(buf);
    if (st == RT_CACHE_OK && !c) snprintf(why, sizeof why, "not a cubin cache entry");
    if (st != RT_CACHE_MISS && !c) {
        fprintf(d && d->out ? d->out : stderr, "tgc: note: the kernel cache entry '%s' is damaged (%s); rebuilding it\n", path, why);
        rt_cache_remove(path);
    }
    return c;
}

/* The entry is written in a private directory beside it (no name there
 * can be planted) and committed from there by rt_cache_commit. */
static bool cache_write(const char *path, const rt_cubin *c, const char *arch)
{
    char why[512], info[128];
    char *dir = file_private_dir(path);
    if (!dir) return false;
    char *tmp = path_join(dir, "entry");
    FILE *f = fopen(tmp, "wbx");
    bool ok = f != NULL;
    size_t nlog = strlen(c->log);
    ok = ok && fprintf(f, CACHE_MAGIC " %llu %llu\n", (unsigned long long)nlog, (unsigned long long)c->size) > 0;
    ok = ok && fwrite(c->log, 1, nlog, f) == nlog && fwrite(c->data, 1, c->size, f) == c->size;
    ok = f && file_close(f) && ok;
    snprintf(info, sizeof info, "compiler NVRTC %d.%d\narch %s\n", nv.major, nv.minor, arch);
    if (ok) ok = rt_cache_commit(tmp, path, info, why, sizeof why);
    else remove(tmp);
    rmdir(dir);
    free(tmp);
    free(dir);
    return ok;
}

static bool write_text(const char *path, const char *text)
{
    char why[256];
    return file_write_atomic(path, text, strlen(text), why, sizeof why);
}

rt_cubin *rt_nvrtc_compile(const char *src, const rt_nvrtc_options *o, diag *d)
{
    if (!rt_nvrtc_available(d)) return NULL;
    const char *arch = o->arch ? o->arch : "sm_80";
    if (!arch_check(arch, d)) return NULL;
    bool no_cache = o->no_cache || env_flag("TGC_NO_CACHE");
    bool keep = o->keep_source || env_flag("TGC_KEEP_SOURCE");
    if (no_cache) return nv_compile(src, arch, d);
    char dir[1024], path[1100];
    if (!rt_cache_dir(dir, sizeof dir, "/cuda", d)) return NULL;
    static const char *const opts[] = {NV_OPTS};
    uint64_t h = hash_bytes(src, strlen(src), HASH_SEED);
    for (size_t i = 0; i < ARRAY_LEN(opts); i++) h = hash_bytes(opts[i], strlen(opts[i]) + 1, h);
    h = hash_bytes(arch, strlen(arch) + 1, h);
    h = hash_u64((uint64_t)nv.major * 1000u + (uint64_t)nv.minor, h);
    snprintf(path, sizeof path, "%s/k%016llx.cubin", dir, (unsigned long long)h);
    rt_cubin *c = cache_read(path, d);
    if (c) return c;
    c = nv_compile(src, arch, d);
    /* A cache that cannot be written costs the next run a compilation, no
     * more: the cubin in hand is good. */
    if (c) cache_write(path, c, arch);
    if (keep) {
        char cu[1200];
        snprintf(cu, sizeof cu, "%s/k%016llx.cu", dir, (unsigned long long)h);
        write_text(cu, src);
    }
    return c;
}

#endif
