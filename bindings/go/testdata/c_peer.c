/* The C peer of the Go <-> C tests (peers_test.go): the C library's API as
 * a C program written against include/tachyon/tachyon.h uses it.
 *
 *   c_peer send REGION TOPIC N KEYS  publish "c-K-S" with key K = I % KEYS,
 *                                    S = I / KEYS, for I = 0..N-1 (half
 *                                    built in a loan, half with ty_send)
 *   c_peer receive REGION TOPIC N    receive N messages from all partitions,
 *                                    print "PARTITION TEXT" per message
 *   c_peer rpc NAME N                join the RPC channel NAME as its client,
 *                                    call "c-I" for I = 0..N-1, expect "C-I",
 *                                    then answer the owner's calls ("call
 *                                    back" requests, reversed bytes) once
 *
 * Every wait is bounded (10 s without a message ends the run, exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tachyon/tachyon.h>

#define WAIT_NS 10000000000LL

static int fail(const char* what, int rc) {
    fprintf(stderr, "c_peer: %s: %s (%s)\n", what, ty_strerror(rc), ty_last_error());
    return 1;
}

/* The client's handler: answers the owner with the request reversed. */
static int reverse(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    (void)user;
    char out[256];
    if (len > sizeof out) return 1;
    for (size_t i = 0; i < len; i++) out[i] = ((const char*)req)[len - 1 - i];
    return ty_rpc_reply(reply, out, len);
}

static int rpc(const char* name, long n) {
    ty_rpc_t* rpc;
    int rc = ty_rpc_open(name, reverse, NULL, &rpc);
    if (rc != TY_OK) return fail("ty_rpc_open", rc);
    for (long i = 0; i < n; i++) {
        char req[32], want[32];
        int len = snprintf(req, sizeof req, "c-%ld", i);
        snprintf(want, sizeof want, "C-%ld", i);
        void* resp;
        size_t resp_len;
        rc = ty_rpc_request(rpc, req, (size_t)len, &resp, &resp_len, WAIT_NS);
        if (rc != TY_OK) return fail("ty_rpc_request", rc);
        int ok = resp_len == (size_t)len && memcmp(resp, want, resp_len) == 0;
        ty_rpc_free(resp, resp_len);
        if (!ok) {
            fprintf(stderr, "c_peer: %s answered wrongly\n", req);
            return 1;
        }
    }
    /* Tell the owner we are done; it calls us back, then closes. */
    void* resp;
    size_t resp_len;
    rc = ty_rpc_request(rpc, "done", 4, &resp, &resp_len, WAIT_NS);
    if (rc != TY_OK) return fail("ty_rpc_request(done)", rc);
    ty_rpc_free(resp, resp_len);
    printf("called %ld\n", n);
    fflush(stdout);
    ty_rpc_close(rpc);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "rpc") == 0) return rpc(argv[2], strtol(argv[3], NULL, 10));
    if (argc < 5) {
        fprintf(stderr, "usage: c_peer send REGION TOPIC N KEYS | c_peer receive REGION TOPIC N\n");
        return 2;
    }
    long n = strtol(argv[4], NULL, 10);
    ty_region_t* reg;
    int rc = ty_region_open(argv[2], NULL, &reg);
    if (rc != TY_OK) return fail("ty_region_open", rc);
    ty_topic_t* topic;
    rc = ty_topic_open(reg, argv[3], &topic);
    if (rc != TY_OK) return fail("ty_topic_open", rc);
    if (strcmp(argv[1], "send") == 0 && argc == 6) {
        long keys = strtol(argv[5], NULL, 10);
        if (keys < 1) return 2;
        for (long i = 0; i < n; i++) {
            char text[64];
            int len = snprintf(text, sizeof text, "c-%ld-%ld", i % keys, i / keys);
            if (i % 2 == 0) {
                char* buf;
                rc = ty_loan_timed(topic, (size_t)len, (void**)&buf, WAIT_NS);
                if (rc != TY_OK) return fail("ty_loan_timed", rc);
                memcpy(buf, text, (size_t)len);
                rc = ty_publish_timed(topic, buf, (size_t)len, (uint64_t)(i % keys), WAIT_NS);
                if (rc != TY_OK) return fail("ty_publish_timed", rc);
            } else {
                rc = ty_send(topic, text, (size_t)len, (uint64_t)(i % keys), WAIT_NS);
                if (rc != TY_OK) return fail("ty_send", rc);
            }
        }
    } else if (strcmp(argv[1], "receive") == 0) {
        long got = 0;
        int partitions = ty_topic_partitions(topic);
        if (partitions < 1) return fail("ty_topic_partitions", partitions);
        int idle = 0;
        while (got < n) {
            int any = 0;
            for (int p = 0; p < partitions; p++) {
                ty_msg_t m;
                rc = ty_subscribe(topic, (uint32_t)p, &m, 1000000); /* 1 ms */
                if (rc == TY_ETIMEDOUT) continue;
                if (rc != TY_OK) return fail("ty_subscribe", rc);
                printf("%d %.*s\n", p, (int)m.len, (const char*)m.data);
                rc = ty_release(topic, &m);
                if (rc != TY_OK) return fail("ty_release", rc);
                got++;
                any = 1;
            }
            idle = any ? 0 : idle + 1;
            if (idle * partitions > 10000) { /* about 10 s without a message */
                fprintf(stderr, "c_peer: only %ld of %ld messages came\n", got, n);
                return 1;
            }
        }
    } else {
        fprintf(stderr, "c_peer: unknown mode %s\n", argv[1]);
        return 2;
    }
    ty_topic_close(topic);
    ty_region_close(reg);
    return 0;
}
