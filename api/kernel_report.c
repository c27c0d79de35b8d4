/* The CUDA kernel report of `tgc compile --backend cuda --kernel-report`
 * (api/kernel_report.h, docs/cuda.md). */
#include "api/kernel_report.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/codegen.h"
#include "runtime/backend/nvrtc.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *kind_name(kk_kind k)
{
    return k == KK_MAP ? "map" : k == KK_ROW ? "row" : k == KK_COL ? "col" : k == KK_ATTN ? "attn" : "scatter";
}

/* The warnings of an NVRTC log, line by line, on stderr. */
static void print_warnings(const char *log)
{
    for (const char *line = log; line && *line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", len, line);
        if (strstr(buf, "warning")) fprintf(stderr, "tgc: warning: NVRTC: %s\n", buf);
        line = nl ? nl + 1 : NULL;
    }
}

int api_kernel_report(const ir_graph *g, const char *model, const char *arch, bool no_cache, FILE *out, diag *d)
{
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, d);
    if (!p) return 1;
    char *src = cg_render_cuda(p);
    rt_nvrtc_options o = {.arch = arch, .no_cache = no_cache};
    double t0 = now_s();
    rt_cubin *bin = rt_nvrtc_compile(src, &o, d);
    double secs = now_s() - t0;
    free(src);
    if (!bin) {
        cg_program_free(p);
        return 1;
    }
    int spilling = 0, missing = 0, max_regs = -1;
    const char *max_name = "";
    fprintf(out, "%-10s %-8s %-22s %-12s %6s %6s %6s %6s  %s\n", "kernel", "shape", "size", "launch", "regs",
            "spill", "stack", "smem", "computes");
    for (int i = 0; i < p->nkernels; i++) {
        const kernel *k = p->kernels[i];
        const rt_kernel_info *ki = rt_cubin_kernel(bin, k->name);
        unsigned grid[3], block[3], shmem;
        cg_cuda_launch_dims(k, grid, block, &shmem);
        char size[32], launch[32];
        if (k->kind == KK_MAP) snprintf(size, sizeof size, "%lld", (long long)k->n);
        else snprintf(size, sizeof size, "%lldx%lld", (long long)k->n, (long long)k->cols);
        snprintf(launch, sizeof launch, "%ux%u", grid[0], block[0]);
        if (!ki) {
            /* ptxas reports every kernel it compiled: a missing one is a bug. */
            fprintf(out, "%-10s %-8s %-22s %-12s %6s %6s %6s %6s  %s\n", k->name, kind_name(k->kind), size, launch,
                    "?", "?", "?", "?", k->comment);
            missing++;
            continue;
        }
        int64_t spill = ki->spill_stores + ki->spill_loads;
        spilling += spill > 0;
        if (ki->registers > max_regs) { max_regs = ki->registers; max_name = k->name; }
        fprintf(out, "%-10s %-8s %-22s %-12s %6d %6lld %6lld %6lld  %s\n", k->name, kind_name(k->kind), size, launch,
                ki->registers, (long long)spill, (long long)ki->stack_bytes, (long long)ki->shared_bytes,
                k->comment);
    }
    int major = 0, minor = 0, warnings = rt_cubin_warnings(bin);
    rt_nvrtc_version(&major, &minor);
    fprintf(out, "%s: %d CUDA kernels for %s, NVRTC %d.%d, %.2f s%s, cubin %zu bytes: max %d registers (%s), "
            "%d spilling, %d warnings\n", model, p->nkernels, arch, major, minor, secs,
            rt_cubin_cached(bin) ? " (cached)" : "", rt_cubin_size(bin), max_regs, max_name, spilling, warnings);
    if (warnings) print_warnings(rt_cubin_log(bin));
    if (spilling) diag_error_plain(d, "%d kernels spill registers to local memory (see the spill column)", spilling);
    if (missing) diag_error_plain(d, "ptxas reported no resources for %d kernels", missing);
    if (warnings) diag_error_plain(d, "NVRTC warned %d times on the generated kernels", warnings);
    rt_cubin_free(bin);
    cg_program_free(p);
    return spilling || missing || warnings ? 1 : 0;
}
