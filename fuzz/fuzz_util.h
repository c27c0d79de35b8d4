/* Shared by the libFuzzer targets: the diagnostics sink and the properties
 * every graph that is accepted must have. */
#ifndef TGC_FUZZ_UTIL_H
#define TGC_FUZZ_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"

static inline void fuzz_fail(const char *target, const char *what, const char *a, const char *b)
{
    fprintf(stderr, "%s: %s\n--- first print ---\n%s\n--- second print ---\n%s\n", target, what, a ? a : "",
            b ? b : "");
    abort();
}

/* Diagnostics go to /dev/null, opened once: the only state the harness
 * keeps between inputs. */
static inline FILE *fuzz_sink(void)
{
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    return devnull ? devnull : stderr;
}

/* An accepted graph verifies, its text reads back and prints the same
 * (print(read(print(g))) == print(g)), and DOT and JSON render; frees g. */
static inline void fuzz_check_graph(const char *target, ir_graph *g, diag *d)
{
    if (!ir_graph_verify(g, d)) fuzz_fail(target, "an accepted graph fails the verifier", NULL, NULL);
    char *p1 = ir_graph_print(g);
    ir_graph *g2 = ir_graph_read(p1, strlen(p1), "fuzz-print.ir", d);
    if (!g2) fuzz_fail(target, "the printed graph does not read back", p1, NULL);
    char *p2 = ir_graph_print(g2);
    if (strcmp(p1, p2) != 0) fuzz_fail(target, "print(read(print(g))) != print(g)", p1, p2);
    free(ir_graph_dot(g));
    free(ir_graph_json(g));
    free(p1);
    free(p2);
    ir_graph_free(g2);
    ir_graph_free(g);
}

/* Readers that take a path get the input through a file of their own in a
 * private directory (made once per process), named with `suffix` since
 * some formats are told apart by name (*.bin). Returns the path. */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char dir[64], path[128];
    if (!dir[0]) {
        strcpy(dir, "/tmp/tgc-fuzz-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    snprintf(path, sizeof path, "%s/input%s", dir, suffix);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    return path;
}

#endif
