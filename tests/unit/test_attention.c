/* The fused attention kernels (codegen/attn_c.c) against the unfused chain
 * they replace, in fp32, on the cpu and sim backends.
 *
 * Each case is one attention(q, k, v[, mask]) and the same computation
 * written as ordinary ops: k and v repeated per query head for grouped-query
 * attention (reshape, concat, reshape), bmm(q, k^T), softmax with the same
 * scale, causal mask, pos_offset and padding mask, dropout with the same p
 * and key, bmm with v. Both get the loss sum(y * w_out), autodiff and
 * memplan, the same parameter values and the same run-time scalars; the
 * output y and the gradients of q, k and v must agree to 1e-5 of the
 * largest value, the fused kernel's sim run must equal its cpu run bit for
 * bit, and an evaluation step (rt.eval: dropout keeps everything) must
 * agree too. The sizes are not multiples of the tiles (s = 7, d = 24, 70
 * keys over two key tiles). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes/pass.h"
#include "runtime/exec.h"
#include "support/util.h"

typedef struct at_case {
    const char *name;
    int b, n, g, sq, sk, d;
    double scale, p;
    bool causal, pos_offset, mask;
    int pos; /* rt.pos of a pos_offset case */
    int tp_rank; /* > 0: rank tp_rank of 2, the heads split (dim 1) as the tp pass splits them */
} at_case;

static const at_case cases[] = {
    {"plain", 2, 2, 2, 5, 7, 6, 0.4, 0, false, false, false, 0, 0},
    {"causal", 1, 2, 2, 7, 7, 24, 0.2, 0, true, false, false, 0, 0},
    {"causal_mask", 2, 2, 2, 7, 7, 5, 0.5, 0, true, false, true, 0, 0},
    {"gqa_dropout", 1, 4, 2, 9, 9, 8, 0.35, 0.2, true, false, false, 0, 0},
    {"mqa_mask", 2, 4, 1, 6, 6, 4, 0.5, 0, false, false, true, 0, 0},
    {"dropout_mask", 2, 2, 2, 7, 7, 8, 0.3, 0.3, true, false, true, 0, 0},
    {"pos_offset", 1, 2, 2, 3, 9, 8, 0.4, 0, true, true, false, 4, 0},
    {"long", 1, 2, 1, 70, 70, 24, 0.2, 0.1, true, false, false, 0, 0},
    {"wide", 1, 1, 1, 33, 33, 64, 0.125, 0.1, false, false, true, 0, 0},
    /* This rank's heads of a head-split attention: the dropout mask is
     * the one of the whole tensor's elements, as the split dropout draws. */
    {"tp_heads_dropout", 2, 2, 2, 7, 7, 8, 0.3, 0.25, true, false, true, 0, 1},
    {"tp_gqa_dropout", 1, 4, 2, 6, 6, 8, 0.3, 0.25, true, false, false, 0, 1},
};

#define KEY 4242

static void dims(strbuf *sb, int a, int b, int c, int d) { sb_printf(sb, "f32[%d, %d, %d, %d]", a, b, c, d); }

static void attrs(strbuf *sb, const at_case *c, bool softmax)
{
    sb_puts(sb, " scale=");
    sb_put_double(sb, c->scale);
    if (c->causal) sb_puts(sb, " causal=true");
    if (c->pos_offset) sb_puts(sb, " pos_offset=true");
    if (!softmax && c->p > 0) {
        sb_puts(sb, " p=");
        sb_put_double(sb, c->p);
        sb_printf(sb, " key=%d", KEY);
    }
}

/* k or v [b, g, sk, d] repeated to [b, n, sk, d]: %<x>r. */
static void repeat(strbuf *sb, const at_case *c, const char *x)
{
    int r = c->n / c->g;
    if (r == 1) {
        sb_printf(sb, "%%%sr = reshape(%%%s) shape=[%d, %d, %d, %d] : ", x, x, c->b, c->n, c->sk, c->d);
        dims(sb, c->b, c->n, c->sk, c->d);
        sb_puts(sb, "\n");
        return;
    }
    sb_printf(sb, "%%%s5 = reshape(%%%s) shape=[%d, %d, 1, %d, %d] : f32[%d, %d, 1, %d, %d]\n", x, x, c->b, c->g,
              c->sk, c->d, c->b, c->g, c->sk, c->d);
    sb_printf(sb, "%%%sc = concat(", x);
    for (int i = 0; i < r; i++) sb_printf(sb, "%s%%%s5", i ? ", " : "", x);
    sb_printf(sb, ") axis=2 : f32[%d, %d, %d, %d, %d]\n", c->b, c->g, r, c->sk, c->d);
    sb_printf(sb, "%%%sr = reshape(%%%sc) shape=[%d, %d, %d, %d] : ", x, x, c->b, c->n, c->sk, c->d);
    dims(sb, c->b, c->n, c->sk, c->d);
    sb_puts(sb, "\n");
}

