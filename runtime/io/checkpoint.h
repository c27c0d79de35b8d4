/* Checkpoints (docs/checkpoints.md): `tgc run --save DIR --save-interval N`
 * writes, and `--load DIR` resumes from, a directory in Megatron's layout
 *
 *   DIR/latest                     the last complete iteration, as text
 *   DIR/iter_0000006/model.safetensors      every parameter, whole
 *   DIR/iter_0000006/optimizer.safetensors  every optimizer-state slot of
 *                                  every parameter, whole ("exp_avg.NAME",
 *                                  "exp_avg_sq.NAME", "momentum.NAME",
 *                                  "master.NAME")
 *
 * Tensors have their logical names and shapes (the model's, without the
 * vocabulary padding), assembled from the ranks: the tensor-parallel
 * shards, the pipeline stages and, under the distributed optimizer, the
 * data-parallel shards of the state. So a checkpoint loads into any
 * (t, p, d) with or without the distributed optimizer. The ranks are the
 * threads of this process, or (mpirun) one process each: then every rank's
 * parts travel to one rank, tensor by tensor, which writes the files, and
 * at load every rank reads the files and takes its own parts.
 * model.safetensors's metadata is the header: format version, step,
 * optimizer step, loss-scaler state, seed, the run's options and an
 * FNV-1a 64 checksum per tensor (each file carries its own tensors'), all
 * verified at load.
 *
 * A save is atomic: the files go to DIR/iter_N.tmp-PID, are fsynced with
 * the directory, which is then renamed to iter_N, and `latest` is replaced
 * by rename too; a crash at any moment leaves the previous checkpoint and
 * `latest` valid. */
#ifndef TGC_RT_CHECKPOINT_H
#define TGC_RT_CHECKPOINT_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/exec.h"
#include "runtime/io/safetensors.h"
#include "support/diag.h"

struct rt_train_opts;

#define RT_CKPT_VERSION 1

/* ---- whole tensors from the ranks' parts ---------------------------------- */

/* The whole tensor's shape of a value split over t ranks (with the tp
 * pass's vocabulary padding), and the model's shape of parameter p (without
 * the padding rows, which are the last ones of the whole tensor). */
ir_shape rt_param_whole_shape(const ir_node *v, int t);
ir_shape rt_param_logical_shape(const ir_node *p, int t);
/* Copies between the whole tensor of v and rank r's part of it (of t). */
void rt_shard_copy(const ir_node *v, int t, int r, char *whole, char *part, bool to_whole);
/* The safetensors dtype of an IR dtype; false for one it lacks. */
bool rt_st_dtype_of(ir_dtype t, tgc_st_dtype *out);

/* The ranks of a run. All in this process (comm NULL): rank (tp r, dp k,
 * pp s) is ex[(k * p + s) * t + r]. One process per rank (mpirun): ex[0]
 * is this process's rank, comm its communicator (whose topology has these
 * t and p, and d or more replicas), and world rank `root` assembles the
 * whole tensors; every rank of the world makes the same calls (they are
 * collective). A run may list only its replica 0 (d = 1) where nothing is
 * sharded over the replicas. */
struct tgc_comm;
typedef struct rt_ckpt_ranks {
    rt_exec *const *ex;
    int t, p, d;
    struct tgc_comm *comm;
    int root;
} rt_ckpt_ranks;

/* The tag of the messages that carry the parts (runtime/comm/comm.h; MPI's
 * smallest allowed largest tag). They flow at step boundaries only, when
 * no pipeline message is in flight. */
#define RT_CKPT_TAG 32767
/* A part could not be copied between a rank's device and the host
 * (rt_exec_error of that rank says why). */
#define RT_CKPT_ERR_DEVICE (-2)

/* Whether this rank assembles (and writes): R->root, or always without a
 * communicator. */
bool rt_ckpt_is_root(const rt_ckpt_ranks *R);
/* Whether ok holds on every rank: an all-gather of one byte per rank over
 * the world (collective); *first (may be NULL) the lowest rank where it
 * did not (-1: none). false also when the exchange fails (the
 * communicator's status and message say so). Without a communicator: ok. */
