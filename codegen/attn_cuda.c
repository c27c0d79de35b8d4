/* The attention kernels as CUDA C++ (KK_ATTN; attn.h). */
#include "codegen/attn.h"
#include "support/util.h"

#define ATTN_THREADS 128

void cg_attn_launch_dims(const kernel *k, unsigned grid[3], unsigned block[3])
{
    const kattn *A = &k->attn;
    int bq, bk;
    cg_attn_tiles(k, CG_LANG_CUDA, &bq, &bk);
    bool kv = A->pass == KATT_DKV;
    int64_t rows = kv ? A->sk : A->sq, tile = kv ? bk : bq;
    grid[0] = (unsigned)((rows + tile - 1) / tile);
    grid[1] = (unsigned)(kv ? A->g : A->n);
    grid[2] = (unsigned)A->b;
    block[0] = ATTN_THREADS;
    block[1] = block[2] = 1;
}

void cg_attn_render_cuda(cg_rx *r)
{
    cg_attn_defines(r);
    sb_puts(r->sb, "    /* not yet */\n");
    cg_attn_undefs(r);
}
