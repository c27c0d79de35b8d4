/* The CUDA renderer and NVRTC without a GPU (issue 7, parts 2a-2b, 3c).
 *
 * 1. The ptxas -v parser on logs of both styles (sm_80 prints cumulative
 *    stack and cmem, sm_90 does not; a non-inlined device function has
 *    "Function properties" but is not a kernel).
 * 2. The run-time scalars: struct tgc_rt as both preludes print it has the
 *    layout of rt_scalars (runtime/exec.h), field by field.
 * 3. One expression renderer: for every kernel of a small GPT (serial, and
 *    t = 2 with sequence parallelism and bf16), each output's expression is
 *    the same text in the C and the CUDA source but for how the run-time
 *    scalars are read, and both sources contain it.
 * 4. With NVRTC (built without the toolkit: not run; built with it but
 *    libnvrtc does not load: exit 77, skipped): tgc_rt as the device compiler
 *    lays it out (each field's load in the PTX of a probe kernel) equals
 *    rt_scalars; a broken source fails with NVRTC's log and the numbered
 *    source; a kernel's
 *    registers come back from ptxas; the cache returns the same cubin and
 *    report, recompiles a damaged entry, and is bypassed by no_cache; a bad
 *    architecture is refused with the list of good ones. */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/capture.h"
#include "../unit/check.h"
#include "codegen/codegen.h"
#include "codegen/render_expr.h"
#include "frontend/frontend.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "runtime/backend/kcache.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/nvrtc.h"
#include "support/file.h"
#include "support/util.h"

static const char *samples_dir = "samples";

/* ---- 1. the ptxas -v parser ------------------------------------------------------ */

static const char log_sm80[] =
    "ptxas info    : 6488 bytes gmem, 80 bytes cmem[4]\n"
    "ptxas info    : Compiling entry function 'k27' for 'sm_80'\n"
    "ptxas info    : Function properties for k27\n"
    "ptxas         .     8 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 1 barriers, 8 bytes cumulative stack size, 132 bytes smem, "
    "456 bytes cmem[0]\n"
    "ptxas info    : Compile time = 26.711 ms\n"
    "ptxas info    : Function properties for _Z6helperf\n"
    "ptxas         .     40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Compiling entry function 'k28_1' for 'sm_80'\n"
    "ptxas info    : Function properties for k28_1\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 83 registers, used 0 barriers, 416 bytes cmem[0]\n";

static const char log_sm90[] =
    "tgc_kernels.cu(12): warning #177-D: variable \"x\" was declared but never referenced\n"
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'k0' for 'sm_90'\n"
    "ptxas info    : Function properties for k0\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 23 registers, used 1 barriers, 2048 bytes smem";

static void test_parser(void)
{
    rt_kernel_info *k = NULL;
    int n = rt_nvrtc_parse_ptxas(log_sm80, &k);
    CHECK(n == 2);
    if (n == 2) {
        CHECK_STR(k[0].name, "k27");
        CHECK(k[0].registers == 32 && k[0].stack_bytes == 8 && k[0].spill_stores == 8 && k[0].spill_loads == 12);
        CHECK(k[0].shared_bytes == 132);
        /* The helper's 40-byte frame belongs to no kernel. */
        CHECK_STR(k[1].name, "k28_1");
        CHECK(k[1].registers == 83 && k[1].stack_bytes == 0 && k[1].spill_stores == 0 && k[1].shared_bytes == 0);
    }
    free(k);
    n = rt_nvrtc_parse_ptxas(log_sm90, &k);
    CHECK(n == 1 && k[0].registers == 23 && k[0].shared_bytes == 2048 && k[0].spill_loads == 0);
    free(k);
    CHECK(rt_nvrtc_count_warnings(log_sm90) == 1);
    CHECK(rt_nvrtc_count_warnings(log_sm80) == 0);
    CHECK(rt_nvrtc_parse_ptxas("", &k) == 0);
    free(k);
}

