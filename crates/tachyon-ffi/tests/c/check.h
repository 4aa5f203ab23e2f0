/* Helpers of the C tests: CHECK a call returns TY_OK, else say where and
 * why and exit 1. */
#ifndef TACHYON_TEST_CHECK_H
#define TACHYON_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <tachyon/tachyon.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        int check_rc_ = (call);                                                      \
        if (check_rc_ != TY_OK) {                                                    \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__,   \
                    #call, check_rc_, ty_strerror(check_rc_), ty_last_error());      \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);     \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define EXPECT_RC(want, call)                                                        \
    do {                                                                             \
        int check_rc_ = (call);                                                      \
        if (check_rc_ != (want)) {                                                   \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %s: %s\n", __FILE__,\
                    __LINE__, #call, check_rc_, ty_strerror(check_rc_), #want,        \
                    ty_last_error());                                                \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif
