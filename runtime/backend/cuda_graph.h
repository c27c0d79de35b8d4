/* --cuda-graphs on the GPU (docs/cuda.md "CUDA graphs"): the driver calls
 * of capturing a run and replaying it, apart from the backend so that a
 * test can check their order against a fake rt_cuda_api
 * (tests/cuda/test_cuda_graph.c).
 *
 *   capture  [cudaGraphExecDestroy of a stale graph]
 *            cudaStreamBeginCapture(stream, thread-local)
 *            issue(ctx): the run's launches, GEMMs, cuDNN calls and NCCL
 *                        collectives, recorded, not executed
 *            cudaStreamEndCapture, cudaGraphInstantiate, cudaGraphDestroy
 *            cudaGraphLaunch
 *   replay   cudaGraphLaunch
 *
 * A capture that fails (issue's error, a call the stream may not capture,
 * instantiation) ends the capture, drops what it made, clears the error
 * and returns RT_CUDA_GRAPH_UNCAPTURED: the caller runs the same work
 * uncaptured (nothing of it ran) and does not capture it again. */
#ifndef TGC_RT_CUDA_GRAPH_H
#define TGC_RT_CUDA_GRAPH_H

#include "runtime/backend/cuda.h"
#include "runtime/backend/graph.h"

#define RT_CUDA_GRAPH_UNCAPTURED 1

#ifdef TGC_HAVE_CUDA
/* Captures (what RT_GRAPH_CAPTURE: *exec replaced) or replays *exec on
 * stream. 0 after the launch; RT_CUDA_GRAPH_UNCAPTURED (why in err); or
 * -1 when the launch failed (err says why). */
int rt_cuda_graph_go(const rt_cuda_api *cu, cudaStream_t stream, rt_graph_do what, void **exec,
                     int (*issue)(void *ctx), void *ctx, char *err, size_t n);
void rt_cuda_graph_drop(const rt_cuda_api *cu, void *exec);
#endif

#endif
