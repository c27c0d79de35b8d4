/* The public C API (include/tgc.h) through the shared library: errors
 * come back as statuses and messages (the command line's text, file:line:col
 * for the DSL) and never end the process; a trainer's steps, metrics,
 * checkpoints and plan files agree with each other; every handle is freed
 * (built with AddressSanitizer: LeakSanitizer checks the whole process at
 * exit, and the test's own memory accesses).
 *
 * Generation: greedy and seeded tokens equal `tgc sample`'s (run as a
 * child, TGC the command) for the same model, weights and arguments, from
 * a model file and from a plan handle, through the KV cache and its
 * sliding window; the logits' argmax is the greedy token; its errors.
 *
 *   test_api SAMPLES_DIR DATA_FILE WORK_DIR TGC (a fresh directory is made in WORK_DIR)
 *   test_api --handles SAMPLES_DIR: only the handles' checks, double frees
 *     and uses after free included (api.handles: built without ASan) */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <tgc.h>

static int failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n  last error: %s\n", tgc_last_error());         \
            failures++;                                                        \
        }                                                                      \
    } while (0)

static tgc_options *opts_of(const char *const *kv)
{
    tgc_options *o;
    if (tgc_options_new(&o) != TGC_OK) return NULL;
    for (int i = 0; kv[i]; i += 2)
        if (tgc_options_set(o, kv[i], kv[i + 1]) != TGC_OK) {
            fprintf(stderr, "setting %s=%s: %s\n", kv[i], kv[i + 1], tgc_last_error());
            failures++;
        }
    return o;
}

