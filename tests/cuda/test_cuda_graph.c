/* The driver calls of --cuda-graphs (runtime/backend/cuda_graph.c) in
 * their order, against a fake rt_cuda_api that logs each call: a capture
 * begins, issues the run, ends, instantiates, drops the template and
 * launches; a replay only launches; a stale graph is destroyed before it
 * is captured again; a run that fails while captured, or a capture the
 * driver refuses, ends the capture, releases what was made, clears the
 * error and reports that the run goes uncaptured. No GPU needed. */
#include <stdio.h>
#include <string.h>

#include "runtime/backend/cuda_graph.h"

static char trace[1024];
static cudaError_t end_status, inst_status;
static int graphs_alive, execs_alive;

static void log_call(const char *name)
{
    size_t n = strlen(trace);
    snprintf(trace + n, sizeof trace - n, "%s%s", n ? " " : "", name);
}

static cudaError_t f_begin(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    log_call(m == cudaStreamCaptureModeThreadLocal && s == (cudaStream_t)0x5 ? "Begin" : "Begin(wrong args)");
    return cudaSuccess;
}
static cudaError_t f_end(cudaStream_t s, cudaGraph_t *g)
{
    log_call(s == (cudaStream_t)0x5 ? "End" : "End(wrong stream)");
    if (end_status != cudaSuccess) {
        *g = NULL;
        return end_status;
    }
    graphs_alive++;
    *g = (cudaGraph_t)0x10;
    return cudaSuccess;
}
static cudaError_t f_inst(cudaGraphExec_t *ge, cudaGraph_t g, unsigned long long flags)
{
    log_call(g == (cudaGraph_t)0x10 && flags == 0 ? "Instantiate" : "Instantiate(wrong args)");
    if (inst_status != cudaSuccess) return inst_status;
    execs_alive++;
    *ge = (cudaGraphExec_t)0x20;
    return cudaSuccess;
}
static cudaError_t f_launch(cudaGraphExec_t ge, cudaStream_t s)
{
    log_call(ge == (cudaGraphExec_t)0x20 && s == (cudaStream_t)0x5 ? "Launch" : "Launch(wrong args)");
    return cudaSuccess;
}
static cudaError_t f_gdestroy(cudaGraph_t g)
{
    (void)g;
    log_call("GraphDestroy");
    graphs_alive--;
    return cudaSuccess;
}
static cudaError_t f_edestroy(cudaGraphExec_t g)
{
    (void)g;
    log_call("ExecDestroy");
    execs_alive--;
    return cudaSuccess;
}
static cudaError_t f_last(void)
{
    log_call("GetLastError");
    return cudaSuccess;
}

static int issue_rc;
static int issue(void *ctx)
{
    (void)ctx;
    log_call("issue");
    return issue_rc;
}

static int fails;

static void expect(const char *what, int rc, int want_rc, const char *want)
{
    if (rc != want_rc || strcmp(trace, want) != 0) {
        fprintf(stderr, "FAIL %s: rc %d (expected %d), calls \"%s\"\n    expected \"%s\"\n", what, rc, want_rc, trace,
                want);
        fails++;
    } else
        printf("ok   %-34s %s\n", what, trace);
    trace[0] = 0;
}

int main(void)
{
    rt_cuda_api cu = {.StreamBeginCapture = f_begin, .StreamEndCapture = f_end, .GraphInstantiate = f_inst,
                      .GraphLaunch = f_launch, .GraphDestroy = f_gdestroy, .GraphExecDestroy = f_edestroy,
                      .GetLastError = f_last};
    cudaStream_t s = (cudaStream_t)0x5;
    char err[512];
    void *exec = NULL;
    int rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_CAPTURE, &exec, issue, NULL, err, sizeof err);
    expect("capture", rc, 0, "Begin issue End Instantiate GraphDestroy Launch");
    rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_REPLAY, &exec, issue, NULL, err, sizeof err);
    expect("replay", rc, 0, "Launch");
    rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_CAPTURE, &exec, issue, NULL, err, sizeof err);
    expect("capture again (pointers moved)", rc, 0, "ExecDestroy Begin issue End Instantiate GraphDestroy Launch");
    issue_rc = -2;
    rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_CAPTURE, &exec, issue, NULL, err, sizeof err);
    expect("a run failing while captured", rc, RT_CUDA_GRAPH_UNCAPTURED,
           "ExecDestroy Begin issue End GraphDestroy GetLastError");
    issue_rc = 0;
    end_status = cudaErrorStreamCaptureUnsupported;
    rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_CAPTURE, &exec, issue, NULL, err, sizeof err);
    expect("a capture the driver refuses", rc, RT_CUDA_GRAPH_UNCAPTURED, "Begin issue End GetLastError");
    if (!strstr(err, "cudaStreamEndCapture")) {
        fprintf(stderr, "FAIL the refusal's message names no call: %s\n", err);
        fails++;
    }
    end_status = cudaSuccess;
    inst_status = cudaErrorInvalidValue;
    rc = rt_cuda_graph_go(&cu, s, RT_GRAPH_CAPTURE, &exec, issue, NULL, err, sizeof err);
    expect("an instantiation that fails", rc, RT_CUDA_GRAPH_UNCAPTURED,
           "Begin issue End Instantiate GraphDestroy GetLastError");
    if (exec || graphs_alive || execs_alive) {
        fprintf(stderr, "FAIL after the failures: exec %p, %d graphs and %d executable graphs alive\n", exec,
                graphs_alive, execs_alive);
        fails++;
    }
    printf("%s\n", fails ? "FAIL" : "PASS");
    return fails != 0;
}