/* ---- 2. struct tgc_rt against rt_scalars ---------------------------------------- */

typedef struct field_off {
    const char *name;
    size_t offset, size;
} field_off;

#define FIELD(f) {#f, offsetof(rt_scalars, f), sizeof(((rt_scalars *)0)->f)}
static const field_off rt_layout[] = {
    FIELD(step),     FIELD(seed),     FIELD(lr_float),         FIELD(lr_double),         FIELD(wd_float),
    FIELD(wd_double), FIELD(tp_rank), FIELD(tp_size),          FIELD(opt_step),          FIELD(loss_scale_float),
    FIELD(loss_scale_double), FIELD(shard_lo), FIELD(shard_hi), FIELD(eval), FIELD(pos),
};

static size_t type_size(const char *t)
{
    return strcmp(t, "float") == 0 ? 4 : strcmp(t, "double") == 0 || strcmp(t, "int64_t") == 0 ? 8 : 0;
}

/* Lays out the struct printed in src ("typedef struct tgc_rt {" ...
 * "} tgc_rt;", one type per line, names separated by commas) with C's
 * rules and compares every field with rt_scalars. */
static void check_struct_text(const char *src, const char *what)
{
    const char *p = strstr(src, "typedef struct tgc_rt {\n");
    const char *end = p ? strstr(p, "} tgc_rt;") : NULL;
    CHECK(p && end);
    if (!p || !end) return;
    p = strchr(p, '\n') + 1;
    size_t off = 0, align = 1;
    int nf = 0;
    while (p < end) {
        const char *nl = strchr(p, '\n');
        char line[256], type[32];
        snprintf(line, sizeof line, "%.*s", (int)(nl - p), p);
        int used = 0;
        CHECK(sscanf(line, " %31s %n", type, &used) == 1);
        size_t sz = type_size(type);
        CHECK(sz != 0);
        for (char *name = strtok(line + used, ", ;"); name && sz; name = strtok(NULL, ", ;")) {
            off = (off + sz - 1) / sz * sz;
            if (sz > align) align = sz;
            bool found = false;
            for (size_t i = 0; i < ARRAY_LEN(rt_layout); i++)
                if (strcmp(rt_layout[i].name, name) == 0) {
                    found = true;
                    if (rt_layout[i].offset != off || rt_layout[i].size != sz)
                        fprintf(stderr, "%s: tgc_rt.%s at %zu (%zu bytes), rt_scalars.%s at %zu (%zu bytes)\n",
                                what, name, off, sz, name, rt_layout[i].offset, rt_layout[i].size);
                    CHECK(rt_layout[i].offset == off && rt_layout[i].size == sz);
                }
            if (!found) fprintf(stderr, "%s: tgc_rt.%s is not in rt_scalars\n", what, name);
            CHECK(found);
            off += sz;
            nf++;
        }
        p = nl + 1;
    }
    CHECK(nf == (int)ARRAY_LEN(rt_layout));
    CHECK((off + align - 1) / align * align == sizeof(rt_scalars));
}

static void test_struct(void)
{
    cg_program empty;
    memset(&empty, 0, sizeof empty);
    char *cu = cg_render_cuda(&empty), *c = cg_render_c(&empty);
    check_struct_text(cu, "CUDA prelude");
    check_struct_text(c, "C prelude");
    CHECK(cg_rt_nfields == (int)ARRAY_LEN(rt_layout));
    /* NVRTC has no system headers: the only #include of the CUDA prelude
     * is the Philox header's own, disabled by TGC_PHILOX_NO_INCLUDES. */
    const char *noinc = strstr(cu, "#define TGC_PHILOX_NO_INCLUDES"), *inc = strstr(cu, "#include");
    CHECK(noinc && (!inc || inc > noinc));
    free(cu);
    free(c);
}

/* ---- 3. one expression renderer ----------------------------------------------- */