static void test_errors(const char *gpt)
{
    tgc_plan *p = (tgc_plan *)1;
    /* A DSL error: the front end's file:line:col, the source line and the caret. */
    tgc_status st = tgc_compile_string("bad.tg", "hparam a = 1\ninput t: i32[a, bogus]\n", NULL, &p);
    CHECK(st == TGC_ERROR && p == NULL, "status %d", st);
    CHECK(strcmp(tgc_last_error(), "bad.tg:2:17: error: unknown name 'bogus'\ninput t: i32[a, bogus]\n"
                                   "                ^") == 0, "message '%s'", tgc_last_error());
    /* Options: an unknown name, a bad value, a bad choice, a flag's value. */
    tgc_options *o;
    CHECK(tgc_options_new(&o) == TGC_OK, "options");
    CHECK(tgc_options_set(o, "no-such-option", "1") == TGC_EUSAGE, "unknown");
    CHECK(strstr(tgc_last_error(), "unknown option '--no-such-option'") != NULL, "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "tp", "two") == TGC_EUSAGE, "bad int");
    CHECK(strcmp(tgc_last_error(), "tgc: error: --tensor-model-parallel-size: 'two' is not a positive integer") == 0,
          "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "optimizer", "lamb") == TGC_EUSAGE, "bad choice");
    CHECK(strstr(tgc_last_error(), "--optimizer: 'lamb' is not one of adamw|adam|sgd") != NULL, "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "fp16", "yes") == TGC_EUSAGE, "bad flag");
    CHECK(strstr(tgc_last_error(), "--fp16 is a flag") != NULL, "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "set", "layers") == TGC_EUSAGE, "bad --set");
    CHECK(strstr(tgc_last_error(), "--set 'layers': expected NAME=VALUE") != NULL, "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "lr", "1e-3") == TGC_OK && tgc_last_error()[0] == 0, "a good call clears the error");
    /* Options that do not go together, refused at compile time as the CLI does. */
    CHECK(tgc_options_set(o, "fp16", NULL) == TGC_OK && tgc_options_set(o, "bf16", "true") == TGC_OK, "flags");
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_EUSAGE && p == NULL, "fp16 + bf16");
    CHECK(strcmp(tgc_last_error(), "tgc: error: --fp16 and --bf16 exclude each other") == 0, "%s", tgc_last_error());
    /* "output" is checked before the passes; the reports' options are tgc_plan_report's. */
    CHECK(tgc_options_set(o, "fp16", "false") == TGC_OK && tgc_options_set(o, "output", "/nonexistent/x.plan") == TGC_OK,
          "output");
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_ERROR && p == NULL, "output's directory missing");
    CHECK(strstr(tgc_last_error(), "-o /nonexistent/x.plan: cannot be created: the directory '/nonexistent' does not "
                 "exist") != NULL, "%s", tgc_last_error());
    CHECK(tgc_options_set(o, "kernel-report", NULL) == TGC_OK, "kernel-report");
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_EUSAGE, "kernel-report refused");
    CHECK(strstr(tgc_last_error(), "--kernel-report is an option of the tgc compile command") != NULL, "%s",
          tgc_last_error());
    tgc_options_free(o);
    /* A missing model file and a misuse. */
    CHECK(tgc_compile_file("/nonexistent/model.tg", NULL, &p) == TGC_ERROR, "missing file");
    CHECK(strstr(tgc_last_error(), "cannot read '/nonexistent/model.tg'") != NULL, "%s", tgc_last_error());
    CHECK(tgc_compile_file(NULL, NULL, &p) == TGC_EINVAL, "NULL path");
    /* tgc_import_hf: a misuse, and a directory without a checkpoint, named. */
    tgc_import_info info;
    CHECK(tgc_import_hf(NULL, "m.tg", "w.safetensors", &info) == TGC_EINVAL, "import with a NULL dir");
    CHECK(strstr(tgc_last_error(), "tgc_import_hf: dir, model_out and weights_out must be given") != NULL, "%s",
          tgc_last_error());
    CHECK(tgc_import_hf("/nonexistent/hf", "/nonexistent/m.tg", "/nonexistent/w.safetensors", &info) == TGC_ERROR,
          "import of a missing directory");
    CHECK(strstr(tgc_last_error(), "/nonexistent") != NULL && info.layers == 0, "%s", tgc_last_error());
    /* tgc_plot: a misuse, and a missing log, named. */
    tgc_plot_info pinfo;
    CHECK(tgc_plot("log.jsonl", NULL, NULL, &pinfo) == TGC_EINVAL, "plot without out");
    CHECK(tgc_plot("/nonexistent/log.jsonl", "/nonexistent/p.svg", NULL, &pinfo) == TGC_ERROR, "plot of a missing log");
    CHECK(strstr(tgc_last_error(), "/nonexistent/log.jsonl") != NULL && pinfo.steps == 0, "%s", tgc_last_error());
    tgc_options_free(NULL);
    tgc_plan_free(NULL);
    CHECK(tgc_trainer_free(NULL) == TGC_OK, "free NULL");
}

/* Built with AddressSanitizer (CMake's TGC_SANITIZE: test_api is), where
 * reading a freed handle is itself the error ASan reports. */
#include "../unit/sanitizer.h"

#ifdef TEST_ASAN
/* An allocation the library cannot have comes back NULL (as malloc's does
 * without ASan) instead of ASan ending the test: test_input_sized. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

#define CHECK_STALE(call, fn, type)                                                                          \
    CHECK((call) == TGC_EINVAL && strcmp(tgc_last_error(), "tgc: error: " fn ": the " type " is not a live one " \
                                         "(freed already, or not a " type ")") == 0, "%s", #call)

/* A free of NULL succeeds and clears the last error, as every call does;
 * a handle that is not live (never one, or freed) is a TGC_EINVAL naming
 * the function, not a crash. */
static void test_handles(const char *gpt)
{
    tgc_plan *p;
    CHECK(tgc_compile_file("/nonexistent/model.tg", NULL, &p) == TGC_ERROR, "an error first");
    CHECK(tgc_trainer_free(NULL) == TGC_OK && tgc_last_error()[0] == 0, "tgc_trainer_free(NULL) clears the error");
    CHECK(tgc_compile_file("/nonexistent/model.tg", NULL, &p) == TGC_ERROR, "an error first");
    tgc_options_free(NULL);
    CHECK(tgc_last_error()[0] == 0, "tgc_options_free(NULL) clears the error");
    CHECK(tgc_compile_file("/nonexistent/model.tg", NULL, &p) == TGC_ERROR, "an error first");
    tgc_plan_free(NULL);
    tgc_generator_free(NULL);
    CHECK(tgc_last_error()[0] == 0, "tgc_plan_free(NULL), tgc_generator_free(NULL) clear the error");

    /* Foreign pointers: memory that never was a handle (valid memory, so this runs under ASan too). */
    static _Alignas(16) unsigned char junk[8192];
    memset(junk, 0x5a, sizeof junk);
    CHECK_STALE(tgc_trainer_step((tgc_trainer *)junk, 1), "tgc_trainer_step", "tgc_trainer");
    CHECK_STALE(tgc_trainer_free((tgc_trainer *)junk), "tgc_trainer_free", "tgc_trainer");
    CHECK(tgc_trainer_iteration((const tgc_trainer *)junk) == 0 && strstr(tgc_last_error(), "tgc_trainer_iteration"),
          "iteration");
    CHECK_STALE(tgc_options_set((tgc_options *)junk, "lr", "1"), "tgc_options_set", "tgc_options");
    CHECK_STALE(tgc_compile_file(gpt, (const tgc_options *)junk, &p), "tgc_compile_file", "tgc_options");
    CHECK_STALE(tgc_plan_save((const tgc_plan *)junk, "x.plan"), "tgc_plan_save", "tgc_plan");
    CHECK(tgc_plan_ranks((const tgc_plan *)junk) == 0 && strstr(tgc_last_error(), "tgc_plan_ranks"), "ranks");
    CHECK(tgc_generator_context((const tgc_generator *)junk) == 0 && strstr(tgc_last_error(), "tgc_generator_context"),
          "context");
    tgc_plan_free((tgc_plan *)junk);
    CHECK(strstr(tgc_last_error(), "tgc_plan_free: the tgc_plan is not a live one") != NULL, "plan free");
    tgc_options_free((tgc_options *)junk);
    tgc_generator_free((tgc_generator *)junk);
    CHECK(strstr(tgc_last_error(), "tgc_generator_free: the tgc_generator is not a live one") != NULL, "gen free");

#ifndef TEST_ASAN
    /* A double free and a use after free: without ASan only (the check reads
     * the freed handle's first bytes). */
    tgc_options *o;
    CHECK(tgc_options_new(&o) == TGC_OK, "options");
    tgc_options_free(o);
    CHECK_STALE(tgc_options_set(o, "lr", "1"), "tgc_options_set", "tgc_options");
    tgc_options_free(o);
    CHECK(strstr(tgc_last_error(), "tgc_options_free: the tgc_options is not a live one") != NULL, "double free");
    CHECK(tgc_compile_file(gpt, NULL, &p) == TGC_OK && p, "a plan");
    tgc_plan_free(p);
    CHECK(tgc_plan_ranks(p) == 0 && strstr(tgc_last_error(), "tgc_plan_ranks: the tgc_plan is not a live one"), "uaf");
    tgc_plan_free(p);
    CHECK(strstr(tgc_last_error(), "tgc_plan_free: the tgc_plan is not a live one") != NULL, "double free");
#endif
}

/* An allocation whose size the caller decides (--train-iters' record of
 * every step) is an error when it cannot be had, not the end of the process. */
static void test_input_sized(const char *gpt, const char *data)
{
    const char *const kv[] = {"set", "layers=1", "set", "hidden=32", "set", "seq=32", "set", "batch=2", "data", data,
                              "train-iters", "4000000000000000", NULL};
    tgc_options *o = opts_of(kv);
    tgc_plan *p = NULL;
    tgc_trainer *t = (tgc_trainer *)1;
    CHECK(o && tgc_compile_file(gpt, o, &p) == TGC_OK, "compile");
    CHECK(p && tgc_trainer_new(p, NULL, &t) == TGC_ERROR && t == NULL, "trainer of 4e15 iterations");
    CHECK(strcmp(tgc_last_error(), "tgc: error: --train-iters 4000000000000000: out of memory for the run's record "
                                   "of every step (512000000000000128 bytes)") == 0, "message");
    tgc_plan_free(p);
    tgc_options_free(o);
}

static const char *const small[] = {"set", "layers=1", "set", "hidden=32", "set", "seq=32", "set", "batch=2",
                                    "train-iters", "3", NULL};

/* Trains 3 iterations in one trainer (one call of 2, one of 1); the same
 * run from a checkpoint after 2; from a saved and loaded plan. */
static void test_training(const char *gpt, const char *data, const char *work)
{
    tgc_options *o = opts_of(small);
    tgc_options_set(o, "data", data);
    tgc_options_set(o, "backend", "sim");
    tgc_plan *p = NULL;
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_OK, "compile");
    if (!p) { tgc_options_free(o); return; }
    CHECK(tgc_plan_ranks(p) == 1, "ranks %d", tgc_plan_ranks(p));
    tgc_trainer *t = NULL;
    CHECK(tgc_trainer_new(p, NULL, &t) == TGC_OK, "trainer");
    if (!t) { tgc_plan_free(p); tgc_options_free(o); return; }
    tgc_metrics m[3], m2;
    CHECK(tgc_trainer_step(t, 2) == TGC_OK && tgc_trainer_iteration(t) == 2, "2 steps");
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work);
    CHECK(tgc_trainer_save_checkpoint(t, ckpt) == TGC_OK, "save");
    CHECK(tgc_trainer_step(t, 5) == TGC_OK && tgc_trainer_iteration(t) == 3, "stops at train-iters");
    CHECK(tgc_trainer_step(t, 1) == TGC_OK && tgc_trainer_iteration(t) == 3, "nothing past train-iters");
    for (int i = 0; i < 3; i++) CHECK(tgc_trainer_metrics(t, i + 1, &m[i]) == TGC_OK && m[i].iteration == i + 1, "m");
    CHECK(tgc_trainer_metrics(t, 4, &m2) == TGC_EINVAL, "no iteration 4");
    CHECK(isfinite(m[0].loss) && m[2].loss < m[0].loss && m[0].tokens == 64 && m[0].lr == 1e-3 && isnan(m[0].val_loss),
          "loss %g -> %g, tokens %lld", m[0].loss, m[2].loss, (long long)m[0].tokens);
    CHECK(tgc_trainer_free(t) == TGC_OK, "free");

    /* Resumed from the checkpoint: iteration 3 is the same. */
    CHECK(tgc_trainer_new(p, NULL, &t) == TGC_OK, "trainer 2");
    CHECK(tgc_trainer_load_checkpoint(t, ckpt) == TGC_OK && tgc_trainer_iteration(t) == 2, "load");
    CHECK(tgc_trainer_step(t, 1) == TGC_OK && tgc_trainer_metrics(t, 0, &m2) == TGC_OK, "resumed step");
    CHECK(m2.iteration == 3 && m2.loss == m[2].loss && m2.grad_norm == m[2].grad_norm,
          "resumed iteration %lld loss %.9g, uninterrupted %.9g", (long long)m2.iteration, m2.loss, m[2].loss);
    CHECK(tgc_trainer_free(t) == TGC_OK, "free 2");

    /* A plan file, loaded with a run-time option over it; a compiled-in one refused. */
    char plan[4200];
    snprintf(plan, sizeof plan, "%s/small.plan", work);
    CHECK(tgc_plan_save(p, plan) == TGC_OK, "plan save");
    tgc_options *run = opts_of((const char *const[]){"data", data, "backend", "cpu", NULL});
    tgc_plan *q = NULL;
    CHECK(tgc_plan_load(plan, run, &q) == TGC_OK, "plan load");
    if (q) {
        CHECK(tgc_trainer_new(q, NULL, &t) == TGC_OK && tgc_trainer_step(t, 1) == TGC_OK &&
              tgc_trainer_metrics(t, 1, &m2) == TGC_OK, "plan's step");
        CHECK(m2.loss == m[0].loss, "the loaded plan's loss %.9g, the compiled one's %.9g", m2.loss, m[0].loss);
        CHECK(tgc_trainer_free(t) == TGC_OK, "free 3");
        tgc_options *tp = opts_of((const char *const[]){"tp", "2", NULL});
        t = (tgc_trainer *)1;
        CHECK(tgc_trainer_new(q, tp, &t) == TGC_EUSAGE && t == NULL, "tp over a plan");
        CHECK(strstr(tgc_last_error(), "--tensor-model-parallel-size 2 (the plan's 1) is compiled into the plan") != NULL,
              "%s", tgc_last_error());
        tgc_options_free(tp);
        /* A missing data file: an error naming it, and the process goes on. */
        tgc_options *bad = opts_of((const char *const[]){"data", "/nonexistent/corpus.txt", NULL});
        CHECK(tgc_trainer_new(q, bad, &t) == TGC_ERROR, "missing data");
        CHECK(strstr(tgc_last_error(), "/nonexistent/corpus.txt") != NULL, "%s", tgc_last_error());
        tgc_options_free(bad);
        /* The text data's tokenizer is opened (not ignored): a missing
         * SentencePiece model is named. */
        bad = opts_of((const char *const[]){"tokenizer-type", "SentencePieceTokenizer", "tokenizer-model",
                                            "/nonexistent/spm.model", NULL});
        t = (tgc_trainer *)1;
        CHECK(tgc_trainer_new(q, bad, &t) == TGC_ERROR && t == NULL, "missing tokenizer model");
        CHECK(strstr(tgc_last_error(), "/nonexistent/spm.model") != NULL, "%s", tgc_last_error());
        tgc_options_free(bad);
    }
    tgc_plan_free(q);
    tgc_options_free(run);
    tgc_plan_free(p);
    tgc_options_free(o);
}

