#include "runtime/train/sysmem.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support/env.h"

/* A limit this large is "no limit" (cgroup v1 writes 2^63 rounded down to a page). */
#define SYSMEM_UNLIMITED ((int64_t)1 << 60)

/* The probed path: under TGC_TEST_SYSROOT when set (tests only). */
static void sysmem_path(char *buf, size_t cap, const char *path)
{
    const char *root = env_text("TGC_TEST_SYSROOT");
    snprintf(buf, cap, "%s%s", root ? root : "", path);
}

/* The first number in file `path` (-1: none or unreadable; "max": no limit). */
static int64_t sysmem_read_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char text[64] = "";
    bool got = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    if (!got) return -1;
    if (strncmp(text, "max", 3) == 0) return SYSMEM_UNLIMITED;
    char *end;
    long long v = strtoll(text, &end, 10);
    return end == text || v < 0 ? -1 : (int64_t)v;
}

static int64_t sysmem_meminfo_available(void)
{
    char path[512], line[256];
    sysmem_path(path, sizeof path, "/proc/meminfo");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int64_t kib = -1;
    while (kib < 0 && fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "MemAvailable: %lld kB", &v) == 1 && v >= 0) kib = v;
    }
    fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

/* The memory cgroup of this process: v2's path ("0::PATH") or v1's
 * ("N:...memory...:PATH"); *v1 says which. false: none. */
static bool sysmem_cgroup(char *cg, size_t cap, bool *v1)
{
    char path[512], line[1024];
    sysmem_path(path, sizeof path, "/proc/self/cgroup");
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctl = c1 + 1;
        bool mem1 = !strcmp(ctl, "memory") || strstr(ctl, "memory,") == ctl || strstr(ctl, ",memory");
        if (mem1 || (!found && !strncmp(line, "0:", 2) && !*ctl)) {
            snprintf(cg, cap, "%s", c2 + 1);
            *v1 = mem1;
            found = true;
            if (mem1) break; /* v1's memory controller binds when it is mounted */
        }
    }
    fclose(f);
    return found;
}

/* The tightest limit from cgroup cg up to the hierarchy's root. */
static void sysmem_cgroup_limit(rt_sysmem *m, const char *cg, bool v1)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", cg);
    /* (sizes: the prefix, dir, a file name; then TGC_TEST_SYSROOT's) */
    for (;;) {
        char base[560];
        snprintf(base, sizeof base, "%s%s", v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup",
                 strcmp(dir, "/") ? dir : "");
        char rel[600], path[1200];
        snprintf(rel, sizeof rel, "%s/%s", base, v1 ? "memory.limit_in_bytes" : "memory.max");
        sysmem_path(path, sizeof path, rel);
        int64_t lim = sysmem_read_number(path);
        if (lim >= 0 && lim < SYSMEM_UNLIMITED && (m->cg_limit < 0 || lim < m->cg_limit)) {
            m->cg_limit = lim;
            snprintf(m->cg_file, sizeof m->cg_file, "%s", rel);
        }
        char *slash = strrchr(dir, '/');
        if (!slash || !strcmp(dir, "/")) break;
        if (slash == dir) snprintf(dir, sizeof dir, "/");
        else *slash = 0;
    }
}

void rt_sysmem_probe(rt_sysmem *m)
{
    memset(m, 0, sizeof *m);
    m->cg_limit = -1;
    m->mem_available = sysmem_meminfo_available();
    char cg[512];
    bool v1 = false;
    if (sysmem_cgroup(cg, sizeof cg, &v1)) sysmem_cgroup_limit(m, cg, v1);
}

int64_t rt_sysmem_available(const rt_sysmem *m)
{
    if (m->cg_limit < 0) return m->mem_available;
    return m->mem_available < 0 || m->cg_limit < m->mem_available ? m->cg_limit : m->mem_available;
}
