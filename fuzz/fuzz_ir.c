/* libFuzzer target for the IR reader (fuzz/run.sh).
 *
 * Any input may be rejected, but never with a crash, a leak, a hang or a
 * sanitizer report. An input that reads must also pass the verifier, and
 * its text must round-trip: print(read(print(g))) == print(g). The DOT and
 * JSON writers run on it too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void fail(const char *what, const char *a, const char *b)
{
    fprintf(stderr, "fuzz_ir: %s\n--- first print ---\n%s\n--- second print ---\n%s\n", what, a ? a : "",
            b ? b : "");
    abort();
}

/* Diagnostics go to /dev/null, opened once: the only state the harness
 * keeps between inputs. */
static FILE *sink(void)
{
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    return devnull ? devnull : stderr;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    diag d;
    diag_init(&d, sink());
    ir_graph *g = ir_graph_read((const char *)data, size, "fuzz.ir", &d);
    if (g) {
        if (!ir_graph_verify(g, &d)) fail("a graph that reads fails the verifier", NULL, NULL);
        char *p1 = ir_graph_print(g);
        ir_graph *g2 = ir_graph_read(p1, strlen(p1), "fuzz-print.ir", &d);
        if (!g2) fail("the printed graph does not read back", p1, NULL);
        char *p2 = ir_graph_print(g2);
        if (strcmp(p1, p2) != 0) fail("print(read(print(g))) != print(g)", p1, p2);
        free(ir_graph_dot(g));
        free(ir_graph_json(g));
        free(p1);
        free(p2);
        ir_graph_free(g2);
        ir_graph_free(g);
    }
    diag_free(&d);
    return 0;
}
