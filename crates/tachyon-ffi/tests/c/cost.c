/* cost: what the C boundary costs per message, in one process (no peer, no
 * waiting): loan, publish, subscribe and release of a SIZE-byte message on
 * one topic, COUNT times, with the calls and timeouts of
 * examples/c/pingpong.c. Prints the mean time per message. Its Rust twin is
 * crates/tachyon-ffi/examples/cost.rs; docs/c-api.md ("Measured") compares
 * the two, by time and under `valgrind --tool=callgrind` (instructions).
 * Not one of run.sh's tests (it measures, it checks nothing).
 *
 *   cost [COUNT [SIZE]]     (defaults 1000000 256) */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tachyon/tachyon.h>
#include <time.h>
#include <unistd.h>

#define TRY(call)                                                                         \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != TY_OK) {                                                               \
            fprintf(stderr, "%s: %s (%s)\n", #call, ty_strerror(rc_), ty_last_error());  \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#define WAIT_NS 10000000000LL

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
    long count = argc > 1 ? atol(argv[1]) : 1000000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 256;
    if (count < 1 || size < 1 || size > TY_MAX_MESSAGE) {
        fprintf(stderr, "usage: cost [COUNT [SIZE]]\n");
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "c-cost-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    TRY(ty_region_create(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = 64;
    ty_topic_t* t;
    TRY(ty_topic_create(reg, "t", &tc, &t));
    long long t0 = now_ns();
    for (long i = 0; i < count; i++) {
        void* buf;
        TRY(ty_loan_timed(t, size, &buf, WAIT_NS));
        memset(buf, (int)(i & 0xff), size);
        TRY(ty_publish_timed(t, buf, size, 0, WAIT_NS));
        ty_msg_t m;
        TRY(ty_subscribe(t, 0, &m, WAIT_NS));
        TRY(ty_release(t, &m));
    }
    printf("C: %.1f ns per message (loan, publish, subscribe, release)\n", (double)(now_ns() - t0) / (double)count);
    ty_topic_close(t);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    return 0;
}
