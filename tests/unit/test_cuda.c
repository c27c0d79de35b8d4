/* The dlopen'd CUDA runtime (runtime/backend/cuda.h), on any machine: without the
 * toolkit every entry says so; with it, libcudart loads and resolves every
 * function the GPU backend calls (no GPU needed), errors are formatted with
 * the call, its context and the status's name; with no device the count
 * is 0 and the message says "no CUDA device"; with one, its properties are
 * read. Exits 77 (skipped) when the toolkit was found at build time but
 * libcudart cannot be loaded here. */
#include <string.h>

#include "capture.h"
#include "check.h"
#include "runtime/backend/cuda.h"

static bool starts_with(const char *s, const char *prefix) { return s && strncmp(s, prefix, strlen(prefix)) == 0; }

static void test_count_and_query(void)
{
    capture cap;
    cap_init(&cap);
    int n = rt_cuda_device_count(&cap.d);
    const char *msg = cap_text(&cap);
    CHECK(n >= 0);
    if (n == 0) {
        /* Exactly one message, and the one the lit test and users see. */
        CHECK(cap.d.nerrors == 1);
#ifdef TGC_HAVE_CUDA
        CHECK(strstr(msg, "tgc: error: no CUDA device: ") != NULL);
#else
        CHECK(strstr(msg, "built without the CUDA toolkit") != NULL);
#endif
    } else {
        CHECK(cap.d.nerrors == 0);
        rt_cuda_device_info info;
        CHECK(rt_cuda_device_query(0, &info, &cap.d));
        CHECK(info.name[0] != 0);
        CHECK(info.cc_major >= 3 && info.sms > 0 && info.mem_total > 0 && info.mem_free <= info.mem_total);
        CHECK(info.runtime_version >= 12000 && info.driver_version >= info.runtime_version / 1000 * 1000);
        char arch[16];
        rt_cuda_arch(&info, arch, sizeof arch);
        CHECK(starts_with(arch, "sm_") && strlen(arch) >= 5);
        printf("device 0: %s, %s, %d SMs\n", info.name, arch, info.sms);
    }
    cap_free(&cap);
}

static void test_arch(void)
{
    rt_cuda_device_info info = {.cc_major = 9, .cc_minor = 0};
    char arch[16];
    rt_cuda_arch(&info, arch, sizeof arch);
    CHECK_STR(arch, "sm_90");
    info.cc_major = 8, info.cc_minor = 6;
    rt_cuda_arch(&info, arch, sizeof arch);
    CHECK_STR(arch, "sm_86");
}

#ifdef TGC_HAVE_CUDA
static void test_api(const rt_cuda_api *cu)
{
    /* Every pointer of the table was resolved. */
    void *const *fn = (void *const *)cu;
    for (size_t i = 0; i < sizeof *cu / sizeof(void *); i++) CHECK(fn[i] != NULL);
    CHECK(strstr(rt_cuda_library_path(), "libcudart.so") != NULL);

    char buf[256] = "untouched";
    CHECK(rt_cuda_ok(cudaSuccess, "cudaMalloc", "ctx", buf, sizeof buf));
    CHECK_STR(buf, "untouched");
    CHECK(!rt_cuda_ok(cudaErrorInvalidValue, "cudaMalloc", "the arena", buf, sizeof buf));
    /* "cudaMalloc (the arena): cudaErrorInvalidValue: <the runtime's text>" */
    CHECK(starts_with(buf, "cudaMalloc (the arena): cudaErrorInvalidValue: "));
    CHECK(strlen(buf) > strlen("cudaMalloc (the arena): cudaErrorInvalidValue: "));
    CHECK(!rt_cuda_ok(cudaErrorIllegalAddress, "cudaStreamSynchronize", NULL, buf, sizeof buf));
    CHECK(starts_with(buf, "cudaStreamSynchronize: cudaErrorIllegalAddress: "));
    /* Truncation keeps the string terminated. */
    char small[12];
    CHECK(!rt_cuda_ok(cudaErrorInvalidValue, "cudaMalloc", "a long context", small, sizeof small));
    CHECK(strlen(small) == sizeof small - 1);
}
#endif

int main(void)
{
#ifdef TGC_HAVE_CUDA
    capture cap;
    cap_init(&cap);
    const rt_cuda_api *cu = rt_cuda_load(&cap.d);
    if (!cu) {
        printf("skipped: %s", cap_text(&cap));
        cap_free(&cap);
        return 77;
    }
    CHECK(cap.d.nerrors == 0);
    cap_free(&cap);
    test_api(cu);
    CHECK(rt_cuda_load(NULL) == cu); /* loaded once */
#endif
    test_arch();
    test_count_and_query();
    CHECK_DONE();
}