/* sample's graph after the passes `names` (every pass when NULL). */
static ir_graph *build_with(const char *sample, const pass_options *po, const char *const *names)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.tg", samples_dir, sample);
    size_t len;
    char why[256];
    char *text = file_read(path, FILE_MODEL, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", path);
        return NULL;
    }
    static const fe_override sets[] = {{"layers", "1", false}, {"hidden", "64", false}, {"heads", "2", false},
                                       {"seq", "16", false},   {"batch", "2", false},   {"vocab", "64", false}};
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = fe_compile(path, text, len, sets, (int)ARRAY_LEN(sets), &d);
    free(text);
    const pass_info *list[64];
    int n = 0;
    if (names)
        for (; names[n]; n++) list[n] = pass_lookup(names[n]);
    else
        for (; n < pass_count(); n++) list[n] = pass_at(n);
    pass_ctx ctx = {.d = &d, .verify_each = true, .opts = po};
    if (g && !pass_run_list(g, list, n, &ctx, NULL, NULL)) {
        ir_graph_free(g);
        g = NULL;
    }
    diag_free(&d);
    return g;
}

static ir_graph *build(const char *sample, int tp, bool sp, ir_dtype precision)
{
    pass_options po;
    pass_options_defaults(&po);
    po.tp = tp;
    po.sequence_parallel = sp;
    po.precision = precision;
    return build_with(sample, &po, NULL);
}

static char *render_one(const kernel *k, const kx *e, cg_lang lang, int64_t mod_c)
{
    strbuf sb;
    sb_init(&sb);
    cg_rx r;
    cg_rx_init(&r, &sb, k, lang);
    r.mod_c = mod_c;
    cg_rx_expr(&r, e);
    return sb.s;
}

/* s with "tgc_key<from>" written "tgc_key<to>". */
static char *rekey(const char *s, int from, int to)
{
    char a[16], b[16];
    snprintf(a, sizeof a, "tgc_key%d", from);
    snprintf(b, sizeof b, "tgc_key%d", to);
    strbuf sb;
    sb_init(&sb);
    for (const char *p = s; *p;) {
        if (strncmp(p, a, strlen(a)) == 0 && !(p[strlen(a)] >= '0' && p[strlen(a)] <= '9')) {
            sb_puts(&sb, b);
            p += strlen(a);
        } else {
            sb_putc(&sb, *p++);
        }
    }
    sb_puts(&sb, "");
    return sb.s;
}

/* Whether the C source holds e as the C renderer writes it in a kernel
 * body: dropout keys as the body's arguments (render_c.c), numbered in
 * the kernel's order, which the expression alone does not know — so every
 * numbering of its keys is tried (keys renumbered from the top down, so
 * that a renamed key is not renamed again). */
static bool c_source_has(const char *csrc, const kernel *k, const kx *e, int64_t mod_c)
{
    strbuf sb;
    sb_init(&sb);
    cg_rx r;
    cg_rx_init(&r, &sb, k, CG_LANG_C);
    r.mod_c = mod_c;
    r.key_args = true;
    cg_rx_expr(&r, e);
    int n = r.nkeys, total = 1;
    CHECK(n <= 3);
    if (n > 3) n = 3;
    for (int i = 0; i < n; i++) total *= CG_RX_MAX_KEYS;
    bool found = false;
    for (int code = 0; code < total && !found; code++) {
        /* Key i becomes tgc_key(100 + i) first, then its number: no clashes. */
        char *t = xstrdup(sb.s);
        for (int i = 0; i < n; i++) {
            char *u = rekey(t, i, 100 + i);
            free(t);
            t = u;
        }
        for (int i = 0, c = code; i < n; i++, c /= CG_RX_MAX_KEYS) {
            char *u = rekey(t, 100 + i, c % CG_RX_MAX_KEYS);
            free(t);
            t = u;
        }
        found = strstr(csrc, t) != NULL;
        free(t);
    }
    free(sb.s);
    return found;
}

