/* Feeding a run's inputs (runtime/train/train.h): --data's or --data-path's
 * tokens (a blend of datasets, --split's parts, --valid-data-path's
 * validation blend), or --inputs' batches of every input, for a step of
 * one executor or for the pipeline runtime's micro-batches. */
#ifndef TGC_RT_TRAIN_FEEDER_H
#define TGC_RT_TRAIN_FEEDER_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/exec.h"
#include "runtime/io/blend.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/data.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/train.h"
#include "support/diag.h"

typedef struct feeder {
    tgc_data *data;
    tgc_data_order *order;
    tgc_blend *blend; /* --data-path with several datasets (then data is NULL) */
    tgc_blend *vblend; /* --valid-data-path's validation blend, or NULL */
    int64_t vocab;     /* tokens must be below it */
    tgc_st_file *batches;
    const ir_node *tokens, *labels;
    int64_t s, b;
    int64_t M;          /* micro-batches per step over all replicas (pipeline runs) */
    int32_t *tok, *lab; /* a micro-batch's rows (pipeline runs) */
    /* --split: training takes samples [first, first+count), validation
     * [vfirst, vfirst+vcount); eval: the feed gives validation data. */
    int64_t first, count, vfirst, vcount;
    bool eval;
} feeder;

/* The datasets of --data-path or --data (*n words). */
const char *const *rt_train_data_words(const rt_train_opts *o, int *n);

/* --data or --data-path (and --valid-data-path) for a run of M
 * micro-batches per step over all replicas and tensor-parallel degree t
 * (the vocabulary is the embedding's whole one); report: this rank
 * describes the blends. false after reporting. */
bool feeder_open_data(feeder *f, const ir_graph *g, const rt_train_opts *o, int64_t M, int t, bool report, diag *d);
/* --inputs: a tensor per input, [N, ...]. */
bool feeder_open_batches(feeder *f, const ir_graph *g, const rt_train_opts *o, diag *d);
/* A pipeline run's feeder: M micro-batches per step over all replicas. */
static inline void feeder_for_pipe(feeder *f, int64_t M) { f->M = M; }
/* A pipeline run's input (rt_pipe_feed_fn; ctx is the feeder). */
void feeder_feed(void *ctx, const ir_node *n, void *dst, int64_t step, int64_t g);
void feeder_close(feeder *f);

#endif
