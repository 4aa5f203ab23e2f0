/* pingpong: round-trip latency between two processes over the bus, the C
 * twin of `cargo run --release --example pingpong -- SIZE COUNT`.
 *
 * The parent creates a region with the topics "ping" and "pong" and forks
 * a child. Each round the parent loans a SIZE-byte chunk, writes a
 * sequence number, publishes it on "ping" and waits for the answer on
 * "pong"; the child echoes every ping in a chunk of its own. Every
 * sequence number is checked. After 1000 warm-up rounds it prints the
 * round trip's p50, p99, p99.9, mean, min and max in nanoseconds.
 *
 *   pingpong [SIZE [COUNT [spin|hybrid|futex]]]     (defaults 256 100000 hybrid) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <tachyon/tachyon.h>
#include <time.h>
#include <unistd.h>

#define TRY(call)                                                                              \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != TY_OK) {                                                                    \
            fprintf(stderr, "%s: %s (%s)\n", #call, ty_strerror(rc_), ty_last_error());       \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define WAIT_NS 10000000000LL /* a peer silent for 10 s ends the run */
#define WARM_UP 1000

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void* a, const void* b) {
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the value below which per_mille thousandths lie. */
static uint64_t percentile(const uint64_t* sorted, size_t n, size_t per_mille) {
    size_t rank = (n * per_mille + 999) / 1000;
    return sorted[(rank ? rank : 1) - 1];
}

static void child(const char* name, uint64_t rounds) {
    ty_region_t* reg;
    ty_topic_t *ping, *pong;
    TRY(ty_region_open(name, NULL, &reg));
    TRY(ty_topic_open(reg, "ping", &ping));
    TRY(ty_topic_open(reg, "pong", &pong));
    for (uint64_t seq = 0; seq < rounds; seq++) {
        ty_msg_t m;
        TRY(ty_subscribe(ping, 0, &m, WAIT_NS));
        uint64_t got;
        memcpy(&got, m.data, sizeof got);
        if (got != seq) {
            fprintf(stderr, "child: expected ping %llu, got %llu\n", (unsigned long long)seq, (unsigned long long)got);
            exit(1);
        }
        void* buf;
        TRY(ty_loan_timed(pong, m.len, &buf, WAIT_NS));
        memcpy(buf, m.data, m.len);
        TRY(ty_publish_timed(pong, buf, m.len, 0, WAIT_NS));
        TRY(ty_release(ping, &m));
    }
    _exit(0);
}

int main(int argc, char** argv) {
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
    uint64_t count = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
    const char* policy = argc > 3 ? argv[3] : "hybrid";
    int notify = strcmp(policy, "spin") == 0    ? TY_NOTIFY_SPIN
                 : strcmp(policy, "futex") == 0 ? TY_NOTIFY_FUTEX
                                                : TY_NOTIFY_HYBRID;
    if (size < 8 || size > TY_MAX_MESSAGE || count < 1 || count > 10000000) {
        fprintf(stderr, "usage: pingpong [SIZE (8..1048576) [COUNT (1..10000000) [spin|hybrid|futex]]]\n");
        return 2;
    }
    char name[64];
    snprintf(name, sizeof name, "c-pingpong-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    TRY(ty_region_create(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = 64;
    tc.notify = notify;
    ty_topic_t *ping, *pong;
    TRY(ty_topic_create(reg, "ping", &tc, &ping));
    TRY(ty_topic_create(reg, "pong", &tc, &pong));

    uint64_t rounds = WARM_UP + count;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) child(name, rounds);
    printf("pingpong (C): %zu-byte messages, %llu round trips (+%d warm-up), %s waiting\n", size,
           (unsigned long long)count, WARM_UP, policy);

    uint64_t* samples = malloc(count * sizeof *samples);
    if (!samples) return 1;
    uint64_t started = now_ns();
    for (uint64_t seq = 0; seq < rounds; seq++) {
        uint64_t t0 = now_ns();
        unsigned char* buf;
        TRY(ty_loan_timed(ping, size, (void**)&buf, WAIT_NS));
        memcpy(buf, &seq, sizeof seq);
        memset(buf + sizeof seq, (int)(seq & 0xff), size - sizeof seq);
        TRY(ty_publish_timed(ping, buf, size, 0, WAIT_NS));
        ty_msg_t m;
        TRY(ty_subscribe(pong, 0, &m, WAIT_NS));
        uint64_t got;
        memcpy(&got, m.data, sizeof got);
        if (got != seq || m.len != size) {
            fprintf(stderr, "round %llu: pong %llu of %zu bytes\n", (unsigned long long)seq,
                    (unsigned long long)got, m.len);
            return 1;
        }
        TRY(ty_release(pong, &m));
        if (seq >= WARM_UP) samples[seq - WARM_UP] = now_ns() - t0;
    }
    double elapsed = (double)(now_ns() - started) / 1e9;
    int status;
    waitpid(pid, &status, 0);

    qsort(samples, count, sizeof *samples, cmp_u64);
    long double sum = 0;
    for (uint64_t i = 0; i < count; i++) sum += samples[i];
    printf("round trip (ns): p50 %llu  p99 %llu  p99.9 %llu  mean %.0Lf  min %llu  max %llu\n",
           (unsigned long long)percentile(samples, count, 500), (unsigned long long)percentile(samples, count, 990),
           (unsigned long long)percentile(samples, count, 999), sum / count, (unsigned long long)samples[0],
           (unsigned long long)samples[count - 1]);
    printf("%llu round trips in %.3f s: %.0f round trips/s; every sequence number checked both ways\n",
           (unsigned long long)rounds, elapsed, rounds / elapsed);
    free(samples);
    ty_topic_close(ping);
    ty_topic_close(pong);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
