/* oneDNN's matmul (runtime/backend/onednn.h). The oneDNN 2.x C API from its
 * headers (Debian's libdnnl-dev), the library itself (libdnnl.so.2) opened
 * with dlopen: tgc links none of it and runs where it is missing. */
#define _GNU_SOURCE
#include "runtime/backend/onednn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/util.h"

#if TGC_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

/* The entry points used, resolved once. */
#define DNNL_FNS(X)                                                                                   \
    X(dnnl_version) X(dnnl_engine_create) X(dnnl_engine_destroy) X(dnnl_stream_create)                 \
    X(dnnl_stream_destroy) X(dnnl_stream_wait) X(dnnl_memory_desc_init_by_strides)                    \
    X(dnnl_memory_desc_get_size) X(dnnl_memory_create) X(dnnl_memory_destroy)                         \
    X(dnnl_memory_set_data_handle) X(dnnl_matmul_desc_init) X(dnnl_primitive_attr_create)             \
    X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_output_scales)                           \
    X(dnnl_primitive_attr_set_post_ops) X(dnnl_primitive_attr_set_scratchpad_mode)                    \
    X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_sum)                      \
    X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query_md)      \
    X(dnnl_primitive_create) X(dnnl_primitive_destroy) X(dnnl_primitive_execute)

static struct {
#define X(name) __typeof__(name) *name;
    DNNL_FNS(X)
#undef X
    const char *(*status2str)(dnnl_status_t);
    void *handle;
    char why[256], version[32];
} L;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    L.handle = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!L.handle) {
        snprintf(L.why, sizeof L.why, "cannot open oneDNN (libdnnl.so.2; Debian: libdnnl2): %s", dlerror());
        return;
    }
