/* cuDNN's fused attention, opened with dlopen (runtime/backend/cudnn.h,
 * docs/attention.md "cuDNN").
 *
 * The graphs, in cuDNN's backend API (every tensor [b, heads, rows, cols],
 * strides of tgc's contiguous buffers; K and V enter transposed by their
 * strides, K^T = [b, g, d, s_k]):
 *
 *   forward   S = Q K^T; S *= scale; [causal: S = row >= col ? S : -inf]
 *             M = max_j S; E = exp(S - M); Z = sum_j E; lse = M + log Z
 *             P = E / Z (bf16/f16); O = P V
 *   backward  D = sum_d(dO * O) * 1
 *             S as above; P = exp(S - lse)
 *             dV = P^T dO; dP = (dO V^T) * 1; dS = (dP - D) * P * scale
 *             dK = dS^T Q; dQ = dS K
 *
 * the pattern of cuDNN's fused flash attention (the frontend's SDPA node
 * builds the same ops; the multiplications by 1 are its dropout's places,
 * kept because the engines match the pattern). With grouped-query heads
 * (g < n) the products read K and V broadcast over each group's n/g query
 * heads, and dK, dV are [b, n, s_k, d] products summed over the group. The
 * lse is cuDNN's softmax statistics, max + log(sum exp): the natural-log
 * row log-sum-exp that tgc's own kernels keep, so a forward of either and a
 * backward of the other agree. */
#include "runtime/backend/cudnn.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/pass.h"
#include "support/util.h"

/* ---- the choice (no library, no device) ----------------------------------------- */

int rt_attention_backend(const ir_node *n)
{
    int b = PASS_ATTENTION_TGC;
    if (n->op == IR_OP_ATTENTION || n->op == IR_OP_ATTENTION_BACK)
        TGC_ASSERT(pass_attention_backend_parse(ir_attr_sym(n, "backend"), &b));
    return b;
}

bool rt_dnn_attn_supported(const kattn *A, ir_dtype io, ir_dtype lse_t, char *why, size_t n)
{
    if (io != IR_BF16 && io != IR_F16)
        snprintf(why, n, "its q, k and v are %s: cuDNN's fused attention takes bf16 or f16 (train with --bf16 or "
                 "--fp16)", ir_dtype_name(io));
    else if (lse_t != IR_F32) snprintf(why, n, "its log-sum-exp is %s, not f32", ir_dtype_name(lse_t));
    else if (A->p > 0)
        snprintf(why, n, "it has dropout p=%g: cuDNN's dropout draws other masks than tgc's Philox by global element "
                 "index, which fused, unfused and every partition share", A->p);
    else if (A->mask >= 0)
        snprintf(why, n, "it has a padding mask: cuDNN's takes sequence lengths and fills -inf where tgc's "
                 "softmax fills -10000");
    else if (A->pos_offset) snprintf(why, n, "it reads a KV cache (pos_offset)");
    else if (A->causal && A->sq != A->sk)
        snprintf(why, n, "its causal mask has s_q=%lld queries over s_k=%lld keys (cuDNN's causal graph here takes "
                 "s_q = s_k)", (long long)A->sq, (long long)A->sk);
    else if (A->d % 8 || A->dv % 8 || A->d > 128 || A->dv > 128 || A->d < 8 || A->dv < 8)
        snprintf(why, n, "its head dim is d=%lld (dv=%lld): cuDNN's fused attention takes multiples of 8 up to 128",
                 (long long)A->d, (long long)A->dv);
    else if (A->g < 1 || A->n % A->g)
        snprintf(why, n, "%lld query heads do not divide into %lld key/value heads", (long long)A->n, (long long)A->g);
    else return true;
    return false;
}

/* The attention parameters of instruction i when it is the forward or the
 * dK/dV pass of a fused attention (the two that cuDNN replaces), else NULL. */
static const kattn *attn_of(const cg_program *p, int i, ir_dtype *io, ir_dtype *lse_t)
{
    const cg_instr *in = &p->instrs[i];
    if (in->kind != CG_KERNEL) return NULL;
    const kernel *k = p->kernels[in->kernel];
    if (k->kind != KK_ATTN || (k->attn.pass != KATT_FWD && k->attn.pass != KATT_DKV)) return NULL;
    *io = k->args[k->attn.q].dtype;
    *lse_t = k->args[k->attn.lse].dtype;
    return &k->attn;
}

bool rt_dnn_plan_check(const ir_graph *g, const cg_program *p, const char *backend, bool cuda, diag *d)
{
    bool any = false;
    for (int i = 0; i < g->nnodes && !any; i++) any = rt_attention_backend(g->nodes[i]) == PASS_ATTENTION_CUDNN;
    if (!any) return true;
    if (!cuda) {
        diag_error_plain(d, "--attention-backend cudnn: cuDNN's fused attention runs on --backend cuda, not %s (the "
                         "IR's attention pass ran with backend=cudnn; use auto or tgc here)", backend);
        return false;
    }
    int bad = 0;
    const ir_node *n = NULL;
    char why[320], first_why[320];
    bool *seen = xcalloc((size_t)g->nnodes + 1, sizeof *seen);
    for (int i = 0; i < p->ninstrs; i++) {
        ir_dtype io, lse_t;
        const kattn *A = attn_of(p, i, &io, &lse_t);
        const ir_node *f = g->nodes[p->instrs[i].node];
        if (!A || rt_attention_backend(f) != PASS_ATTENTION_CUDNN || rt_dnn_attn_supported(A, io, lse_t, why, sizeof why))
            continue;
        /* The backward's parameters are its forward's: the forward is named
         * and counted. */
        if (f->op == IR_OP_ATTENTION_BACK && f->nsrc > 4) f = f->src[4];
        if (seen[f->id]) continue;
        seen[f->id] = true;
        if (bad++ == 0) {
            n = f;
            snprintf(first_why, sizeof first_why, "%s", why);
        }
    }
    free(seen);
    if (!bad) return true;
    char more[64] = "";
    if (bad > 1) snprintf(more, sizeof more, " (and %d more attention ops)", bad - 1);
    src_loc loc = {n->loc.file, n->loc.line, n->loc.col};
    if (loc.line > 0)
        diag_error(d, loc, "--attention-backend cudnn cannot run attention %s: %s%s; --attention-backend auto runs "
                   "tgc's kernel there", n->name, first_why, more);
    else
        diag_error_plain(d, "--attention-backend cudnn cannot run attention %s: %s%s; --attention-backend auto runs "
                         "tgc's kernel there", n->name, first_why, more);
    return false;
}

