/* libFuzzer target for the checkpoint reader (fuzz/run.sh,
 * docs/checkpoints.md): the input is a checkpoint -- its first 4 bytes
 * (little-endian) the length of model.safetensors, the rest split between
 * it and optimizer.safetensors -- laid out as DIR/latest + DIR/iter_0000001/,
 * then verified and exported as `tgc export DIR -o OUT` does (the header,
 * the format version, every tensor's checksum). Any input may be rejected,
 * never with a crash, leak or sanitizer report; an accepted one writes an
 * export that the safetensors reader opens again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void put(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    data += 4, size -= 4;
    if (n > size) n = size;
    /* The checkpoint directory next to fuzz_file's private file. */
    const char *anchor = fuzz_file((const uint8_t *)"", 0, ".anchor");
    char dir[256], iter[300], path[400], out[300];
    snprintf(dir, sizeof dir, "%.*s/ckpt", (int)(strrchr(anchor, '/') - anchor), anchor);
    snprintf(iter, sizeof iter, "%s/iter_0000001", dir);
    mkdir(dir, 0700);
    mkdir(iter, 0700);
    put((snprintf(path, sizeof path, "%s/latest", dir), path), "1\n", 2);
    put((snprintf(path, sizeof path, "%s/model.safetensors", iter), path), data, n);
    put((snprintf(path, sizeof path, "%s/optimizer.safetensors", iter), path), data + n, size - n);
    snprintf(out, sizeof out, "%s/export.safetensors", dir);
    remove(out);
    diag d;
    diag_init(&d, fuzz_sink());
    if (rt_ckpt_export(dir, out, &d)) {
        tgc_st_file *f = tgc_st_open(out, &d);
        if (!f) fuzz_fail("fuzz_ckpt", "an accepted checkpoint's export does not open", out, NULL);
        tgc_st_close(f);
    }
    diag_free(&d);
    return 0;
}
