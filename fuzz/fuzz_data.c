/* libFuzzer target for the dataset readers (fuzz/run.sh): plain text,
 * llm.c token files and Megatron indexed datasets. The first input byte
 * picks the format and file name (*.bin must be an llm.c file unless a
 * PREFIX.idx sits beside it), the vocabulary checked and the sequence
 * length. Megatron (bit 6): the next two bytes are the length of the .idx
 * part, the rest after it is the .bin part, and bit 7 opens the dataset by
 * its prefix or by its .idx. A dataset that opens is cut into batches,
 * sequentially and shuffled: every token of a batch is below the
 * vocabulary and equals tgc_data_token of its stream position, and the
 * document starts run from 0 to the token count without decreasing. */
#include <stdint.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "runtime/io/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes the input's files; returns the path to open. */
static const char *fuzz_data_files(const uint8_t *data, size_t size, unsigned sel)
{
    static char prefix[128], idx[140];
    if (!(sel & 64)) {
        const char *path = fuzz_file(data, size, (sel & 1) ? ".bin" : ".txt");
        snprintf(prefix, sizeof prefix, "%s", path);
        snprintf(idx, sizeof idx, "%.*s.idx", (int)(strlen(prefix) - 4), prefix);
        unlink(idx); /* a .bin is llm.c unless an index sits beside it */
        return prefix;
    }
    size_t n = size >= 2 ? (size_t)data[0] | (size_t)data[1] << 8 : 0, skip = size >= 2 ? 2 : size;
    if (n > size - skip) n = size - skip;
    const char *path = fuzz_file(data + skip, n, ".idx");
    snprintf(idx, sizeof idx, "%s", path);
    fuzz_file(data + skip + n, size - skip - n, ".bin");
    snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(idx) - 4), idx);
    return (sel & 128) ? idx : prefix;
}

/* Batches against tgc_data_token, sequential (order NULL) or shuffled. */
static void fuzz_data_batches(tgc_data *t, tgc_data_order *order, int64_t s, int64_t vocab)
{
    enum { B = 2 };
    int32_t tok[8 * B], lab[8 * B];
    int64_t n = tgc_data_nsamples(t, s);
    for (int64_t step = 0; step < 3; step++) {
        if (order) tgc_data_batch_rows(t, order, step, s, B, 0, B, tok, lab);
        else tgc_data_batch(t, step, s, B, tok, lab);
        for (int64_t b = 0; b < B; b++) {
            int64_t j = step * B + b, sample = order ? tgc_data_order_sample(order, j) : j % n;
            for (int64_t i = 0; i < s; i++) {
                int32_t x = tok[i * B + b], y = lab[i * B + b];
                if (vocab > 0 && (x < 0 || x >= vocab || y < 0 || y >= vocab))
                    fuzz_fail("fuzz_data", "a token outside the vocabulary was accepted", NULL, NULL);
                if (x != tgc_data_token(t, sample * s + i) || y != tgc_data_token(t, sample * s + i + 1))
                    fuzz_fail("fuzz_data", "a batch differs from tgc_data_token", NULL, NULL);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    static const int64_t vocabs[4] = {0, 256, 50257, 3};
    unsigned sel = data[0];
    const char *path = fuzz_data_files(data + 1, size - 1, sel);
    int64_t vocab = vocabs[(sel >> 1) & 3], s = 1 + ((sel >> 3) & 7);
    diag d;
    diag_init(&d, fuzz_sink());
    tgc_data *t = tgc_data_open(path, vocab, &d);
    if (t) {
        int64_t prev = 0, ndoc = tgc_data_ndocuments(t);
        for (int64_t k = 0; k <= ndoc; k++) {
            int64_t at = tgc_data_document_start(t, k);
            if (at < prev || (k == 0 && at != 0) || (k == ndoc && at != tgc_data_ntokens(t)))
                fuzz_fail("fuzz_data", "document starts out of order", NULL, NULL);
            prev = at;
        }
        if (tgc_data_check_seq(t, s, &d)) {
            tgc_data_order *order = tgc_data_order_new(tgc_data_nsamples(t, s), 1234);
            fuzz_data_batches(t, NULL, s, vocab);
            fuzz_data_batches(t, order, s, vocab);
            tgc_data_order_free(order);
        }
        tgc_data_close(t);
    }
    diag_free(&d);
    return 0;
}
