/* key_ordering: messages of one key arrive in the order they were sent.
 *
 * Two producer processes publish interleaved streams on a topic of 8
 * partitions: producer 0 owns keys 0..49, producer 1 keys 50..99, and each
 * message carries its key and a per-key sequence number. The parent reads
 * every partition (round robin, without blocking) and asserts that each
 * key's sequence numbers come 1, 2, 3, ... with no gap, repeat or
 * reordering, however the producers interleave.
 *
 *   key_ordering [PER_KEY]     (default 300 messages per key) */
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

#define KEYS 100
#define PARTITIONS 8
#define WAIT_NS 10000000000LL

struct msg {
    uint64_t key;
    uint64_t seq;
};

static void producer(const char* name, uint64_t first_key, uint64_t per_key) {
    ty_region_t* reg;
    ty_topic_t* topic;
    TRY(ty_region_open(name, NULL, &reg));
    TRY(ty_topic_open(reg, "ordered", &topic));
    for (uint64_t seq = 1; seq <= per_key; seq++) {
        for (uint64_t k = first_key; k < first_key + KEYS / 2; k++) {
            struct msg* m;
            TRY(ty_loan_timed(topic, sizeof *m, (void**)&m, WAIT_NS));
            m->key = k;
            m->seq = seq;
            TRY(ty_publish_timed(topic, m, sizeof *m, k, WAIT_NS));
        }
    }
    ty_topic_close(topic);
    ty_region_close(reg);
    _exit(0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
    uint64_t per_key = argc > 1 ? strtoull(argv[1], NULL, 10) : 300;
    char name[64];
    snprintf(name, sizeof name, "c-key-ordering-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    ty_region_t* reg;
    TRY(ty_region_open(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = PARTITIONS;
    tc.capacity = 64; /* small: the producers often wait for room */
    ty_topic_t* topic;
    TRY(ty_topic_create(reg, "ordered", &tc, &topic));

    pid_t pids[2];
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] < 0) return 1;
        if (pids[i] == 0) producer(name, (uint64_t)i * (KEYS / 2), per_key);
    }

    uint64_t last[KEYS] = {0};
    uint64_t total = per_key * KEYS, got = 0;
    double deadline = now_s() + 60; /* a stuck run fails instead of hanging */
    while (got < total) {
        int idle = 1;
        for (uint32_t p = 0; p < PARTITIONS; p++) {
            ty_msg_t m;
            int rc_ = ty_try_subscribe(topic, p, &m);
            if (rc_ == TY_EAGAIN) continue;
            TRY(rc_);
            idle = 0;
            struct msg v;
            memcpy(&v, m.data, sizeof v);
            TRY(ty_release(topic, &m));
            if (v.key >= KEYS || v.seq != last[v.key] + 1) {
                fprintf(stderr, "key %llu: seq %llu after %llu: order broken\n", (unsigned long long)v.key,
                        (unsigned long long)v.seq, (unsigned long long)last[v.key]);
                return 1;
            }
            last[v.key] = v.seq;
            got++;
        }
        if (idle) {
            if (now_s() > deadline) {
                fprintf(stderr, "stalled after %llu of %llu messages\n", (unsigned long long)got,
                        (unsigned long long)total);
                return 1;
            }
            usleep(50);
        }
    }
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    printf("%llu messages of %d keys from 2 producers: every key in order (FIFO per key)\n",
           (unsigned long long)got, KEYS);
    ty_topic_close(topic);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    return failed;
}
