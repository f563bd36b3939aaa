/* The C tests' assertions: each CHECK counts, a failed one is reported with
 * its file and line and counted in `failures`, and the test goes on; main()
 * exits non-zero when failures != 0. One translation unit per test program. */
#ifndef M0_TESTS_CHECK_H
#define M0_TESTS_CHECK_H

#include <stdio.h>

static int failures;
static int checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);                                   \
        }                                                                                                              \
    } while (0)

#endif