static char *run_argv(const char *tgc, const char *work, const char *cmd, char **args);
/* `TGC ARGS...`'s standard output, or NULL when it does not exit 0. */
static char *run_tgc(const char *tgc, const char *work, char **args) { return run_argv(tgc, work, NULL, args); }

/* A stream's text so far (open_memstream), as a string. */
static char *mem_text(FILE *f, char **buf)
{
    fflush(f);
    return *buf ? *buf : "";
}

/* The new calls of the API: the diagnostics echoed, options read back,
 * words, reset, checks; misuse of each returns TGC_EINVAL with a message. */
static void test_options_calls(const char *gpt, const char *work)
{
    /* Diagnostics echoed as they are made: the same text as the last error. */
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    tgc_set_diagnostics(mem);
    tgc_options *o = NULL;
    CHECK(tgc_options_new(&o) == TGC_OK, "options");
    CHECK(tgc_options_set(o, "tp", "two") == TGC_EUSAGE, "bad int");
    char *echoed = mem_text(mem, &buf);
    CHECK(strncmp(echoed, tgc_last_error(), strlen(tgc_last_error())) == 0 && echoed[strlen(tgc_last_error())] == '\n',
          "echoed '%s'", echoed);
    tgc_set_diagnostics(NULL);
    size_t before = len;
    CHECK(tgc_options_set(o, "tp", "three") == TGC_EUSAGE && (fflush(mem), len == before), "not echoed after NULL");
    fclose(mem);
    free(buf);

    /* Values read back as the command line writes them; defaults; unset paths. */
    CHECK(tgc_options_set(o, "tp", "2") == TGC_OK && strcmp(tgc_options_get(o, "tp"), "2") == 0, "tp");
    CHECK(strcmp(tgc_options_get(o, "tensor-model-parallel-size"), "2") == 0, "by the long name");
    CHECK(strcmp(tgc_options_get(o, "lr"), "0.001") == 0, "lr default %s", tgc_options_get(o, "lr"));
    CHECK(strcmp(tgc_options_get(o, "quiet"), "true") == 0 && !tgc_options_given(o, "quiet"), "the library's quiet");
    CHECK(strcmp(tgc_options_get(o, "backend"), "cpu") == 0, "backend");
    CHECK(tgc_options_get(o, "data") == NULL && !tgc_options_given(o, "data"), "no data");
    CHECK(tgc_options_given(o, "tp") && tgc_options_given(o, "tensor-model-parallel-size"), "given");
    CHECK(tgc_options_get(o, "no-such") == NULL && strstr(tgc_last_error(), "no such option"), "unknown get");
    CHECK(tgc_options_get(NULL, "tp") == NULL && strstr(tgc_last_error(), "tgc_options_get"), "NULL get");
    CHECK(tgc_options_reset(o, "quiet") == TGC_OK && strcmp(tgc_options_get(o, "quiet"), "false") == 0, "reset quiet");
    CHECK(tgc_options_reset(o, "tp") == TGC_OK && strcmp(tgc_options_get(o, "tp"), "1") == 0 &&
          !tgc_options_given(o, "tp"), "reset tp");
    CHECK(tgc_options_reset(o, "no-such") == TGC_EINVAL && tgc_options_reset(NULL, "tp") == TGC_EINVAL, "reset misuse");
    /* Words: a blend; misuse; an option of one value. */
    const char *blend[] = {"0.3", "a.bin", "0.7", "b.bin"};
    CHECK(tgc_options_set_words(o, "data-path", blend, 4) == TGC_OK &&
          strcmp(tgc_options_get(o, "data-path"), "0.3 a.bin 0.7 b.bin") == 0, "data-path %s",
          tgc_options_get(o, "data-path"));
    CHECK(tgc_options_set_words(o, "data-path", blend, 0) == TGC_EINVAL, "no words");
    CHECK(tgc_options_set_words(o, "data-path", NULL, 1) == TGC_EINVAL, "NULL words");
    CHECK(tgc_options_set_words(o, "tp", blend, 1) == TGC_EUSAGE && strstr(tgc_last_error(), "takes one value"),
          "tp is no words: %s", tgc_last_error());
    CHECK(tgc_options_set_words(o, "no-such", blend, 1) == TGC_EUSAGE, "unknown words");
    CHECK(tgc_options_set_origin(o, NULL) == TGC_EINVAL && tgc_options_set_origin(o, "from here") == TGC_OK, "origin");
    /* Cross-option checks, as tgc compile makes them first. */
    CHECK(tgc_options_check(o) == TGC_OK, "checks pass: %s", tgc_last_error());
    CHECK(tgc_options_set(o, "fp16", NULL) == TGC_OK && tgc_options_set(o, "bf16", NULL) == TGC_OK, "flags");
    CHECK(tgc_options_check(o) == TGC_EUSAGE && strcmp(tgc_last_error(), "tgc: error: --fp16 and --bf16 exclude each "
          "other") == 0, "%s", tgc_last_error());
    CHECK(tgc_options_check(NULL) == TGC_EINVAL, "NULL check");
    tgc_options_free(o);
    /* tgc_run_check: one of a plan and options; a launcher-less world fits. */
    int leave = 5;
    CHECK(tgc_run_check(NULL, NULL, &leave) == TGC_EINVAL && leave == 0, "run check of nothing");
    o = opts_of((const char *const[]){"micro-batch-size", "2", "global-batch-size", "3", NULL});
    CHECK(tgc_run_check(NULL, o, &leave) == TGC_EUSAGE && leave == 0, "bad batch");
    CHECK(strstr(tgc_last_error(), "--global-batch-size 3") != NULL, "%s", tgc_last_error());
    tgc_options_free(o);
    o = opts_of(small);
    CHECK(tgc_run_check(NULL, o, &leave) == TGC_OK && leave == 0, "run check: %s", tgc_last_error());
    CHECK(tgc_file_is_plan(gpt) == 0 && tgc_file_is_plan(NULL) == 0, "a model is no plan");
    tgc_options_free(o);
    (void)work;
}

