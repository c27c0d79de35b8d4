/* Training logs: one JSON object per step appended to a file, and a
 * progress line on standard error. Neither allocates per step; everything
 * but the timings they are given is deterministic.
 *
 * A JSON line, keys in this order, optional keys ("wd", "tflops", "mfu",
 * "val_loss") only when set; "step" is the iteration, counted from 1:
 *   {"step":12,"loss":3.25,"lr":0.0006,"wd":0.1,"grad_norm":1.5,"tokens_per_s":81920.0,
 *    "step_ms":100.0,"tflops":128.0,"mfu":0.41,"val_loss":3.5}
 * Numbers are the shortest decimal that reads back as the same double
 * ("0.1", "1e-05"), integers below 1e16 with ".0" ("81920.0"); NaN and
 * infinities are written as null. */
#ifndef TGC_RUNTIME_LOG_H
#define TGC_RUNTIME_LOG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "support/diag.h"

typedef struct tgc_step_stats {
    int64_t step; /* the iteration just finished, 1-based as Megatron's (the progress line's, the log's) */
    double loss, lr, grad_norm, tokens_per_s, step_ms;
    bool has_wd; /* the weight decay of the step (tgc run always sets it) */
    double wd;
    bool has_mfu, has_val_loss;
    bool has_scale;    /* fp16: the loss scale used, and whether the step was skipped */
    double loss_scale;
    bool skipped;
    double mfu, val_loss;
    bool has_tflops;   /* achieved model TFLOP/s of the step (tgc run: when the model FLOPs are known) */
    double tflops;
} tgc_step_stats;

/* Room for the longest line (every number needs at most 24 characters). */
#define TGC_LOG_LINE_MAX 512

/* Formats stats as one JSON line (with the newline) into buf; returns the
 * length. buf needs TGC_LOG_LINE_MAX bytes. */
size_t tgc_log_format_step(const tgc_step_stats *s, char *buf, size_t cap);
/* A decimal of v that strtod reads back exactly, as in the JSON lines
 * ("null" for NaN or an infinity); buf needs 32 bytes. */
size_t tgc_log_format_double(double v, char *buf, size_t cap);

typedef struct tgc_log tgc_log;

/* Opens path for appending (created if absent); NULL after reporting. Each
 * line goes out in one write(2) on an O_APPEND descriptor, so concurrent
 * writers never interleave within a line and a crash loses at most the
 * line being written. */
tgc_log *tgc_log_open(const char *path, diag *d);
/* Appends one line; false if the write failed (errno is set). */
bool tgc_log_step(tgc_log *log, const tgc_step_stats *s);
/* Closes the log; false after reporting when the close failed. NULL: true. */
bool tgc_log_close(tgc_log *log, diag *d);

/* The progress line. On a terminal it is rewritten in place with '\r'
 * every step; otherwise a plain line is printed every `interval` steps
 * and on the first and last step. The ETA is the mean step time so far
 * times the steps left, formatted h:mm:ss. */
typedef struct tgc_progress {
    FILE *out;
    bool tty;
    int64_t total, interval;
    double ms_sum; /* sum of step_ms seen, for the ETA */
    int64_t nseen;
    bool open_line; /* a '\r' line is on the screen and needs a newline */
} tgc_progress;

void tgc_progress_init(tgc_progress *p, FILE *out, int64_t total_steps, int64_t interval);
void tgc_progress_step(tgc_progress *p, const tgc_step_stats *s);
/* Ends a live line with a newline (before other output, or at the end). */
void tgc_progress_finish(tgc_progress *p);
/* Formats seconds as h:mm:ss (rounded down, negative as 0:00:00). */
size_t tgc_progress_format_eta(double seconds, char *buf, size_t cap);

#endif
