/* libFuzzer target for the dataset readers (fuzz/run.sh): plain text and
 * llm.c token files. The first input byte picks the file name (*.bin must
 * be an llm.c file), the vocabulary checked and the sequence length; the
 * rest is the file. A file that opens is cut into batches, sequentially
 * and shuffled, and every token of a batch is below the vocabulary. */
#include <stdint.h>

#include "fuzz_util.h"
#include "runtime/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    static const int64_t vocabs[4] = {0, 256, 50257, 3};
    unsigned sel = data[0];
    const char *path = fuzz_file(data + 1, size - 1, (sel & 1) ? ".bin" : ".txt");
    int64_t vocab = vocabs[(sel >> 1) & 3], s = 1 + ((sel >> 3) & 7), B = 2;
    diag d;
    diag_init(&d, fuzz_sink());
    tgc_data *t = tgc_data_open(path, vocab, &d);
    if (t) {
        if (tgc_data_check_seq(t, s, &d)) {
            int32_t tok[16 * 2], lab[16 * 2];
            tgc_data_order *order = tgc_data_order_new(tgc_data_nsamples(t, s), 1234);
            for (int64_t step = 0; step < 3; step++) {
                tgc_data_batch(t, step, s, B, tok, lab);
                tgc_data_batch_rows(t, order, step, s, B, 1, 1, tok, lab);
                for (int64_t i = 0; i < s; i++)
                    if (vocab > 0 && (tok[i] < 0 || tok[i] >= vocab || lab[i] < 0 || lab[i] >= vocab))
                        fuzz_fail("fuzz_data", "a token outside the vocabulary was accepted", NULL, NULL);
            }
            tgc_data_order_free(order);
        }
        tgc_data_close(t);
    }
    diag_free(&d);
    return 0;
}
