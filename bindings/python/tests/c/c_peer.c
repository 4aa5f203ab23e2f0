/* The C peer of the Python <-> C tests: the C library's API, as a C
 * program written against include/tachyon/tachyon.h uses it.
 *
 *   c_peer send REGION TOPIC N      publish "c-I" with key I, I = 0..N-1
 *   c_peer receive REGION TOPIC N   receive N messages from every partition,
 *                                   print "PARTITION TEXT" per message
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tachyon/tachyon.h>

static int fail(const char* what, int rc) {
    fprintf(stderr, "c_peer: %s: %s (%s)\n", what, ty_strerror(rc), ty_last_error());
    return 1;
}

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: c_peer send|receive REGION TOPIC N\n");
        return 2;
    }
    long n = strtol(argv[4], NULL, 10);
    ty_region_t* reg;
    int rc = ty_region_open(argv[2], NULL, &reg);
    if (rc != TY_OK) return fail("ty_region_open", rc);
    ty_topic_t* topic;
    rc = ty_topic_open(reg, argv[3], &topic);
    if (rc != TY_OK) return fail("ty_topic_open", rc);
    if (strcmp(argv[1], "send") == 0) {
        for (long i = 0; i < n; i++) {
            char* buf;
            rc = ty_loan(topic, 32, (void**)&buf, NULL);
            if (rc != TY_OK) return fail("ty_loan", rc);
            int len = snprintf(buf, 32, "c-%ld", i);
            rc = ty_publish(topic, buf, (size_t)len, (uint64_t)i);
            if (rc != TY_OK) return fail("ty_publish", rc);
        }
    } else {
        long got = 0;
        int partitions = ty_topic_partitions(topic);
        int idle = 0;
        while (got < n) {
            int any = 0;
            for (int p = 0; p < partitions; p++) {
                ty_msg_t m;
                rc = ty_subscribe(topic, (uint32_t)p, &m, 10 * 1000 * 1000); /* 10 ms */
                if (rc == TY_ETIMEDOUT) continue;
                if (rc != TY_OK) return fail("ty_subscribe", rc);
                printf("%d %.*s\n", p, (int)m.len, (const char*)m.data);
                ty_release(topic, &m);
                got++;
                any = 1;
            }
            /* Bounded: give up after about 30 s without a message. */
            idle = any ? 0 : idle + 1;
            if (idle > 3000 / (partitions > 0 ? partitions : 1)) {
                fprintf(stderr, "c_peer: only %ld of %ld messages came\n", got, n);
                return 1;
            }
        }
    }
    ty_topic_close(topic);
    ty_region_close(reg);
    return 0;
}
