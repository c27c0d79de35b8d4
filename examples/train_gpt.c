/* Trains a model (the sample GPT, samples/gpt.tg) a few steps through
 * tgc's C API (include/tgc.h, docs/api.md) and prints every step's loss.
 *
 *   train_gpt MODEL DATA [NAME=VALUE ...]
 *
 * NAME=VALUE sets the option the command line calls --NAME ("tp=2",
 * "train-iters=3", "set=layers=2"; a flag: "bf16=true"), so the same
 * options give `tgc run MODEL --data DATA --NAME VALUE ...`'s losses
 * (also under mpirun: one process per rank, "comm" auto). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tgc.h>

static int fail(const char *what)
{
    fprintf(stderr, "train_gpt: %s failed:\n%s\n", what, tgc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: train_gpt MODEL DATA [NAME=VALUE ...]\n");
        return 2;
    }
    tgc_options *opts;
    if (tgc_options_new(&opts) != TGC_OK) return fail("tgc_options_new");
    int rc = tgc_options_set(opts, "data", argv[2]) != TGC_OK;
    for (int i = 3; i < argc && !rc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "train_gpt: '%s': expected NAME=VALUE\n", argv[i]);
            rc = 2;
            break;
        }
        *eq = 0;
        rc = tgc_options_set(opts, argv[i], eq + 1) != TGC_OK;
    }
    tgc_plan *plan = NULL;
    tgc_trainer *tr = NULL;
    if (rc == 1) rc = fail("tgc_options_set");
    else if (!rc && tgc_compile_file(argv[1], opts, &plan) != TGC_OK) rc = fail("tgc_compile_file");
    else if (!rc && tgc_trainer_new(plan, NULL, &tr) != TGC_OK) rc = fail("tgc_trainer_new");
    /* One iteration per call, until the options' train-iters are done. */
    for (int64_t done = 0; !rc; done = tgc_trainer_iteration(tr)) {
        tgc_metrics m;
        if (tgc_trainer_step(tr, 1) != TGC_OK) rc = fail("tgc_trainer_step");
        else if (tgc_trainer_iteration(tr) == done) break;
        else if (!tgc_trainer_reports(tr)) continue; /* mpirun: another rank's process prints */
        else if (tgc_trainer_metrics(tr, 0, &m) != TGC_OK) rc = fail("tgc_trainer_metrics");
        else
            printf("iteration %lld loss %.17g grad_norm %.17g lr %.17g tokens %lld\n", (long long)m.iteration,
                   m.loss, m.grad_norm, m.lr, (long long)m.tokens);
    }
    if (tr && tgc_trainer_free(tr) != TGC_OK && !rc) rc = fail("tgc_trainer_free");
    tgc_plan_free(plan);
    tgc_options_free(opts);
    return rc;
}
