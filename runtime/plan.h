/* Compiled plans: a self-contained file holding what `tgc run` needs
 * without the .tg file — the run configuration, the training graph after
 * every pass (with its memory plan), and the generated kernel source.
 *
 *   tgc-plan 1
 *   section config <bytes>\n<`name value` lines>
 *   section ir <bytes>\n<text IR>
 *   section kernels <bytes>\n<C source>
 *   checksum <16 hex digits: FNV-1a 64 of everything before this line>
 *
 * Written atomically (temporary file, fsync, rename). Reading checks the
 * version, the section framing and the checksum; a plan whose kernels
 * differ from what this tgc generates from its IR was made by another
 * version and is rejected. */
#ifndef TGC_RT_PLAN_H
#define TGC_RT_PLAN_H
#include <stdbool.h>

#include "ir/ir.h"
#include "support/diag.h"

#define TGC_PLAN_VERSION 1

typedef struct rt_plan {
    char *config;  /* `name value` lines */
    char *ir;      /* text IR */
    char *kernels; /* C source */
} rt_plan;

bool rt_plan_write(const char *path, const rt_plan *p, diag *d);
/* NULL after reporting a corrupt, truncated or foreign file. */
rt_plan *rt_plan_read(const char *path, diag *d);
void rt_plan_free(rt_plan *p);
/* True when the file starts like a plan (to tell plans from models). */
bool rt_plan_sniff(const char *path);

/* Writes bytes to path atomically: path.tmp, fsync, rename. */
bool rt_write_atomic(const char *path, const void *data, size_t len, diag *d);

#endif
