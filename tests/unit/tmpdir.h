/* A test's scratch directory (the test makes it with mkdtemp) and paths in
 * it; the last four paths stay valid. */
#ifndef TGC_TEST_TMPDIR_H
#define TGC_TEST_TMPDIR_H

#include <stdio.h>

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

#endif
