/* libFuzzer target for the DSL front end (fuzz/run.sh).
 *
 * Any input may be rejected, but never with a crash, a leak, a hang or a
 * sanitizer report. A model that compiles must give a graph that passes
 * the verifier and whose text round-trips through the IR reader. */
#include <stdint.h>

#include "frontend/frontend.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    diag d;
    diag_init(&d, fuzz_sink());
    ir_graph *g = fe_compile("fuzz.tg", (const char *)data, size, NULL, 0, &d);
    if (g) fuzz_check_graph("fuzz_dsl", g, &d);
    diag_free(&d);
    return 0;
}
