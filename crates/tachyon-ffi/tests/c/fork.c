/* Across processes with fork: a producer child and a consumer parent
 * (far more messages than the ring holds, order checked), then children
 * SIGKILLed while holding loans and while holding a received message, and
 * recovery: the chunks come back, the at-least-once message is delivered
 * again, the at-most-once one is counted lost; last, a child's stream
 * read in batches; then an RPC server child built with ty_rpc_create_with
 * (nodes of 64 KiB: calls up to 65,504 bytes in one packet), called from
 * this process with ty_rpc_open_with. Children open the region themselves
 * (handles are not shared across fork). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define WAIT_NS 10000000000LL /* 10 s: a stuck peer fails the test */
#define N 20000

static char name[64];

static void wait_ok(pid_t pid) {
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void kill_and_reap(pid_t pid) {
    int status;
    EXPECT(kill(pid, SIGKILL) == 0);
    EXPECT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

/* Child: opens the region and topic by name. */
static ty_topic_t* child_open(const char* topic_name) {
    ty_region_t* reg;
    ty_topic_t* topic;
    CHECK(ty_region_open(name, NULL, &reg));
    CHECK(ty_topic_open(reg, topic_name, &topic));
    ty_region_close(reg);
    return topic;
}

/* Tells the parent (through a pipe) that the child is ready to be killed,
 * then waits for the signal. */
static void ready_and_wait(int fd) {
    EXPECT(write(fd, "r", 1) == 1);
    for (;;) pause();
}

/* The RPC child's handler: the request back, reversed; a request that
 * starts with 'T' sets a draft reply first, which the second replaces. */
static int reverse(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    (void)user;
    const unsigned char* in = req;
    if (len > 0 && in[0] == 'T') CHECK(ty_rpc_reply(reply, "draft", 5));
    unsigned char* out = malloc(len ? len : 1);
    EXPECT(out != NULL);
    for (size_t i = 0; i < len; i++) out[i] = in[len - 1 - i];
    int rc = ty_rpc_reply(reply, out, len);
    free(out);
    return rc;
}

/* A ty_rpc_request_with reader: checks the response is the reverse of
 * `want` (`want_len` bytes) and counts its calls. */
struct reversed {
    const unsigned char* want;
    size_t want_len;
    int calls;
    int exact;
};

static void check_reversed(void* ctx, const void* resp, size_t len) {
    struct reversed* r = ctx;
    const unsigned char* b = resp;
    r->calls++;
    r->exact = len == r->want_len;
    for (size_t i = 0; r->exact && i < len; i++) r->exact = b[i] == r->want[len - 1 - i];
}

static size_t free_chunks(ty_region_t* reg, int class) {
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    return ps.classes[class].free;
}

int main(void) {
    snprintf(name, sizeof name, "c-fork-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create(name, &rc, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = 16;
    ty_topic_t* work;
    CHECK(ty_topic_create(reg, "work", &tc, &work));
    tc.delivery = TY_DELIVERY_AT_LEAST_ONCE;
    ty_topic_t* alo;
    CHECK(ty_topic_create(reg, "alo", &tc, &alo));

    /* 1. A producer child, this process the consumer. */
    fflush(stdout);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_topic_t* t = child_open("work");
        for (uint64_t i = 0; i < N; i++) {
            uint64_t* b;
            CHECK(ty_loan_timed(t, sizeof *b, (void**)&b, WAIT_NS));
            *b = i;
            CHECK(ty_publish_timed(t, b, sizeof *b, 7, WAIT_NS));
        }
        ty_topic_close(t);
        _exit(0);
    }
    for (uint64_t i = 0; i < N; i++) {
        ty_msg_t m;
        CHECK(ty_subscribe(work, 0, &m, WAIT_NS));
        uint64_t v;
        EXPECT(m.len == sizeof v);
        memcpy(&v, m.data, sizeof v);
        EXPECT(v == i);
        CHECK(ty_release(work, &m));
    }
    wait_ok(pid);
    printf("fork: %d messages from a child producer through a ring of 16, in order\n", N);

    /* 2. A child SIGKILLed while it holds loans: recovery returns them. */
    size_t before = free_chunks(reg, 0);
    int fds[2];
    EXPECT(pipe(fds) == 0);
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_topic_t* t = child_open("work");
        for (int i = 0; i < 10; i++) {
            void* b;
            CHECK(ty_loan(t, 64, &b, NULL));
            memset(b, 0xab, 64);
        }
        ready_and_wait(fds[1]);
    }
    char c;
    EXPECT(read(fds[0], &c, 1) == 1);
    EXPECT(free_chunks(reg, 0) + 10 <= before);
    kill_and_reap(pid);
    /* Opening the region reclaims them (and says so); a recovery after
     * that finds nothing more. */
    ty_region_t* again;
    CHECK(ty_region_open(name, NULL, &again));
    ty_recovered_t on_open, rec;
    CHECK(ty_region_recovered_on_open(again, &on_open));
    ty_region_close(again);
    CHECK(ty_region_recover(reg, &rec));
    EXPECT(on_open.loans + on_open.cached + rec.loans + rec.cached >= 10);
    EXPECT(free_chunks(reg, 0) == before);
    printf("fork: a child killed holding 10 loans; opening the region returned %zu chunks, recovery %zu more\n",
           on_open.total, rec.total);

    /* 3. A consumer SIGKILLed holding a message of an at-least-once topic:
     * delivered again. */
    CHECK(ty_send(alo, "precious", 8, 1, 0));
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_topic_t* t = child_open("alo");
        ty_msg_t m;
        CHECK(ty_subscribe(t, 0, &m, WAIT_NS));
        EXPECT(m.len == 8 && memcmp(m.data, "precious", 8) == 0);
        ready_and_wait(fds[1]);
    }
    EXPECT(read(fds[0], &c, 1) == 1);
    ty_msg_t m;
    EXPECT_RC(TY_EAGAIN, ty_try_subscribe(alo, 0, &m));
    kill_and_reap(pid);
    CHECK(ty_region_recover(reg, &rec));
    EXPECT(rec.redelivered == 1);
    CHECK(ty_subscribe(alo, 0, &m, WAIT_NS));
    EXPECT(m.len == 8 && memcmp(m.data, "precious", 8) == 0);
    CHECK(ty_release(alo, &m));
    printf("fork: a consumer killed holding an at-least-once message; delivered again\n");

    /* 4. The same on an at-most-once topic: the message is lost, counted. */
    CHECK(ty_send(work, "fleeting", 8, 1, 0));
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_topic_t* t = child_open("work");
        CHECK(ty_subscribe(t, 0, &m, WAIT_NS));
        ready_and_wait(fds[1]);
    }
    EXPECT(read(fds[0], &c, 1) == 1);
    kill_and_reap(pid);
    CHECK(ty_region_recover(reg, &rec));
    EXPECT(rec.held == 1);
    ty_topic_stats_t st;
    CHECK(ty_topic_stats(work, &st));
    EXPECT(st.lost == 1);
    EXPECT_RC(TY_EAGAIN, ty_try_subscribe(work, 0, &m));
    EXPECT(free_chunks(reg, 0) == before);
    printf("fork: a consumer killed holding an at-most-once message; lost and counted, chunk returned\n");

    /* 5. Batch readers: a producer child streams into an inline topic and
     * into a ring, this process reads both with batch reads on; every
     * item arrives, whole and in order. The ring's reader here sleeps at
     * once when it waits (TY_NOTIFY_FUTEX), its writer there never
     * sleeps (TY_NOTIFY_SPIN): each wakes the other all the same. */
    ty_topic_conf_t sc = ty_topic_conf_default;
    sc.capacity = 256;
    ty_topic_t* stream;
    CHECK(ty_topic_create_inline(reg, "stream", &sc, 0, 64, &stream));
    CHECK(ty_topic_set_batch_reads(stream, 1));
    char ring_name[80];
    snprintf(ring_name, sizeof ring_name, "%s-ring", name);
    ty_ring_t* ring;
    CHECK(ty_ring_create(ring_name, 256, 64, &ring));
    CHECK(ty_ring_set_batch_reads(ring, 1));
    CHECK(ty_ring_set_notify(ring, TY_NOTIFY_FUTEX));
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_topic_t* t = child_open("stream");
        ty_ring_t* r;
        CHECK(ty_ring_open(ring_name, &r));
        CHECK(ty_ring_set_notify(r, TY_NOTIFY_SPIN));
        uint64_t item[8] = {0};
        for (uint64_t i = 0; i < 5 * N; i++) {
            item[0] = i;
            item[7] = ~i;
            CHECK(ty_send(t, item, sizeof item, 7, WAIT_NS));
        }
        for (uint64_t i = 0; i < 5 * N; i++) {
            item[0] = i;
            item[7] = ~i;
            CHECK(ty_ring_write(r, item, sizeof item, WAIT_NS));
        }
        ty_ring_close(r);
        ty_topic_close(t);
        _exit(0);
    }
    uint32_t part = (uint32_t)ty_partition_of(stream, 7);
    for (uint64_t i = 0; i < 5 * N; i++) {
        uint64_t item[8];
        size_t got;
        CHECK(ty_recv(stream, part, item, sizeof item, &got, WAIT_NS));
        EXPECT(got == sizeof item && item[0] == i && item[7] == ~i);
    }
    for (uint64_t i = 0; i < 5 * N; i++) {
        uint64_t item[8];
        size_t got;
        CHECK(ty_ring_read(ring, item, sizeof item, &got, WAIT_NS));
        EXPECT(got == sizeof item && item[0] == i && item[7] == ~i);
    }
    wait_ok(pid);
    EXPECT(ty_topic_depth(stream, part) == 0);
    printf("fork: %d 64-byte items from a child producer, read in batches from an inline topic and a ring, in order\n",
           5 * N);
    ty_ring_close(ring);
    ty_topic_close(stream);

    /* 6. RPC with options: a server child with nodes of 64 KiB and
     * spinning waits; this process opens it with the owner's geometry (a
     * geometry of its own is TY_EINCOMPAT) and calls with sizes around
     * the packet's room and beyond. */
    char rpc_name[80];
    snprintf(rpc_name, sizeof rpc_name, "%s-rpc", name);
    int quit[2];
    EXPECT(pipe(quit) == 0);
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_rpc_conf_t sc = ty_rpc_conf_default;
        sc.node_count = 8;
        sc.node_size = 65536;
        sc.notify = TY_NOTIFY_SPIN;
        sc.handler_threads = 1;
        ty_rpc_t* server;
        CHECK(ty_rpc_create_with(rpc_name, &sc, reverse, NULL, &server));
        EXPECT(write(fds[1], "r", 1) == 1);
        EXPECT(read(quit[0], &c, 1) == 1); /* until this process is done */
        ty_rpc_close(server);
        _exit(0);
    }
    EXPECT(read(fds[0], &c, 1) == 1);
    ty_rpc_conf_t cc = ty_rpc_conf_default;
    cc.node_size = 4096;
    ty_rpc_t* client;
    EXPECT_RC(TY_EINCOMPAT, ty_rpc_open_with(rpc_name, &cc, NULL, NULL, &client));
    cc.node_size = 0; /* the owner's */
    cc.notify = TY_NOTIFY_FUTEX;
    CHECK(ty_rpc_open_with(rpc_name, &cc, NULL, NULL, &client));
    size_t sizes[] = {0, 1, 65504, 65505, 300000};
    unsigned char* msg = malloc(300000);
    EXPECT(msg != NULL);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (size_t i = 0; i < n; i++) msg[i] = (unsigned char)(i * 7 + k);
        if (n > 0) msg[0] = (k % 2) ? 'T' : 'x';
        void* resp;
        size_t resp_len;
        CHECK(ty_rpc_request(client, msg, n, &resp, &resp_len, WAIT_NS));
        EXPECT(resp_len == n);
        const unsigned char* r = resp;
        for (size_t i = 0; i < n; i++) EXPECT(r[i] == msg[n - 1 - i]);
        ty_rpc_free(resp, resp_len);
        struct reversed rv = {msg, n, 0, 0};
        CHECK(ty_rpc_request_with(client, msg, n, WAIT_NS, check_reversed, &rv));
        EXPECT(rv.calls == 1 && rv.exact);
    }
    free(msg);
    ty_rpc_close(client);
    EXPECT(write(quit[1], "q", 1) == 1);
    wait_ok(pid);
    printf("fork: RPC calls of 0 to 300000 bytes to a child server with 64 KiB nodes, every response exact, "
           "returned and read where it lies\n");

    ty_topic_close(work);
    ty_topic_close(alo);
    ty_region_close(reg);
    CHECK(ty_region_remove(name));
    return 0;
}
