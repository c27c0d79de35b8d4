/* Compiled plans: a self-contained file holding what `tgc run` needs
 * without the .tg file — the run configuration, the model's IR before the
 * passes (what `tgc run PLAN` recompiles for options that change them),
 * the training graph after every pass (with its memory plan), and the
 * generated kernel source.
 *
 *   tgc-plan 2 keys <16 hex digits: rt_plan_schema's hash of the keys>
 *   section config <bytes>\n<`name value` lines>
 *   section lowered <bytes>\n<text IR before the passes>
 *   section ir <bytes>\n<text IR after them>
 *   section kernels <bytes>\n<C source>
 *   checksum <16 hex digits: FNV-1a 64 of everything before this line>
 *
 * Written atomically (temporary file, fsync, rename). Reading checks the
 * version and the keys' hash (so a tgc whose configuration keys changed
 * refuses the plan even where the version was not bumped; the lit test
 * plan_format.test fails until it is), the section framing and the
 * checksum; a plan whose kernels differ from what this tgc generates from
 * its IR was made by another version and is rejected. */
#ifndef TGC_RT_PLAN_H
#define TGC_RT_PLAN_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "support/diag.h"

#define TGC_PLAN_VERSION 9

typedef struct rt_plan {
    char *config;  /* `name value` lines */
    char *lowered; /* text IR before the passes */
    char *ir;      /* text IR after them */
    char *kernels; /* C source */
} rt_plan;

/* The hash of the format's keys: its section names and config_keys (the
 * configuration's "name kind" lines, tgc_config_keys). */
uint64_t rt_plan_schema(const char *config_keys);
bool rt_plan_write(const char *path, const rt_plan *p, uint64_t schema, diag *d);
/* NULL after reporting a corrupt, truncated, damaged or foreign file, or
 * one whose keys' hash is not schema. */
rt_plan *rt_plan_read(const char *path, uint64_t schema, diag *d);
void rt_plan_free(rt_plan *p);

/* What a file's content says it is (plans are told from models by their
 * bytes, never by their name): no plan; a plan's header; or a damaged
 * plan: a first line within two bytes of "tgc-plan", or a plan's sections
 * or checksum line under another first line. */
typedef enum { RT_PLAN_NONE, RT_PLAN_HEADER, RT_PLAN_DAMAGED } rt_plan_look;
rt_plan_look rt_plan_sniff_text(const char *text, size_t len);
/* The same for a file; "-" (standard input) is not read: RT_PLAN_NONE. */
rt_plan_look rt_plan_sniff(const char *path);

/* Writes bytes to path atomically (file_write_atomic: an exclusive
 * temporary, fsync, rename); the error names path. */
bool rt_write_atomic(const char *path, const void *data, size_t len, diag *d);

#endif
