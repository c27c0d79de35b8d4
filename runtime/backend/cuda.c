#include "cuda.h"

#include <stdio.h>
#include <string.h>

#ifndef TGC_HAVE_CUDA

static const char no_toolkit[] = "--backend cuda: this tgc was built without the CUDA toolkit (configure with "
                                 "the toolkit installed)";

int rt_cuda_device_count(diag *d)
{
    diag_error_plain(d, "%s", no_toolkit);
    return 0;
}

bool rt_cuda_device_query(int dev, rt_cuda_device_info *out, diag *d)
{
    (void)dev;
    memset(out, 0, sizeof *out);
    diag_error_plain(d, "%s", no_toolkit);
    return false;
}

const char *rt_cuda_library_path(void) { return ""; }

#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

/* The version of the headers: libcudart.so.13 for CUDA 13. */
#define CUDART_MAJOR (CUDART_VERSION / 1000)

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_cuda_api api;
static bool loaded;
static char lib_path[1024];

/* Where the toolkit's libraries are: CMake's CUDAToolkit_LIBRARY_DIR. */
#ifndef TGC_CUDA_LIBDIR
#define TGC_CUDA_LIBDIR ""
#endif

static void *open_cudart(char *why, size_t n)
{
    char name[64], path[1024];
    snprintf(name, sizeof name, "libcudart.so.%d", CUDART_MAJOR);
    const char *dirs[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), NULL};
    why[0] = 0;
    /* First by soname (LD_LIBRARY_PATH, the loader's cache), then in the
     * toolkit's directories. */
    for (int i = 0; i < 2 + 3; i++) {
        if (i == 0) snprintf(path, sizeof path, "%s", name);
        else if (i == 1) snprintf(path, sizeof path, "libcudart.so");
        else if (i < 4) {
            if (!dirs[i - 2] || !*dirs[i - 2]) continue;
            snprintf(path, sizeof path, "%s/lib64/%s", dirs[i - 2], name);
        } else {
            if (!*TGC_CUDA_LIBDIR) continue;
            snprintf(path, sizeof path, "%s/%s", TGC_CUDA_LIBDIR, name);
        }
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(lib_path, sizeof lib_path, "%s", path);
            return h;
        }
        if (!why[0]) snprintf(why, n, "%s", dlerror()); /* the soname's reason says most */
    }
    return NULL;
}

/* Every function, by its exported name. */
#define API_SYMS(X)                                                                                                    \
    X(GetErrorName) X(GetErrorString) X(GetLastError) X(DriverGetVersion) X(RuntimeGetVersion) X(GetDeviceCount)      \
    X(SetDevice) X(DeviceGetAttribute) X(MemGetInfo) X(DeviceSynchronize) X(StreamCreateWithFlags)                     \
    X(StreamDestroy) X(StreamSynchronize) X(EventCreate) X(EventRecord) X(EventElapsedTime) X(EventDestroy) X(StreamWaitEvent)          \
    X(Malloc) X(Free) X(MallocHost) X(FreeHost) X(Memcpy) X(MemcpyAsync) X(MemsetAsync) X(LibraryLoadData)          \
    X(LibraryUnload) X(LibraryGetKernel) X(KernelSetAttributeForDevice) X(LaunchKernel) X(StreamBeginCapture)        \
    X(StreamEndCapture) X(GraphInstantiate) X(GraphLaunch) X(GraphDestroy) X(GraphExecDestroy)