/* s with every "rt->" read as "rt." (the one textual difference). */
static char *as_cuda(const char *s)
{
    strbuf sb;
    sb_init(&sb);
    for (const char *p = s; *p;) {
        if (strncmp(p, "rt->", 4) == 0) { sb_puts(&sb, "rt."); p += 4; }
        else sb_putc(&sb, *p++);
    }
    return sb.s ? sb.s : xstrdup("");
}

static void test_shared_exprs(int tp, bool sp, ir_dtype precision)
{
    ir_graph *g = build("gpt", tp, sp, precision);
    CHECK(g != NULL);
    if (!g) return;
    diag d;
    diag_init(&d, stderr);
    cg_program *p = cg_build(g, &d);
    CHECK(p != NULL);
    if (p) {
        char *csrc = cg_render_c(p), *cusrc = cg_render_cuda(p);
        int exprs = 0, rt_reads = 0;
        for (int i = 0; i < p->nkernels; i++) {
            const kernel *k = p->kernels[i];
            for (int o = 0; o < k->nout; o++) {
                char *c = render_one(k, k->out[o].val, CG_LANG_C, 0), *cu = render_one(k, k->out[o].val, CG_LANG_CUDA, 0);
                char *c_as_cu = as_cuda(c);
                CHECK_STR(c_as_cu, cu);
                /* The C source renders a map over rows of C with its column counter. */
                /* (a map split into uniform loops holds them resolved: tests/optim/vectorised.py) */
                if (!cg_render_c_split(k, p->binds[i])) CHECK(c_source_has(csrc, k, k->out[o].val, cg_render_c_modulus(k)));
                CHECK(strstr(cusrc, cu) != NULL);
                rt_reads += strstr(c, "rt->") != NULL;
                exprs++;
                free(c);
                free(cu);
                free(c_as_cu);
            }
        }
        /* The comparison covered kernels that read run-time scalars (dropout, the optimizer). */
        CHECK(exprs > 50 && rt_reads > 0);
        /* Every kernel is an extern "C" __global__ entry of the same name. */
        for (int i = 0; i < p->nkernels; i++) {
            char sig[96];
            snprintf(sig, sizeof sig, ") %s(", p->kernels[i]->name);
            CHECK(strstr(cusrc, sig) != NULL);
        }
        free(csrc);
        free(cusrc);
    }
    cg_program_free(p);
    ir_graph_free(g);
    diag_free(&d);
}

/* ---- 4. NVRTC -------------------------------------------------------------------- */

/* The CUDA prelude (an empty program) and one probe kernel per tgc_rt
 * field that reads just that field: in the PTX, the kernel's one load
 * from its struct parameter is at the field's offset as the device
 * compiler lays tgc_rt out. `extra` is appended (a failing assert). */
static char *probe_source(const char *extra)
{
    cg_program empty;
    memset(&empty, 0, sizeof empty);
    char *pre = cg_render_cuda(&empty);
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, pre);
    for (size_t i = 0; i < ARRAY_LEN(rt_layout); i++)
        sb_printf(&sb, "extern \"C\" __global__ void probe_%s(double *out, const tgc_rt rt) "
                       "{ *out = (double)rt.%s; }\n", rt_layout[i].name, rt_layout[i].name);
    sb_printf(&sb, "static_assert(sizeof(tgc_rt) == %zu && alignof(tgc_rt) == %zu, \"tgc_rt size\");\n",
              sizeof(rt_scalars), _Alignof(rt_scalars));
    sb_puts(&sb, extra);
    free(pre);
    return sb.s;
}

