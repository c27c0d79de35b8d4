/* libFuzzer target for the IR reader (fuzz/run.sh).
 *
 * Any input may be rejected, but never with a crash, a leak, a hang or a
 * sanitizer report. An input that reads must also pass the verifier, and
 * its text must round-trip: print(read(print(g))) == print(g). The DOT and
 * JSON writers run on it too. */
#include <stdint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    diag d;
    diag_init(&d, fuzz_sink());
    ir_graph *g = ir_graph_read((const char *)data, size, "fuzz.ir", &d);
    if (g) fuzz_check_graph("fuzz_ir", g, &d);
    diag_free(&d);
    return 0;
}
