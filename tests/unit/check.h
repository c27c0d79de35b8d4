/* A minimal test harness: CHECK records a failure with file:line and goes on;
 * the test's exit status is the number of failures (0 = pass). */
#ifndef TGC_TEST_CHECK_H
#define TGC_TEST_CHECK_H
#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond)                                                          \
    do {                                                                     \
        check_count++;                                                       \
        if (!(cond)) {                                                       \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

#define CHECK_STR(a, b)                                                      \
    do {                                                                     \
        const char *a_ = (a), *b_ = (b);                                     \
        check_count++;                                                       \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                             \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: check failed: \"%s\" == \"%s\"\n", __FILE__, __LINE__, \
                    a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
        }                                                                    \
    } while (0)

#define CHECK_DONE()                                                         \
    do {                                                                     \
        printf("%d checks, %d failed\n", check_count, check_failures);       \
        return check_failures ? 1 : 0;                                       \
    } while (0)

#endif
