/* JSON-lines step logs and the progress line; fixed buffers, no
 * allocation per step. */
#include "runtime/io/log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/file.h"
#include "support/util.h"

struct tgc_log {
    int fd;
    char *path; /* for the message of a failed close */
    char line[TGC_LOG_LINE_MAX];
};

/* snprintf at buf + at, keeping at <= cap - 1 when the text does not fit. */
static size_t log_appendf(char *buf, size_t cap, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t log_appendf(char *buf, size_t cap, size_t at, const char *fmt, ...)
{
    if (at + 1 >= cap) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, cap - at, fmt, ap);
    va_end(ap);
    if (n < 0) return at;
    return at + (size_t)n < cap ? at + (size_t)n : cap - 1;
}

size_t tgc_log_format_double(double v, char *buf, size_t cap)
{
    if (!isfinite(v)) return (size_t)snprintf(buf, cap, "null");
    /* Integers print as "100.0", not the shortest "1e+02". */
    if (v == floor(v) && fabs(v) < 1e16) return (size_t)snprintf(buf, cap, "%.1f", v);
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    /* Keep a marker that this is a real number, not an integer. */
    if (!strpbrk(tmp, ".eE")) strcat(tmp, ".0");
    return (size_t)snprintf(buf, cap, "%s", tmp);
}

/* Appends `,"key":value` at buf + at. */
static size_t log_put_field(char *buf, size_t cap, size_t at, const char *key, double v)
{
    char num[40];
    tgc_log_format_double(v, num, sizeof num);
    return log_appendf(buf, cap, at, ",\"%s\":%s", key, num);
}

size_t tgc_log_format_step(const tgc_step_stats *s, char *buf, size_t cap)
{
    TGC_ASSERT(cap >= TGC_LOG_LINE_MAX);
    size_t at = log_appendf(buf, cap, 0, "{\"step\":%lld", (long long)s->step);
    at = log_put_field(buf, cap, at, "loss", s->loss);
    at = log_put_field(buf, cap, at, "lr", s->lr);
    if (s->has_wd) at = log_put_field(buf, cap, at, "wd", s->wd);
    at = log_put_field(buf, cap, at, "grad_norm", s->grad_norm);
    at = log_put_field(buf, cap, at, "tokens_per_s", s->tokens_per_s);
    at = log_put_field(buf, cap, at, "step_ms", s->step_ms);
    if (s->has_tflops) at = log_put_field(buf, cap, at, "tflops", s->tflops);
    if (s->has_mfu) at = log_put_field(buf, cap, at, "mfu", s->mfu);
    if (s->has_val_loss) at = log_put_field(buf, cap, at, "val_loss", s->val_loss);
    if (s->has_scale) {
        at = log_put_field(buf, cap, at, "loss_scale", s->loss_scale);
        at = log_put_field(buf, cap, at, "skipped", s->skipped ? 1.0 : 0.0);
    }
    return log_appendf(buf, cap, at, "}\n");
}

tgc_log *tgc_log_open(const char *path, diag *d)
{
    /* A FIFO with no reader fails at once instead of hanging; a symlink
     * someone else planted is not followed (support/file.h). */
    char why[256];
    int fd = file_open_append(path, why, sizeof why);
    if (fd < 0) {
        diag_error(d, (src_loc){.file = path}, "cannot open the log for appending: %s", why);
        return NULL;
    }
    tgc_log *log = xcalloc(1, sizeof *log);
    log->fd = fd;
    log->path = xstrdup(path);
    return log;
}

bool tgc_log_step(tgc_log *log, const tgc_step_stats *s)
{
    size_t n = tgc_log_format_step(s, log->line, sizeof log->line);
    ssize_t w;
    do w = write(log->fd, log->line, n);
    while (w < 0 && errno == EINTR);
    if (w >= 0 && (size_t)w != n) errno = EIO; /* a short write: disk full */
    return w >= 0 && (size_t)w == n;
}

bool tgc_log_close(tgc_log *log, diag *d)
{
    if (!log) return true;
    /* Where the file system reports a write error only at close (NFS, a
     * quota), the last lines are lost: that fails the run too. */
    bool ok = close(log->fd) == 0 || errno == EINTR;
    if (!ok) diag_error(d, (src_loc){.file = log->path}, "cannot write the log: %s", strerror(errno));
    free(log->path);
    free(log);
    return ok;
}

/* ---- progress line -------------------------------------------------------- */

void tgc_progress_init(tgc_progress *p, FILE *out, int64_t total_steps, int64_t interval)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = isatty(fileno(out)) == 1;
    p->total = total_steps;
    p->interval = interval > 0 ? interval : 1;
}

size_t tgc_progress_format_eta(double seconds, char *buf, size_t cap)
{
    long long t = isfinite(seconds) && seconds > 0 ? (long long)seconds : 0;
    return (size_t)snprintf(buf, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

/* The line's text without '\r' or '\n'. */
static void progress_format(const tgc_progress *p, const tgc_step_stats *s, char *buf, size_t cap)
{
    long long step = (long long)s->step;
    size_t at = p->total > 0 ? log_appendf(buf, cap, 0, "step %lld/%lld", step, (long long)p->total)
                             : log_appendf(buf, cap, 0, "step %lld", step);
    at = log_appendf(buf, cap, at, " | loss %.4f | lr %.3e | norm %.3f | %.0f tok/s | %.1f ms", s->loss, s->lr,
                     s->grad_norm, s->tokens_per_s, s->step_ms);
    if (s->has_val_loss) at = log_appendf(buf, cap, at, " | val %.4f", s->val_loss);
    if (s->has_tflops) at = log_appendf(buf, cap, at, " | %.3g TFLOP/s", s->tflops);
    if (s->has_mfu) at = log_appendf(buf, cap, at, " | mfu %.1f%%", 100.0 * s->mfu);
    if (s->has_scale) at = log_appendf(buf, cap, at, " | scale %g%s", s->loss_scale, s->skipped ? " (skipped)" : "");
    if (p->total > 0 && p->nseen > 0) {
        char eta[32];
        int64_t left = p->total - s->step;
        double mean_ms = p->ms_sum / (double)p->nseen;
        tgc_progress_format_eta((double)(left > 0 ? left : 0) * mean_ms / 1000.0, eta, sizeof eta);
        log_appendf(buf, cap, at, " | ETA %s", eta);
    }
}

void tgc_progress_step(tgc_progress *p, const tgc_step_stats *s)
{
    if (isfinite(s->step_ms) && s->step_ms >= 0) {
        p->ms_sum += s->step_ms;
        p->nseen++;
    }
    bool last = p->total > 0 && s->step >= p->total;
    char line[TGC_LOG_LINE_MAX];
    progress_format(p, s, line, sizeof line);
    if (p->tty) {
        /* \x1b[K clears what a longer previous line left behind. */
        fprintf(p->out, "\r%s\x1b[K", line);
        p->open_line = true;
        if (last) tgc_progress_finish(p);
    } else if (s->step == 1 || last || s->step % p->interval == 0) {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
}

void tgc_progress_finish(tgc_progress *p)
{
    if (!p->open_line) return;
    fputc('\n', p->out);
    fflush(p->out);
    p->open_line = false;
}