#define X(name)                                                                                          \
    if (!(*(void **)&L.name = dlsym(L.handle, #name))) {                                                 \
        snprintf(L.why, sizeof L.why, "oneDNN (libdnnl.so.2) lacks %s", #name);                          \
        dlclose(L.handle);                                                                               \
        L.handle = NULL;                                                                                 \
        return;                                                                                          \
    }
    DNNL_FNS(X)
#undef X
    *(void **)&L.status2str = dlsym(L.handle, "dnnl_status2str");
    const dnnl_version_t *v = L.dnnl_version();
    snprintf(L.version, sizeof L.version, "%d.%d.%d", v->major, v->minor, v->patch);
    if (v->major != DNNL_VERSION_MAJOR) { /* the 3.x API differs (no op descriptors) */
        snprintf(L.why, sizeof L.why, "oneDNN %s is not the %d.x tgc was built for", L.version, DNNL_VERSION_MAJOR);
        dlclose(L.handle);
        L.handle = NULL;
    }
}

static bool loaded(char *why, size_t cap)
{
    pthread_once(&load_once, load);
    if (!L.handle) snprintf(why, cap, "%s", L.why);
    return L.handle != NULL;
}

bool rt_onednn_available(char *why, size_t cap) { return loaded(why, cap); }

const char *rt_onednn_version(void)
{
    char why[256];
    return loaded(why, sizeof why) ? L.version : "";
}

struct rt_onednn_gemm {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst, pad; /* pad: the scratchpad (user mode: made here, once) */
    void *pad_buf;
};

static const char *status(dnnl_status_t s)
{
    static char buf[32];
    if (L.status2str) return L.status2str(s);
    snprintf(buf, sizeof buf, "status %d", (int)s);
    return buf;
}

#define TRY(call)                                                                     \
    do {                                                                              \
        dnnl_status_t st_ = (call);                                                   \
        if (st_ != dnnl_success) {                                                    \
            snprintf(why, cap, "%s: %s", #call, status(st_));                         \
            goto fail;                                                                \
        }                                                                             \
    } while (0)

/* The descriptor of a [batch,] rows x cols operand with row stride ld and
 * batch stride sb, transposed (column-major) when t. */
static dnnl_status_t operand_md(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int64_t batch, int64_t rows,
                                int64_t cols, bool t, int64_t ld, int64_t sb)
{
    dnnl_dims_t dims, strides;
    int nd = 0;
    if (batch > 1) dims[nd] = batch, strides[nd++] = sb;
    dims[nd] = rows, strides[nd++] = t ? 1 : ld;
    dims[nd] = cols, strides[nd++] = t ? ld : 1;
    return L.dnnl_memory_desc_init_by_strides(md, nd, dims, dt, strides);
}

rt_onednn_gemm *rt_onednn_gemm_new(const cg_gemm *g, char *why, size_t cap)
{
    if (!loaded(why, cap)) return NULL;
    rt_onednn_gemm *p = xcalloc(1, sizeof *p);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_data_type_t dt = g->dtype == IR_BF16 ? dnnl_bf16 : g->dtype == IR_F16 ? dnnl_f16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t mm;
    TRY(L.dnnl_engine_create(&p->engine, dnnl_cpu, 0));
    TRY(L.dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags));
    /* C[m, n] = A[m, k] B[k, n]: A stored [k, m] when ta, B [n, k] when tb. */
    TRY(operand_md(&a, dt, g->batch, g->m, g->k, g->ta, g->lda, g->stride_a));
    TRY(operand_md(&b, dt, g->batch, g->k, g->n, g->tb, g->ldb, g->stride_b));
    TRY(operand_md(&c, dt, g->batch, g->m, g->n, false, g->ldc, g->stride_c));
    TRY(L.dnnl_matmul_desc_init(&mm, &a, &b, NULL, &c));
    TRY(L.dnnl_primitive_attr_create(&attr));
    float alpha = (float)g->alpha;
    if (alpha != 1.0f) TRY(L.dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha));
    if (g->beta != 0.0) { /* dst = alpha A B + beta dst, accumulated in f32, rounded once */
        TRY(L.dnnl_post_ops_create(&po));
        TRY(L.dnnl_post_ops_append_sum(po, (float)g->beta));
        TRY(L.dnnl_primitive_attr_set_post_ops(attr, po));
    }
    TRY(L.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    TRY(L.dnnl_primitive_desc_create(&pd, &mm, attr, p->engine, NULL));
    TRY(L.dnnl_primitive_create(&p->prim, pd));
    const dnnl_memory_desc_t *pad = L.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t pad_bytes = pad ? L.dnnl_memory_desc_get_size(pad) : 0;
    if (pad_bytes) {
        p->pad_buf = aligned_alloc(64, (pad_bytes + 63) & ~(size_t)63);
        if (!p->pad_buf) {
            snprintf(why, cap, "out of memory allocating oneDNN's scratchpad (%zu bytes)", pad_bytes);
            goto fail;
        }
        TRY(L.dnnl_memory_create(&p->pad, pad, p->engine, p->pad_buf));
    }
    TRY(L.dnnl_memory_create(&p->src, &a, p->engine, DNNL_MEMORY_NONE));
    TRY(L.dnnl_memory_create(&p->wei, &b, p->engine, DNNL_MEMORY_NONE));
    TRY(L.dnnl_memory_create(&p->dst, &c, p->engine, DNNL_MEMORY_NONE));
    L.dnnl_primitive_desc_destroy(pd);
    L.dnnl_primitive_attr_destroy(attr);
    if (po) L.dnnl_post_ops_destroy(po);
    return p;
fail:
    if (pd) L.dnnl_primitive_desc_destroy(pd);
    if (attr) L.dnnl_primitive_attr_destroy(attr);
    if (po) L.dnnl_post_ops_destroy(po);
    rt_onednn_gemm_free(p);
    return NULL;
}

bool rt_onednn_gemm_run(rt_onednn_gemm *p, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                        size_t cap)
{
    (void)g;
    TRY(L.dnnl_memory_set_data_handle(p->src, (void *)a));
    TRY(L.dnnl_memory_set_data_handle(p->wei, (void *)b));
    TRY(L.dnnl_memory_set_data_handle(p->dst, c));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst},
                               {DNNL_ARG_SCRATCHPAD, p->pad}};
    TRY(L.dnnl_primitive_execute(p->prim, p->stream, p->pad ? 4 : 3, args));
    TRY(L.dnnl_stream_wait(p->stream));
    return true;
fail:
    return false;
}

void rt_onednn_gemm_free(rt_onednn_gemm *p)
{
    if (!p) return;
    if (p->prim) L.dnnl_primitive_destroy(p->prim);
    dnnl_memory_t mems[4] = {p->src, p->wei, p->dst, p->pad};
    for (int i = 0; i < 4; i++)
        if (mems[i]) L.dnnl_memory_destroy(mems[i]);
    if (p->stream) L.dnnl_stream_destroy(p->stream);
    if (p->engine) L.dnnl_engine_destroy(p->engine);
    free(p->pad_buf);
    free(p);
}

#else /* built without oneDNN's headers */

static const char no_headers[] = "tgc was built without oneDNN's headers (Debian: libdnnl-dev)";

bool rt_onednn_available(char *why, size_t cap)
{
    snprintf(why, cap, "%s", no_headers);
    return false;
}

const char *rt_onednn_version(void) { return ""; }

rt_onednn_gemm *rt_onednn_gemm_new(const cg_gemm *g, char *why, size_t cap)
{
    (void)g;
    snprintf(why, cap, "%s", no_headers);
    return NULL;
}

bool rt_onednn_gemm_run(rt_onednn_gemm *p, const cg_gemm *g, const void *a, const void *b, void *c, char *why,
                        size_t cap)
{
    (void)p, (void)g, (void)a, (void)b, (void)c;
    snprintf(why, cap, "%s", no_headers);
    return false;
}

void rt_onednn_gemm_free(rt_onednn_gemm *p) { (void)p; }
#endif
