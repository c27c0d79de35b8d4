/* Validated entries of the kernel caches: the CPU backend's shared objects
 * (runtime/backend/cpu.c) and NVRTC's cubins (runtime/backend/nvrtc.c), docs/runtime.md
 * "The kernel cache".
 *
 * Beside every entry PATH lies PATH.manifest:
 *   tgc-cache 1
 *   size BYTES
 *   hash HEX          (64-bit FNV-1a of the entry's bytes)
 *   ...               (lines saying what built it, for reading)
 * Both are written to temporary files and renamed into place, the entry
 * first, so a reader sees a complete manifest or none. An entry is used
 * only when its size and hash match its manifest; otherwise it is rebuilt
 * (a truncated shared object would crash dlopen's caller with SIGBUS). */
#ifndef TGC_RT_KCACHE_H
#define TGC_RT_KCACHE_H
#include <stdbool.h>
#include <stddef.h>

typedef enum rt_cache_state {
    RT_CACHE_MISS, /* no entry */
    RT_CACHE_OK,   /* the entry matches its manifest */
    RT_CACHE_BAD,  /* damaged: why says how; rebuild it */
} rt_cache_state;

/* Checks the entry at path. With data non-NULL, an OK entry's bytes are
 * returned in *data / *len (malloc'd, NUL-terminated). */
rt_cache_state rt_cache_check(const char *path, char **data, size_t *len, char *why, size_t cap);

/* Makes the complete file tmp the entry at path: hashes it, renames it to
 * path and writes path.manifest (with the `info` lines appended). false
 * with the reason in why; tmp is removed either way. */
bool rt_cache_commit(const char *tmp, const char *path, const char *info, char *why, size_t cap);

/* Removes the entry at path and its manifest. */
void rt_cache_remove(const char *path);

#endif
