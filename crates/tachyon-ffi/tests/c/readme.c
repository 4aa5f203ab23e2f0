/* The README's snippet made whole: a producer that publishes N keyed
 * orders and exits, and a consumer, in another process, that reads all N
 * from every partition (a thread per partition) and checks that the orders
 * of each key arrive in the order they were published.
 *
 *   readme produce NAME N    publish N orders (waits for room if needed)
 *   readme consume NAME N    read them all, check counts and per-key order
 *   readme remove NAME       ty_region_remove, and check /dev/shm is clean
 *
 * The test runs produce then consume (the region persists after the
 * producer exits), and both at once with far more orders than the rings
 * hold. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define KEYS 97
#define PARTITIONS 8

struct order {
    uint64_t user_id;
    uint64_t seq; /* per user, from 1 */
    double price;
};

static int produce(const char* name, uint64_t n) {
    /* --- the README's producer, unchanged --- */
    ty_region_t* reg;
    ty_region_conf_t rc = ty_region_conf_default; /* a value: struct copy */
    rc.size = 64 << 20;
    CHECK(ty_region_open(name, &rc, &reg)); /* create, or open a compatible one */
    ty_topic_t* topic;
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = 8; /* power of two */
    tc.capacity = 1024;
    CHECK(ty_topic_create(reg, "orders", &tc, &topic));
    uint64_t seq[KEYS] = {0};
    for (uint64_t i = 0; i < n; i++) {
        struct order order = {.user_id = i % KEYS, .price = (double)i};
        order.seq = ++seq[order.user_id];
        char* buf;
        CHECK(ty_loan(topic, 4096, (void**)&buf, NULL)); /* NULL: default options */
        memcpy(buf, &order, sizeof order);
        CHECK(ty_publish(topic, buf, sizeof order, order.user_id)); /* waits for room */
    }
    ty_topic_close(topic);
    ty_region_close(reg);
    return 0;
}

struct consumer {
    ty_topic_t* topic;
    uint32_t partition;
    uint64_t expected; /* orders of the keys of this partition */
    uint64_t* last;    /* last seq per key (each key is read by one thread) */
};

static void* consume_partition(void* arg) {
    struct consumer* c = arg;
    ty_msg_t m;
    uint64_t got = 0;
    /* The README's loop, bounded: it stops after the orders it expects and a
     * stall of 30 s fails it. */
    while (got < c->expected && ty_subscribe(c->topic, c->partition, &m, 30000000000LL) == TY_OK) {
        struct order o;
        EXPECT(m.len == sizeof o);
        EXPECT(m.partition == c->partition);
        memcpy(&o, m.data, sizeof o); /* m.data points into shared memory */
        EXPECT(o.user_id < KEYS);
        EXPECT(ty_partition_of(c->topic, o.user_id) == (int)c->partition);
        if (o.seq != c->last[o.user_id] + 1) {
            fprintf(stderr, "key %llu: seq %llu after %llu\n", (unsigned long long)o.user_id,
                    (unsigned long long)o.seq, (unsigned long long)c->last[o.user_id]);
            exit(1);
        }
        c->last[o.user_id] = o.seq;
        CHECK(ty_release(c->topic, &m));
        got++;
    }
    if (got != c->expected) {
        fprintf(stderr, "partition %u: %llu of %llu orders: %s\n", c->partition, (unsigned long long)got,
                (unsigned long long)c->expected, ty_last_error());
        exit(1);
    }
    return NULL;
}

static int consume(const char* name, uint64_t n) {
    ty_region_t* reg;
    /* The producer may not have created it yet (concurrent run): retry. */
    int rc;
    for (int i = 0; (rc = ty_region_open(name, NULL, &reg)) == TY_ENOENT && i < 3000; i++) usleep(10000);
    CHECK(rc); /* NULL conf: attach with defaults */
    ty_topic_t* topic;
    for (int i = 0; (rc = ty_topic_open(reg, "orders", &topic)) == TY_ENOENT && i < 3000; i++) usleep(10000);
    CHECK(rc);
    EXPECT(ty_topic_partitions(topic) == PARTITIONS);
    uint64_t last[KEYS] = {0};
    struct consumer cs[PARTITIONS];
    pthread_t threads[PARTITIONS];
    for (uint32_t p = 0; p < PARTITIONS; p++) cs[p] = (struct consumer){topic, p, 0, last};
    for (uint64_t i = 0; i < n; i++) cs[ty_partition_of(topic, i % KEYS)].expected++;
    for (uint32_t p = 0; p < PARTITIONS; p++) EXPECT(pthread_create(&threads[p], NULL, consume_partition, &cs[p]) == 0);
    for (uint32_t p = 0; p < PARTITIONS; p++) pthread_join(threads[p], NULL);
    for (uint64_t k = 0; k < KEYS; k++) EXPECT(last[k] == n / KEYS + (k < n % KEYS));
    ty_topic_stats_t st;
    CHECK(ty_topic_stats(topic, &st));
    EXPECT(st.received >= n && st.lost == 0 && st.corrupt == 0);
    ty_topic_close(topic);
    ty_region_close(reg);
    printf("consumer: %llu orders from %d partitions, per-key order kept\n", (unsigned long long)n, PARTITIONS);
    return 0;
}

static int removes(const char* name) {
    CHECK(ty_region_remove(name));
    EXPECT_RC(TY_ENOENT, ty_region_remove(name));
    /* Nothing of it is left in /dev/shm (its file is tachyon.u<uid>.<name>). */
    DIR* dir = opendir("/dev/shm");
    EXPECT(dir != NULL);
    size_t n = strlen(name);
    for (struct dirent* e; (e = readdir(dir)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l > n && strcmp(e->d_name + l - n, name) == 0 && e->d_name[l - n - 1] == '.') {
            fprintf(stderr, "/dev/shm/%s is left after ty_region_remove\n", e->d_name);
            exit(1);
        }
    }
    closedir(dir);
    printf("removed: nothing left in /dev/shm\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "produce") == 0) return produce(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "consume") == 0) return consume(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 3 && strcmp(argv[1], "remove") == 0) return removes(argv[2]);
    fprintf(stderr, "usage: readme produce|consume NAME N | readme remove NAME\n");
    return 2;
}