#ifndef TGC_HAVE_CUDNN

/* ---- built without cuDNN's headers ------------------------------------------------ */

static const char no_dnn[] = "cuDNN: tgc was built without cuDNN's headers (cudnn_graph.h)";

bool rt_dnn_load(diag *d)
{
    if (d) diag_error_plain(d, "%s", no_dnn);
    return false;
}
long rt_dnn_version(void) { return 0; }
bool rt_dnn_attn_ops_check(const kattn *A, ir_dtype io, bool backward, diag *d)
{
    (void)A, (void)io, (void)backward;
    return rt_dnn_load(d);
}
rt_dnn *rt_dnn_new(void *stream, int cc_major, diag *d)
{
    (void)stream, (void)cc_major;
    rt_dnn_load(d);
    return NULL;
}
void rt_dnn_free(rt_dnn *h) { (void)h; }
const char *rt_dnn_error(const rt_dnn *h)
{
    (void)h;
    return no_dnn;
}
rt_dnn_call *rt_dnn_call_new(rt_dnn *h, const kattn *A, ir_dtype io, bool backward, size_t max_ws, char *why,
                             size_t n)
{
    (void)h, (void)A, (void)io, (void)backward, (void)max_ws;
    snprintf(why, n, "%s", no_dnn);
    return NULL;
}
size_t rt_dnn_call_workspace(const rt_dnn_call *c, size_t *zero_at, size_t *zero_bytes)
{
    (void)c;
    *zero_at = *zero_bytes = 0;
    return 0;
}
void rt_dnn_call_describe(const rt_dnn_call *c, char *buf, size_t n)
{
    (void)c;
    snprintf(buf, n, "%s", no_dnn);
}
int rt_dnn_call_run(rt_dnn *h, rt_dnn_call *c, void *const *ptrs, void *ws)
{
    (void)h, (void)c, (void)ptrs, (void)ws;
    return -1;
}
void rt_dnn_call_free(rt_dnn_call *c) { (void)c; }
bool rt_dnn_attn_eval(const kattn *A, bool backward, bool dq_accum, const double *const *in, double *const *out,
                      diag *d)
{
    (void)A, (void)backward, (void)dq_accum, (void)in, (void)out;
    return rt_dnn_load(d);
}

#else

#include <dlfcn.h>
#include <pthread.h>

#include <cudnn_graph.h>

#include "runtime/backend/cublaslt.h" /* rt_cuda_dlopen */

/* ---- the library ------------------------------------------------------------------ */

#define DNN_FUNCS(X)                                                                                           \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnDestroy)        \
    X(cudnnSetStream) X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor)                         \
    X(cudnnBackendFinalize) X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute) X(cudnnBackendExecute)

typedef struct dnn_api {
#define DNN_MEMBER(fn) __typeof__(&fn) fn;
    DNN_FUNCS(DNN_MEMBER)
#undef DNN_MEMBER
} dnn_api;

static dnn_api api;
static bool api_ok;
static long api_version;
static char api_err[512];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

/* The oldest cuDNN taken: 9.0, whose fused flash attention has the
 * forward and backward of this pattern for any s_k and grouped heads. */
#define DNN_MIN_VERSION 90000L

