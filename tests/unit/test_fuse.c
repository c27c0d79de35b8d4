/* Fused kernels in codegen (codegen/fuse.c, docs/fusion.md) on hand-written
 * groups: a good group becomes one kernel whose intermediates get no
 * buffer, and every group that cannot be one kernel is refused with a
 * message naming the node and the reason (never a wrong kernel). The fuse
 * pass makes only good groups; these are what hand-written IR can ask. */
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "check.h"
#include "codegen/codegen.h"
#include "passes/pass.h"

#define HEAD "tgc-ir 1\nmodel \"fz\"\n"

/* Reads the IR, plans memory (keeping its fuse(N) annotations) and builds
 * the program; NULL with the messages in *errors (caller frees). */
static cg_program *build(const char *ir, ir_graph **gout, char **errors)
{
    capture c;
    cap_init(&c);
    ir_graph *g = ir_graph_read(ir, strlen(ir), "fz.ir", &c.d);
    const pass_info *memplan = pass_lookup("memplan");
    pass_ctx ctx = {.d = &c.d, .verify_each = true};
    cg_program *p = NULL;
    if (g && pass_run_list(g, &memplan, 1, &ctx, NULL, NULL)) p = cg_build(g, &c.d);
    *errors = strdup(cap_text(&c) ? cap_text(&c) : "");
    cap_free(&c);
    *gout = g;
    return p;
}

static void expect_error(const char *ir, const char *message)
{
    ir_graph *g;
    char *errors;
    cg_program *p = build(ir, &g, &errors);
    CHECK(g != NULL);
    CHECK(p == NULL);
    bool found = strstr(errors, message) != NULL;
    if (!found) fprintf(stderr, "expected '%s' in:\n%s", message, errors);
    CHECK(found);
    cg_program_free(p);
    ir_graph_free(g);
    free(errors);
}

/* add -> scale -> mean: the first two are one map kernel; %s is never stored. */
static void test_map_chain(void)
{
    const char *ir = HEAD "%a = param init=normal : f32[4, 8]\n%b = param init=normal : f32[4, 8]\n"
                          "%s = add(%a, %b) : f32[4, 8] fuse(0)\n%t = scale(%s) alpha=0.5 : f32[4, 8] fuse(0)\n"
                          "%loss = mean(%t) : f32[] loss\n";
    ir_graph *g;
    char *errors;
    cg_program *p = build(ir, &g, &errors);
    CHECK(p != NULL);
    if (p) {
        CHECK(p->nkernels == 2);
        CHECK(strstr(p->kernels[0]->comment, "fused kernel 0: %s = add, %t = scale") != NULL);
        CHECK(p->kernels[0]->kind == KK_MAP && p->kernels[0]->nout == 1);
        const ir_node *s = ir_graph_find(g, "s"), *t = ir_graph_find(g, "t");
        CHECK(s && s->mem == IR_MEM_NONE);
        CHECK(t && t->mem == IR_MEM_ACT);
        for (int a = 0; a < p->kernels[0]->nargs; a++) CHECK(p->binds[0][a].node != s->id);
    }
    cg_program_free(p);
    ir_graph_free(g);
    free(errors);
}

#define XW "%x = param init=normal : f32[4, 8]\n%w = param init=normal : f32[8, 8]\n"

int main(void)
{
    test_map_chain();
    expect_error(HEAD XW "%y = linear(%x, %w) : f32[4, 8] fuse(0)\n%z = scale(%y) alpha=2.0 : f32[4, 8] fuse(0)\n"
                         "%loss = mean(%z) : f32[] loss\n",
                 "tgc: error: codegen: fused kernel 0 cannot hold %y (linear): this op is not a generated "
                 "kernel (a GEMM, view, leaf or collective)");
    expect_error(HEAD XW "%g = param init=ones : f32[8]\n%b = param init=zeros : f32[8]\n"
                         "%n = layernorm(%x, %g, %b) : f32[4, 8] fuse(0)\n%m = softmax(%n) : f32[4, 8] fuse(0)\n"
                         "%loss = mean(%m) : f32[] loss\n",
                 "cannot hold %m (softmax): a fused kernel holds at most one reduction");
    expect_error(HEAD XW "%g = param init=ones : f32[8]\n%b = param init=zeros : f32[8]\n"
                         "%n = layernorm(%x, %g, %b) : f32[4, 8] fuse(0)\n"
                         "%m = permute(%n) perm=[1, 0] : f32[8, 4] fuse(0)\n%loss = mean(%m) : f32[] loss\n",
                 "cannot hold %m (permute): it reads the reduction's result away from the element the kernel writes");
    expect_error(HEAD XW "%s = mul(%x, %x) : f32[4, 8] fuse(0)\n%c = colsum(%s) : f32[8] fuse(0)\n"
                         "%u = mean(%s) : f32[] loss\n%v = mean(%c) : f32[] output\n",
                 "cannot hold %s (mul): it is read outside the group, and the kernel writes no element of its shape");
    expect_error(HEAD "%x = param init=normal : f32[2, 4, 4]\n"
                      "%p = softmax(%x) causal=true : f32[2, 4, 4] fuse(0)\n%q = add(%p, %x) : f32[2, 4, 4] fuse(0)\n"
                      "%loss = mean(%q) : f32[] loss\n",
                 "cannot hold %q (add): it is read outside the group, and the causal reduction writes zeros past each "
                 "row's limit where its value is not 0");
    expect_error(HEAD XW "%dy = param init=normal : f32[4, 8]\n%d = layernorm_dw(%dy, %x) : f32[8] fuse(0)\n"
                         "%e = scale(%d) alpha=2.0 : f32[8] fuse(0)\n%loss = mean(%e) : f32[] loss\n",
                 "cannot hold %d (layernorm_dw): its op takes more than one kernel");
    expect_error(HEAD XW "%s = mul(%x, %x) : f32[4, 8] fuse(0)\n%c = colsum(%s) : f32[8] fuse(0)\n"
                         "%loss = mean(%x) : f32[] loss\n",
                 "cannot hold %c (colsum): nothing the group computes is read outside it");
    CHECK_DONE();
}
