/* The CUDA attention kernels (codegen/attn_cuda.c) compile with NVRTC for
 * sm_80 and sm_90, without a GPU: for head dims 5 to 128, f32 and f64, with
 * causal and padding masks, grouped-query heads, dropout and pos_offset,
 * and with bf16/fp16 storage (the tensor-core kernels), every attention
 * kernel (forward, dK/dV, dQ) is in the cubin with no spill, the log has
 * no warning, its shared memory is under the 48 KiB of static arrays, and
 * its launch geometry covers the tiles (a 3-D grid of CG_ATTN_THREADS
 * blocks). Exit 77 (skipped) where libnvrtc does not load. */
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "attn_case.h"
#include "codegen/attn.h"
#include "codegen/codegen.h"
#include "passes/pass.h"
#include "runtime/backend/nvrtc.h"
#include "support/util.h"

static const attn_case cases[] = {
    {"d24_gqa_mask_dropout", "f32", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.1 key=5", true, IR_F32, 0, NULL},
    {"d64_long", "f32", 1, 8, 8, 300, 300, 64, "scale=0.125 causal=true p=0.1 key=5", true, IR_F32, 0, NULL},
    {"d128_mqa", "f32", 2, 4, 1, 70, 70, 128, "scale=0.08 causal=true", false, IR_F32, 0, NULL},
    {"d5_plain", "f32", 2, 2, 2, 7, 9, 5, "scale=0.4", false, IR_F32, 0, NULL},
    {"pos_offset", "f32", 1, 2, 2, 3, 9, 32, "scale=0.4 causal=true pos_offset=true", false, IR_F32, 0, NULL},
    {"f64_d24", "f64", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.1 key=5", true, IR_F32, 0, NULL},
    {"f64_d64", "f64", 1, 2, 2, 40, 40, 64, "scale=0.2 causal=true", false, IR_F32, 0, NULL},
    {"bf16_d64", "f32", 2, 4, 2, 33, 33, 64, "scale=0.125 causal=true p=0.1 key=5", true, IR_BF16, 0, NULL},
    {"fp16_d128", "f32", 1, 4, 4, 33, 33, 128, "scale=0.125 causal=true", false, IR_F16, 0, NULL},
    /* more of the tensor-core path: GQA, masks, dropout, edge tiles, odd head dims */
    {"bf16_d24_gqa_mask_dropout", "f32", 2, 4, 2, 70, 70, 24, "scale=0.2 causal=true p=0.1 key=5", true, IR_BF16, 0, NULL},
    {"fp16_d64_long", "f32", 1, 8, 8, 300, 300, 64, "scale=0.125 causal=true p=0.1 key=5", true, IR_F16, 0, NULL},
    {"bf16_d128_mqa_dropout", "f32", 2, 4, 1, 70, 70, 128, "scale=0.08 causal=true p=0.1 key=7", true, IR_BF16, 0, NULL},
    {"fp16_d5_plain", "f32", 2, 2, 2, 7, 9, 5, "scale=0.4", false, IR_F16, 0, NULL},
    {"bf16_pos_offset", "f32", 1, 2, 2, 3, 9, 32, "scale=0.4 causal=true pos_offset=true", false, IR_BF16, 0, NULL},
    {"bf16_d96", "f32", 1, 2, 2, 50, 50, 96, "scale=0.1 causal=true p=0.1 key=3", false, IR_BF16, 0, NULL},
    /* the attention pass's in-place layouts */
    {"sbnd_d64_gqa", "f32", 2, 4, 2, 70, 70, 64, "scale=0.125 causal=true p=0.1 key=5", true, IR_F32, 0, "sbnd"},
    {"bf16_packed_d128", "f32", 1, 4, 4, 33, 33, 128, "scale=0.08 causal=true p=0.1 key=5", false, IR_BF16, 0, "packed"},
    {"fp16_sbnd_d64_gqa", "f32", 2, 4, 2, 70, 70, 64, "scale=0.125 causal=true", false, IR_F16, 0, "sbnd"},
};

static void run_case(const attn_case *c)
{
    diag d;
    diag_init(&d, stderr);
    char *text = attn_case_ir(c);
    ir_graph *g = ir_graph_read(text, strlen(text), c->name, &d);
    free(text);
    CHECK(g != NULL);
    const pass_info *list[] = {pass_lookup("autodiff"), pass_lookup("memplan")};
    pass_ctx ctx = {.d = &d, .verify_each = true};
    bool ok = g && pass_run_list(g, list, 2, &ctx, NULL, NULL);
    CHECK(ok);
    if (!ok) {
        ir_graph_free(g);
        diag_free(&d);
        return;
    }
    cg_program *p = cg_build_target(g, CG_TARGET_CUDA, &d);
    CHECK(p != NULL);
    char *src = p ? cg_render_cuda(p) : NULL;
    const char *const arches[] = {"sm_80", "sm_90"};
    for (int a = 0; p && a < 2; a++) {
        rt_nvrtc_options o = {.arch = arches[a]}; /* the cache keeps the ptxas report too */
        rt_cubin *bin = rt_nvrtc_compile(src, &o, &d);
        CHECK(bin != NULL);
        if (!bin) continue;
        CHECK(rt_cubin_warnings(bin) == 0);
        int seen[3] = {0, 0, 0};
        for (int k = 0; k < p->nkernels; k++) {
            const kernel *kn = p->kernels[k];
            if (kn->kind != KK_ATTN) continue;
            seen[kn->attn.pass]++;
            /* 16-bit storage takes the tensor-core kernels, fp32 and f64 today's */
            CHECK(cg_attn_tensor_cores(kn) == (c->precision != IR_F32));
            const rt_kernel_info *ki = rt_cubin_kernel(bin, kn->name);
            CHECK(ki != NULL);
            if (!ki) continue;
            unsigned grid[3], block[3], shmem;
            cg_cuda_launch_dims(kn, grid, block, &shmem);
            int bq, bk;
            cg_attn_tiles(kn, CG_LANG_CUDA, &bq, &bk);
            const kattn *A = &kn->attn;
            bool kv = A->pass == KATT_DKV;
            int64_t rows = kv ? A->sk : A->sq, tile = kv ? bk : bq;
            printf("%-22s %s %-6s %s: %3d registers, %lld spill bytes, %6lld shared, grid %ux%ux%u x %u\n", c->name,
                   arches[a], kn->name, A->pass == KATT_FWD ? "forward" : kv ? "dK, dV " : "dQ     ", ki->registers,
                   (long long)(ki->spill_stores + ki->spill_loads), (long long)ki->shared_bytes, grid[0], grid[1],
                   grid[2], block[0]);
            CHECK(ki->spill_stores == 0 && ki->spill_loads == 0);
            CHECK(ki->shared_bytes <= 48 * 1024 && shmem == 0);
            CHECK(block[0] == CG_ATTN_THREADS && (int64_t)grid[0] * tile >= rows && (int64_t)(grid[0] - 1) * tile < rows);
            CHECK(grid[1] == (unsigned)(kv ? A->g : A->n) && grid[2] == (unsigned)A->b);
        }
        CHECK(seen[KATT_FWD] == 1 && seen[KATT_DKV] == 1 && seen[KATT_DQ] == 1);
        rt_cubin_free(bin);
    }
    free(src);
    cg_program_free(p);
    ir_graph_free(g);
    diag_free(&d);
}

int main(int argc, char **argv)
{
    if (!rt_nvrtc_available(NULL)) {
        printf("NVRTC cannot be loaded: the attention kernels are not compiled\n");
        return 77;
    }
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (argc < 2 || strcmp(argv[1], cases[i].name) == 0) run_case(&cases[i]);
    CHECK_DONE();
}
