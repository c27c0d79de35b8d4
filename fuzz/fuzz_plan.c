/* libFuzzer target for the plan reader (fuzz/run.sh).
 *
 * A plan ends in a checksum of everything before it, which random bytes
 * almost never match; so an input whose first byte is odd has that byte
 * dropped and a correct checksum line appended, and the reader's section
 * framing, the configuration lines and the IR inside are fuzzed too. Any
 * input may be rejected, never with a crash, leak, hang or sanitizer
 * report; a plan that reads has an IR that verifies and round-trips. */
#include <stdint.h>

#include "api/config.h"
#include "fuzz_util.h"
#include "runtime/plan.h"
#include "support/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    strbuf b;
    sb_init(&b);
    if (size && (data[0] & 1)) {
        for (size_t i = 1; i < size; i++) sb_putc(&b, (char)data[i]);
        uint64_t h = hash_bytes(b.s ? b.s : "", b.len, HASH_SEED);
        sb_printf(&b, "checksum %016llx\n", (unsigned long long)h);
    } else {
        for (size_t i = 0; i < size; i++) sb_putc(&b, (char)data[i]);
    }
    const char *path = fuzz_file((const uint8_t *)(b.s ? b.s : ""), b.len, ".plan");
    sb_free(&b);

    diag d;
    diag_init(&d, fuzz_sink());
    rt_plan *p = rt_plan_read(path, tgc_config_plan_schema(), &d);
    if (p) {
        /* What `tgc run PLAN` does next: the configuration lines, then
         * the IR. */
        tgc_config c;
        tgc_config_defaults(&c);
        char *cfg = p->config, *line = cfg;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            (void)tgc_config_read_line(&c, line);
            line = nl ? nl + 1 : NULL;
        }
        ir_graph *g = ir_graph_read(p->ir, strlen(p->ir), "fuzz-plan.ir", &d);
        if (g) fuzz_check_graph("fuzz_plan", g, &d);
        ir_graph *l = ir_graph_read(p->lowered, strlen(p->lowered), "fuzz-plan-lowered.ir", &d);
        if (l) fuzz_check_graph("fuzz_plan", l, &d);
        rt_plan_free(p);
    }
    diag_free(&d);
    return 0;
}