/* The plan's figures (also as `tgc compile -o` prints them) and reports. */
static void test_plan_calls(const char *gpt, const char *work, const char *tgc)
{
    char plan[4200];
    snprintf(plan, sizeof plan, "%s/figures.plan", work);
    tgc_options *o = opts_of(small);
    tgc_options_set(o, "output", plan);
    tgc_plan *p = NULL, *q = NULL;
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_OK && p, "compile -o");
    CHECK(tgc_file_is_plan(plan) == 1, "the plan was written");
    tgc_options_reset(o, "output");
    CHECK(tgc_compile_file(gpt, o, &q) == TGC_OK && q, "compile");
    tgc_plan_figures f = {0}, g = {0};
    CHECK(p && tgc_plan_figures_get(p, &f) == TGC_OK && q && tgc_plan_figures_get(q, &g) == TGC_OK, "figures");
    CHECK(f.kernels > 0 && f.gemms > 0 && f.param_bytes > 0 && f.act_bytes > 0 && f.region_bytes > 0 &&
          memcmp(&f, &g, sizeof f) == 0, "figures: %d kernels, %d GEMMs; the same without -o (%d, %d)", f.kernels,
          f.gemms, g.kernels, g.gemms);
    CHECK(tgc_plan_figures_get(NULL, &f) == TGC_EINVAL && tgc_plan_figures_get(p, NULL) == TGC_EINVAL, "misuse");
    /* The same figures as the command prints. */
    char line[4800];
    snprintf(line, sizeof line, "%s: %d kernels and %d GEMMs per step; parameters %lld bytes, activations %lld bytes "
             "(peak of the plan), workspace %lld bytes\n", plan, f.kernels, f.gemms, (long long)f.param_bytes,
             (long long)f.act_bytes, (long long)f.workspace_bytes);
    char *args[] = {"compile", (char *)gpt, "--set", "layers=1", "--set", "hidden=32", "--set", "seq=32", "--set",
                    "batch=2", "--train-iters", "3", "-o", plan, NULL};
    char *out = run_tgc(tgc, work, args);
    CHECK(out && strncmp(out, line, strlen(line)) == 0, "tgc compile printed '%s', want '%s'", out ? out : "", line);
    free(out);
    /* Reports: the fusion report of a compiled model; the CUDA ones need backend cuda. */
    char *rb = NULL;
    size_t rl = 0;
    FILE *r = open_memstream(&rb, &rl);
    CHECK(q && tgc_plan_report(q, TGC_REPORT_FUSION, NULL, r) == TGC_OK, "fusion report");
    fflush(r);
    CHECK(rb && strstr(rb, "kernel") != NULL, "fusion report text '%s'", rb ? rb : "");
    CHECK(tgc_plan_report(q, TGC_REPORT_GEMMS, NULL, r) == TGC_EUSAGE && strstr(tgc_last_error(), "backend cuda"),
          "gemm report on cpu: %s", tgc_last_error());
    CHECK(tgc_plan_report(q, (tgc_report_kind)9, NULL, r) == TGC_EINVAL, "bad kind");
    CHECK(tgc_plan_report(NULL, TGC_REPORT_FUSION, NULL, r) == TGC_EINVAL &&
          tgc_plan_report(q, TGC_REPORT_FUSION, NULL, NULL) == TGC_EINVAL, "NULL report");
    tgc_plan *l = NULL;
    CHECK(tgc_plan_load(plan, NULL, &l) == TGC_OK, "load");
    CHECK(l && tgc_plan_report(l, TGC_REPORT_FUSION, NULL, r) == TGC_EUSAGE && strstr(tgc_last_error(), "plan file"),
          "fusion report of a plan file: %s", tgc_last_error());
    tgc_plan_free(l);
    fclose(r);
    free(rb);
    tgc_options_set(o, "backend", "cuda");
    tgc_plan *c = NULL;
    rb = NULL;
    r = open_memstream(&rb, &rl);
    CHECK(tgc_compile_file(gpt, o, &c) == TGC_OK, "compile for cuda: %s", tgc_last_error());
#ifdef TGC_TEST_HAVE_CUDA
    CHECK(c && tgc_plan_report(c, TGC_REPORT_GEMMS, NULL, r) == TGC_OK, "gemm report: %s", tgc_last_error());
    fflush(r);
    CHECK(rb && strstr(rb, "cuBLASLt") != NULL, "gemm report text '%.200s'", rb ? rb : "");
#else
    /* A build without the toolkit refuses the cuBLASLt report in exactly these words, and writes no report. */
    CHECK(c && tgc_plan_report(c, TGC_REPORT_GEMMS, NULL, r) == TGC_ERROR, "gemm report without the toolkit");
    CHECK(strcmp(tgc_last_error(), "tgc: error: cuBLASLt: tgc was built without the CUDA toolkit") == 0,
          "the refusal: '%s'", tgc_last_error());
    fflush(r);
    CHECK(!rb || !*rb, "a report was written without the toolkit: '%.200s'", rb ? rb : "");
#endif
    fclose(r);
    free(rb);
    tgc_plan_free(c);
    tgc_plan_free(p);
    tgc_plan_free(q);
    tgc_options_free(o);
}

/* tgc_trainer_run: every remaining iteration, the losses of step by step. */
static void test_trainer_run(const char *gpt, const char *data)
{
    tgc_options *o = opts_of(small);
    tgc_options_set(o, "data", data);
    tgc_plan *p = NULL;
    tgc_trainer *a = NULL, *b = NULL;
    int sig = 7;
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_OK, "compile");
    CHECK(p && tgc_trainer_new(p, NULL, &a) == TGC_OK && tgc_trainer_new(p, NULL, &b) == TGC_OK, "trainers");
    if (a && b) {
        CHECK(tgc_trainer_reports(a) == 1 && tgc_trainer_reports(NULL) == 0, "one process reports");
        CHECK(tgc_trainer_step(a, 1) == TGC_OK && tgc_trainer_run(a, &sig) == TGC_OK && sig == 0 &&
              tgc_trainer_iteration(a) == 3, "run after a step: iteration %lld", (long long)tgc_trainer_iteration(a));
        CHECK(tgc_trainer_run(a, NULL) == TGC_OK && tgc_trainer_iteration(a) == 3, "nothing left");
        for (int i = 0; i < 3; i++) CHECK(tgc_trainer_step(b, 1) == TGC_OK, "step %d", i);
        for (int i = 1; i <= 3; i++) {
            tgc_metrics ma, mb;
            CHECK(tgc_trainer_metrics(a, i, &ma) == TGC_OK && tgc_trainer_metrics(b, i, &mb) == TGC_OK &&
                  ma.loss == mb.loss && ma.grad_norm == mb.grad_norm, "iteration %d: run's loss equals the steps'", i);
        }
    }
    CHECK(tgc_trainer_run(NULL, &sig) == TGC_EINVAL && sig == 0, "NULL run");
    CHECK(tgc_trainer_free(a) == TGC_OK && tgc_trainer_free(b) == TGC_OK, "free");
    tgc_plan_free(p);
    tgc_options_free(o);
}

extern char **environ;

/* `TGC sample ARGS...`'s standard output (its stderr to WORK/sample.err);
 * NULL when it does not exit 0. */
