/* Training logs: the JSON line of a step (exact text, round-tripping
 * numbers, null for non-finite), appending to a file, and the progress
 * line on a terminal and off one, with fixed timings. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/io/log.h"
#include "support/file.h"
#include "support/util.h"

static tgc_step_stats stats(int64_t step, double loss)
{
    return (tgc_step_stats){.step = step, .loss = loss, .lr = 6e-4, .grad_norm = 1.5, .tokens_per_s = 81920,
                            .step_ms = 100};
}

static void test_format(void)
{
    char buf[TGC_LOG_LINE_MAX];
    tgc_step_stats s = stats(12, 3.25);
    size_t n = tgc_log_format_step(&s, buf, sizeof buf);
    const char *want = "{\"step\":12,\"loss\":3.25,\"lr\":0.0006,\"grad_norm\":1.5,\"tokens_per_s\":81920.0,"
                       "\"step_ms\":100.0}\n";
    CHECK_STR(buf, want);
    CHECK(n == strlen(want));
    s.has_mfu = s.has_val_loss = s.has_tflops = true;
    s.mfu = 0.1;
    s.tflops = 0.25;
    s.val_loss = 1e-5;
    s.loss = NAN;
    s.grad_norm = INFINITY;
    tgc_log_format_step(&s, buf, sizeof buf);
    CHECK_STR(buf, "{\"step\":12,\"loss\":null,\"lr\":0.0006,\"grad_norm\":null,\"tokens_per_s\":81920.0,"
                   "\"step_ms\":100.0,\"tflops\":0.25,\"mfu\":0.1,\"val_loss\":1e-05}\n");
    /* The longest numbers still fit. */
    s = (tgc_step_stats){.step = INT64_MIN, .loss = -1.2345678901234567e-300, .lr = -2.2250738585072014e-308,
                         .grad_norm = 1.7976931348623157e308, .tokens_per_s = -2.2250738585072014e-308,
                         .step_ms = 4.9406564584124654e-324, .has_mfu = true, .mfu = -0.1234567890123456789,
                         .has_val_loss = true, .val_loss = 123456789012345678.0, .has_wd = true,
                         .wd = -1.2345678901234567e-300, .has_tflops = true, .tflops = -1.2345678901234567e-300,
                         .has_scale = true, .loss_scale = -1.2345678901234567e-300, .skipped = true};
    n = tgc_log_format_step(&s, buf, sizeof buf);
    CHECK(n < sizeof buf - 1 && buf[n - 1] == '\n' && buf[n - 2] == '}');
}

static void test_doubles(void)
{
    const double vals[] = {0.1, 1e-5, 3.0, -0.0, 2.0 / 3.0, 6e-4, 1e300, 4.9406564584124654e-324, 123456789.0,
                           -1.7976931348623157e308};
    char buf[40];
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        tgc_log_format_double(vals[i], buf, sizeof buf);
        CHECK(strtod(buf, NULL) == vals[i] && signbit(strtod(buf, NULL)) == signbit(vals[i]));
    }
    tgc_log_format_double(0.1, buf, sizeof buf);
    CHECK_STR(buf, "0.1");
    tgc_log_format_double(3, buf, sizeof buf);
    CHECK_STR(buf, "3.0");
    tgc_log_format_double(-INFINITY, buf, sizeof buf);
    CHECK_STR(buf, "null");
}

