#define _DEFAULT_SOURCE /* realpath */
#include "runtime/io/run_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/util.h"

/* The directory part of path ("." for a bare name). */
static char *files_dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return xstrdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = xmalloc(n + 1);
    memcpy(dir, path, n);
    dir[n] = 0;
    return dir;
}

/* path with its directory resolved (realpath), or a copy of path when the
 * directory does not resolve either. */
static char *files_resolved(const char *path)
{
    char *whole = realpath(path, NULL);
    if (whole) return whole;
    const char *slash = strrchr(path, '/');
    char *dir = files_dir_of(path);
    char *rdir = realpath(dir, NULL);
    free(dir);
    if (!rdir) return xstrdup(path);
    char *out = path_join(rdir, slash ? slash + 1 : path);
    free(rdir);
    return out;
}

bool rt_files_same(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char *ra = files_resolved(a), *rb = files_resolved(b);
    bool same = strcmp(ra, rb) == 0;
    free(ra);
    free(rb);
    return same;
}

/* Whether the file out would lie inside the directory dir (both resolved):
 * a new file there writes into what an input holds (a checkpoint). */
static bool files_inside(const char *out, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    char *ro = files_resolved(out), *rd = realpath(dir, NULL);
    size_t n = rd ? strlen(rd) : 0;
    bool in = n > 1 && strncmp(ro, rd, n) == 0 && ro[n] == '/';
    free(ro);
    free(rd);
    return in;
}

static bool files_allowed(const char *x, const char *y, const char *const (*allowed)[2], int n)
{
    for (int k = 0; k < n; k++)
        if ((!strcmp(x, allowed[k][0]) && !strcmp(y, allowed[k][1])) ||
            (!strcmp(y, allowed[k][0]) && !strcmp(x, allowed[k][1])))
            return true;
    return false;
}

/* Whether the output file f can be written now: false after reporting. */
static bool files_writable(const rt_run_file *f, diag *d)
{
    struct stat st;
    if (stat(f->path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            diag_error_plain(d, "%s %s: is a directory, not a file", f->opt, f->path);
            return false;
        }
        if (!S_ISREG(st.st_mode)) {
            /* A FIFO or a device is written in place when the output is
             * made (file_out_begin); opening a FIFO here would block
             * without a reader, or send its reader an end of file. */
            if (access(f->path, W_OK) == 0) return true;
            diag_error_plain(d, "%s %s: cannot be written: %s", f->opt, f->path, strerror(errno));
            return false;
        }
        /* A regular file is replaced by a rename (file_out_begin), never
         * opened: what matters is its directory. */
    }
    char *dir = files_dir_of(f->path);
    const char *why = NULL;
    if (stat(dir, &st) != 0) why = "does not exist";
    else if (!S_ISDIR(st.st_mode)) why = "is not a directory";
    else if (access(dir, W_OK | X_OK) != 0) why = strerror(errno);
    if (why) diag_error_plain(d, "%s %s: cannot be created: the directory '%s' %s", f->opt, f->path, dir, why);
    free(dir);
    return !why;
}

bool rt_files_check(const rt_run_file *inputs, int nin, const rt_run_file *outputs, const bool *is_dir, int nout,
                    const char *const (*allowed)[2], int nallowed, diag *d)
{
    bool ok = true;
    for (int i = 0; i < nout; i++) {
        const rt_run_file *o = &outputs[i];
        if (!o->path) continue;
        for (int k = 0; k < nin; k++)
            if (inputs[k].path && !files_allowed(o->opt, inputs[k].opt, allowed, nallowed) &&
                rt_files_same(o->path, inputs[k].path)) {
                diag_error_plain(d, "%s %s: is the input %s %s: an output would overwrite it; give another path",
                                 o->opt, o->path, inputs[k].opt, inputs[k].path);
                ok = false;
            } else if (inputs[k].path && !is_dir[i] && !files_allowed(o->opt, inputs[k].opt, allowed, nallowed) &&
                       files_inside(o->path, inputs[k].path)) {
                diag_error_plain(d, "%s %s: is inside the input %s %s: an output would write into it; give another "
                                 "path", o->opt, o->path, inputs[k].opt, inputs[k].path);
                ok = false;
            }
        for (int k = 0; k < i; k++)
            if (outputs[k].path && rt_files_same(o->path, outputs[k].path)) {
                diag_error_plain(d, "%s %s and %s %s: two outputs name one file; give each its own", outputs[k].opt,
                                 outputs[k].path, o->opt, o->path);
                ok = false;
            }
        struct stat st;
        if (is_dir[i] && stat(o->path, &st) == 0 && !S_ISDIR(st.st_mode)) {
            diag_error_plain(d, "%s %s: is a file, not a directory", o->opt, o->path);
            ok = false;
        }
        if (!is_dir[i] && !files_writable(o, d)) ok = false;
    }
    return ok;
}
