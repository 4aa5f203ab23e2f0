/* rpc_large: large calls between two processes, and what the node size
 * and the way a response is read do to them.
 *
 * The parent forks a server child (a C handler that echoes the request,
 * its reply written straight into the ring node when it fits one) for
 * each of two geometries: the default nodes of 4096 bytes, where a large
 * call goes in many packets, and nodes that hold the whole call
 * (ty_rpc_create_with), where it goes in one. Against each it times calls
 * of SIZE bytes two ways: ty_rpc_request (the response copied into memory
 * the library allocates, then freed) and ty_rpc_request_with (the response
 * given to a callback where it lies, copied once into a buffer reused
 * call after call). Every response is checked; prints p50 and p99 in
 * microseconds per way, and exits non-zero on any failure.
 *
 *   rpc_large [SIZE [COUNT]]     (default 512000 bytes, 2000 calls) */
#define _GNU_SOURCE
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

#define WAIT_NS 10000000000LL

static int echo(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    (void)user;
    return ty_rpc_reply(reply, req, len);
}

/* The caller's buffer for ty_rpc_request_with, reused call after call. */
struct into {
    unsigned char* buf;
    size_t cap;
    size_t len;
};

static void copy_into(void* ctx, const void* resp, size_t len) {
    struct into* in = ctx;
    in->len = len;
    if (len <= in->cap) memcpy(in->buf, resp, len);
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

/* Times `count` calls of `size` bytes on `rpc` (after 100 untimed ones),
 * through ty_rpc_request or (with_read) ty_rpc_request_with. */
static void measure(ty_rpc_t* rpc, const unsigned char* msg, size_t size, int count, int with_read,
                    const char* label) {
    double* t = malloc(sizeof(double) * (size_t)count);
    struct into in = {malloc(size ? size : 1), size, 0};
    if (t == NULL || in.buf == NULL) exit(1);
    for (int i = -100; i < count; i++) {
        double a = now_us();
        const void* got;
        size_t got_len;
        void* resp = NULL;
        if (with_read) {
            TRY(ty_rpc_request_with(rpc, msg, size, WAIT_NS, copy_into, &in));
            got = in.buf;
            got_len = in.len;
        } else {
            TRY(ty_rpc_request(rpc, msg, size, &resp, &got_len, WAIT_NS));
            got = resp;
        }
        double b = now_us();
        if (got_len != size || (size > 0 && memcmp(got, msg, size) != 0)) {
            fprintf(stderr, "%s: a wrong response\n", label);
            exit(1);
        }
        ty_rpc_free(resp, got_len);
        if (i >= 0) t[i] = b - a;
    }
    qsort(t, (size_t)count, sizeof *t, by_value);
    printf("  %-44s p50 %8.1f us   p99 %8.1f us\n", label, t[count / 2], t[count * 99 / 100]);
    free(in.buf);
    free(t);
}

int main(int argc, char** argv) {
    size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 512000;
    int count = argc > 2 ? atoi(argv[2]) : 2000;
    if (count < 1 || size > (64u << 20)) {
        fprintf(stderr, "usage: rpc_large [SIZE (at most 64 MiB) [COUNT (1 or more)]]\n");
        return 2;
    }
    unsigned char* msg = malloc(size ? size : 1);
    if (msg == NULL) return 1;
    for (size_t i = 0; i < size; i++) msg[i] = (unsigned char)(i * 31 + 7);
    printf("calls of %zu bytes, %d per way, echoed by a server process\n", size, count);
    for (int one_packet = 0; one_packet < 2; one_packet++) {
        char name[64];
        snprintf(name, sizeof name, "rpc-large-%d-%d", (int)getpid(), one_packet);
        int ready[2], done[2];
        if (pipe(ready) != 0 || pipe(done) != 0) return 1;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            ty_rpc_conf_t conf = ty_rpc_conf_default;
            if (one_packet) {
                conf.node_count = 8;
                conf.node_size = size + 4096; /* the call and its header */
            }
            ty_rpc_t* server;
            TRY(ty_rpc_create_with(name, &conf, echo, NULL, &server));
            char c;
            if (write(ready[1], "r", 1) != 1 || read(done[0], &c, 1) != 1) _exit(1);
            ty_rpc_close(server);
            _exit(0);
        }
        char c;
        if (read(ready[0], &c, 1) != 1) return 1;
        ty_rpc_t* client;
        TRY(ty_rpc_open_with(name, NULL, NULL, NULL, &client)); /* the owner's geometry */
        printf("%s:\n", one_packet ? "nodes that hold the call (one packet)" : "default nodes of 4096 bytes");
        measure(client, msg, size, count, 0, "ty_rpc_request (a new response each call)");
        measure(client, msg, size, count, 1, "ty_rpc_request_with (into one buffer)");
        ty_rpc_close(client);
        int status;
        if (write(done[1], "q", 1) != 1 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "the server process failed\n");
            return 1;
        }
        close(ready[0]);
        close(ready[1]);
        close(done[0]);
        close(done[1]);
    }
    free(msg);
    return 0;
}