bool rt_ckpt_agree(const rt_ckpt_ranks *R, bool ok, int *first);

/* What of a parameter: its value, its gradient, or optimizer-state slot k >= 0. */
#define RT_CKPT_VALUE (-1)
#define RT_CKPT_GRAD (-2)

/* The whole tensor (whole shape, padding included) of `what` of parameter
 * p, put together from the ranks; whole holds numel(whole shape) elements
 * on the assembling rank and is NULL on the others, which send their parts
 * to it. false when a message failed (the communicator's error says why). */
bool rt_ckpt_gather(const rt_ckpt_ranks *R, const ir_node *p, int what, void *whole);
/* The reverse, within the process: every rank of R in this process that
 * holds a part of `what` of p gets it from whole (which every process has).
 * false when a copy to a rank's device failed. */
bool rt_ckpt_scatter(const rt_ckpt_ranks *R, const ir_node *p, int what, const void *whole);

/* ---- saving and loading --------------------------------------------------- */

/* Where a run stands at a step boundary. */
typedef struct rt_ckpt_state {
    int64_t step;      /* steps done: the next one to run */
    int64_t opt_step;  /* optimizer steps taken (fp16 overflows skip some) */
    double loss_scale; /* fp16's loss scaler (Megatron's DynamicGradScaler) */
    int64_t scale_growth, hysteresis_left;
} rt_ckpt_state;

/* Writes DIR/iter_<step>/ and then DIR/latest, atomically (above). All
 * ranks must be quiescent. On failure: reports the file and the system's
 * reason, removes the partial directory, and says the previous checkpoint
 * is intact; returns false. With a communicator every rank calls it: the
 * root prepares the directory, the parts travel to it tensor by tensor,
 * it writes, and its verdict reaches every rank before any returns (the
 * same on all; only the root reports). TGC_CKPT_TEST_DELAY_MS (a test
 * hook) sleeps that long before each file and before the rename. */
bool rt_ckpt_save(const char *dir, const rt_ckpt_ranks *R, const rt_ckpt_state *st, const struct rt_train_opts *o,
                  diag *d);

/* One writer per --save directory: DIR (created if absent) gets the lock
 * file DIR/tgc.lock, held with flock(2) for the run's life (a crash
 * releases it with the process) and naming its holder ("pid 123 on host
 * h"). Returns the descriptor to pass to rt_ckpt_unlock, or -1 after
 * reporting: DIR cannot be created or written, or another run holds the
 * lock (named in the message). Under mpirun only the writing rank takes
 * it; rank threads share their process's. */
#define RT_CKPT_LOCK "tgc.lock"
int rt_ckpt_lock(const char *dir, diag *d);
void rt_ckpt_unlock(int fd);

/* Loads DIR (its `latest`, or DIR an iter_N directory itself) into the
 * ranks: verifies the header and every checksum, and every parameter's and
 * state's name and shape; sets *st. false after reporting. With a
 * communicator every rank calls it and reads the files itself (one host,
 * or a file system all hosts share); whether all succeeded is agreed
 * before any returns, and the lowest failing rank reports. */
bool rt_ckpt_load(const char *dir, const rt_ckpt_ranks *R, const struct rt_train_opts *o, rt_ckpt_state *st,
                  diag *d);

/* `tgc export`: the model weights of checkpoint CKPT (a --save DIR or an
 * iter_N directory), verified, written to out for the Hugging Face
 * ecosystem (metadata "format": "pt"). */
bool rt_ckpt_export(const char *ckpt, const char *out, diag *d);

/* The model weights at path, opened: a --save DIR's latest checkpoint or an
 * iter_N directory (verified as rt_ckpt_export verifies it), or a
 * safetensors file (`tgc run --export`, `tgc import hf`; a checkpoint's
 * model.safetensors has its checksums verified). NULL after reporting. */
tgc_st_file *rt_ckpt_open_weights(const char *path, diag *d);

#endif