/* The offset and width of the load from parameter 1 in kernel probe_NAME. */
static bool probe_load(const char *ptx, const char *name, size_t *off, size_t *width)
{
    char entry[96], param[96];
    snprintf(entry, sizeof entry, ".entry probe_%s(", name);
    snprintf(param, sizeof param, "[probe_%s_param_1", name);
    const char *e = strstr(ptx, entry);
    const char *at = e ? strstr(e + strlen(entry), param) : NULL; /* skips the declaration */
    if (!at) return false;
    const char *ld = at;
    while (ld > e && strncmp(ld, "ld.param.", 9) != 0 && *ld != '\n') ld--;
    if (strncmp(ld, "ld.param.", 9) != 0) return false;
    at += strlen(param);
    *off = *at == '+' ? (size_t)strtoul(at + 1, NULL, 10) : 0;
    const char *w = ld + strlen("ld.param.");
    *width = (size_t)atoi(w + 1) / 8; /* u64, s64, f64, f32, ... */
    return true;
}

static void test_nvrtc_layout(void)
{
    char *src = probe_source("");
    diag d;
    diag_init(&d, stderr);
    char *ptx = rt_nvrtc_ptx(src, "sm_90", &d);
    CHECK(ptx != NULL);
    for (size_t i = 0; ptx && i < ARRAY_LEN(rt_layout); i++) {
        size_t off = 0, width = 0;
        bool found = probe_load(ptx, rt_layout[i].name, &off, &width);
        if (!found || off != rt_layout[i].offset || width != rt_layout[i].size)
            fprintf(stderr, "NVRTC: tgc_rt.%s %s at %zu (%zu bytes); rt_scalars.%s at %zu (%zu bytes)\n",
                    rt_layout[i].name, found ? "loaded" : "not found", off, width, rt_layout[i].name,
                    rt_layout[i].offset, rt_layout[i].size);
        CHECK(found && off == rt_layout[i].offset && width == rt_layout[i].size);
    }
    free(ptx);
    diag_free(&d);
    free(src);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The entries of dir (not . and ..); the last one's path in last. */
/* The number of files in dir; *last: the last one not a manifest. */
static int list_dir(const char *dir, char *last, size_t cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (!strstr(e->d_name, ".manifest")) snprintf(last, cap, "%s/%s", dir, e->d_name);
        n++;
    }
    if (d) closedir(d);
    return n;
}

static void test_nvrtc_compile(void)
{
    rt_nvrtc_options o = {.arch = "sm_90", .no_cache = true};
    char *src = probe_source("");
    capture cap;
    cap_init(&cap);
    rt_cubin *c = rt_nvrtc_compile(src, &o, &cap.d);
    CHECK(c != NULL);
    if (c) {
        CHECK(rt_cubin_size(c) > 0 && !rt_cubin_cached(c) && rt_cubin_warnings(c) == 0);
        const rt_kernel_info *k = rt_cubin_kernel(c, "probe_lr_double");
        CHECK(k && k->registers > 0 && k->spill_stores == 0);
        CHECK(rt_cubin_nkernels(c) == (int)ARRAY_LEN(rt_layout));
    }
    if (!c || rt_cubin_warnings(c)) fprintf(stderr, "%s%s\n", cap_text(&cap), c ? rt_cubin_log(c) : "");
    rt_cubin_free(c);
    cap_free(&cap);
    free(src);
    /* A failure shows NVRTC's log (naming the assert) and the numbered
     * source, whose line numbers the log refers to. */
    src = probe_source("static_assert(sizeof(tgc_rt) == 1, \"tgc_rt is one byte\");\n");
    cap_init(&cap);
    c = rt_nvrtc_compile(src, &o, &cap.d);
    CHECK(c == NULL);
    const char *t = cap_text(&cap);
    CHECK(strstr(t, "NVRTC") && strstr(t, "tgc_rt is one byte") && strstr(t, "    1  /* Generated by tgc"));
    rt_cubin_free(c);
    cap_free(&cap);
    free(src);
    /* A bad architecture: refused with the list. */
    rt_nvrtc_options bad = {.arch = "sm_91", .no_cache = true};
    cap_init(&cap);
    CHECK(rt_nvrtc_compile("", &bad, &cap.d) == NULL);
    t = cap_text(&cap);
    CHECK(strstr(t, "--cuda-arch 'sm_91'") && strstr(t, "sm_80") && strstr(t, "sm_90"));
    cap_free(&cap);
}

