/* Generated CUDA kernels run on the host: the pieces that the emulation
 * tests (test_attn_emulate.c, test_map_emulate.c) share. The kernels' text,
 * as NVRTC gets it, is compiled by the host C++ compiler after a host
 * prelude and a test's own shim of the CUDA execution model, and loaded. */
#ifndef TGC_TESTS_CUDA_EMU_H
#define TGC_TESTS_CUDA_EMU_H
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/render_expr.h"
#include "support/proc.h"
#include "support/util.h"

extern const char tgc_philox_src[];

/* The text of kernel `name` in the CUDA source, from its signature to its
 * closing brace (malloc'd), or NULL. */
static char *emu_kernel_text(const char *src, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof pat, " %s(", name);
    const char *at = strstr(src, pat);
    if (!at) return NULL;
    while (at > src && strncmp(at, "extern \"C\"", 10) != 0) at--;
    const char *end = strstr(at, "\n}\n");
    if (!end) return NULL;
    size_t n = (size_t)(end + 3 - at);
    char *s = malloc(n + 1);
    memcpy(s, at, n);
    s[n] = 0;
    return s;
}

/* What the CUDA prelude gives every kernel, for the host: tgc_rt, the
 * Philox core, the bit casts and the 16-bit conversions. */
static void emu_host_prelude(strbuf *sb)
{
    sb_puts(sb, "#include <stdint.h>\n");
    cg_rx_rt_struct(sb);
    sb_puts(sb, "#define TGC_PHILOX_FN static inline\n");
    sb_puts(sb, tgc_philox_src);
    sb_puts(sb, "#include <string.h>\n"
                "static inline uint32_t tgc_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }\n"
                "static inline float tgc_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }\n");
    cg_rx_half_prelude(sb, "static inline");
}

/* Compiles text (freed) as DIR/TAG.cpp into a shared library with the C++
 * compiler cxx (-O1: no FMA contraction on x86-64 without -march) and
 * loads it; NULL after saying why. */
static void *emu_compile(const char *cxx, const char *dir, const char *tag, char *text)
{
    char cpp[512], so[512], log[512], why[256];
    snprintf(cpp, sizeof cpp, "%s/%s.cpp", dir, tag);
    snprintf(so, sizeof so, "%s/%s.so", dir, tag);
    snprintf(log, sizeof log, "%s/%s.log", dir, tag);
    FILE *f = fopen(cpp, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(text);
    if (!f) { perror(cpp); return NULL; }
    proc_argv av;
    proc_argv_init(&av);
    const char *words[] = {cxx, "-std=gnu++17", "-O1", "-fPIC", "-shared", "-pthread", "-w", "-o", so, cpp};
    for (size_t i = 0; i < ARRAY_LEN(words); i++) proc_argv_add(&av, words[i]);
    int rc = proc_run(&av, log, why, sizeof why);
    proc_argv_free(&av);
    if (rc != 0) {
        fprintf(stderr, "%s: the C++ compiler failed (%d%s%s); its log is %s\n", tag, rc, rc < 0 ? ": " : "",
                rc < 0 ? why : "", log);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) fprintf(stderr, "%s: %s\n", tag, dlerror());
    return h;
}
#endif
