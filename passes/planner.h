/* The parallel-configuration planner (docs/planner.md): for n GPUs and a
 * global batch B it enumerates (t, p, d, b, v, SP, recomputation), keeps
 * what fits in a GPU's memory, and ranks by a step-time model built from
 * the Megatron-LM paper's analysis (seeds/001, section 3):
 *
 *   step   = (m + (p-1)/v) * t_mb + t_dp          m = B / (b d) micro-batches
 *   t_mb   = t_gemm + t_mem + t_tp + t_pp         one micro-batch on one stage
 *   t_gemm = FLOPs / (t p) / rate(b)              the last stage's FLOPs (l/p layers and the LM head);
 *                                                 rate(b) = peak eff_max b s / (b s + n_half h_ref / h)
 *   t_mem  = the non-GEMM kernels' bytes / HBM bandwidth
 *   t_tp   = (l/p) 8 b s h (t-1)/t * 2 bytes / link      (x 1.5 with full recomputation)
 *   t_pp   = 2 v b s h * 2 bytes / t / link               (scatter-gather: / t)
 *   t_dp   = 2 (d-1)/d * params * 2 bytes / link          (not overlapped)
 *
 * A link is the intra-node one when the group's GPUs share a node (ranks
 * in Megatron's order: TP adjacent, then DP, then PP), else the inter-node
 * one. Memory per GPU is the first pipeline stage's: its parameters at 18
 * bytes each (Megatron's: bf16 weights, fp32 main gradients, fp32 master weights and Adam's
 * two moments; 6 + 12/d with the distributed optimizer) and the
 * activations of the micro-batches 1F1B keeps in flight (cost.h). */
#ifndef TGC_PASSES_PLANNER_H
#define TGC_PASSES_PLANNER_H
#include <stdbool.h>
#include <stdint.h>

#include "cost.h"

typedef struct plan_cluster {
    int64_t gpus, gpus_per_node;
    double mem_bytes;  /* per GPU */
    double peak_flops; /* per GPU: the dense 16-bit peak, FLOP/s */
    double eff_max;    /* the fraction of peak that large GEMMs reach */
    double n_half;     /* tokens per micro-batch (b s) at which the GEMMs reach half of eff_max, */
    double h_ref;      /* ... for this hidden size (n_half h_ref / h at another; 0: for every h) */
    double intra_bw, inter_bw, hbm_bw; /* bytes/s per GPU */
} plan_cluster;

/* A DGX A100 80GB cluster, the paper's (see docs/planner.md for where each
 * number comes from); gpus and mem_bytes are left 0. */
void plan_cluster_defaults(plan_cluster *c);

typedef struct plan_config {
    int64_t t, p, d, b, v;
    bool sp;
    cost_recompute rc;
} plan_config;

/* Which pipeline schedules the search considers. */
typedef enum plan_pipe { PLAN_PIPE_ANY, PLAN_PIPE_1F1B, PLAN_PIPE_INTERLEAVED, PLAN_PIPE_GPIPE } plan_pipe;

typedef struct plan_request {
    int64_t B;           /* global batch (sequences) */
    bool dist_opt;       /* --use-distributed-optimizer: optimizer state sharded over d */
    bool scatter_gather; /* pipeline sends split over the t ranks (Megatron's default) */
    /* Degrees the command line fixed (0 / -1: searched). */
    int64_t t, p, d, b, v;
    int sp, rc;
    plan_pipe pipe;      /* ANY: 1F1B (v = 1) and interleaved 1F1B (v > 1) */
    int64_t max_b;       /* the largest micro-batch tried */
} plan_request;

typedef struct plan_estimate {
    int64_t m;                         /* micro-batches per pipeline */
    double params;                     /* parameters on one GPU of the first stage */
    double mem_states, mem_act, mem_total; /* bytes per GPU */
    double rate;                       /* the GEMMs' FLOP/s at this b and t */
    double t_gemm, t_mem, t_tp, t_pp;  /* seconds per micro-batch */
    double t_mb, t_dp, t_step;
    double bubble;                     /* (p-1) / (v m) */
    double comm_share;                 /* communication's share of the step */
    double tflops;                     /* achieved per GPU, recomputation included (as the paper counts) */
    bool tp_intra, pp_intra, dp_intra; /* which link each group uses */
} plan_estimate;

/* Whether cfg is a legal configuration for the model on the cluster (t p d
 * = n, TP inside a node, heads divisible by t, layers by p v, B by b d,
 * m a multiple of p when v > 1, SP only with t > 1); false with the reason. */
bool plan_config_valid(const cost_model *m, const plan_cluster *c, const plan_request *r, const plan_config *cfg,
                       char *why, size_t cap);
/* "t=8 p=16 d=12 b=1 v=2 SP recompute selective" */
void plan_cfg_str(const plan_config *k, char *buf, size_t cap);
/* The memory and step-time model of a valid configuration. */
void plan_estimate_config(const cost_model *m, const plan_cluster *c, const plan_request *r, const plan_config *cfg,
                          plan_estimate *e);

typedef struct plan_result {
    plan_config cfg;
    plan_estimate est;
} plan_result;

typedef struct plan_search_out {
    plan_result *fit;  /* the configurations that fit, fastest first */
    int nfit;
    int nvalid;        /* legal configurations evaluated */
    plan_result least; /* the one needing the least memory (valid when nvalid > 0) */
} plan_search_out;

void plan_search(const cost_model *m, const plan_cluster *c, const plan_request *r, plan_search_out *out);
void plan_search_free(plan_search_out *out);

/* One sentence (malloc'd) on why fit[0] wins: where its groups run, how
 * its degrees were chosen (or given in r), and the step-time term it saves
 * most on against the best configuration with another (t, p, d), or the
 * runner-up. */
char *plan_explain(const plan_search_out *s, const plan_cluster *c, const plan_request *r);

#endif