/* The cuda backend's own kernels (the pipeline's accumulation and 1/M,
 * the device-local communicator's reductions) compile for every
 * architecture tgc targets, without a warning. */
static void test_nvrtc_backend_kernels(void)
{
    static const char *const archs[] = {"sm_80", "sm_90"};
    static const char *const names[] = {"tgc_be_reduce_f32", "tgc_be_reduce_f64", "tgc_be_scale_f32", "tgc_be_scale_f64",
                                        "tgc_be_reduce_16", "tgc_be_scale_16"};
    for (size_t a = 0; a < ARRAY_LEN(archs); a++) {
        rt_nvrtc_options o = {.arch = archs[a], .no_cache = true};
        capture cap;
        cap_init(&cap);
        rt_cubin *c = rt_nvrtc_compile(rt_cuda_backend_source(), &o, &cap.d);
        CHECK(c != NULL);
        for (size_t k = 0; c && k < ARRAY_LEN(names); k++) {
            const rt_kernel_info *ki = rt_cubin_kernel(c, names[k]);
            CHECK(ki && ki->spill_stores == 0);
        }
        CHECK(c && rt_cubin_warnings(c) == 0);
        if (!c || rt_cubin_warnings(c)) fprintf(stderr, "%s%s\n", cap_text(&cap), c ? rt_cubin_log(c) : "");
        rt_cubin_free(c);
        cap_free(&cap);
    }
}

/* A KV-cached decoding step (`tgc sample`) of a Llama (rope, the causal
 * softmax and arange from rt.pos, kv_cache writes): its kernels read
 * tgc_rt's pos and compile without a warning. */
static void test_nvrtc_decode(void)
{
    static const char *const names[] = {"dce", "fuse", "kvcache", "memplan", NULL};
    pass_options po;
    pass_options_defaults(&po);
    po.kv_positions = 1;
    ir_graph *g = build_with("llama", &po, names);
    CHECK(g != NULL);
    if (!g) return;
    capture cap;
    cap_init(&cap);
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, &cap.d);
    CHECK(p != NULL);
    if (p) {
        char *cu = cg_render_cuda(p);
        CHECK(strstr(cu, "kv_cache") && strstr(cu, "rt.pos"));
        rt_nvrtc_options o = {.arch = "sm_80", .no_cache = true};
        rt_cubin *c = rt_nvrtc_compile(cu, &o, &cap.d);
        CHECK(c != NULL && rt_cubin_warnings(c) == 0 && rt_cubin_nkernels(c) == p->nkernels);
        if (!c || rt_cubin_warnings(c)) fprintf(stderr, "%s%s\n", cap_text(&cap), c ? rt_cubin_log(c) : "");
        rt_cubin_free(c);
        free(cu);
    }
    cg_program_free(p);
    cap_free(&cap);
    ir_graph_free(g);
}

