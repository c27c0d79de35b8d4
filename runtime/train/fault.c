/* The fault-injection test hook (runtime/train/fault.h). */
#include "runtime/train/fault.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "support/env.h"

fault_hook fault_hook_read(void)
{
    fault_hook h = {.rank = -1, .iter = -1};
    const char *s = env_text("TGC_TEST_FAULT");
    if (s && sscanf(s, "%d:%" SCNd64 ":%7s", &h.rank, &h.iter, h.kind) != 3) h.rank = -1;
    return h;
}

bool fault_hook_fire(const fault_hook *h, int rank, int64_t it, diag *d)
{
    if (rank != h->rank || it != h->iter) return true;
    if (strcmp(h->kind, "kill") == 0) raise(SIGKILL);
    diag_error_plain(d, "rank %d: step %lld: TGC_TEST_FAULT: an injected failure", rank, (long long)it);
    return false;
}

