/* The attention kernels (KK_ATTN, kir.h): the C rendering (attn_c.c, what
 * the cpu and sim backends run) and the CUDA one (attn_cuda.c), written
 * whole from the kernel's kattn parameters. docs/attention.md, "Kernels". */
#ifndef TGC_ATTN_H
#define TGC_ATTN_H
#include "codegen/render_expr.h"

/* Threads of a CUDA attention block. */
#define CG_ATTN_THREADS 128

/* Query rows and key rows per tile of kernel k on a target. */
void cg_attn_tiles(const kernel *k, cg_lang lang, int *bq, int *bk);
/* The #defines both renderings read the kernel through (TA_*: sizes,
 * flags, the scale, the causal offset, the masked test, the dropout keep
 * factor, and one load or store macro per argument, keyed on the
 * argument's dtype), and the #undefs after the kernel. */
void cg_attn_defines(cg_rx *r);
void cg_attn_undefs(cg_rx *r);
/* The body of kernel r->k (its arguments a0.. already declared). */
void cg_attn_render_c(cg_rx *r);
void cg_attn_render_cuda(cg_rx *r);
/* Whether the CUDA kernel k takes the tensor-core path (mma.sync on
 * bf16 / f16 q, k, v and dO; fp32 compute; head dims up to 128), its tiles
 * then, and the prelude's warp-level product it calls (render_cuda.c). */
bool cg_attn_tensor_cores(const kernel *k);
void cg_attn_tc_tiles(const kernel *k, int *bq, int *bk);
void cg_attn_cuda_prelude(strbuf *sb);
/* CUDA launch geometry: grid (tiles, heads, batch), block threads. */
void cg_attn_launch_dims(const kernel *k, unsigned grid[3], unsigned block[3]);

#endif