static void test_nvrtc_cache(void)
{
    const char *base = getenv("TGC_CACHE_DIR");
    char dir[1024], entry[1200];
    snprintf(dir, sizeof dir, "%s/test-nvrtc-%d", base && *base ? base : ".", (int)getpid());
    setenv("TGC_CACHE_DIR", dir, 1);
    /* A source no earlier run compiled (the pid in a comment). */
    char src[512];
    snprintf(src, sizeof src, "/* %d */\nextern \"C\" __global__ void __launch_bounds__(128, 1) k1(float *a0) "
             "{ a0[threadIdx.x] = expf(a0[threadIdx.x]); }\n", (int)getpid());
    rt_nvrtc_options o = {.arch = "sm_80"};
    diag d;
    diag_init(&d, stderr);
    rt_cubin *a = rt_nvrtc_compile(src, &o, &d), *b = rt_nvrtc_compile(src, &o, &d);
    CHECK(a && b && !rt_cubin_cached(a) && rt_cubin_cached(b));
    if (a && b) {
        CHECK(rt_cubin_size(a) == rt_cubin_size(b));
        CHECK(memcmp(rt_cubin_data(a), rt_cubin_data(b), rt_cubin_size(a)) == 0);
        const rt_kernel_info *ia = rt_cubin_kernel(a, "k1"), *ib = rt_cubin_kernel(b, "k1");
        CHECK(ia && ib && ia->registers > 0 && ia->registers == ib->registers);
    }
    /* The one entry and its manifest: damage the entry (cut in half, or one
     * byte changed, which only the hash sees) and it is compiled again. */
    char cuda_dir[1100];
    snprintf(cuda_dir, sizeof cuda_dir, "%s/cuda", dir);
    entry[0] = 0;
    int files = list_dir(cuda_dir, entry, sizeof entry);
    CHECK(files == 2 && strstr(entry, ".cubin"));
    for (int damage = 0; a && files == 2 && damage < 2; damage++) {
        if (damage == 0) CHECK(truncate(entry, (off_t)(rt_cubin_size(a) / 2)) == 0);
        else {
            FILE *f = fopen(entry, "r+b");
            CHECK(f && fseek(f, -1, SEEK_END) == 0 && fputc(0x5a ^ (int)((const unsigned char *)rt_cubin_data(a))[rt_cubin_size(a) - 1], f) != EOF);
            if (f) fclose(f);
        }
        rt_cubin *c = rt_nvrtc_compile(src, &o, &d);
        CHECK(c && !rt_cubin_cached(c) && rt_cubin_size(c) == rt_cubin_size(a));
        rt_cubin_free(c);
        c = rt_nvrtc_compile(src, &o, &d);
        CHECK(c && rt_cubin_cached(c));
        rt_cubin_free(c);
    }
    /* no_cache: compiled, nothing new on disk. */
    rt_nvrtc_options nc = {.arch = "sm_80", .no_cache = true};
    char other[600];
    snprintf(other, sizeof other, "/* other */\n%s", src);
    rt_cubin *c = rt_nvrtc_compile(other, &nc, &d);
    CHECK(c && !rt_cubin_cached(c));
    rt_cubin_free(c);
    char ignored[1200];
    files = list_dir(cuda_dir, ignored, sizeof ignored);
    CHECK(files == 2);
    rt_cubin_free(a);
    rt_cubin_free(b);
    if (file_exists(entry)) rt_cache_remove(entry);
    rmdir(cuda_dir);
    rmdir(dir);
    diag_free(&d);
    if (base) setenv("TGC_CACHE_DIR", base, 1);
}

int main(int argc, char **argv)
{
    if (argc > 1) samples_dir = argv[1];
    test_parser();
    test_struct();
    test_shared_exprs(1, false, IR_F32);
    test_shared_exprs(2, true, IR_BF16);
    if (!rt_nvrtc_available(NULL)) {
#ifdef TGC_HAVE_CUDA
        /* Built with the toolkit, yet its library does not load: skipped. */
        printf("NVRTC cannot be loaded: its checks are skipped\n");
        if (check_failures) CHECK_DONE();
        return 77;
#else
        printf("built without the CUDA toolkit: no NVRTC checks\n");
        CHECK_DONE();
#endif
    }
    int major, minor;
    CHECK(rt_nvrtc_version(&major, &minor) && major >= 11);
    test_nvrtc_layout();
    test_nvrtc_compile();
    test_nvrtc_backend_kernels();
    test_nvrtc_decode();
    test_nvrtc_cache();
    CHECK_DONE();
}
