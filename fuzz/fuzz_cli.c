/* libFuzzer target for the command line (fuzz/run.sh): the input, split at
 * newlines and NULs, is the argument list of `tgc run`; parsing, the
 * cross-option checks and the learning-rate schedule (with its small
 * language, --lr-scheduler) may reject it, never with a crash, leak or
 * sanitizer report. Run with -close_fd_mask=2: the usage errors go to
 * stderr. */
#include <stdint.h>

#include "api/internal.h"
#include "cli/config.h"
#include "cli/overrides.h"
#include "fuzz_util.h"
#include "runtime/train/schedule.h"
#include "support/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAXARGS = 64 };
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAXARGS + 2];
    int argc = 0;
    argv[argc++] = "run";
    for (char *p = buf; argc < MAXARGS && p <= buf + size;) {
        size_t n = strcspn(p, "\n");
        p[n] = '\0';
        argv[argc++] = p;
        p += n + 1;
    }
    argv[argc] = NULL;

    tgc_options *o = NULL;
    if (tgc_options_new(&o) != TGC_OK) abort();
    const char *pos[4];
    int npos = 0, nsets = 0;
    cli_override sets[16];
    bool help = false;
    const tgc_config *c = api_options_config(o);
    if (cli_options_parse_cmd(o, argc, argv, NULL, pos, &npos, 4, sets, &nsets, 16, &help) == 0 &&
        tgc_config_check(c) == 0) {
        rt_schedule s;
        if (tgc_config_schedule(c, &s) == 0)
            for (int64_t step = 0; step < 4; step++) {
                volatile double lr = rt_schedule_lr(&s, step * 997), wd = rt_schedule_wd(&s, step * 997);
                (void)lr;
                (void)wd;
            }
        strbuf out;
        sb_init(&out);
        tgc_config_write(c, &out);
        sb_free(&out);
    }
    cli_overrides_free(sets, nsets); /* the parser's copies */
    tgc_options_free(o);
    free(buf);
    return 0;
}