static void dnn_load_once(void)
{
    static const char *const names[] = {"libcudnn.so.9", "libcudnn.so", NULL};
    void *h = rt_cuda_dlopen(names, "cuDNN (libcudnn)", api_err, sizeof api_err);
    if (!h) return;
#define DNN_RESOLVE(fn)                                                                                        \
    if (!(*(void **)&api.fn = dlsym(h, #fn))) {                                                                \
        snprintf(api_err, sizeof api_err, "cuDNN: the library lacks %s (too old?)", #fn);                       \
        return;                                                                                                \
    }
    DNN_FUNCS(DNN_RESOLVE)
#undef DNN_RESOLVE
    api_version = (long)api.cudnnGetVersion();
    if (api_version < DNN_MIN_VERSION) {
        snprintf(api_err, sizeof api_err, "cuDNN %ld.%ld.%ld is loaded; fused attention needs cuDNN 9.0 or newer",
                 api_version / 10000, api_version / 100 % 100, api_version % 100);
        return;
    }
    api_ok = true;
}

bool rt_dnn_load(diag *d)
{
    pthread_once(&api_once, dnn_load_once);
    if (!api_ok && d) diag_error_plain(d, "%s", api_err);
    return api_ok;
}

long rt_dnn_version(void)
{
    pthread_once(&api_once, dnn_load_once);
    return api_version;
}

/* "CUDNN_STATUS_BAD_PARAM (...the library's last error...)" */
static void status_text(cudnnStatus_t s, char *buf, size_t n)
{
    char last[256] = "";
    api.cudnnGetLastErrorString(last, sizeof last);
    const char *m = api.cudnnGetErrorString(s);
    snprintf(buf, n, "%s%s%s%s", m ? m : "unknown cuDNN status", *last ? " (" : "", last, *last ? ")" : "");
}

/* ---- building graphs ------------------------------------------------------------ */

enum { GB_MAX = 256, GB_MAX_OPS = 48 };

/* The uids of the variant pack; virtual tensors count from U_VIRT. */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SCALE, U_NEGINF, U_ONE, U_DQACC, U_VIRT = 100 };

typedef struct shape4 {
    int64_t dim[4], stride[4];
} shape4;

/* The graph as data, beside its descriptors, for rt_dnn_attn_eval: the
 * tensors (by descriptor) and the operations in the order they were made
 * (a topological order). */
enum { TR_PW, TR_RED, TR_MM, TR_RESHAPE };
typedef struct tr_tensor {
    cudnnBackendDescriptor_t desc;
    int64_t uid;
    shape4 s;
    bool by_value;
    double *data; /* eval: owned unless it aliases a reshape's input */
    bool alias;
} tr_tensor;
typedef struct tr_op {
    int kind, mode; /* cudnnPointwiseMode_t or cudnnReduceTensorOp_t */
    int x, b, t, y; /* tensor indices, -1 where absent (matmul: x = a, b = b, y = c) */
    int64_t axis;
} tr_op;
typedef struct tr_graph {
    tr_tensor t[GB_MAX];
    int nt;
    tr_op op[GB_MAX_OPS];
    int nop;
} tr_graph;

typedef struct gb {
    tr_graph *trace; /* NULL: not recorded */
    cudnnBackendDescriptor_t all[GB_MAX]; /* every descriptor made, destroyed together */
    int nall;
    cudnnBackendDescriptor_t ops[GB_MAX_OPS];
    int nops;
    int64_t next_uid;
    bool ok;
    char err[512];
} gb;

static void gb_fail(gb *G, const char *what, cudnnStatus_t s)
{
    if (!G->ok) return;
    G->ok = false;
    char st[384];
    status_text(s, st, sizeof st);
    snprintf(G->err, sizeof G->err, "cuDNN: %.120s: %.380s", what, st);
}

static cudnnBackendDescriptor_t gb_new(gb *G, cudnnBackendDescriptorType_t t, const char *what)
{
    if (!G->ok) return NULL;
    if (G->nall >= GB_MAX) {
        G->ok = false;
        snprintf(G->err, sizeof G->err, "cuDNN: more than %d descriptors in one graph", GB_MAX);
        return NULL;
    }
    cudnnBackendDescriptor_t x = NULL;
    cudnnStatus_t s = api.cudnnBackendCreateDescriptor(t, &x);
    if (s != CUDNN_STATUS_SUCCESS) {
        gb_fail(G, what, s);
        return NULL;
    }
    G->all[G->nall++] = x;
    return x;
}

static void gb_set(gb *G, cudnnBackendDescriptor_t x, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                   int64_t count, const void *v, const char *what)
{
    if (!G->ok) return;
    cudnnStatus_t s = api.cudnnBackendSetAttribute(x, a, t, count, v);
    if (s != CUDNN_STATUS_SUCCESS) {
        char w[160];
        snprintf(w, sizeof w, "%s (attribute %d)", what, (int)a);
        gb_fail(G, w, s);
    }
}

static void gb_fin(gb *G, cudnnBackendDescriptor_t x, const char *what)
{
    if (!G->ok) return;
    cudnnStatus_t s = api.cudnnBackendFinalize(x);
    if (s != CUDNN_STATUS_SUCCESS) gb_fail(G, what, s);
}

static void gb_free(gb *G)
{
    for (int i = G->nall - 1; i >= 0; i--)
        if (G->all[i]) api.cudnnBackendDestroyDescriptor(G->all[i]);
    G->nall = G->nops = 0;
}

static void gb_op(gb *G, cudnnBackendDescriptor_t op)
{
    if (!G->ok) return;
    if (G->nops >= GB_MAX_OPS) {
        G->ok = false;
        snprintf(G->err, sizeof G->err, "cuDNN: more than %d operations in one graph", GB_MAX_OPS);
        return;
    }
    G->ops[G->nops++] = op;
}

/* [a, b, c, e] with contiguous strides. */
static shape4 packed(int64_t a, int64_t b, int64_t c, int64_t e)
{
    return (shape4){{a, b, c, e}, {b * c * e, c * e, e, 1}};
}

/* The [a, b, c, e] buffer seen as [a, b, e, c] (a transpose by strides). */
static shape4 transposed(shape4 s)
{
    shape4 t = s;
    t.dim[2] = s.dim[3], t.dim[3] = s.dim[2];
    t.stride[2] = s.stride[3], t.stride[3] = s.stride[2];
    return t;
}

static cudnnBackendDescriptor_t tensor_of(gb *G, int64_t uid, cudnnDataType_t t, shape4 s, bool is_virtual,
                                          bool by_value, bool reorder)
{
    cudnnBackendDescriptor_t x = gb_new(G, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor descriptor");
    int64_t align = 16;
    gb_set(G, x, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, "a tensor's data type");
    gb_set(G, x, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim, "a tensor's dimensions");
    gb_set(G, x, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.stride, "a tensor's strides");
    gb_set(G, x, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "a tensor's uid");
    gb_set(G, x, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "a tensor's alignment");
    if (is_virtual) gb_set(G, x, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "virtual");
    if (by_value) gb_set(G, x, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "by value");
    if (reorder) {
        cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
        gb_set(G, x, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r, "reordering");
    }
    char what[64];
    snprintf(what, sizeof what, "tensor %lld", (long long)uid);
    gb_fin(G, x, what);
    if (G->trace && G->ok && G->trace->nt < GB_MAX)
        G->trace->t[G->trace->nt++] = (tr_tensor){.desc = x, .uid = uid, .s = s, .by_value = by_value};
    return x;
}

static int tr_find(const tr_graph *T, cudnnBackendDescriptor_t x)
{
    for (int i = 0; x && i < T->nt; i++)
        if (T->t[i].desc == x) return i;
    return -1;
}

static void tr_op_add(gb *G, int kind, int mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis)
{
    tr_graph *T = G->trace;
    if (!T || !G->ok || T->nop >= GB_MAX_OPS) return;
    T->op[T->nop++] = (tr_op){kind, mode, tr_find(T, x), tr_find(T, b), tr_find(T, t), tr_find(T, y), axis};
}

static cudnnBackendDescriptor_t io_tensor(gb *G, int64_t uid, cudnnDataType_t t, shape4 s)
{
    return tensor_of(G, uid, t, s, false, false, false);
}

static cudnnBackendDescriptor_t virt(gb *G, cudnnDataType_t t, shape4 s)
{
    return tensor_of(G, G->next_uid++, t, s, true, false, false);
}

static cudnnBackendDescriptor_t scalar(gb *G, int64_t uid)
{
    return tensor_of(G, uid, CUDNN_DATA_FLOAT, packed(1, 1, 1, 1), false, true, false);
}

/* y = mode(x[, b[, t]]); axis for GEN_INDEX, else -1. */
static void pw(gb *G, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
               cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, cudnnDataType_t prec, int64_t axis)
{
    cudnnBackendDescriptor_t p = gb_new(G, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "a pointwise descriptor");
    gb_set(G, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "a pointwise mode");
    gb_set(G, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "a pointwise precision");
    if (axis >= 0) gb_set(G, p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "a pointwise axis");
    gb_fin(G, p, "a pointwise descriptor");
    cudnnBackendDescriptor_t op = gb_new(G, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "a pointwise operation");
    gb_set(G, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, "pointwise op");
    gb_set(G, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (b) gb_set(G, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
    if (t) gb_set(G, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    gb_set(G, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    char what[64];
    snprintf(what, sizeof what, "a pointwise operation (mode %d)", (int)mode);
    gb_fin(G, op, what);
    gb_op(G, op);
    tr_op_add(G, TR_PW, (int)mode, x, b, t, y, axis);
}

static void reduce(gb *G, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = gb_new(G, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "a reduction descriptor");
    gb_set(G, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "a reduction operator");
    gb_set(G, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "a reduction's precision");
    gb_fin(G, r, "a reduction descriptor");
    cudnnBackendDescriptor_t op = gb_new(G, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "a reduction operation");
    gb_set(G, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    gb_set(G, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    gb_set(G, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    gb_fin(G, op, "a reduction operation");
    gb_op(G, op);
    tr_op_add(G, TR_RED, (int)how, x, NULL, NULL, y, -1);
}

/* c = a b, fp32 accumulation. */
static void matmul(gb *G, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c)
{
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = gb_new(G, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "a matmul descriptor");
    gb_set(G, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "a matmul's precision");
    gb_fin(G, m, "a matmul descriptor");
    cudnnBackendDescriptor_t op = gb_new(G, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "a matmul operation");
    gb_set(G, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    gb_set(G, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    gb_set(G, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    gb_set(G, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul desc");
    gb_fin(G, op, "a matmul operation");
    gb_op(G, op);
    tr_op_add(G, TR_MM, 0, a, b, NULL, c, -1);
}

static void reshape(gb *G, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t op = gb_new(G, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "a reshape operation");
    gb_set(G, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    gb_set(G, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    gb_fin(G, op, "a reshape operation");
    gb_op(G, op);
    tr_op_add(G, TR_RESHAPE, 0, x, NULL, NULL, y, -1);
}

/* S = scale Q K^T with the causal mask: the scores both graphs start from.
 * One descriptor per uid: the scale's is the caller's, which the backward
 * reads again. */
static cudnnBackendDescriptor_t scores(gb *G, const kattn *A, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt,
                                       cudnnBackendDescriptor_t scale)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    shape4 ss = packed(A->b, A->n, A->sq, A->sk);
    cudnnBackendDescriptor_t s = virt(G, F, ss), s1 = virt(G, F, ss);
    matmul(G, q, kt, s);
    pw(G, CUDNN_POINTWISE_MUL, s, scale, NULL, s1, F, -1);
    if (!A->causal) return s1;
    cudnnBackendDescriptor_t row = virt(G, CUDNN_DATA_INT32, ss), col = virt(G, CUDNN_DATA_INT32, ss);
    cudnnBackendDescriptor_t keep = virt(G, CUDNN_DATA_BOOLEAN, ss), s2 = virt(G, F, ss);
    pw(G, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, row, CUDNN_DATA_INT32, 2);
    pw(G, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, col, CUDNN_DATA_INT32, 3);
    pw(G, CUDNN_POINTWISE_CMP_GE, row, col, NULL, keep, CUDNN_DATA_BOOLEAN, -1);
    pw(G, CUDNN_POINTWISE_BINARY_SELECT, s1, scalar(G, U_NEGINF), keep, s2, F, -1); /* keep ? s1 : -inf */
    return s2;
}

static cudnnDataType_t dnn_type(ir_dtype t) { return t == IR_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

/* The shapes of the graph's own tensors. */
typedef struct attn_shapes {
    shape4 q, kt, v, vt, o, lse, k;
} attn_shapes;

/* [b, h, s, d] as it lies in tgc's buffer: contiguous, or (sbnd) rows of
 * w elements in [s, b, h] order (w = 3d: the packed q | k | v, each
 * tensor's pointer at its own part; rt_dnn_call_run). */
static shape4 laid(const kattn *A, int64_t h, int64_t s, int64_t d, bool sbnd, int64_t w)
{
    if (!sbnd) return packed(A->b, h, s, d);
    return (shape4){{A->b, h, s, d}, {h * w, w, A->b * h * w, 1}};
}

static attn_shapes shapes_of(const kattn *A)
{
    attn_shapes s;
    bool sb = A->layout != IR_ATTN_BNSD, pk = A->layout == IR_ATTN_PACKED;
    s.q = laid(A, A->n, A->sq, A->d, sb, pk ? 3 * A->d : A->d);
    s.k = laid(A, A->g, A->sk, A->d, sb, pk ? 3 * A->d : A->d);
    s.kt = transposed(s.k);
    s.v = laid(A, A->g, A->sk, A->dv, sb, pk ? 3 * A->d : A->dv);
    s.vt = transposed(s.v);
    s.o = laid(A, A->n, A->sq, A->dv, A->out_sbnd, A->dv);
    s.lse = packed(A->b, A->n, A->sq, 1);
    return s;
}

static void build_fwd(gb *G, const kattn *A, ir_dtype io_t)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, io = dnn_type(io_t);
    attn_shapes sh = shapes_of(A);
    shape4 ss = packed(A->b, A->n, A->sq, A->sk), row = sh.lse;
    cudnnBackendDescriptor_t q = io_tensor(G, U_Q, io, sh.q), kt = io_tensor(G, U_K, io, sh.kt);
    cudnnBackendDescriptor_t v = io_tensor(G, U_V, io, sh.v), o = io_tensor(G, U_O, io, sh.o);
    cudnnBackendDescriptor_t lse = io_tensor(G, U_STATS, F, sh.lse);
    cudnnBackendDescriptor_t s = scores(G, A, q, kt, scalar(G, U_SCALE));
    cudnnBackendDescriptor_t m = virt(G, F, row), sub = virt(G, F, ss), e = virt(G, F, ss), z = virt(G, F, row);
    cudnnBackendDescriptor_t logz = virt(G, F, row), p = virt(G, io, ss);
    reduce(G, CUDNN_REDUCE_TENSOR_MAX, s, m);
    pw(G, CUDNN_POINTWISE_SUB, s, m, NULL, sub, F, -1);
    pw(G, CUDNN_POINTWISE_EXP, sub, NULL, NULL, e, F, -1);
    reduce(G, CUDNN_REDUCE_TENSOR_ADD, e, z);
    pw(G, CUDNN_POINTWISE_LOG, z, NULL, NULL, logz, F, -1);
    pw(G, CUDNN_POINTWISE_ADD, m, logz, NULL, lse, F, -1);
    pw(G, CUDNN_POINTWISE_DIV, e, z, NULL, p, F, -1);
    matmul(G, p, v, o);
}

/* dq_accum: the engine accumulates dQ in an fp32 workspace tensor (the
 * choice where its dP workspace would not be taken: before Hopper, or dP
 * over 256 MiB). */
static void build_bwd(gb *G, const kattn *A, ir_dtype io_t, bool dq_accum)
{
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, io = dnn_type(io_t);
    attn_shapes sh = shapes_of(A);
    shape4 ss = packed(A->b, A->n, A->sq, A->sk), row = sh.lse;
    shape4 st = transposed(ss); /* [b, n, s_k, s_q] views of the scores */
    cudnnBackendDescriptor_t q = io_tensor(G, U_Q, io, sh.q), kt = io_tensor(G, U_K, io, sh.kt);
    cudnnBackendDescriptor_t vt = io_tensor(G, U_V, io, sh.vt), o = io_tensor(G, U_O, io, sh.o);
    cudnnBackendDescriptor_t dout = io_tensor(G, U_DO, io, sh.o), lse = io_tensor(G, U_STATS, F, sh.lse);
    cudnnBackendDescriptor_t dq = io_tensor(G, U_DQ, io, sh.q), dk = io_tensor(G, U_DK, io, sh.k);
    cudnnBackendDescriptor_t dv = io_tensor(G, U_DV, io, sh.v), one = scalar(G, U_ONE);
    cudnnBackendDescriptor_t scale = scalar(G, U_SCALE);
    bool gqa = A->g != A->n;

    /* D = sum_d (dO * O) * 1 */
    cudnnBackendDescriptor_t doo = virt(G, F, sh.o), dsum0 = virt(G, F, row), dsum = virt(G, F, row);
    pw(G, CUDNN_POINTWISE_MUL, dout, o, NULL, doo, F, -1);
    reduce(G, CUDNN_REDUCE_TENSOR_ADD, doo, dsum0);
    pw(G, CUDNN_POINTWISE_MUL, dsum0, one, NULL, dsum, F, -1);

    /* P = exp(S - lse); dV = P^T dO */
    cudnnBackendDescriptor_t s = scores(G, A, q, kt, scale), sub = virt(G, F, ss), p = virt(G, F, ss);
    pw(G, CUDNN_POINTWISE_SUB, s, lse, NULL, sub, F, -1);
    pw(G, CUDNN_POINTWISE_EXP, sub, NULL, NULL, p, F, -1);
    cudnnBackendDescriptor_t pt = virt(G, io, st);
    reshape(G, p, pt);
    if (!gqa) matmul(G, pt, dout, dv);
    else {
        cudnnBackendDescriptor_t dvh = virt(G, io, packed(A->b, A->n, A->sk, A->dv));
        matmul(G, pt, dout, dvh);
        reduce(G, CUDNN_REDUCE_TENSOR_ADD, dvh, dv);
    }

    /* dS = (dO V^T * 1 - D) * P * scale */
    cudnnBackendDescriptor_t dp0 = virt(G, F, ss), dp1 = virt(G, F, ss), dp2 = virt(G, F, ss);
    cudnnBackendDescriptor_t dp3 = virt(G, F, ss), ds = virt(G, F, ss);
    matmul(G, dout, vt, dp0);
    pw(G, CUDNN_POINTWISE_MUL, dp0, one, NULL, dp1, F, -1);
    pw(G, CUDNN_POINTWISE_SUB, dp1, dsum, NULL, dp2, F, -1);
    pw(G, CUDNN_POINTWISE_MUL, dp2, p, NULL, dp3, F, -1);
    pw(G, CUDNN_POINTWISE_MUL, dp3, scale, NULL, ds, F, -1);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = virt(G, io, st);
    reshape(G, ds, dst);
    if (!gqa) matmul(G, dst, q, dk);
    else {
        cudnnBackendDescriptor_t dkh = virt(G, io, packed(A->b, A->n, A->sk, A->d));
        matmul(G, dst, q, dkh);
        reduce(G, CUDNN_REDUCE_TENSOR_ADD, dkh, dk);
    }

    /* dQ = dS K (K from K^T by a reshape) */
    cudnnBackendDescriptor_t k = virt(G, io, transposed(sh.kt));
    reshape(G, kt, k);
    if (!dq_accum) matmul(G, ds, k, dq);
    else {
        cudnnBackendDescriptor_t acc = tensor_of(G, U_DQACC, F, packed(A->b, A->n, A->sq, A->d), false, false, true);
        matmul(G, ds, k, acc);
        pw(G, CUDNN_POINTWISE_IDENTITY, acc, NULL, NULL, dq, F, -1);
    }
}

static void gb_init(gb *G)
{
    memset(G, 0, sizeof *G);
    G->ok = true;
    G->next_uid = U_VIRT;
}

bool rt_dnn_attn_ops_check(const kattn *A, ir_dtype io, bool backward, diag *d)
{
    if (!rt_dnn_load(d)) return false;
    char why[320];
    if (!rt_dnn_attn_supported(A, io, IR_F32, why, sizeof why)) {
        diag_error_plain(d, "cuDNN: %s", why);
        return false;
    }
    gb *G = xmalloc(sizeof *G);
    bool ok = true;
    for (int acc = 0; acc < (backward ? 2 : 1) && ok; acc++) {
        gb_init(G);
        if (backward) build_bwd(G, A, io, acc == 1);
        else build_fwd(G, A, io);
        if (!(ok = G->ok)) diag_error_plain(d, "%s", G->err);
        gb_free(G);
    }
    free(G);
    return ok;
}

/* ---- the graph on the host (rt_dnn_attn_eval) ---------------------------------- */

static int64_t tr_size(const shape4 *s)
{
    int64_t n = 1;
    for (int k = 0; k < 4; k++) n += (s->dim[k] - 1) * s->stride[k];
    return n;
}

/* The element of tensor X read for the element idx of a result of dims
 * `of`: equal dims index alike; a dim of 1 broadcasts; a smaller dim that
 * divides groups consecutive indices (K and V's heads under grouped-query
 * attention: head h reads h / (n / g)). */
static int64_t tr_at(const tr_tensor *X, const int64_t *idx, const int64_t *of)
{
    int64_t off = 0;
    for (int k = 0; k < 4; k++) {
        int64_t i = X->s.dim[k] == of[k] ? idx[k] : idx[k] * X->s.dim[k] / of[k];
        off += i * X->s.stride[k];
    }
    return off;
}

static double tr_pw(int mode, double x, double b, double t, const int64_t *idx, int64_t axis)
{
    switch (mode) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_EXP: return exp(x);
    case CUDNN_POINTWISE_LOG: return log(x);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_GEN_INDEX: return (double)idx[axis];
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0 ? x : b;
    default: return NAN;
    }
}

static void tr_run(tr_graph *T)
{
    for (int o = 0; o < T->nop; o++) {
        const tr_op *op = &T->op[o];
        tr_tensor *y = &T->t[op->y], *x = op->x >= 0 ? &T->t[op->x] : NULL;
        tr_tensor *b = op->b >= 0 ? &T->t[op->b] : NULL, *t = op->t >= 0 ? &T->t[op->t] : NULL;
        const int64_t *yd = y->s.dim;
        int64_t idx[4];
        if (op->kind == TR_RESHAPE) { /* the same memory, seen through y's strides */
            free(y->data);
            y->data = x->data;
            y->alias = true;
            continue;
        }
        if (op->kind == TR_RED) {
            bool mx = op->mode == CUDNN_REDUCE_TENSOR_MAX;
            for (int64_t i = 0; i < tr_size(&y->s); i++) y->data[i] = mx ? -INFINITY : 0.0;
            const int64_t *xd = x->s.dim;
            for (idx[0] = 0; idx[0] < xd[0]; idx[0]++)
                for (idx[1] = 0; idx[1] < xd[1]; idx[1]++)
                    for (idx[2] = 0; idx[2] < xd[2]; idx[2]++)
                        for (idx[3] = 0; idx[3] < xd[3]; idx[3]++) {
                            double v = x->data[tr_at(x, idx, xd)];
                            double *r = &y->data[tr_at(y, idx, xd)];
                            *r = mx ? (v > *r ? v : *r) : *r + v;
                        }
            continue;
        }
        for (idx[0] = 0; idx[0] < yd[0]; idx[0]++)
            for (idx[1] = 0; idx[1] < yd[1]; idx[1]++)
                for (idx[2] = 0; idx[2] < yd[2]; idx[2]++)
                    for (idx[3] = 0; idx[3] < yd[3]; idx[3]++) {
                        double v;
                        if (op->kind == TR_MM) {
                            int64_t K = x->s.dim[3], ia[4] = {idx[0], idx[1], idx[2], 0};
                            int64_t ib[4] = {idx[0], idx[1], 0, idx[3]}, da[4], db[4];
                            memcpy(da, yd, sizeof da), memcpy(db, yd, sizeof db);
                            da[3] = K, db[2] = K;
                            v = 0;
                            for (int64_t k = 0; k < K; k++) {
                                ia[3] = ib[2] = k;
                                v += x->data[tr_at(x, ia, da)] * b->data[tr_at(b, ib, db)];
                            }
                        } else
                            v = tr_pw(op->mode, x->data[tr_at(x, idx, yd)], b ? b->data[tr_at(b, idx, yd)] : 0,
                                      t ? t->data[tr_at(t, idx, yd)] : 0, idx, op->axis);
                        y->data[tr_at(y, idx, yd)] = v;
                    }
    }
}

bool rt_dnn_attn_eval(const kattn *A, bool backward, bool dq_accum, const double *const *in, double *const *out,
                      diag *d)
{
    if (!rt_dnn_load(d)) return false;
    gb *G = xmalloc(sizeof *G);
    tr_graph *T = xcalloc(1, sizeof *T);
    gb_init(G);
    G->trace = T;
    if (backward) build_bwd(G, A, IR_BF16, dq_accum);
    else build_fwd(G, A, IR_BF16);
    bool ok = G->ok;
    if (!ok) diag_error_plain(d, "%s", G->err);
    static const int64_t fwd_in[] = {U_Q, U_K, U_V}, fwd_out[] = {U_O, U_STATS};
    static const int64_t bwd_in[] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS}, bwd_out[] = {U_DQ, U_DK, U_DV};
    const int64_t *ins = backward ? bwd_in : fwd_in, *outs = backward ? bwd_out : fwd_out;
    int nin = backward ? 6 : 3, nout = backward ? 3 : 2;
    for (int i = 0; ok && i < T->nt; i++) {
        tr_tensor *x = &T->t[i];
        int64_t n = tr_size(&x->s);
        x->data = xcalloc((size_t)n, sizeof *x->data);
        if (x->uid == U_SCALE) x->data[0] = A->scale;
        if (x->uid == U_ONE) x->data[0] = 1.0;
        if (x->uid == U_NEGINF) x->data[0] = -INFINITY;
        for (int k = 0; k < nin; k++)
            if (x->uid == ins[k]) memcpy(x->data, in[k], (size_t)n * sizeof *x->data);
    }
    if (ok) tr_run(T);
    for (int i = 0; i < T->nt; i++) {
        tr_tensor *x = &T->t[i];
        for (int k = 0; ok && k < nout; k++)
            if (x->uid == outs[k]) memcpy(out[k], x->data, (size_t)tr_size(&x->s) * sizeof *x->data);
    }
    for (int i = 0; i < T->nt; i++)
        if (!T->t[i].alias) free(T->t[i].data);
    gb_free(G);
    free(G);
    free(T);
    return ok;
}

/* ---- plans, calls ------------------------------------------------------------------ */

/* The plan of one graph: shared by every call of its shape. */
typedef struct dnn_plan {
    kattn key; /* the shape and attributes (pass: KATT_FWD or KATT_DKV) */
    ir_dtype io;
    gb G;
    cudnnBackendDescriptor_t plan;
    int64_t ws_bytes, engine;
    bool dq_accum;
    size_t acc_at, acc_bytes; /* the dQ accumulator's place in the workspace */
} dnn_plan;

struct rt_dnn {
    cudnnHandle_t h;
    int cc_major;
    dnn_plan **plans;
    int nplans;
    char err[512];
};

struct rt_dnn_call {
    dnn_plan *p;
    bool backward;
    float scale, neginf, one;
    void *ptrs[RT_DNN_BWD_PTRS], *ws;
    cudnnBackendDescriptor_t pack; /* for ptrs and ws */
};

rt_dnn *rt_dnn_new(void *stream, int cc_major, diag *d)
{
    if (!rt_dnn_load(d)) return NULL;
    rt_dnn *h = xcalloc(1, sizeof *h);
    h->cc_major = cc_major;
    cudnnStatus_t s = api.cudnnCreate(&h->h);
    if (s == CUDNN_STATUS_SUCCESS) s = api.cudnnSetStream(h->h, (cudaStream_t)stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        char st[384];
        status_text(s, st, sizeof st);
        if (d)
            diag_error_plain(d, "cuDNN %ld.%ld.%ld: a handle on the rank's stream: %s", api_version / 10000,
                             api_version / 100 % 100, api_version % 100, st);
        if (h->h) api.cudnnDestroy(h->h);
        free(h);
        return NULL;
    }
    return h;
}

static void plan_free(dnn_plan *p)
{
    gb_free(&p->G);
    free(p);
}

void rt_dnn_free(rt_dnn *h)
{
    if (!h) return;
    for (int i = 0; i < h->nplans; i++) plan_free(h->plans[i]);
    free(h->plans);
    if (h->h) api.cudnnDestroy(h->h);
    free(h);
}

const char *rt_dnn_error(const rt_dnn *h) { return h->err; }

static bool same_shape(const kattn *a, const kattn *b)
{
    return a->pass == b->pass && a->b == b->b && a->n == b->n && a->g == b->g && a->sq == b->sq && a->sk == b->sk &&
           a->d == b->d && a->dv == b->dv && a->causal == b->causal && a->layout == b->layout &&
           a->out_sbnd == b->out_sbnd;
}

enum { DNN_MAX_CFGS = 8 };

/* p's graph (forward or backward) finalized on the handle, and the
 * heuristics' engine configurations for it into cfg (at most
 * DNN_MAX_CFGS), in their order: how many; G->ok false after a failure,
 * G->err saying which. */
static int64_t plan_configs(rt_dnn *h, dnn_plan *p, const kattn *A, ir_dtype io, cudnnBackendDescriptor_t *cfg)
{
    gb *G = &p->G;
    gb_init(G);
    if (p->key.pass != KATT_FWD) build_bwd(G, A, io, p->dq_accum);
    else build_fwd(G, A, io);
    cudnnBackendDescriptor_t og = gb_new(G, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
    gb_set(G, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h->h, "the graph's handle");
    gb_set(G, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, G->nops, G->ops, "the graph's ops");
    gb_fin(G, og, "the operation graph");
    cudnnBackendDescriptor_t heur = gb_new(G, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "the heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    gb_set(G, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
           "the heuristics' graph");
    gb_set(G, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristics' mode");
    gb_fin(G, heur, "the heuristics (CUDNN_HEUR_MODE_A)");
    int64_t count = 0;
    if (G->ok) {
        cudnnStatus_t s = api.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
        if (s != CUDNN_STATUS_SUCCESS) gb_fail(G, "the heuristics' result count", s);
    }
    if (count > DNN_MAX_CFGS) count = DNN_MAX_CFGS;
    for (int64_t i = 0; i < count; i++) cfg[i] = gb_new(G, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config");
    int64_t got = 0;
    if (G->ok && count > 0) {
        cudnnStatus_t s = api.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
        if (s != CUDNN_STATUS_SUCCESS) gb_fail(G, "the heuristics' results", s);
    }
    return got;
}

/* An execution plan of engine config cfg finalized on the handle, into *ep
 * (NULL where it could not be created), and its workspace bytes. */
static cudnnStatus_t plan_try(rt_dnn *h, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *ep, int64_t *ws)
{
    *ep = NULL;
    *ws = 0;
    int64_t one = 0;
    cudnnStatus_t s = api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, ep);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.cudnnBackendSetAttribute(*ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h->h);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.cudnnBackendSetAttribute(*ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         1, &cfg);
    if (s == CUDNN_STATUS_SUCCESS) s = api.cudnnBackendFinalize(*ep);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.cudnnBackendGetAttribute(*ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &one, ws);
    return s;
}

/* The first of the got configurations in cfg whose plan finalizes with its
 * workspace (and dQ's fp32 accumulator after it) within max_ws becomes p's
 * plan: its index, or -1 with what each said in tried. */
static int64_t plan_choose(rt_dnn *h, dnn_plan *p, const kattn *A, const cudnnBackendDescriptor_t *cfg,
                           int64_t got, size_t max_ws, char *tried, size_t cap)
{
    gb *G = &p->G;
    size_t tl = 0;
    for (int64_t i = 0; i < got; i++) {
        cudnnBackendDescriptor_t ep;
        int64_t ws;
        cudnnStatus_t s = plan_try(h, cfg[i], &ep, &ws);
        size_t acc_at = ((size_t)ws + 255) / 256 * 256;
        size_t acc = p->dq_accum ? (size_t)(A->b * A->n * A->sq * A->d) * sizeof(float) : 0;
        if (s == CUDNN_STATUS_SUCCESS && acc_at + acc <= max_ws) {
            p->plan = ep;
            p->ws_bytes = ws;
            p->acc_at = acc_at;
            p->acc_bytes = acc;
            if (G->nall < GB_MAX) G->all[G->nall++] = ep;
            else p->plan = NULL, api.cudnnBackendDestroyDescriptor(ep);
            return p->plan ? i : -1;
        }
        if (s != CUDNN_STATUS_SUCCESS) {
            char st[160];
            snprintf(st, sizeof st, "%s", api.cudnnGetErrorString(s));
            tl += (size_t)snprintf(tried + tl, tl < cap ? cap - tl : 0, "%s%s", tl ? "; " : "", st);
        } else
            tl += (size_t)snprintf(tried + tl, tl < cap ? cap - tl : 0, "%s%.1f MiB of workspace, over %.1f",
                                   tl ? "; " : "", (double)(acc_at + acc) / 1048576.0, (double)max_ws / 1048576.0);
        if (tl >= cap) tl = cap - 1;
        if (ep) api.cudnnBackendDestroyDescriptor(ep);
    }
    return -1;
}

/* The global index of engine config cfg's engine, for the description; -1
 * where cuDNN does not say. */
static int64_t plan_engine(cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = NULL;
    int64_t one = 0, idx = -1;
    if (api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return -1;
    if (api.cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &one, &eng) !=
            CUDNN_STATUS_SUCCESS ||
        api.cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &one, &idx) !=
            CUDNN_STATUS_SUCCESS)
        idx = -1;
    api.cudnnBackendDestroyDescriptor(eng);
    return idx;
}

/* The graph finalized on the handle, the heuristics' engine configurations
 * tried in their order, the first that finalizes with a workspace that
 * fits taken. */
static dnn_plan *plan_build(rt_dnn *h, const kattn *A, ir_dtype io, size_t max_ws, char *why, size_t n)
{
    dnn_plan *p = xcalloc(1, sizeof *p);
    p->key = *A;
    p->key.pass = A->pass == KATT_FWD ? KATT_FWD : KATT_DKV;
    p->io = io;
    p->engine = -1;
    bool backward = p->key.pass != KATT_FWD;
    /* The frontend's rule: Hopper's engines keep dP in their workspace
     * when it is at most 256 MiB; elsewhere dQ accumulates in fp32. */
    int64_t dp_bytes = A->b * A->n * ((A->sq + 63) / 64 * 64) * ((A->sk + 63) / 64 * 64) * 2;
    p->dq_accum = backward && !(h->cc_major >= 9 && dp_bytes <= ((int64_t)256 << 20));
    cudnnBackendDescriptor_t cfg[DNN_MAX_CFGS];
    int64_t got = plan_configs(h, p, A, io, cfg);
    if (!p->G.ok) {
        snprintf(why, n, "%.500s", p->G.err);
        plan_free(p);
        return NULL;
    }
    char tried[256] = "";
    int64_t chosen = plan_choose(h, p, A, cfg, got, max_ws, tried, sizeof tried);
    if (chosen < 0) {
        snprintf(why, n,
                 "cuDNN %ld.%ld.%ld has no engine for this %s graph (%lld engine configs from the heuristics%s%s)",
                 api_version / 10000, api_version / 100 % 100, api_version % 100, backward ? "backward" : "forward",
                 (long long)got, *tried ? ": " : "", tried);
        plan_free(p);
        return NULL;
    }
    p->engine = plan_engine(cfg[chosen]);
    return p;
}

rt_dnn_call *rt_dnn_call_new(rt_dnn *h, const kattn *A, ir_dtype io, bool backward, size_t max_ws, char *why,
                             size_t n)
{
    if (!rt_dnn_attn_supported(A, io, IR_F32, why, n)) return NULL;
    kattn key = *A;
    key.pass = backward ? KATT_DKV : KATT_FWD;
    dnn_plan *p = NULL;
    for (int i = 0; i < h->nplans && !p; i++)
        if (same_shape(&h->plans[i]->key, &key) && h->plans[i]->io == io) p = h->plans[i];
    if (!p) {
        if (!(p = plan_build(h, &key, io, max_ws, why, n))) return NULL;
        h->plans = xrealloc(h->plans, (size_t)(h->nplans + 1) * sizeof *h->plans);
        h->plans[h->nplans++] = p;
    }
    rt_dnn_call *c = xcalloc(1, sizeof *c);
    c->p = p;
    c->backward = backward;
    c->scale = (float)A->scale;
    c->neginf = api_version < 91000 ? -FLT_MAX : -INFINITY; /* the frontend's choice per version */
    c->one = 1.0f;
    return c;
}

size_t rt_dnn_call_workspace(const rt_dnn_call *c, size_t *zero_at, size_t *zero_bytes)
{
    *zero_at = c->p->acc_at;
    *zero_bytes = c->p->acc_bytes;
    return c->p->acc_bytes ? c->p->acc_at + c->p->acc_bytes : (size_t)c->p->ws_bytes;
}

void rt_dnn_call_describe(const rt_dnn_call *c, char *buf, size_t n)
{
    const kattn *A = &c->p->key;
    snprintf(buf, n,
             "cuDNN %ld.%ld.%ld SDPA %s b=%lld n=%lld g=%lld s=%lldx%lld d=%lld%s, %s, engine %lld, %lld B workspace%s",
             api_version / 10000, api_version / 100 % 100, api_version % 100, c->backward ? "bwd" : "fwd",
             (long long)A->b, (long long)A->n, (long long)A->g,
             (long long)A->sq, (long long)A->sk, (long long)A->d, A->causal ? " causal" : "", ir_dtype_name(c->p->io),
             (long long)c->p->engine, (long long)c->p->ws_bytes, c->p->dq_accum ? " + fp32 dQ accumulator" : "");
}

int rt_dnn_call_run(rt_dnn *h, rt_dnn_call *c, void *const *ptrs, void *ws)
{
    int np = c->backward ? RT_DNN_BWD_PTRS : RT_DNN_FWD_PTRS;
    bool same = c->pack && c->ws == ws;
    for (int i = 0; i < np && same; i++) same = c->ptrs[i] == ptrs[i];
    if (!same) {
        /* The variant pack: made again only when a pointer moved (a new
         * binding), never in a steady step. */
        if (c->pack) api.cudnnBackendDestroyDescriptor(c->pack);
        c->pack = NULL;
        memcpy(c->ptrs, ptrs, (size_t)np * sizeof *ptrs);
        /* layout=packed: k and v (dk and dv) are d and 2d elements into the q | k | v rows. */
        void *at[RT_DNN_BWD_PTRS];
        memcpy(at, ptrs, (size_t)np * sizeof *ptrs);
        if (c->p->key.layout == IR_ATTN_PACKED) {
            size_t d = (size_t)c->p->key.d * 2; /* bytes: 16-bit storage */
            at[1] = (char *)at[1] + d, at[2] = (char *)at[2] + 2 * d;
            if (c->backward) at[7] = (char *)at[7] + d, at[8] = (char *)at[8] + 2 * d;
        }
        ptrs = at;
        c->ws = ws;
        int64_t uids[16];
        void *data[16];
        int k = 0;
        static const int64_t fwd_uids[] = {U_Q, U_K, U_V, U_O, U_STATS};
        static const int64_t bwd_uids[] = {U_Q, U_K, U_V, U_O, U_DO, U_STATS, U_DQ, U_DK, U_DV};
        for (int i = 0; i < np; i++, k++) {
            uids[k] = c->backward ? bwd_uids[i] : fwd_uids[i];
            data[k] = ptrs[i];
        }
        uids[k] = U_SCALE, data[k++] = &c->scale;
        if (c->p->key.causal) uids[k] = U_NEGINF, data[k++] = &c->neginf;
        if (c->backward) uids[k] = U_ONE, data[k++] = &c->one;
        if (c->p->dq_accum) uids[k] = U_DQACC, data[k++] = (char *)ws + c->p->acc_at;
        cudnnBackendDescriptor_t vp = NULL;
        cudnnStatus_t s = api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
        if (s == CUDNN_STATUS_SUCCESS)
            s = api.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, k, uids);
        if (s == CUDNN_STATUS_SUCCESS)
            s = api.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, k, data);
        if (s == CUDNN_STATUS_SUCCESS)
            s = api.cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
        if (s == CUDNN_STATUS_SUCCESS) s = api.cudnnBackendFinalize(vp);
        if (s != CUDNN_STATUS_SUCCESS) {
            char st[384];
            status_text(s, st, sizeof st);
            snprintf(h->err, sizeof h->err, "cuDNN: the variant pack: %.400s", st);
            if (vp) api.cudnnBackendDestroyDescriptor(vp);
            return -1;
        }
        c->pack = vp;
    }
    cudnnStatus_t s = api.cudnnBackendExecute(h->h, c->p->plan, c->pack);
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    char st[384];
    status_text(s, st, sizeof st);
    snprintf(h->err, sizeof h->err, "cudnnBackendExecute: %.400s", st);
    return -1;
}

void rt_dnn_call_free(rt_dnn_call *c)
{
    if (!c) return;
    if (c->pack) api.cudnnBackendDestroyDescriptor(c->pack);
    free(c);
}

#endif
