/* oneDNN's matmul (runtime/backend/onednn.h). */
#include "runtime/backend/onednn.h"

#include <stdio.h>

bool rt_onednn_available(char *why, size_t cap)
{
    snprintf(why, cap, "tgc was built without oneDNN's headers");
    return false;
}

const char *rt_onednn_version(void) { return ""; }

rt_onednn_gemm *rt_onednn_gemm_new(const cg_gemm *g, char *why, size_t cap)
{
    (void)g;
    snprintf(why, cap, "tgc was built without oneDNN's headers");
    return NULL;
}

bool rt_onednn_gemm_run(rt_onednn_gemm *p, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                        size_t cap)
{
    (void)p, (void)g, (void)a, (void)b, (void)c;
    snprintf(why, cap, "oneDNN is not available");
    return false;
}

void rt_onednn_gemm_free(rt_onednn_gemm *p) { (void)p; }
