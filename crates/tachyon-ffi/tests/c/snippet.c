/* The README's snippet with every one of its lines unchanged (the region
 * is even called "demo": the test runner points TACHYON_SHM_DIR at a
 * private directory), made whole:
 *
 *   snippet produce N   the producer part, publishing N keyed orders
 *   snippet consume N   a process per partition running the consumer part;
 *                       handle() checks each key's orders come in order and
 *                       ends the process once its partition's share is in
 *   snippet remove      ty_region_remove("demo")
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <tachyon/tachyon.h>
#include <unistd.h>

#define KEYS 31

struct order_t {
    uint64_t user_id;
    uint64_t seq;
};

static uint64_t last[KEYS], expected, got;

static void handle(const void* data, size_t len) {
    struct order_t o;
    if (len != sizeof o) exit(3);
    memcpy(&o, data, sizeof o);
    if (o.user_id >= KEYS || o.seq != last[o.user_id] + 1) {
        fprintf(stderr, "user %llu: order %llu after %llu\n", (unsigned long long)o.user_id,
                (unsigned long long)o.seq, (unsigned long long)last[o.user_id % KEYS]);
        exit(4);
    }
    last[o.user_id] = o.seq;
    if (++got == expected) exit(0);
}

static void produce(uint64_t n) {
    ty_region_t* reg;
    ty_region_conf_t rc = ty_region_conf_default;   /* a value: struct copy */
    rc.size = 64 << 20;
    ty_region_open("demo", &rc, &reg);                /* a configuration: create, or open a compatible existing one */
    ty_topic_t* topic;
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = 8;        /* power of two */
    tc.capacity   = 1024;
    ty_topic_create(reg, "orders", &tc, &topic);
    uint64_t seq[KEYS] = {0};
    for (uint64_t i = 0; i < n; i++) {
        struct order_t order = {i % KEYS, 0};
        order.seq = ++seq[order.user_id];
        char* buf;
        ty_loan(topic, 4096, (void**)&buf, NULL);         /* NULL: default options, wait per the topic's policy */
        memcpy(buf, &order, sizeof order);
        ty_publish(topic, buf, sizeof order, order.user_id);   /* waits for room per the topic's policy */
    }
}

static void consume(uint32_t partition) {
    ty_region_t* reg;
    ty_topic_t* topic;
    /* another process */
    ty_region_open("demo", NULL, &reg);               /* NULL conf: attach with defaults */
    ty_topic_open(reg, "orders", &topic);
    ty_msg_t m;
    while (ty_subscribe(topic, partition, &m, -1) == TY_OK) {   /* timeout in ns, -1 = forever */
        handle(m.data, m.len);                        /* points into shared memory */
        ty_release(topic, &m);
    }
    exit(5);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "produce") == 0) {
        produce(strtoull(argv[2], NULL, 10));
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "consume") == 0) {
        uint64_t n = strtoull(argv[2], NULL, 10);
        ty_region_t* reg;
        ty_topic_t* topic;
        if (ty_region_open("demo", NULL, &reg) != TY_OK || ty_topic_open(reg, "orders", &topic) != TY_OK) return 1;
        pid_t pids[8];
        fflush(stdout);
        for (uint32_t p = 0; p < 8; p++) {
            expected = 0;
            for (uint64_t i = 0; i < n; i++) expected += ty_partition_of(topic, i % KEYS) == (int)p;
            pids[p] = fork();
            if (pids[p] < 0) return 1;
            if (pids[p] == 0) {
                if (expected == 0) _exit(0);
                consume(p);
            }
        }
        int failed = 0;
        for (uint32_t p = 0; p < 8; p++) {
            int status;
            waitpid(pids[p], &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "the consumer of partition %u failed (status %#x)\n", p, status);
                failed = 1;
            }
        }
        if (!failed) printf("%llu orders read by one process per partition, every user's in order\n", (unsigned long long)n);
        return failed;
    }
    if (argc == 2 && strcmp(argv[1], "remove") == 0) return ty_region_remove("demo") == TY_OK ? 0 : 1;
    fprintf(stderr, "usage: snippet produce N | snippet consume N | snippet remove\n");
    return 2;
}
