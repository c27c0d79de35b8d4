/* libFuzzer target for the safetensors reader (fuzz/run.sh): any file may
 * be rejected, never with a crash, leak or sanitizer report; a file that
 * opens has tensors whose data lies inside the mapping (every byte is read
 * here, so ASan checks it) and lookups by name that find them. */
#include <stdint.h>

#include "fuzz_util.h"
#include "runtime/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".safetensors");
    diag d;
    diag_init(&d, fuzz_sink());
    tgc_st_file *f = tgc_st_open(path, &d);
    if (f) {
        unsigned sum = 0;
        for (int i = 0; i < tgc_st_count(f); i++) {
            const tgc_st_info *t = tgc_st_at(f, i);
            if (tgc_st_find(f, t->name) != t) fuzz_fail("fuzz_safetensors", "a tensor is not found by its name", t->name, NULL);
            const unsigned char *p = t->data;
            for (int64_t j = 0; j < t->nbytes; j++) sum += p[j];
            (void)tgc_st_expect(f, t->name, t->dtype, t->rank, t->shape, &d);
        }
        for (int i = 0; i < tgc_st_meta_count(f); i++) {
            tgc_st_kv kv = tgc_st_meta_at(f, i);
            if (tgc_st_meta(f, kv.key) == NULL) fuzz_fail("fuzz_safetensors", "a metadata key is not found", kv.key, NULL);
        }
        (void)sum;
        tgc_st_close(f);
    }
    diag_free(&d);
    return 0;
}
