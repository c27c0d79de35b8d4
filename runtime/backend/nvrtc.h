/* NVRTC: the generated CUDA source (codegen/render_cuda.c) -> a cubin for
 * one GPU architecture, cached on disk. No GPU is needed to compile.
 *
 * libnvrtc is opened with dlopen on first use, never linked, so tgc starts
 * on machines without CUDA. It is looked for as $TGC_NVRTC (a path), then
 * by soname (libnvrtc.so.13, .so.12, .so), then in $CUDA_HOME/lib64,
 * $CUDA_PATH/lib64 and the toolkit directory CMake found. Without the
 * toolkit at build time every function reports "built without the CUDA
 * toolkit".
 *
 * Options: --gpu-architecture=sm_XX -std=c++17 --ptxas-options=-v -lineinfo
 * (no fast math: results agree with the CPU backend's within rounding).
 * ptxas -v reports each kernel's registers, spills, stack and shared
 * memory; they are parsed from the log (rt_nvrtc_parse_ptxas).
 *
 * Cache: <cache>/cuda/k<hash>.cubin under the CPU backend's cache directory
 * ($TGC_CACHE_DIR, else $XDG_CACHE_HOME/tgc, else ~/.cache/tgc), the hash
 * over (source, options, architecture, NVRTC version). The file holds the
 * NVRTC log and the cubin, written to a temporary name and renamed, so a
 * cached hit has the same kernel report and no reader sees half a file.
 * rt_nvrtc_options.no_cache or TGC_NO_CACHE=1 compiles in memory only;
 * TGC_KEEP_SOURCE=1 keeps the .cu beside the cubin for reading. */
#ifndef TGC_RT_NVRTC_H
#define TGC_RT_NVRTC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/diag.h"

typedef struct rt_nvrtc_options {
    const char *arch; /* "sm_90", "sm_80", ...; NULL: sm_80 */
    bool no_cache;
    bool keep_source;
} rt_nvrtc_options;

/* What ptxas -v says about one kernel (an entry function). */
typedef struct rt_kernel_info {
    char name[64];
    int registers;
    int64_t spill_stores, spill_loads; /* bytes */
    int64_t stack_bytes;               /* the stack frame */
    int64_t shared_bytes;              /* static shared memory */
} rt_kernel_info;

typedef struct rt_cubin rt_cubin;

/* Compiles src for o->arch (or finds it in the cache). NULL after an error;
 * a compile failure prints NVRTC's log and the numbered source. */
rt_cubin *rt_nvrtc_compile(const char *src, const rt_nvrtc_options *o, diag *d);
void rt_cubin_free(rt_cubin *c);
const void *rt_cubin_data(const rt_cubin *c);
size_t rt_cubin_size(const rt_cubin *c);
/* NVRTC's log of the compilation (ptxas info, any warnings). */
const char *rt_cubin_log(const rt_cubin *c);
/* Warnings in the log (of the compiler or of ptxas). */
int rt_cubin_warnings(const rt_cubin *c);
/* True when the cubin came from the cache. */
bool rt_cubin_cached(const rt_cubin *c);
/* The kernels in the log's order; rt_cubin_kernel finds one by name. */
int rt_cubin_nkernels(const rt_cubin *c);
const rt_kernel_info *rt_cubin_kernel_at(const rt_cubin *c, int i);
const rt_kernel_info *rt_cubin_kernel(const rt_cubin *c, const char *name);

/* The PTX of src for the virtual architecture of `arch` (sm_90 ->
 * compute_90), for reading and for tests that inspect what the device
 * compiler made of the source (the tgc_rt layout); not cached. malloc'd;
 * NULL after an error, reported as for rt_nvrtc_compile. */
char *rt_nvrtc_ptx(const char *src, const char *arch, diag *d);

/* Loads libnvrtc; false (and an error in d, if d) when it cannot. */
bool rt_nvrtc_available(diag *d);
/* NVRTC's version, e.g. 13 0; false when it is not available. */
bool rt_nvrtc_version(int *major, int *minor);

/* Parses ptxas -v output into per-kernel records (malloc'd, *out); returns
 * how many. Functions that are not entry points (kernels) are skipped. */
int rt_nvrtc_parse_ptxas(const char *log, rt_kernel_info **out);
/* Counts the warnings in an NVRTC log. */
int rt_nvrtc_count_warnings(const char *log);

#endif
