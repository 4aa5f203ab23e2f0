/* One topic handle shared by threads: 4 producer threads loan and publish
 * through it, 4 consumer threads subscribe and release through it (the
 * handle's ledger under contention), plus threads
 * sharing a ring handle. Every message arrives once, in order per key. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define THREADS 4
#define PER_THREAD 20000
#define PARTITIONS 4
#define WAIT_NS 10000000000LL

static ty_topic_t* topic;
static ty_ring_t* ring;
static atomic_ulong received, ring_read;
static uint64_t last[THREADS]; /* per key (= producer thread): last seq, by its partition's consumer */

static void* produce(void* arg) {
    uint64_t key = (uint64_t)(uintptr_t)arg;
    for (uint64_t seq = 1; seq <= PER_THREAD; seq++) {
        uint64_t* b;
        CHECK(ty_loan_timed(topic, 2 * sizeof *b, (void**)&b, WAIT_NS));
        b[0] = key;
        b[1] = seq;
        if (seq % 3 == 0) {
            CHECK(ty_unloan(topic, b)); /* and loan again */
            CHECK(ty_loan_timed(topic, 2 * sizeof *b, (void**)&b, WAIT_NS));
            b[0] = key;
            b[1] = seq;
        }
        CHECK(ty_publish_timed(topic, b, 2 * sizeof *b, key, WAIT_NS));
    }
    return NULL;
}

static void* consume(void* arg) {
    uint32_t p = (uint32_t)(uintptr_t)arg;
    uint64_t expected = 0;
    for (uint64_t k = 0; k < THREADS; k++) expected += ty_partition_of(topic, k) == (int)p ? PER_THREAD : 0;
    for (uint64_t got = 0; got < expected; got++) {
        ty_msg_t m;
        CHECK(ty_subscribe(topic, p, &m, WAIT_NS));
        uint64_t v[2];
        EXPECT(m.len == sizeof v);
        memcpy(v, m.data, sizeof v);
        EXPECT(v[0] < THREADS && v[1] == last[v[0]] + 1);
        last[v[0]] = v[1];
        CHECK(ty_release(topic, &m));
        atomic_fetch_add(&received, 1);
    }
    return NULL;
}

static void* ring_writer(void* arg) {
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) CHECK(ty_ring_write(ring, &i, sizeof i, WAIT_NS));
    return NULL;
}

static void* ring_reader(void* arg) {
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        int v;
        size_t len;
        CHECK(ty_ring_read(ring, &v, sizeof v, &len, WAIT_NS));
        EXPECT(len == sizeof v && v >= 0 && v < PER_THREAD);
        atomic_fetch_add(&ring_read, 1);
    }
    return NULL;
}

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "c-threads-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = PARTITIONS;
    tc.capacity = 64;
    CHECK(ty_topic_create(reg, "shared", &tc, &topic));
    char ring_name[80];
    snprintf(ring_name, sizeof ring_name, "%s-ring", name); /* one name space for every kind */
    CHECK(ty_ring_create(ring_name, 8, 16, &ring));

    pthread_t t[4 * THREADS];
    for (int i = 0; i < THREADS; i++) {
        EXPECT(pthread_create(&t[i], NULL, consume, (void*)(uintptr_t)i) == 0);
        EXPECT(pthread_create(&t[THREADS + i], NULL, produce, (void*)(uintptr_t)i) == 0);
        EXPECT(pthread_create(&t[2 * THREADS + i], NULL, ring_reader, NULL) == 0);
        EXPECT(pthread_create(&t[3 * THREADS + i], NULL, ring_writer, NULL) == 0);
    }
    for (int i = 0; i < 4 * THREADS; i++) pthread_join(t[i], NULL);
    EXPECT(received == THREADS * PER_THREAD);
    EXPECT(ring_read == THREADS * PER_THREAD);
    ty_topic_stats_t st;
    CHECK(ty_topic_stats(topic, &st));
    EXPECT(st.published == THREADS * PER_THREAD && st.received == THREADS * PER_THREAD);
    printf("threads: %d messages through one topic handle and %d items through one ring handle, %d threads each\n",
           THREADS * PER_THREAD, THREADS * PER_THREAD, 2 * THREADS);
    ty_ring_close(ring);
    ty_topic_close(topic);
    ty_region_close(reg);
    CHECK(ty_region_remove(name));
    return 0;
}
