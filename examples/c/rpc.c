/* rpc: request/response between two processes, with a C handler.
 *
 * The parent forks, then creates the channel with a handler that answers each request
 * with its bytes upper-cased and counts the calls; a forked child opens the
 * channel (with no handler of its own), sends requests and checks every
 * answer, then asks for the count. A handler returning non-zero makes the
 * request fail with TY_EREMOTE.
 *
 *   rpc [N]     (default 1000 requests) */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdatomic.h>
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

#define WAIT_NS 10000000000LL

/* Runs on the library's handler threads: thread-safe (an atomic counter). */
static int upper(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    atomic_ulong* calls = user;
    unsigned long n = atomic_fetch_add(calls, 1) + 1;
    if (len == 5 && memcmp(req, "count", 5) == 0) return ty_rpc_reply(reply, &n, sizeof n);
    if (len == 4 && memcmp(req, "fail", 4) == 0) return 42;
    char out[256];
    if (len > sizeof out) return 1;
    for (size_t i = 0; i < len; i++) out[i] = (char)toupper(((const unsigned char*)req)[i]);
    return ty_rpc_reply(reply, out, len);
}

static int client(const char* name, unsigned long n) {
    ty_rpc_t* rpc;
    int rc;
    /* The parent creates the channel after the fork (a process with threads,
     * as an RPC end has, should not fork): wait for it, at most 10 s. */
    for (int i = 0; (rc = ty_rpc_open(name, NULL, NULL, &rpc)) == TY_ENOENT && i < 1000; i++) usleep(10000);
    TRY(rc);
    for (unsigned long i = 0; i < n; i++) {
        char req[64], want[64];
        int len = snprintf(req, sizeof req, "request number %lu", i);
        snprintf(want, sizeof want, "REQUEST NUMBER %lu", i);
        void* resp;
        size_t resp_len;
        TRY(ty_rpc_request(rpc, req, (size_t)len, &resp, &resp_len, WAIT_NS));
        if (resp_len != (size_t)len || memcmp(resp, want, resp_len) != 0) {
            fprintf(stderr, "request %lu: wrong answer\n", i);
            return 1;
        }
        ty_rpc_free(resp, resp_len);
    }
    void* resp;
    size_t resp_len;
    rc = ty_rpc_request(rpc, "fail", 4, &resp, &resp_len, WAIT_NS);
    if (rc != TY_EREMOTE) return 1;
    printf("a failing handler: %s (%s)\n", ty_strerror(rc), ty_last_error());
    TRY(ty_rpc_request(rpc, "count", 5, &resp, &resp_len, WAIT_NS));
    unsigned long count;
    if (resp_len != sizeof count) return 1;
    memcpy(&count, resp, sizeof count);
    ty_rpc_free(resp, resp_len);
    printf("%lu requests answered by the C handler of process %d (it counted %lu calls)\n", n, (int)getppid(),
           count);
    fflush(stdout);
    ty_rpc_close(rpc);
    return count == n + 2 ? 0 : 1;
}

int main(int argc, char** argv) {
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
    char name[64];
    snprintf(name, sizeof name, "c-rpc-%d", (int)getpid());
    static atomic_ulong calls;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) _exit(client(name, n));
    ty_rpc_t* rpc;
    TRY(ty_rpc_create(name, upper, &calls, &rpc));
    int status;
    waitpid(child, &status, 0);
    ty_rpc_close(rpc);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