static void test_log_file(void)
{
    char dir[] = "/tmp/tgc_test_log_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    char path[128];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    diag d;
    diag_init(&d, stderr);
    tgc_log *log = tgc_log_open(path, &d);
    CHECK(log != NULL);
    tgc_step_stats s0 = stats(0, 10), s1 = stats(1, 9.5);
    CHECK(log && tgc_log_step(log, &s0) && tgc_log_step(log, &s1));
    CHECK(tgc_log_close(log, &d));
    log = tgc_log_open(path, &d); /* appends */
    tgc_step_stats s2 = stats(2, 9.0);
    CHECK(log && tgc_log_step(log, &s2));
    CHECK(tgc_log_close(log, &d));
    size_t n;
    char why[256];
    char *text = file_read(path, FILE_LOG, &n, why, sizeof why);
    CHECK_STR(text,
              "{\"step\":0,\"loss\":10.0,\"lr\":0.0006,\"grad_norm\":1.5,\"tokens_per_s\":81920.0,\"step_ms\":100.0}\n"
              "{\"step\":1,\"loss\":9.5,\"lr\":0.0006,\"grad_norm\":1.5,\"tokens_per_s\":81920.0,\"step_ms\":100.0}\n"
              "{\"step\":2,\"loss\":9.0,\"lr\":0.0006,\"grad_norm\":1.5,\"tokens_per_s\":81920.0,\"step_ms\":100.0}\n");
    free(text);
    CHECK(d.nerrors == 0);
    unlink(path);
    CHECK(rmdir(dir) == 0);

    /* A log that cannot be created is a reported error. */
    char *err = NULL;
    size_t errlen;
    FILE *mem = open_memstream(&err, &errlen);
    diag_init(&d, mem);
    CHECK(tgc_log_open("/nonexistent-dir/x.jsonl", &d) == NULL);
    fflush(mem);
    CHECK_STR(err, "/nonexistent-dir/x.jsonl: error: cannot open the log for appending: No such file or directory\n");
    fclose(mem);
    free(err);
    diag_free(&d);
}

static void test_progress(void)
{
    char *text = NULL;
    size_t len;
    FILE *mem = open_memstream(&text, &len);
    tgc_progress p;
    tgc_progress_init(&p, mem, 10, 4);
    CHECK(!p.tty);
    for (int64_t k = 1; k <= 10; k++) { /* iterations count from 1 */
        tgc_step_stats s = stats(k, 10.0 - 0.5 * (double)(k - 1));
        s.step_ms = 1000; /* 1 s per step: the ETA is the steps left */
        if (k == 10) { s.has_val_loss = true; s.val_loss = 5.25; }
        tgc_progress_step(&p, &s);
    }
    tgc_progress_finish(&p);
    fflush(mem);
    CHECK_STR(text, "step 1/10 | loss 10.0000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 1000.0 ms | ETA 0:00:09\n"
                    "step 4/10 | loss 8.5000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 1000.0 ms | ETA 0:00:06\n"
                    "step 8/10 | loss 6.5000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 1000.0 ms | ETA 0:00:02\n"
                    "step 10/10 | loss 5.5000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 1000.0 ms | val 5.2500 "
                    "| ETA 0:00:00\n");
    fclose(mem);
    free(text);

    /* On a terminal: one line rewritten in place, ended by a newline. */
    text = NULL;
    mem = open_memstream(&text, &len);
    tgc_progress_init(&p, mem, 0, 100);
    p.tty = true;
    for (int64_t k = 1; k <= 2; k++) {
        tgc_step_stats s = stats(k, 2.0);
        tgc_progress_step(&p, &s);
    }
    tgc_progress_finish(&p);
    tgc_progress_finish(&p); /* idempotent */
    fflush(mem);
    CHECK_STR(text, "\rstep 1 | loss 2.0000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 100.0 ms\x1b[K"
                    "\rstep 2 | loss 2.0000 | lr 6.000e-04 | norm 1.500 | 81920 tok/s | 100.0 ms\x1b[K\n");
    fclose(mem);
    free(text);

    char eta[32];
    tgc_progress_format_eta(3661.9, eta, sizeof eta);
    CHECK_STR(eta, "1:01:01");
    tgc_progress_format_eta(-5, eta, sizeof eta);
    CHECK_STR(eta, "0:00:00");
    tgc_progress_format_eta(100 * 3600.0 + 59, eta, sizeof eta);
    CHECK_STR(eta, "100:00:59");
    tgc_progress_format_eta(NAN, eta, sizeof eta);
    CHECK_STR(eta, "0:00:00");
}

int main(void)
{
    test_format();
    test_doubles();
    test_log_file();
    test_progress();
    CHECK_DONE();
}
