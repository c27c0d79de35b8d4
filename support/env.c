/* tgc's environment variables (support/env.h). */
#include "support/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

#define I64_MAX INT64_MAX
static const env_def table[] = {
    {"TGC_DEBUG", ENV_INT, 0, 5, 0, "1: plan and memory summary; 2: per-kernel timings; 3: IR after each pass; "
                                    "4: keeps the generated source; 5: PTX"},
    {"TGC_CC", ENV_TEXT, 0, 0, 0, "the C compiler of the CPU kernels and its words (cc)"},
    {"TGC_KERNEL_CFLAGS", ENV_TEXT, 0, 0, 0, "more flags for the kernels' compiler"},
    {"TGC_CACHE_DIR", ENV_TEXT, 0, 0, 0, "the kernel cache's directory (docs/runtime.md, \"The kernel cache\")"},
    {"TGC_NO_CACHE", ENV_FLAG, 0, 1, 0, "1: compile kernels in a temporary directory, no cache"},
    {"TGC_KEEP_SOURCE", ENV_FLAG, 0, 1, 0, "1: keep every generated .c/.cu beside its cache entry"},
    {"TGC_GEMM16_WORKSPACE", ENV_INT, 0, I64_MAX / 4, 0,
     "floats of the CPU 16-bit GEMMs' conversion workspace (0: the built-in size)"},
    {"TGC_GEMM16_SCALAR", ENV_FLAG, 0, 1, 0, "1: the 16-bit conversions' scalar forms only"},
    {"TGC_CPU_BF16_GEMM", ENV_TEXT, 0, 0, 0, "bf16 GEMMs on the CPU: auto, convert or onednn"},
    {"TGC_CPU_F16_GEMM", ENV_TEXT, 0, 0, 0, "f16 GEMMs on the CPU: auto, convert or onednn"},
    {"TGC_CUDA_SYNC", ENV_FLAG, 0, 1, 0, "1: synchronise after every CUDA launch (debugging)"},
    {"TGC_CUDA_TF32", ENV_FLAG, 0, 1, 0, "1: let cuBLASLt use TF32 for f32 GEMMs"},
    {"TGC_CUDA_EPILOGUES", ENV_FLAG, 0, 1, 1, "0: no cuBLASLt bias/GELU epilogues"},
    {"TGC_NVRTC", ENV_TEXT, 0, 0, 0, "the NVRTC library to open"},
    {"TGC_LIBCUDA", ENV_TEXT, 0, 0, 0, "tests: the CUDA driver library tests/cuda/kernel_check opens"},
    {"TGC_COMM_TIMEOUT", ENV_TEXT, 0, 0, 0, "seconds a collective waits for the other ranks"},
    {"TGC_NCCL_PORT", ENV_TEXT, 0, 0, 0, "the TCP port of NCCL's id exchange"},
    {"TGC_CKPT_TEST_DELAY_MS", ENV_INT, 0, 600000, 0, "tests: milliseconds each checkpoint write waits"},
    {"TGC_TEST_FAULT", ENV_TEXT, 0, 0, 0, "tests: RANK:ITER:KIND, a fault injected into a run"},
    {"TGC_TEST_SYSROOT", ENV_TEXT, 0, 0, 0, "tests: the root the memory check reads /proc and /sys under"},
    {"TGC_KERNEL_CHECK_CUBINS", ENV_TEXT, 0, 0, 0, "tests: the directory tests/cuda/kernel_check keeps its cubins in"},
};

const env_def *env_table(int *n)
{
    *n = (int)ARRAY_LEN(table);
    return table;
}

static const env_def *env_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(table); i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    TGC_ASSERT(!"a TGC_ variable missing from support/env.c's table");
    return NULL;
}

/* v as the row's value: false when the row refuses it. */
static bool env_value(const env_def *e, const char *v, int64_t *out)
{
    if (e->kind == ENV_TEXT) return true;
    return parse_i64(v, out) && *out >= e->min && *out <= e->max;
}

bool env_check(char *why, size_t cap)
{
    for (size_t i = 0; i < ARRAY_LEN(table); i++) {
        const env_def *e = &table[i];
        const char *v = getenv(e->name);
        int64_t x;
        if (!v || !*v || env_value(e, v, &x)) continue; /* set empty: unset */
        if (e->kind == ENV_FLAG) snprintf(why, cap, "tgc: error: %s='%s': expected 0 or 1", e->name, v);
        else
            snprintf(why, cap, "tgc: error: %s='%s': expected an integer from %lld to %lld", e->name, v,
                     (long long)e->min, (long long)e->max);
        return false;
    }
    return true;
}

int64_t env_int(const char *name)
{
    const env_def *e = env_find(name);
    const char *v = getenv(name);
    int64_t x;
    return v && *v && e->kind != ENV_TEXT && env_value(e, v, &x) ? x : e->def;
}

bool env_flag(const char *name) { return env_int(name) != 0; }

const char *env_text(const char *name)
{
    env_find(name);
    return getenv(name);
}
