/* The fault-injection test hook of a run, kept out of the production loop:
 * TGC_TEST_FAULT=RANK:ITER:kill|fail (docs/testing.md) makes rank RANK die
 * or fail at iteration ITER (1-based). Read once per rank. */
#ifndef TGC_RT_TRAIN_FAULT_H
#define TGC_RT_TRAIN_FAULT_H
#include <stdbool.h>
#include <stdint.h>

#include "support/diag.h"

typedef struct fault_hook {
    int rank;
    int64_t iter;
    char kind[8];
} fault_hook;

/* TGC_TEST_FAULT's hook (rank -1: none). */
fault_hook fault_hook_read(void);
/* Iteration `it` of `rank`: false after the injected failure reported to d
 * (or never returns: kill). */
bool fault_hook_fire(const fault_hook *h, int rank, int64_t it, diag *d);

#endif