static char *case_ir(const at_case *c, bool fused)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "tgc-ir 1\nmodel \"%s_%s\"\n", c->name, fused ? "fused" : "unfused");
    if (c->mask) sb_printf(&sb, "%%m = input : u8[%d, %d]\n", c->b, c->sk);
    sb_puts(&sb, "%q = param init=normal std=1.0 : ");
    dims(&sb, c->b, c->n, c->sq, c->d);
    sb_puts(&sb, "\n%k = param init=normal std=1.0 : ");
    dims(&sb, c->b, c->g, c->sk, c->d);
    sb_puts(&sb, "\n%v = param init=normal std=1.0 : ");
    dims(&sb, c->b, c->g, c->sk, c->d);
    sb_puts(&sb, "\n");
    if (fused) {
        sb_printf(&sb, "%%y = attention(%%q, %%k, %%v%s)", c->mask ? ", %m" : "");
        attrs(&sb, c, false);
    } else {
        repeat(&sb, c, "k");
        repeat(&sb, c, "v");
        sb_puts(&sb, "%s = bmm(%q, %kr) transpose_b=true : ");
        dims(&sb, c->b, c->n, c->sq, c->sk);
        sb_printf(&sb, "\n%%pr = softmax(%%s%s)", c->mask ? ", %m" : "");
        attrs(&sb, c, true);
        sb_puts(&sb, " : ");
        dims(&sb, c->b, c->n, c->sq, c->sk);
        sb_puts(&sb, "\n");
        const char *pv = "pr";
        if (c->p > 0) {
            sb_puts(&sb, "%pd = dropout(%pr) p=");
            sb_put_double(&sb, c->p);
            sb_printf(&sb, " key=%d : ", KEY);
            dims(&sb, c->b, c->n, c->sq, c->sk);
            sb_puts(&sb, "\n");
            pv = "pd";
        }
        sb_printf(&sb, "%%y = bmm(%%%s, %%vr)", pv);
    }
    sb_puts(&sb, " : ");
    dims(&sb, c->b, c->n, c->sq, c->d);
    sb_puts(&sb, " output\n%w_out = param init=normal std=1.0 : ");
    dims(&sb, c->b, c->n, c->sq, c->d);
    sb_puts(&sb, "\n%yw = mul(%y, %w_out) : ");
    dims(&sb, c->b, c->n, c->sq, c->d);
    sb_puts(&sb, "\n%loss = sum(%yw) : f32[] loss\n");
    return sb.s;
}

typedef struct run {
    ir_graph *g;
    rt_exec *e;
} run;

static const char *const watched[] = {"y", "grad.q", "grad.k", "grad.v"};
#define NW 4

