#include "runtime/backend/cuda_graph.h"

#include <stdio.h>

#ifdef TGC_HAVE_CUDA

void rt_cuda_graph_drop(const rt_cuda_api *cu, void *exec)
{
    if (exec) cu->GraphExecDestroy((cudaGraphExec_t)exec);
}

int rt_cuda_graph_go(const rt_cuda_api *cu, cudaStream_t stream, rt_graph_do what, void **exec,
                     int (*issue)(void *ctx), void *ctx, char *err, size_t n)
{
    if (what == RT_GRAPH_CAPTURE) {
        rt_cuda_graph_drop(cu, *exec);
        *exec = NULL;
        /* Thread-local: rank threads capture their own streams at once, and
         * another thread's cudaMalloc does not end this capture. */
        if (!rt_cuda_ok(cu->StreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
                        "a step's capture", err, n)) {
            cu->GetLastError();
            return RT_CUDA_GRAPH_UNCAPTURED;
        }
        int rc = issue(ctx);
        cudaGraph_t graph = NULL;
        cudaError_t st = cu->StreamEndCapture(stream, &graph); /* always: the stream leaves capture mode */
        cudaGraphExec_t ge = NULL;
        bool ok = rc == 0 && rt_cuda_ok(st, "cudaStreamEndCapture", "a step's capture", err, n) && graph &&
                  rt_cuda_ok(cu->GraphInstantiate(&ge, graph, 0), "cudaGraphInstantiate", "a step's graph", err, n);
        if (graph) cu->GraphDestroy(graph);
        if (!ok) {
            if (rc && !err[0]) snprintf(err, n, "the run failed while it was captured");
            if (ge) cu->GraphExecDestroy(ge);
            cu->GetLastError(); /* the capture's error is not the run's */
            return RT_CUDA_GRAPH_UNCAPTURED;
        }
        *exec = ge;
    }
    return rt_cuda_ok(cu->GraphLaunch((cudaGraphExec_t)*exec, stream), "cudaGraphLaunch", "a step's graph", err, n)
               ? 0
               : -1;
}

#endif