static char *run_argv(const char *tgc, const char *work, const char *cmd, char **args)
{
    char outp[4200], errp[4200];
    snprintf(outp, sizeof outp, "%s/sample.out", work);
    snprintf(errp, sizeof errp, "%s/sample.err", work);
    char *argv[40] = {(char *)tgc, (char *)cmd};
    int n = cmd ? 2 : 1;
    for (int i = 0; args[i] && n < 39; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, tgc, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (rc != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s %s failed (spawn %d, status %d): see %s\n", tgc, cmd ? cmd : args[0], rc, status, errp);
        return NULL;
    }
    FILE *f = fopen(outp, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t got = fread(buf, 1, (1 << 20) - 1, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static char *run_sample(const char *tgc, const char *work, char **args) { return run_argv(tgc, work, "sample", args); }

/* "1,2,3\n" -> ids; their count. */
static int64_t parse_ids(const char *s, int32_t *ids, int64_t cap)
{
    int64_t n = 0;
    while (*s && *s != '\n' && n < cap) {
        char *end;
        ids[n++] = (int32_t)strtol(s, &end, 10);
        if (end == s) return -1;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int same_tokens(const tgc_generation *g, const int32_t *want, int64_t n)
{
    if (g->ntokens != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (g->tokens[i] != want[i]) return 0;
    return 1;
}

/* The tokens `tgc sample --temperature T --top-k K --seed S` prints for
 * ids through the model small_model and its weights, against the
 * generator's. */
static void check_against_sample(tgc_generator *g, const char *what, const char *tgc, const char *work,
                                 const char *gpt, const char *weights, const int32_t *prompt, int64_t np, int64_t n,
                                 const char *temp, const char *topk, const char *seed)
{
    char ids[256] = "";
    for (int64_t i = 0; i < np; i++)
        snprintf(ids + strlen(ids), sizeof ids - strlen(ids), "%s%d", i ? "," : "", prompt[i]);
    char ntok[32];
    snprintf(ntok, sizeof ntok, "%lld", (long long)n);
    char *args[] = {(char *)gpt, "--set", "layers=1", "--set", "hidden=32", "--set", "seq=32", "--weights",
                    (char *)weights, "--prompt-tokens", ids, "--tokens", ntok, "--temperature", (char *)temp,
                    "--top-k", (char *)topk, "--seed", (char *)seed, NULL};
    char *out = run_sample(tgc, work, args);
    CHECK(out != NULL, "tgc sample ran (%s)", what);
    if (!out) return;
    int32_t want[256];
    int64_t nw = parse_ids(out, want, 256);
    CHECK(nw == np + n, "%s: tgc sample printed %lld ids: '%s'", what, (long long)nw, out);
    tgc_generation r;
    tgc_status st = tgc_generate(g, NULL, prompt, np, n, atof(temp), atoll(topk), (uint64_t)atoll(seed), &r);
    CHECK(st == TGC_OK && r.nprompt == np && same_tokens(&r, want, nw), "%s: tgc_generate's tokens equal tgc "
          "sample's '%s' (status %d, %lld tokens)", what, out, st, (long long)r.ntokens);
    tgc_generation_free(&r);
    free(out);
}

static void test_generation(const char *gpt, const char *work, const char *tgc)
{
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work); /* test_training's checkpoint of iteration 2 */
    tgc_options *o = opts_of((const char *const[]){"set", "layers=1", "set", "hidden=32", "set", "seq=32", NULL});
    tgc_generator *g = NULL;
    CHECK(tgc_generator_new(gpt, ckpt, o, 0, &g) == TGC_OK && g, "generator");
    if (!g) { tgc_options_free(o); return; }
    CHECK(tgc_generator_context(g) == 32 && tgc_generator_vocab_size(g) == 256 && tgc_generator_tokenizer(g) == NULL,
          "context %lld, vocabulary %lld", (long long)tgc_generator_context(g), (long long)tgc_generator_vocab_size(g));
    /* 5 + 40 tokens: past the 32 positions, the window slides. */
    const int32_t prompt[] = {84, 104, 101, 32, 116};
    check_against_sample(g, "greedy", tgc, work, gpt, ckpt, prompt, 5, 40, "0", "0", "1");
    check_against_sample(g, "seeded top-k", tgc, work, gpt, ckpt, prompt, 5, 12, "0.8", "5", "7");
    /* A text prompt's bytes are its tokens; the text is the tokens' bytes. */
    tgc_generation a, b;
    CHECK(tgc_generate(g, "The t", NULL, 0, 6, 0, 0, 1, &a) == TGC_OK && a.nprompt == 5 && a.ntokens == 11 &&
          a.text && a.text_len == 11 && memcmp(a.text, "The t", 5) == 0, "text prompt");
    CHECK(tgc_generate(g, NULL, prompt, 5, 6, 0, 0, 1, &b) == TGC_OK && same_tokens(&a, b.tokens, b.ntokens),
          "text and ids prompts");
    for (int64_t i = 0; a.text && i < a.ntokens; i++)
        CHECK((unsigned char)a.text[i] == (unsigned)a.tokens[i], "byte %lld", (long long)i);
    /* The logits of the prompt: the last row's argmax is the greedy token. */
    float *lg = NULL;
    CHECK(tgc_generator_logits(g, prompt, 5, &lg) == TGC_OK && lg, "logits");
    if (lg && b.tokens) {
        int best = 0;
        for (int i = 1; i < 256; i++)
            if (lg[4 * 256 + i] > lg[4 * 256 + best]) best = i;
        CHECK(best == b.tokens[5], "argmax %d, greedy %d", best, b.tokens[5]);
    }
    /* ... and equal to tgc sample --logits-out's, bit for bit (the file's one
     * f32 tensor is its last n x vocab x 4 bytes). */
    char lo[4200];
    snprintf(lo, sizeof lo, "%s/logits.safetensors", work);
    char *args[] = {(char *)gpt, "--set", "layers=1", "--set", "hidden=32", "--set", "seq=32", "--weights", ckpt,
                    "--prompt-tokens", "84,104,101,32,116", "--tokens", "0", "--logits-out", lo, NULL};
    char *printed = run_sample(tgc, work, args);
    FILE *f = printed ? fopen(lo, "rb") : NULL;
    float want[5 * 256];
    CHECK(f && fseek(f, -(long)sizeof want, SEEK_END) == 0 && fread(want, sizeof want, 1, f) == 1, "read %s", lo);
    CHECK(lg && memcmp(lg, want, sizeof want) == 0, "tgc_generator_logits equal tgc sample --logits-out's");
    if (f) fclose(f);
    free(printed);
    free(lg);
    /* The same model as a plan handle (compiled for training, batch 2): the same tokens. */
    tgc_options *po = opts_of(small);
    tgc_plan *p = NULL;
    tgc_generator *gp = NULL;
    tgc_generation c = {0};
    CHECK(tgc_compile_file(gpt, po, &p) == TGC_OK, "compile");
    CHECK(p && tgc_generator_new_plan(p, ckpt, NULL, 0, &gp) == TGC_OK, "generator of a plan");
    tgc_plan_free(p); /* the generator keeps a copy */
    CHECK(gp && tgc_generate(gp, NULL, prompt, 5, 6, 0, 0, 1, &c) == TGC_OK && same_tokens(&c, b.tokens, b.ntokens),
          "the plan's tokens");
    tgc_generation_free(&c);
    tgc_generator_free(gp);
    tgc_options_free(po);
    /* Without the KV cache: the same greedy tokens. */
    CHECK(tgc_generator_new(gpt, ckpt, o, TGC_GENERATE_NO_KV_CACHE, &gp) == TGC_OK, "no KV cache");
    CHECK(gp && tgc_generate(gp, NULL, prompt, 5, 6, 0, 0, 1, &c) == TGC_OK && same_tokens(&c, b.tokens, b.ntokens),
          "no KV cache's tokens");
    tgc_generation_free(&c);
    tgc_generator_free(gp);
    tgc_generation_free(&a);
    tgc_generation_free(&b);

    /* Errors: statuses and messages, the generator usable after each. */
    const int32_t outside[] = {84, 300};
    CHECK(tgc_generate(g, NULL, outside, 2, 3, 0, 0, 1, &a) == TGC_ERROR && a.tokens == NULL, "outside the vocabulary");
    CHECK(strstr(tgc_last_error(), "token 300 (at 1) is outside model") != NULL, "%s", tgc_last_error());
    CHECK(tgc_generate(g, NULL, prompt, 5, 3, -1, 0, 1, &a) == TGC_EUSAGE, "negative temperature");
    CHECK(strstr(tgc_last_error(), "temperature -1") != NULL, "%s", tgc_last_error());
    CHECK(tgc_generate(g, NULL, prompt, 5, 3, 0, -2, 1, &a) == TGC_EUSAGE, "negative top_k");
    CHECK(tgc_generate(g, "", NULL, 0, 3, 0, 0, 1, &a) == TGC_EUSAGE, "empty prompt");
    CHECK(strstr(tgc_last_error(), "the prompt is empty") != NULL, "%s", tgc_last_error());
    CHECK(tgc_generate(g, "x", prompt, 5, 3, 0, 0, 1, &a) == TGC_EINVAL, "text and tokens");
    int32_t many[40] = {0};
    CHECK(tgc_generator_logits(g, many, 40, &lg) == TGC_ERROR && lg == NULL, "logits past the context");
    CHECK(strstr(tgc_last_error(), "more than the model's 32 positions") != NULL, "%s", tgc_last_error());
    CHECK(tgc_generate(g, NULL, prompt, 5, 2, 0, 0, 1, &a) == TGC_OK && a.ntokens == 7, "usable after errors");
    tgc_generation_free(&a);
    tgc_generator_free(g);
    g = (tgc_generator *)1;
    CHECK(tgc_generator_new(gpt, "/nonexistent/weights.safetensors", o, 0, &g) == TGC_ERROR && g == NULL,
          "missing weights");
    CHECK(strstr(tgc_last_error(), "/nonexistent/weights.safetensors") != NULL, "%s", tgc_last_error());
    CHECK(tgc_generator_new("/nonexistent/model.tg", ckpt, o, 0, &g) == TGC_ERROR, "missing model");
    CHECK(strstr(tgc_last_error(), "cannot read '/nonexistent/model.tg'") != NULL, "%s", tgc_last_error());
    tgc_options *tp = opts_of((const char *const[]){"tp", "2", "lr", "1e-3", NULL});
    CHECK(tgc_generator_new(gpt, ckpt, tp, 0, &g) == TGC_EUSAGE, "training options refused");
    CHECK(strstr(tgc_last_error(), "--tensor-model-parallel-size, --lr are not options of generation") != NULL, "%s",
          tgc_last_error());
    tgc_options_free(tp);
    tgc_options *big = opts_of((const char *const[]){"set", "layers=2", "set", "hidden=32", "set", "seq=32", NULL});
    CHECK(tgc_generator_new(gpt, ckpt, big, 0, &g) == TGC_ERROR, "weights of another model");
    tgc_options_free(big);
    CHECK(tgc_generator_new(gpt, ckpt, o, 4, &g) == TGC_EUSAGE, "unknown flag");
    CHECK(tgc_generate(NULL, "x", NULL, 0, 1, 0, 0, 1, &a) == TGC_EINVAL, "NULL generator");
    tgc_generator_free(NULL);
    tgc_options_free(o);
}

/* What a streaming generation's callback saw. */
typedef struct seen {
    int prompts, encoded, tokens, stop_after, ntoks;
    int32_t toks[128];
    char text[512];
    size_t len;
} seen;

static int on_event(void *user, tgc_generate_event ev, const int32_t *tokens, int64_t n, const char *text, size_t len)
{
    seen *s = user;
    if (ev == TGC_GENERATE_ENCODED) s->encoded++;
    else if (ev == TGC_GENERATE_PROMPT) s->prompts++;
    else s->tokens++;
    for (int64_t i = 0; ev != TGC_GENERATE_ENCODED && i < n && s->ntoks < 128; i++) s->toks[s->ntoks++] = tokens[i];
    if (ev != TGC_GENERATE_ENCODED && text && s->len + len < sizeof s->text) {
        memcpy(s->text + s->len, text, len);
        s->len += len;
    }
    return s->stop_after && s->tokens >= s->stop_after;
}

/* tgc_generate_ex: the callback sees the prompt and each token (their
 * text the generation's), the figures, --check-kv-cache and --logits-out. */
static void test_streaming(const char *gpt, const char *work)
{
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work);
    tgc_options *o = opts_of((const char *const[]){"set", "layers=1", "set", "hidden=32", "set", "seq=32", NULL});
    tgc_generator *g = NULL;
    CHECK(tgc_generator_new(gpt, ckpt, o, TGC_GENERATE_CHECK_KV_CACHE, &g) == TGC_OK && g, "generator");
    if (!g) { tgc_options_free(o); return; }
    tgc_generator_info in;
    CHECK(tgc_generator_info_get(g, &in) == TGC_OK && in.context == 32 && in.vocab == 256 && in.kv_cache &&
          in.check_kv_cache && in.tokenizer_origin == NULL && in.params > 0 && strcmp(in.backend, "cpu") == 0 &&
          strstr(in.weights, "ckpt") != NULL, "info: context %lld, backend %s", (long long)in.context, in.backend);
    CHECK(tgc_generator_info_get(NULL, &in) == TGC_EINVAL && tgc_generator_info_get(g, NULL) == TGC_EINVAL, "misuse");
    seen sn = {0};
    char lo[4200];
    snprintf(lo, sizeof lo, "%s/stream.safetensors", work);
    tgc_generate_args args = {.text = "The t", .n = 40, .temperature = 0, .seed = 1, .logits_out = lo,
                              .fn = on_event, .user = &sn};
    tgc_generation r;
    tgc_generate_stats st;
    CHECK(tgc_generate_ex(g, &args, &r, &st) == TGC_OK, "streamed generation");
    CHECK(sn.encoded == 0 && sn.prompts == 1 && sn.tokens == 40, "events: %d encoded, %d prompts, %d tokens",
          sn.encoded, sn.prompts, sn.tokens);
    CHECK(r.ntokens == 45 && r.text && sn.len == r.text_len && memcmp(sn.text, r.text, sn.len) == 0,
          "the streamed text is the generation's");
    for (int i = 0; i < 45 && r.tokens; i++) CHECK(sn.toks[i] == r.tokens[i], "token %d", i);
    CHECK(st.done && st.made == 40 && st.prefills >= 2 && st.checked == 40 && st.check_ok && st.max_diff <= st.tol &&
          st.seconds > 0, "stats: made %lld, prefills %lld (the window slid), checked %lld, max diff %g",
          (long long)st.made, (long long)st.prefills, (long long)st.checked, st.max_diff);
    /* --logits-out's file holds tgc_generator_logits' numbers. */
    float *lg = NULL;
    FILE *f = fopen(lo, "rb");
    float want[5 * 256];
    CHECK(f && fseek(f, -(long)sizeof want, SEEK_END) == 0 && fread(want, sizeof want, 1, f) == 1, "read %s", lo);
    if (f) fclose(f);
    CHECK(tgc_generator_logits(g, r.tokens, 5, &lg) == TGC_OK && lg && memcmp(lg, want, sizeof want) == 0,
          "logits_out equals tgc_generator_logits");
    free(lg);
    tgc_generation_free(&r);
    /* The callback stops it: an error naming the stop, the tokens so far kept. */
    sn = (seen){.stop_after = 3};
    args.logits_out = NULL;
    CHECK(tgc_generate_ex(g, &args, &r, &st) == TGC_ERROR && r.ntokens == 8 && !st.done, "stopped: %lld tokens",
          (long long)r.ntokens);
    CHECK(strstr(tgc_last_error(), "the callback stopped the generation after token 8") != NULL, "%s",
          tgc_last_error());
    tgc_generation_free(&r);
    /* The prompt's name in messages. */
    const int32_t outside[] = {84, 300};
    args = (tgc_generate_args){.prompt_tokens = outside, .nprompt = 2, .n = 1, .prompt_name = "--prompt-tokens"};
    CHECK(tgc_generate_ex(g, &args, &r, &st) == TGC_ERROR && strncmp(tgc_last_error(), "tgc: error: --prompt-tokens: "
          "token 300", 30) == 0, "%s", tgc_last_error());
    CHECK(tgc_generate_ex(g, NULL, &r, &st) == TGC_EINVAL && tgc_generate_ex(NULL, &args, &r, NULL) == TGC_EINVAL &&
          tgc_generate_ex(g, &args, NULL, NULL) == TGC_EINVAL, "misuse");
    tgc_generator_free(g);
    g = (tgc_generator *)1;
    CHECK(tgc_generator_new(gpt, ckpt, o, TGC_GENERATE_CHECK_KV_CACHE | TGC_GENERATE_NO_KV_CACHE, &g) == TGC_EUSAGE &&
          g == NULL && strstr(tgc_last_error(), "drop TGC_GENERATE_NO_KV_CACHE"), "check without the cache: %s",
          tgc_last_error());
    tgc_options_free(o);
}

/* The byte tokenizer of no options; a GPT-2 BPE tokenizer missing its
 * merges refused by name. */
static void test_tokenizer(const char *work)
{
    tgc_tokenizer *t = NULL;
    CHECK(tgc_tokenizer_open(NULL, &t) == TGC_OK && t, "bytes");
    if (t) {
        CHECK(strcmp(tgc_tokenizer_type(t), "ByteTokenizer") == 0 && tgc_tokenizer_vocab_size(t) == 256 &&
              tgc_tokenizer_eod(t) == 256, "%s %lld %lld", tgc_tokenizer_type(t),
              (long long)tgc_tokenizer_vocab_size(t), (long long)tgc_tokenizer_eod(t));
        int32_t *ids = NULL;
        int64_t n = 0;
        char *text = NULL;
        size_t len = 0;
        CHECK(tgc_tokenizer_encode(t, "h\xc3\xa9!", 4, &ids, &n) == TGC_OK && n == 4 && ids[1] == 0xc3, "encode");
        CHECK(ids && tgc_tokenizer_decode(t, ids, n, &text, &len) == TGC_OK && len == 4 &&
              strcmp(text, "h\xc3\xa9!") == 0, "decode");
        free(ids);
        free(text);
    }
    tgc_tokenizer_free(t);
    tgc_options *o = opts_of((const char *const[]){"tokenizer-type", "GPT2BPETokenizer", "vocab-file", "vocab.json",
                                                   NULL});
    t = (tgc_tokenizer *)1;
    CHECK(tgc_tokenizer_open(o, &t) == TGC_EUSAGE && t == NULL, "no merges");
    CHECK(strstr(tgc_last_error(), "--merge-file") != NULL, "%s", tgc_last_error());
    CHECK(tgc_tokenizer_check(o) == TGC_EUSAGE && strstr(tgc_last_error(), "--merge-file") != NULL,
          "checked without reading: %s", tgc_last_error());
    CHECK(tgc_tokenizer_check(NULL) == TGC_OK && tgc_last_error()[0] == 0, "no options: bytes");
    tgc_options_free(o);
    o = opts_of((const char *const[]){"tokenizer-type", "SentencePieceTokenizer", "tokenizer-model",
                                      "/nonexistent/spm.model", NULL});
    CHECK(tgc_tokenizer_open(o, &t) == TGC_ERROR && t == NULL, "missing model");
    CHECK(strstr(tgc_last_error(), "/nonexistent/spm.model") != NULL, "%s", tgc_last_error());
    tgc_options_free(o);
    tgc_tokenizer_free(NULL);
    /* An id that would size a 16 GiB table: an error with its reason, the program goes on. */
    char vocab[4200], merges[4200];
    snprintf(vocab, sizeof vocab, "%s/huge.vocab.json", work);
    snprintf(merges, sizeof merges, "%s/huge.merges.txt", work);
    FILE *f = fopen(vocab, "w");
    if (f) { fputs("{\"a\": 0, \"zz\": 2147483647}\n", f); fclose(f); }
    f = fopen(merges, "w");
    if (f) { fputs("#version: 0.2\n", f); fclose(f); }
    o = opts_of((const char *const[]){"tokenizer-type", "GPT2BPETokenizer", "vocab-file", vocab, "merge-file", merges,
                                      NULL});
    CHECK(tgc_tokenizer_open(o, &t) == TGC_ERROR && t == NULL, "an id of 2147483647 in a 2-entry vocabulary");
    CHECK(strstr(tgc_last_error(), "has id 2147483647, beyond the vocabulary's 2 entries") != NULL, "%s",
          tgc_last_error());
    tgc_options_free(o);
}

/* The developer commands' calls (tgc check, dump-ir, plan, data, inspect,
 * export) into a memory stream, their args structs' size checked, and the
 * option table a command line scans by. */
static char *captured(FILE *f, char **buf)
{
    fclose(f);
    return *buf ? *buf : "";
}

/* One thread's tgc_planner_report of model (NULL: the usage error) into a
 * memory stream of its own. */
typedef struct plan_job {
    const tgc_options *o;
    const char *model;
    char *text;
    tgc_status status;
} plan_job;

static void *plan_thread(void *arg)
{
    plan_job *j = arg;
    size_t len = 0;
    FILE *f = open_memstream(&j->text, &len);
    if (!f) return NULL;
    tgc_planner_args pa = TGC_PLANNER_ARGS_INIT;
    pa.model = j->model;
    for (int k = 0; k < 3; k++) j->status = tgc_planner_report(j->o, &pa, f);
    fclose(f);
    return NULL;
}

static void test_command_calls(const char *gpt, const char *data, const char *work)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tgc_options *o = opts_of((const char *const[]){"set", "layers=1", NULL});
    tgc_check_args ca = TGC_CHECK_ARGS_INIT;
    ca.model = gpt;
    ca.params = 1;
    CHECK(tgc_check(o, &ca, f) == TGC_OK, "tgc_check");
    char *text = captured(f, &buf);
    CHECK(strstr(text, "gpt: ok: 1 layers") && strstr(text, "decay"), "check's lines: %s", text);
    free(buf);
    ca.size = 3; /* not the struct's */
    CHECK(tgc_check(o, &ca, stdout) == TGC_EINVAL, "tgc_check with a bad args size");
    CHECK(strstr(tgc_last_error(), "args->size"), "%s", tgc_last_error());
    /* An older caller's shorter struct: what it lacks is zero (no params listed). */
    ca.size = offsetof(tgc_check_args, params);
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_check(o, &ca, f) == TGC_OK, "tgc_check with a shorter struct");
    text = captured(f, &buf);
    CHECK(strncmp(text, "gpt: ok: 1 layers", 17) == 0, "a shorter struct's check: %s", text);
    free(buf);

    tgc_dump_ir_args da = TGC_DUMP_IR_ARGS_INIT;
    da.model = gpt;
    da.after = "lower";
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_dump_ir(o, &da, f) == TGC_OK, "tgc_dump_ir --after lower");
    text = captured(f, &buf);
    CHECK(strncmp(text, "tgc-ir", 6) == 0, "dump-ir's text IR: %.60s", text);
    free(buf);
    da.after = "no-such-pass";
    CHECK(tgc_dump_ir(o, &da, stdout) == TGC_EUSAGE, "dump-ir of an unknown pass");
    CHECK(strstr(tgc_last_error(), "unknown pass 'no-such-pass'"), "%s", tgc_last_error());

    tgc_planner_args pa = TGC_PLANNER_ARGS_INIT;
    pa.model = gpt;
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_planner_report(o, &pa, f) == TGC_OK, "tgc_planner_report");
    text = captured(f, &buf);
    CHECK(strncmp(text, "tgc plan: gpt", 13) == 0 && strstr(text, "memory per rank"), "plan: %.80s", text);
    free(buf);
    /* Calls on other threads (one at a time, docs/api.md) write their own
     * streams, and the last error of a thread that ends is freed with it
     * (LeakSanitizer's check at exit). */
    plan_job jobs[2] = {{o, gpt, NULL, 0}, {o, NULL, NULL, 0}};
    for (int k = 0; k < 2; k++) {
        pthread_t th;
        CHECK(pthread_create(&th, NULL, plan_thread, &jobs[k]) == 0, "pthread_create");
        pthread_join(th, NULL);
    }
    CHECK(jobs[0].status == TGC_OK && jobs[0].text && strncmp(jobs[0].text, "tgc plan: gpt", 13) == 0,
          "the threaded plan: %d %.80s", (int)jobs[0].status, jobs[0].text ? jobs[0].text : "");
    CHECK(jobs[1].status == TGC_EUSAGE && jobs[1].text && !strstr(jobs[1].text, "memory per rank"),
          "the threaded plan without a model: %d %.80s", (int)jobs[1].status, jobs[1].text ? jobs[1].text : "");
    free(jobs[0].text);
    free(jobs[1].text);
    pa.model = NULL;
    CHECK(tgc_planner_report(o, &pa, stdout) == TGC_EUSAGE, "plan without a model");

    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/readme", work);
    tgc_data_prep_args pr = TGC_DATA_PREP_ARGS_INIT;
    pr.inputs = (const char *const[]){data, NULL};
    pr.output = prefix;
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_data_prep(&pr, f) == TGC_OK, "tgc_data_prep");
    text = captured(f, &buf);
    CHECK(strstr(text, "1 documents") && strstr(text, "wrote"), "prep: %s", text);
    free(buf);
    tgc_data_view_args va = TGC_DATA_VIEW_ARGS_INIT;
    va.path = prefix;
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_data_info(&va, f) == TGC_OK, "tgc_data_info");
    text = captured(f, &buf);
    CHECK(strstr(text, "format: megatron") && strstr(text, "documents: 1"), "info: %s", text);
    free(buf);
    va.count = 3;
    buf = NULL;
    f = open_memstream(&buf, &len);
    CHECK(tgc_data_dump(&va, f) == TGC_OK, "tgc_data_dump");
    text = captured(f, &buf);
    int a, b, c;
    CHECK(sscanf(text, "%d %d %d", &a, &b, &c) == 3 && !strchr(text, '\n')[1], "dump of 3 tokens: %s", text);
    free(buf);

    tgc_inspect_args ia = TGC_INSPECT_ARGS_INIT;
    ia.plan = gpt; /* a model, not a plan */
    CHECK(tgc_inspect(&ia, stdout) == TGC_ERROR, "inspect of a model");
    tgc_export_args ea = TGC_EXPORT_ARGS_INIT;
    ea.ckpt = "/nonexistent/ckpt";
    ea.out = "/nonexistent/w.safetensors";
    ea.dtype = "bf16";
    CHECK(tgc_export(NULL, &ea, stderr) == TGC_EUSAGE, "export's --dtype without --format hf");
    CHECK(strstr(tgc_last_error(), "belong to --format hf"), "%s", tgc_last_error());
    tgc_options_free(o);

    /* The option table: every row described, found by its name and alias. */
    int rows = tgc_option_count(), flags = 0;
    CHECK(rows > 50, "%d rows", rows);
    for (int i = 0; i < rows; i++) {
        tgc_option_info info;
        CHECK(tgc_option_info_get(i, &info) == TGC_OK && info.name && info.help, "row %d", i);
        CHECK(tgc_option_find(info.name) == i && (!info.alias || tgc_option_find(info.alias) == i), "%s", info.name);
        CHECK(info.use >= TGC_OPTION_RUNTIME && info.use <= TGC_OPTION_COMPILE, "%s's use", info.name);
        flags += info.kind == TGC_OPTION_FLAG;
    }
    CHECK(flags > 0 && tgc_option_info_get(rows, &(tgc_option_info){0}) == TGC_EINVAL, "past the table");
    CHECK(tgc_option_find("tp") == tgc_option_find("tensor-model-parallel-size"), "tp's alias");
    CHECK(strcmp(tgc_model_flag(0), "num-layers") == 0 && !tgc_model_flag(1000), "the model flags");
    char switches[128] = "";
    int nflags = 0;
    for (int i = 0; tgc_model_flag(i); i++, nflags++)
        if (tgc_model_flag_is_switch(i))
            snprintf(switches + strlen(switches), sizeof switches - strlen(switches), "%s%s", *switches ? " " : "",
                     tgc_model_flag(i));
    CHECK(strcmp(switches, "use-rope-scaling add-qkv-bias qk-layernorm") == 0 && !tgc_model_flag_is_switch(nflags),
          "the switches among the model flags: %s", switches);
    {
        tgc_options *so = NULL;
        CHECK(tgc_options_new(&so) == TGC_OK, "options for the switch");
        CHECK(tgc_options_set(so, "use-rope-scaling", NULL) == TGC_OK &&
              tgc_options_set(so, "use-rope-scaling", "false") == TGC_OK, "a switch takes NULL and \"false\"");
        CHECK(tgc_options_set(so, "use-rope-scaling", "2") == TGC_EUSAGE &&
              strstr(tgc_last_error(), "--use-rope-scaling is a switch"), "a switch refuses a value: %s",
              tgc_last_error());
        tgc_options_free(so);
    }
    CHECK(tgc_pass_name(0) && !tgc_pass_name(1000), "the passes");
    int64_t n;
    double x;
    CHECK(tgc_parse_i64("-12", &n) && n == -12 && !tgc_parse_i64("1.5", &n) && tgc_parse_double("1e-3", &x) &&
          x == 1e-3 && !tgc_parse_double("inf", &x), "the table's numbers");
    CHECK(strcmp(tgc_tokenizer_type_parse("gpt2"), "GPT2BPETokenizer") == 0 && !tgc_tokenizer_type_parse("bert"),
          "tokenizer names");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--handles") == 0) { /* test_api_handles: built without ASan */
        char gpt[4096];
        snprintf(gpt, sizeof gpt, "%s/gpt.tg", argv[2]);
        test_handles(gpt);
        if (failures) fprintf(stderr, "test_api --handles: %d checks failed\n", failures);
        return failures ? 1 : 0;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: test_api SAMPLES_DIR DATA_FILE WORK_DIR TGC\n");
        return 2;
    }
    char gpt[4096];
    snprintf(gpt, sizeof gpt, "%s/gpt.tg", argv[1]);
    char work[4096];
    snprintf(work, sizeof work, "%s/test_api.XXXXXX", argv[3]);
    if (!mkdtemp(work)) {
        perror(work);
        return 1;
    }
    test_errors(gpt);
    test_handles(gpt);
    test_input_sized(gpt, argv[2]);
    test_training(gpt, argv[2], work);
    test_generation(gpt, work, argv[4]);
    test_streaming(gpt, work);
    test_options_calls(gpt, work);
    test_plan_calls(gpt, work, argv[4]);
    test_trainer_run(gpt, argv[2]);
    test_tokenizer(work);
    test_command_calls(gpt, argv[2], work);
    if (failures) fprintf(stderr, "test_api: %d checks failed\n", failures);
    else printf("test_api: every check passed (library %s)\n", tgc_version());
    return failures ? 1 : 0;
}