static bool resolve(void *h, diag *d)
{
    const char *missing = NULL;
#define RESOLVE(fn)                                                                                                    \
    *(void **)&api.fn = dlsym(h, "cuda" #fn);                                                                          \
    if (!api.fn && !missing) missing = "cuda" #fn;
    API_SYMS(RESOLVE)
#undef RESOLVE
    /* CUDA 12 exports the current cudaDeviceProp under a _v2 name. */
    *(void **)&api.GetDeviceProperties = dlsym(h, "cudaGetDeviceProperties_v2");
    if (!api.GetDeviceProperties) *(void **)&api.GetDeviceProperties = dlsym(h, "cudaGetDeviceProperties");
    if (!api.GetDeviceProperties && !missing) missing = "cudaGetDeviceProperties";
    if (missing) {
        diag_error_plain(d, "the CUDA runtime '%s' lacks %s (tgc needs CUDA %d.0 or later: the library API)",
                         lib_path, missing, CUDART_MAJOR >= 12 ? 12 : CUDART_MAJOR);
        return false;
    }
    return true;
}

const rt_cuda_api *rt_cuda_load(diag *d)
{
    pthread_mutex_lock(&load_lock);
    if (!loaded) {
        char why[512];
        void *h = open_cudart(why, sizeof why);
        if (!h)
            diag_error_plain(d, "cannot load the CUDA runtime libcudart.so.%d (set LD_LIBRARY_PATH or CUDA_HOME): %s",
                             CUDART_MAJOR, why);
        else if (!resolve(h, d)) {
            dlclose(h);
            lib_path[0] = 0;
        } else
            loaded = true;
    }
    pthread_mutex_unlock(&load_lock);
    return loaded ? &api : NULL;
}

const char *rt_cuda_library_path(void) { return lib_path; }

bool rt_cuda_ok(cudaError_t st, const char *call, const char *context, char *buf, size_t n)
{
    if (st == cudaSuccess) return true;
    const char *name = loaded ? api.GetErrorName(st) : NULL, *text = loaded ? api.GetErrorString(st) : NULL;
    snprintf(buf, n, "%s%s%s%s: %s: %s", call, context && *context ? " (" : "", context ? context : "",
             context && *context ? ")" : "", name ? name : "cudaError", text ? text : "unknown error");
    /* The code too, for errors newer than the library's names. */
    if (!name) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, " (%d)", (int)st);
    }
    return false;
}

int rt_cuda_device_count(diag *d)
{
    const rt_cuda_api *cu = rt_cuda_load(d);
    if (!cu) return 0;
    int count = 0;
    cudaError_t st = cu->GetDeviceCount(&count);
    if (st != cudaSuccess) {
        diag_error_plain(d, "no CUDA device: %s (%s)", cu->GetErrorString(st), cu->GetErrorName(st));
        return 0;
    }
    if (count <= 0) {
        diag_error_plain(d, "no CUDA device: the driver reports none");
        return 0;
    }
    return count;
}

bool rt_cuda_device_query(int dev, rt_cuda_device_info *out, diag *d)
{
    memset(out, 0, sizeof *out);
    out->index = dev;
    const rt_cuda_api *cu = rt_cuda_load(d);
    if (!cu) return false;
    char err[512], ctx[32];
    snprintf(ctx, sizeof ctx, "device %d", dev);
    /* Larger than any version's struct, aligned for it. */
    static _Thread_local union { struct cudaDeviceProp p; char bytes[16384]; } props;
    bool ok = rt_cuda_ok(cu->SetDevice(dev), "cudaSetDevice", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->GetDeviceProperties(&props, dev), "cudaGetDeviceProperties", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->DeviceGetAttribute(&out->cc_major, cudaDevAttrComputeCapabilityMajor, dev),
                         "cudaDeviceGetAttribute", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->DeviceGetAttribute(&out->cc_minor, cudaDevAttrComputeCapabilityMinor, dev),
                         "cudaDeviceGetAttribute", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->DeviceGetAttribute(&out->sms, cudaDevAttrMultiProcessorCount, dev),
                         "cudaDeviceGetAttribute", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->MemGetInfo(&out->mem_free, &out->mem_total), "cudaMemGetInfo", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->DriverGetVersion(&out->driver_version), "cudaDriverGetVersion", ctx, err, sizeof err) &&
              rt_cuda_ok(cu->RuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion", ctx, err, sizeof err);
    if (!ok) {
        diag_error_plain(d, "%s", err);
        return false;
    }
    memcpy(out->name, props.bytes, sizeof out->name - 1); /* the name is cudaDeviceProp's first member */
    return true;
}

#endif

void rt_cuda_arch(const rt_cuda_device_info *info, char *out, size_t n)
{
    snprintf(out, n, "sm_%d%d", info->cc_major, info->cc_minor);
}
