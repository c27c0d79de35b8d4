/* The files a run reads and writes, checked before anything is computed:
 * an output (--save, --export, --export-grads, --log, --trace,
 * --tensorboard-dir; compile's -o) that is one of the inputs (the model or plan, --data, --inputs,
 * --init-from, --load) or a file inside an input directory (--load's
 * checkpoint) is refused, as is one file named by two outputs,
 * and every output file must be writable then, not only after the last
 * step. */
#ifndef TGC_RT_RUN_FILES_H
#define TGC_RT_RUN_FILES_H
#include <stdbool.h>

#include "support/diag.h"

/* An option and the path it names (path NULL: not given, skipped). */
typedef struct rt_run_file {
    const char *opt;
    const char *path;
} rt_run_file;

/* Whether a and b are one file: the same (st_dev, st_ino) when both exist,
 * else the same path once the directory part is resolved (realpath) —
 * for an output that does not exist yet. */
bool rt_files_same(const char *a, const char *b);

/* Every output against every input and every other output (the pairs
 * allowed[k][0], allowed[k][1] of option names excepted, e.g. --save and
 * --load naming one directory to resume into), and each output of
 * files[] (dir false) writable: an existing file opened for writing (not
 * truncated), a new one's directory existing and writable; an existing
 * directory output (dir true) must be a directory. false after reporting
 * each problem, naming the options and paths. */
bool rt_files_check(const rt_run_file *inputs, int nin, const rt_run_file *outputs, const bool *is_dir, int nout,
                    const char *const (*allowed)[2], int nallowed, diag *d);

#endif
