/* The CUDA runtime API of the GPU backend, opened with dlopen.
 *
 * tgc links no CUDA library, so one binary starts on any machine, with or
 * without a driver: libcudart is opened on first use and the functions the
 * GPU backend calls are resolved into rt_cuda_api (a table of function
 * pointers); the toolkit's headers give types and enums only. The library
 * is looked for as
 *
 *     libcudart.so.N   (N: the major version of the headers tgc was built with)
 *     libcudart.so
 *     $CUDA_HOME/lib64, $CUDA_PATH/lib64, then the lib64 of the toolkit
 *     CMake found, each with libcudart.so.N
 *
 * Without TGC_HAVE_CUDA (a build without the toolkit) the functions below
 * exist and report "this tgc was built without the CUDA toolkit".
 *
 * Errors of CUDA calls (rt_cuda_ok) name the call, what it was doing (a
 * kernel, a GEMM, an IR node) and the status's name and text:
 *
 *     cudaLaunchKernel (kernel k12_softmax, node layers.0.softmax): cudaErrorInvalidValue: invalid argument
 */
#ifndef TGC_RT_CUDA_H
#define TGC_RT_CUDA_H
#include <stdbool.h>
#include <stddef.h>

#include "support/diag.h"

/* What the check script and the run summary print about a device. */
typedef struct rt_cuda_device_info {
    int index;
    char name[256];
    int cc_major, cc_minor;   /* compute capability: 9.0 on an H100 / H200 */
    int sms;                  /* multiprocessors */
    size_t mem_free, mem_total;
    int driver_version;       /* CUDA version the driver supports, e.g. 13000 */
    int runtime_version;      /* version of the libcudart that was loaded */
} rt_cuda_device_info;

/* The number of CUDA devices; 0 after reporting why there are none:
 * "no CUDA device: <cudaGetErrorString>" when the runtime loaded but the
 * driver or the device is missing, "cannot load the CUDA runtime: ..." and
 * "this tgc was built without the CUDA toolkit" otherwise. */
int rt_cuda_device_count(diag *d);
/* Fills *out for device `dev` (selecting it on the calling thread). */
bool rt_cuda_device_query(int dev, rt_cuda_device_info *out, diag *d);
/* The NVRTC architecture of a device: "sm_90". */
void rt_cuda_arch(const rt_cuda_device_info *info, char *out, size_t n);
/* The path libcudart was loaded from ("" before a successful load). */
const char *rt_cuda_library_path(void);

#ifdef TGC_HAVE_CUDA
#include <cuda_runtime_api.h>

/* The runtime functions the GPU backend uses. Member names are the API's
 * without the "cuda" prefix, so no header macro (per-thread default stream
 * variants) can rename them. */
typedef struct rt_cuda_api {
    const char *(*GetErrorName)(cudaError_t);
    const char *(*GetErrorString)(cudaError_t);
    cudaError_t (*GetLastError)(void);
    cudaError_t (*DriverGetVersion)(int *);
    cudaError_t (*RuntimeGetVersion)(int *);
    cudaError_t (*GetDeviceCount)(int *);
    cudaError_t (*SetDevice)(int);
    cudaError_t (*DeviceGetAttribute)(int *, enum cudaDeviceAttr, int);
    /* Only the name is read from cudaDeviceProp (its first member), into a
     * buffer larger than any version's struct. */
    cudaError_t (*GetDeviceProperties)(void *, int);
    cudaError_t (*MemGetInfo)(size_t *, size_t *);
    cudaError_t (*DeviceSynchronize)(void);
    cudaError_t (*StreamCreateWithFlags)(cudaStream_t *, unsigned);
    cudaError_t (*StreamDestroy)(cudaStream_t);
    cudaError_t (*StreamSynchronize)(cudaStream_t);
    cudaError_t (*EventCreate)(cudaEvent_t *);
    cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
    cudaError_t (*EventElapsedTime)(float *, cudaEvent_t, cudaEvent_t);
    cudaError_t (*EventDestroy)(cudaEvent_t);
    cudaError_t (*StreamWaitEvent)(cudaStream_t, cudaEvent_t, unsigned);
    cudaError_t (*Malloc)(void **, size_t);
    cudaError_t (*Free)(void *);
    cudaError_t (*MallocHost)(void **, size_t);
    cudaError_t (*FreeHost)(void *);
    cudaError_t (*Memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
    cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
    cudaError_t (*MemsetAsync)(void *, int, size_t, cudaStream_t);
    cudaError_t (*LibraryLoadData)(cudaLibrary_t *, const void *, enum cudaJitOption *, void **, unsigned,
                                   enum cudaLibraryOption *, void **, unsigned);
    cudaError_t (*LibraryUnload)(cudaLibrary_t);
    cudaError_t (*LibraryGetKernel)(cudaKernel_t *, cudaLibrary_t, const char *);
    cudaError_t (*KernelSetAttributeForDevice)(cudaKernel_t, enum cudaFuncAttribute, int, int);
    cudaError_t (*LaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
    /* --cuda-graphs (runtime/backend/cuda_graph.c) */
    cudaError_t (*StreamBeginCapture)(cudaStream_t, enum cudaStreamCaptureMode);
    cudaError_t (*StreamEndCapture)(cudaStream_t, cudaGraph_t *);
    cudaError_t (*GraphInstantiate)(cudaGraphExec_t *, cudaGraph_t, unsigned long long);
    cudaError_t (*GraphLaunch)(cudaGraphExec_t, cudaStream_t);
    cudaError_t (*GraphDestroy)(cudaGraph_t);
    cudaError_t (*GraphExecDestroy)(cudaGraphExec_t);
} rt_cuda_api;

/* Opens libcudart once (thread-safe) and resolves every function; NULL
 * after reporting which library or symbol is missing. Needs no GPU. */
const rt_cuda_api *rt_cuda_load(diag *d);

/* true when st is cudaSuccess; otherwise writes
 * "CALL (CONTEXT): cudaErrorName: text" into buf (CONTEXT may be NULL or "")
 * and returns false. */
bool rt_cuda_ok(cudaError_t st, const char *call, const char *context, char *buf, size_t n);
#endif

#endif
