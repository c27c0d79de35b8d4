/* The CPU backend's compiler driver: generated C -> shared object, cached
 * on disk by a hash of (source, compiler, flags, CPU target), validated
 * against its manifest (runtime/backend/kcache.h) and loaded with dlopen. The
 * compiler runs from an argument vector (support/proc.h), never a shell.
 *
 * Cache directory: $TGC_CACHE_DIR, else $XDG_CACHE_HOME/tgc, else
 * $HOME/.cache/tgc, else a directory under $TMPDIR. TGC_NO_CACHE=1 (or
 * rt_cc_options.no_cache) compiles into a fresh temporary directory.
 * TGC_KEEP_SOURCE=1 keeps the generated .c beside the .so for reading.
 * The compiler is $TGC_CC, else cc; $TGC_KERNEL_CFLAGS adds flags (a
 * sanitizer build sets the same -fsanitize options for the kernels); both
 * are split into words as a shell would, quotes included, without one.
 * The key holds the compiler's --version and what the flags mean on this
 * machine (`-Q --help=target`: -march=native resolved), so machines that
 * share a cache but differ in CPU never load each other's kernels. */
#ifndef TGC_RT_CPU_H
#define TGC_RT_CPU_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "support/diag.h"

typedef struct rt_so rt_so;

typedef struct rt_cc_options {
    bool no_cache;
    bool keep_source;
    bool debug;      /* -O1 -g instead of -O3 */
    const char *extra_flags; /* e.g. sanitizer flags of a sanitizer build */
} rt_cc_options;

/* Compiles (or finds in the cache) and loads src. NULL after an error; a
 * compiler failure prints the compiler's log and the numbered source. */
rt_so *rt_cc_load(const char *src, const rt_cc_options *o, diag *d);
void *rt_so_sym(rt_so *so, const char *name);
/* The cache key: the source, the command's words, and the identity of
 * the compiler and the target it resolves to (a hash). */
uint64_t rt_cc_key(const char *src, const char *const *words, int nwords, uint64_t identity);
const char *rt_so_path(const rt_so *so);
void rt_so_close(rt_so *so);

/* Shared with the NVRTC cache (runtime/backend/nvrtc.c): the cache directory
 * with `sub` appended ("" or "/cuda"), made and checked writable: from
 * TGC_CACHE_DIR, else $XDG_CACHE_HOME/tgc, else $HOME/.cache/tgc when HOME
 * is an existing absolute directory (never created), else the per-user
 * $TMPDIR (or /tmp)/tgc-cache-UID, made 0700 and refused unless it is this
 * user's with mode 0700. false after an error naming the variable and the
 * path. Then mkdir -p; a source printed with line numbers. */
bool rt_cache_dir(char *out, size_t n, const char *sub, diag *d);
void rt_print_numbered(FILE *out, const char *src);

#endif