static bool run_open(run *r, const at_case *c, bool fused, rt_backend be)
{
    diag d;
    diag_init(&d, stderr);
    char *text = case_ir(c, fused);
    r->g = ir_graph_read(text, strlen(text), c->name, &d);
    r->e = NULL;
    if (!r->g) fprintf(stderr, "%s", text);
    free(text);
    const pass_info *list[] = {pass_lookup("autodiff"), pass_lookup("memplan")};
    pass_ctx ctx = {.d = &d, .verify_each = true};
    bool ok = r->g && pass_run_list(r->g, list, 2, &ctx, NULL, NULL);
    if (ok && c->tp_rank) {
        /* The split the tp pass gives the heads: the attention (its
         * backward draws by its forward's split), or the probabilities the
         * unfused dropout and its backward draw on. */
        for (int i = 0; i < r->g->nnodes; i++) {
            ir_node *x = r->g->nodes[i];
            if (x->op == IR_OP_ATTENTION || x->op == IR_OP_DROPOUT || x->op == IR_OP_DROPOUT_BACK)
                x->shard = (ir_shard){1, IR_GROUP_TP};
        }
    }
    if (ok) {
        rt_exec_options o = {.backend = be};
        r->e = rt_exec_new_on(r->g, &o, &d);
        ok = r->e && rt_exec_init_params(r->e, 7);
    }
    diag_free(&d);
    if (!ok) return false;
    /* The same values in both graphs: parameters from a small LCG by
     * name, the padding mask keeping all but a few keys. */
    uint64_t state = 99;
    const char *const params[] = {"q", "k", "v", "w_out"};
    for (int i = 0; i < 4; i++) {
        const ir_node *n = ir_graph_find(r->g, params[i]);
        int64_t count = ir_shape_numel(&n->shape);
        float *x = malloc((size_t)count * sizeof *x);
        for (int64_t j = 0; j < count; j++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = (float)((double)(state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        }
        ok &= rt_exec_set(r->e, NULL, n, x);
        free(x);
    }
    if (c->mask) {
        const ir_node *m = ir_graph_find(r->g, "m");
        uint8_t mk[64 * 128];
        for (int j = 0; j < c->b * c->sk; j++) mk[j] = !(j % c->sk == c->sk - 1 || (j / c->sk == 1 && j % 3 == 0));
        ok &= rt_exec_set(r->e, NULL, m, mk);
    }
    r->e->rt.seed = 1234;
    r->e->rt.pos = c->pos;
    if (c->tp_rank) {
        r->e->rt.tp_rank = c->tp_rank;
        r->e->rt.tp_size = 2;
    }
    return ok;
}

static void run_close(run *r)
{
    rt_exec_free(r->e);
    ir_graph_free(r->g);
}

/* Values of the watched nodes after one step at `step`. */
static float *values(run *r, int64_t step, int64_t *len)
{
    rt_exec *e = r->e; /* the whole program at `step` (its dropout masks), an update at lr 0 */
    e->rt.step = step;
    e->rt.lr_float = 0.0f, e->rt.lr_double = 0.0, e->rt.wd_float = 0.0f, e->rt.wd_double = 0.0;
    CHECK(rt_exec_run(e, NULL, e->prog->ninstrs) == 0);
    int64_t total = 0;
    for (int w = 0; w < NW; w++) total += ir_shape_numel(&ir_graph_find(r->g, watched[w])->shape);
    float *v = malloc((size_t)total * sizeof *v), *at = v;
    for (int w = 0; w < NW; w++) {
        const ir_node *n = ir_graph_find(r->g, watched[w]);
        CHECK(rt_exec_get(r->e, NULL, n, at));
        at += ir_shape_numel(&n->shape);
    }
    *len = total;
    return v;
}

/* max |a - b| over each watched node, relative to the largest |b| of it. */
static double compare(const run *r, const float *a, const float *b, const char *what, const char *name)
{
    const float *pa = a, *pb = b;
    double worst = 0;
    for (int w = 0; w < NW; w++) {
        int64_t count = ir_shape_numel(&ir_graph_find(r->g, watched[w])->shape);
        double big = 0, diff = 0;
        for (int64_t j = 0; j < count; j++) {
            big = fmax(big, fabs(pb[j]));
            diff = fmax(diff, fabs((double)pa[j] - pb[j]));
        }
        double rel = diff / fmax(big, 1e-30);
        printf("%-14s %-8s %-7s max |diff| %.2e of %.2e (%.1e)\n", name, what, watched[w], diff, big, rel);
        if (rel > worst) worst = rel;
        pa += count;
        pb += count;
    }
    return worst;
}

static void run_case(const at_case *c)
{
    run fc, uc, fs;
    bool ok = run_open(&fc, c, true, RT_BACKEND_CPU) && run_open(&uc, c, false, RT_BACKEND_CPU) &&
              run_open(&fs, c, true, RT_BACKEND_SIM);
    CHECK(ok);
    if (ok) {
        /* The fused program holds attention kernels, the unfused none. */
        bool has_attn = false;
        for (int k = 0; k < fc.e->prog->nkernels; k++) has_attn |= fc.e->prog->kernels[k]->kind == KK_ATTN;
        CHECK(has_attn);
        for (int step = 0; step < 2; step++) { /* two steps: two dropout masks */
            int64_t n1, n2, n3;
            float *f = values(&fc, step, &n1), *u = values(&uc, step, &n2), *s = values(&fs, step, &n3);
            CHECK(n1 == n2 && n1 == n3);
            double err = compare(&fc, f, u, step ? "step 1" : "step 0", c->name);
            if (!(err < 1e-5)) {
                fprintf(stderr, "%s: fused and unfused differ by %.3e at step %d\n", c->name, err, step);
                check_failures++;
            }
            check_count++;
            bool same = memcmp(f, s, (size_t)n1 * sizeof *f) == 0;
            if (!same) fprintf(stderr, "%s: sim and cpu differ at step %d\n", c->name, step);
            CHECK(same);
            free(f);
            free(u);
            free(s);
        }
        if (c->p > 0) { /* an evaluation keeps every probability */
            fc.e->rt.eval = uc.e->rt.eval = 1;
            int64_t n1, n2;
            float *f = values(&fc, 5, &n1), *u = values(&uc, 5, &n2);
            double err = compare(&fc, f, u, "eval", c->name);
            CHECK(err < 1e-5);
            free(f);
            free(u);
        }
    }
    run_close(&fc);
    run_close(&uc);
    run_close(&fs);
}

int main(int argc, char **argv)
{
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) run_case(&cases[i]);
    CHECK_DONE();
}
