/* The public C API (include/tgc.h) through the shared library: errors
 * come back as statuses and messages (the command line's text, file:line:col
 * for the DSL) and never end the process; a trainer's steps, metrics,
 * checkpoints and plan files agree with each other; every handle is freed
 * (built with AddressSanitizer: LeakSanitizer checks the whole process at
 * exit, and the test's own memory accesses).
 *
 *   test_api SAMPLES_DIR DATA_FILE WORK_DIR (a fresh directory is made in it) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK(strcmp(tgc_last_error(), "tgc: error: --tensor-model-parallel-size: 'two' is not a non-negative integer") == 0,
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
    CHECK(tgc_options_set(o, "fp16", "false") == TGC_OK && tgc_options_set(o, "output", "x.plan") == TGC_OK, "output");
    CHECK(tgc_compile_file(gpt, o, &p) == TGC_EUSAGE, "output refused");
    CHECK(strstr(tgc_last_error(), "--output x.plan is an option of the tgc compile command") != NULL, "%s",
          tgc_last_error());
    tgc_options_free(o);
    /* A missing model file and a misuse. */
    CHECK(tgc_compile_file("/nonexistent/model.tg", NULL, &p) == TGC_ERROR, "missing file");
    CHECK(strstr(tgc_last_error(), "cannot read '/nonexistent/model.tg'") != NULL, "%s", tgc_last_error());
    CHECK(tgc_compile_file(NULL, NULL, &p) == TGC_EINVAL, "NULL path");
    tgc_options_free(NULL);
    tgc_plan_free(NULL);
    CHECK(tgc_trainer_free(NULL) == TGC_OK, "free NULL");
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
    }
    tgc_plan_free(q);
    tgc_options_free(run);
    tgc_plan_free(p);
    tgc_options_free(o);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_api SAMPLES_DIR DATA_FILE WORK_DIR\n");
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
    test_training(gpt, argv[2], work);
    if (failures) fprintf(stderr, "test_api: %d checks failed\n", failures);
    else printf("test_api: every check passed (library %s)\n", tgc_version());
    return failures ? 1 : 0;
}
