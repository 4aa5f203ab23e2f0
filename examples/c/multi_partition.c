/* multi_partition: one consumer process per partition.
 *
 * The parent creates a topic of 4 partitions and forks one consumer per
 * partition; each attaches by name and reads only its partition. The
 * parent publishes N messages with keys 0..N-1: a key always lands in the
 * same partition (ty_partition_of). Each consumer checks that it got
 * exactly the messages whose key maps to its partition, and exits 0.
 *
 *   multi_partition [N]     (default 20000) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <tachyon/tachyon.h>
#include <unistd.h>

#define TRY(call)                                                                              \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != TY_OK) {                                                                    \
            fprintf(stderr, "%s: %s (%s)\n", #call, ty_strerror(rc_), ty_last_error());       \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define PARTITIONS 4
#define WAIT_NS 10000000000LL

static int consumer(const char* name, uint32_t partition, uint64_t n) {
    ty_region_t* reg;
    ty_topic_t* topic;
    TRY(ty_region_open(name, NULL, &reg));
    TRY(ty_topic_open(reg, "events", &topic));
    uint64_t expected = 0;
    for (uint64_t k = 0; k < n; k++) expected += ty_partition_of(topic, k) == (int)partition;
    uint64_t got = 0;
    while (got < expected) {
        ty_msg_t m;
        TRY(ty_subscribe(topic, partition, &m, WAIT_NS));
        uint64_t key;
        memcpy(&key, m.data, sizeof key);
        if (ty_partition_of(topic, key) != (int)partition) {
            fprintf(stderr, "partition %u got key %llu\n", partition, (unsigned long long)key);
            return 1;
        }
        TRY(ty_release(topic, &m));
        got++;
    }
    printf("consumer of partition %u (pid %d): %llu messages, all of its keys\n", partition, (int)getpid(),
           (unsigned long long)got);
    fflush(stdout);
    return 0;
}

int main(int argc, char** argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
    char name[64];
    snprintf(name, sizeof name, "c-multi-partition-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    ty_region_t* reg;
    TRY(ty_region_open(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = PARTITIONS;
    tc.capacity = 256;
    ty_topic_t* topic;
    TRY(ty_topic_create(reg, "events", &tc, &topic));

    pid_t pids[PARTITIONS];
    fflush(stdout);
    for (uint32_t p = 0; p < PARTITIONS; p++) {
        pids[p] = fork();
        if (pids[p] < 0) return 1;
        if (pids[p] == 0) _exit(consumer(name, p, n));
    }
    for (uint64_t key = 0; key < n; key++) {
        uint64_t* buf;
        TRY(ty_loan_timed(topic, sizeof *buf, (void**)&buf, WAIT_NS));
        *buf = key;
        TRY(ty_publish_timed(topic, buf, sizeof *buf, key, WAIT_NS));
    }
    int failed = 0;
    for (uint32_t p = 0; p < PARTITIONS; p++) {
        int status;
        waitpid(pids[p], &status, 0);
        failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    printf("published %llu messages over %d partitions; %s\n", (unsigned long long)n, PARTITIONS,
           failed ? "a consumer FAILED" : "every consumer got its own");
    ty_topic_close(topic);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    return failed;
}
