/* A diag whose output is kept in memory, so tests can assert the exact
 * message a user would see. */
#ifndef TGC_TEST_CAPTURE_H
#define TGC_TEST_CAPTURE_H
#include <stdio.h>
#include <stdlib.h>

#include "support/diag.h"

typedef struct capture {
    char *text;
    size_t len;
    FILE *f;
    diag d;
} capture;

static inline void cap_init(capture *c)
{
    c->text = NULL;
    c->f = open_memstream(&c->text, &c->len);
    diag_init(&c->d, c->f);
}

static inline const char *cap_text(capture *c)
{
    fflush(c->f);
    return c->text;
}

static inline void cap_free(capture *c)
{
    fclose(c->f);
    free(c->text);
    diag_free(&c->d);
}

#endif
