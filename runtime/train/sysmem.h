/* How much memory this process can take, read before a run allocates
 * (docs/runtime.md, "Memory"): the tightest limit of its memory cgroup and
 * the cgroups above it (v2: memory.max; v1: memory.limit_in_bytes; found
 * through /proc/self/cgroup), and /proc/meminfo's MemAvailable (which
 * counts reclaimable caches as available, as the kernel will). TGC_TEST_SYSROOT=DIR (a test hook) reads
 * DIR/proc/... and DIR/sys/fs/cgroup/... instead. */
#ifndef TGC_RT_SYSMEM_H
#define TGC_RT_SYSMEM_H
#include <stdint.h>

typedef struct rt_sysmem {
    int64_t mem_available;      /* MemAvailable in bytes; -1: unknown */
    int64_t cg_limit;           /* the binding cgroup limit; -1: none */
    char cg_file[600];          /* where cg_limit was read ("" when none) */
} rt_sysmem;

void rt_sysmem_probe(rt_sysmem *m);
/* Bytes available to this process: the smaller of MemAvailable and the
 * cgroup limit; -1 when neither is known. */
int64_t rt_sysmem_available(const rt_sysmem *m);

#endif
