/* The primitives' C API in one process: NULL is TY_EINVAL, sizes and
 * ranges are checked, timeouts report, both RPC ends in one process with
 * a C handler (and a request cancelled from another thread), and an end
 * whose threads a C spawner starts. */
#define _GNU_SOURCE /* usleep */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static int echo(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    (void)user;
    if (len == 3 && memcmp(req, "bad", 3) == 0) return 7;
    if (len == 4 && memcmp(req, "slow", 4) == 0) usleep(2000000);
    return ty_rpc_reply(reply, req, len);
}

/* A ty_rpc_request_with reader: copies the response into `buf` (if it
 * fits), counts its calls, and tries a call back through the channel. */
struct got {
    char buf[8192];
    size_t len;
    int calls;
    const ty_rpc_t* rpc;
    int nested_rc;
};

static void take(void* ctx, const void* resp, size_t len) {
    struct got* g = ctx;
    g->calls++;
    g->len = len;
    if (len <= sizeof g->buf) memcpy(g->buf, resp, len);
    if (g->rpc != NULL) {
        void* r;
        size_t n;
        g->nested_rc = ty_rpc_request(g->rpc, "inner", 5, &r, &n, 1000000000LL);
    }
}

/* A spawner: each thread a detached pthread, marked as the spawner's,
 * counted when started and when its work returns; it refuses all when
 * `refuse` is set. */
struct spawner {
    int refuse;
    int spawned;
    int ended;
};
static _Thread_local int on_spawned_thread;
struct start {
    struct spawner* sp;
    void (*run)(void*);
    void* task;
};

static void* spawned_main(void* arg) {
    struct start st = *(struct start*)arg;
    free(arg);
    on_spawned_thread = 1;
    st.run(st.task);
    __atomic_add_fetch(&st.sp->ended, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static int spawn_thread(void* ctx, const char* name, void (*run)(void*), void* task) {
    struct spawner* sp = ctx;
    if (sp->refuse || strncmp(name, "tachyon-rpc-", 12) != 0) return 1;
    struct start* st = malloc(sizeof *st);
    if (st == NULL) return 1;
    *st = (struct start){sp, run, task};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, spawned_main, st);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(st);
        return 1;
    }
    __atomic_add_fetch(&sp->spawned, 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* Answers "1" on a thread the spawner started, else "0". */
static int where(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    (void)user;
    (void)req;
    if (len == 4) usleep(20000); /* long enough for the standby to read */
    return ty_rpc_reply(reply, on_spawned_thread ? "1" : "0", 1);
}

static void* call_where(void* arg) {
    const ty_rpc_t* client = arg;
    for (int i = 0; i < 20; i++) {
        void* resp;
        size_t resp_len;
        CHECK(ty_rpc_request(client, i % 5 == 0 ? "slow" : "q", i % 5 == 0 ? 4 : 1, &resp, &resp_len,
                             5000000000LL));
        EXPECT(resp_len == 1 && memcmp(resp, "1", 1) == 0);
        ty_rpc_free(resp, resp_len);
    }
    return NULL;
}

static ty_cancel_t* cancel;

static void* cancel_later(void* arg) {
    (void)arg;
    usleep(50000);
    CHECK(ty_cancel(cancel));
    return NULL;
}

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "c-prim-%d", (int)getpid());
    ty_ring_t* ring = (ty_ring_t*)1;
    ty_buffer_t* buf = (ty_buffer_t*)1;
    ty_rpc_t* rpc = (ty_rpc_t*)1;
    size_t len;
    char bytes[64];
    void* resp;

    EXPECT_RC(TY_EINVAL, ty_ring_create(NULL, 4, 8, &ring));
    EXPECT(ring == NULL);
    EXPECT_RC(TY_EINVAL, ty_ring_open(name, NULL));
    EXPECT_RC(TY_EINVAL, ty_ring_write(NULL, "x", 1, 0));
    EXPECT_RC(TY_EINVAL, ty_ring_read(NULL, bytes, 1, &len, 0));
    EXPECT(ty_ring_node_size(NULL) == 0);
    ty_ring_close(NULL);
    EXPECT_RC(TY_EINVAL, ty_buffer_create(NULL, 8, &buf));
    EXPECT_RC(TY_EINVAL, ty_buffer_open(name, NULL));
    EXPECT_RC(TY_EINVAL, ty_buffer_write(NULL, 0, "x", 1));
    EXPECT_RC(TY_EINVAL, ty_buffer_read(NULL, 0, bytes, 1));
    EXPECT(ty_buffer_size(NULL) == 0);
    ty_buffer_close(NULL);
    EXPECT_RC(TY_EINVAL, ty_rpc_create(NULL, NULL, NULL, &rpc));
    EXPECT_RC(TY_EINVAL, ty_rpc_open(name, NULL, NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_rpc_request(NULL, "x", 1, &resp, &len, 0));
    EXPECT_RC(TY_EINVAL, ty_rpc_reply(NULL, "x", 1));
    ty_rpc_free(NULL, 0);
    ty_rpc_close(NULL);

    /* Ring. */
    EXPECT_RC(TY_ENOENT, ty_ring_open(name, &ring));
    CHECK(ty_ring_create(name, 4, 8, &ring));
    ty_ring_t* other;
    EXPECT_RC(TY_EEXIST, ty_ring_create(name, 4, 8, &other));
    CHECK(ty_ring_open(name, &other));
    EXPECT(ty_ring_node_size(other) == 8);
    EXPECT_RC(TY_EMSGSIZE, ty_ring_write(ring, "123456789", 9, 0));
    EXPECT_RC(TY_EINVAL, ty_ring_write(ring, NULL, 1, 0));
    EXPECT_RC(TY_EINVAL, ty_ring_write(ring, "x", 1, -5));
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_read(other, bytes, sizeof bytes, &len, 0));
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_read(other, bytes, sizeof bytes, &len, 1000000));
    for (int i = 0; i < 4; i++) CHECK(ty_ring_write(ring, "abcdefgh", 8, 0));
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_write(ring, "x", 1, 0));
    int rc = ty_ring_read(other, bytes, 4, &len, 0);
    EXPECT(rc == TY_EMSGSIZE || rc == TY_ENOBUFS);
    for (int i = 0; i < 4; i++) {
        CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, -1));
        EXPECT(len == 8 && memcmp(bytes, "abcdefgh", 8) == 0);
    }
    CHECK(ty_ring_write(ring, NULL, 0, 0));
    CHECK(ty_ring_read(other, NULL, 0, &len, 0));
    EXPECT(len == 0);
    /* Shut down through one handle, seen through the other: queued items
       first, then TY_ECLOSED without waiting (timeout -1). */
    CHECK(ty_ring_write(ring, "z", 1, 0));
    CHECK(ty_ring_shutdown(ring));
    EXPECT_RC(TY_ECLOSED, ty_ring_write(other, "y", 1, -1));
    CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, -1));
    EXPECT(len == 1 && bytes[0] == 'z');
    EXPECT_RC(TY_ECLOSED, ty_ring_read(other, bytes, sizeof bytes, &len, -1));
    EXPECT_RC(TY_EINVAL, ty_ring_shutdown(NULL));
    EXPECT(ty_buffer_size((ty_buffer_t*)ring) == 0); /* a handle of another kind */
    ty_ring_close(other);
    ty_ring_close(ring);

    /* A ring with light hand-overs: the option is the ring's, seen by an
       opener; unknown flags are refused. */
    char light_name[80];
    snprintf(light_name, sizeof light_name, "%s-light", name);
    EXPECT_RC(TY_EINVAL, ty_ring_create_with(light_name, 4, 8, 2, &ring));
    EXPECT(ring == NULL);
    EXPECT(ty_ring_light_handovers(NULL) == 0);
    CHECK(ty_ring_create_with(light_name, 4, 8, TY_RING_LIGHT_HANDOVERS, &ring));
    CHECK(ty_ring_open(light_name, &other));
    EXPECT(ty_ring_light_handovers(ring) == 1 && ty_ring_light_handovers(other) == 1);
    for (int i = 0; i < 10; i++) {
        CHECK(ty_ring_write(ring, "lighter", 7, -1));
        CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, -1));
        EXPECT(len == 7 && memcmp(bytes, "lighter", 7) == 0);
    }
    ty_ring_close(other);
    ty_ring_close(ring);
    CHECK(ty_ring_create_with(name, 4, 8, 0, &ring));
    EXPECT(ty_ring_light_handovers(ring) == 0);

    /* Batch reads: a handle's option, off by default, not seen by the
       ring's other handles; items queued are read as before. */
    EXPECT(ty_ring_batch_reads(ring) == 0 && ty_ring_batch_reads(NULL) == 0);
    EXPECT_RC(TY_EINVAL, ty_ring_set_batch_reads(NULL, 1));
    CHECK(ty_ring_open(name, &other));
    CHECK(ty_ring_set_batch_reads(other, 1));
    EXPECT(ty_ring_batch_reads(other) == 1 && ty_ring_batch_reads(ring) == 0);
    CHECK(ty_ring_write(ring, "one", 3, 0));
    CHECK(ty_ring_write(ring, "two", 3, 0));
    CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, 0));
    EXPECT(len == 3 && memcmp(bytes, "one", 3) == 0);
    CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, 1000000000));
    EXPECT(len == 3 && memcmp(bytes, "two", 3) == 0);
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_read(other, bytes, sizeof bytes, &len, 1000000));
    CHECK(ty_ring_set_batch_reads(other, 0));
    EXPECT(ty_ring_batch_reads(other) == 0);

    /* The wait policy: a handle's, hybrid by default; other values and
       NULL are TY_EINVAL (the handle keeps its policy); a reader that
       sleeps at once and one that spins both time out when nothing
       comes. */
    EXPECT(ty_ring_notify(ring) == TY_NOTIFY_HYBRID && ty_ring_notify(NULL) == TY_EINVAL);
    EXPECT_RC(TY_EINVAL, ty_ring_set_notify(NULL, TY_NOTIFY_SPIN));
    EXPECT_RC(TY_EINVAL, ty_ring_set_notify(other, 3));
    EXPECT(ty_ring_notify(other) == TY_NOTIFY_HYBRID);
    CHECK(ty_ring_set_notify(other, TY_NOTIFY_FUTEX));
    EXPECT(ty_ring_notify(other) == TY_NOTIFY_FUTEX && ty_ring_notify(ring) == TY_NOTIFY_HYBRID);
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_read(other, bytes, sizeof bytes, &len, 1000000));
    CHECK(ty_ring_write(ring, "three", 5, 0));
    CHECK(ty_ring_read(other, bytes, sizeof bytes, &len, 1000000000));
    EXPECT(len == 5 && memcmp(bytes, "three", 5) == 0);
    CHECK(ty_ring_set_notify(other, TY_NOTIFY_SPIN));
    EXPECT(ty_ring_notify(other) == TY_NOTIFY_SPIN);
    EXPECT_RC(TY_ETIMEDOUT, ty_ring_read(other, bytes, sizeof bytes, &len, 1000000));
    ty_ring_close(other);
    ty_ring_close(ring);

    /* Buffer. */
    CHECK(ty_buffer_create(name, 32, &buf));
    EXPECT(ty_buffer_size(buf) == 32);
    ty_buffer_t* view;
    CHECK(ty_buffer_open(name, &view));
    CHECK(ty_buffer_write(buf, 30, "hi", 2));
    EXPECT_RC(TY_EINVAL, ty_buffer_write(buf, 31, "hi", 2));
    EXPECT_RC(TY_EINVAL, ty_buffer_read(view, (size_t)-1, bytes, 2));
    CHECK(ty_buffer_read(view, 30, bytes, 2));
    EXPECT(memcmp(bytes, "hi", 2) == 0);
    CHECK(ty_buffer_read(view, 0, bytes, 2));
    EXPECT(bytes[0] == 0 && bytes[1] == 0);
    EXPECT_RC(TY_EKIND, ty_ring_open(name, &ring)); /* a buffer is not a ring */
    ty_buffer_close(view);
    ty_buffer_close(buf);

    /* RPC, both ends here. */
    CHECK(ty_rpc_create(name, echo, NULL, &rpc));
    ty_rpc_t* client;
    CHECK(ty_rpc_open(name, NULL, NULL, &client));
    size_t resp_len = 99;
    CHECK(ty_rpc_request(client, "ping", 4, &resp, &resp_len, 5000000000LL));
    EXPECT(resp_len == 4 && memcmp(resp, "ping", 4) == 0);
    ty_rpc_free(resp, resp_len);
    CHECK(ty_rpc_request(client, NULL, 0, &resp, &resp_len, 5000000000LL));
    EXPECT(resp == NULL && resp_len == 0);
    EXPECT_RC(TY_EREMOTE, ty_rpc_request(client, "bad", 3, &resp, &resp_len, 5000000000LL));
    EXPECT(strstr(ty_last_error(), "7") != NULL);
    EXPECT_RC(TY_EREMOTE, ty_rpc_request(rpc, "no handler there", 16, &resp, &resp_len, 5000000000LL));
    /* A request waiting for a slow handler's response, cancelled from
     * another thread: TY_EINTR long before the handler answers; later
     * calls with that cancellation fail at once; a fresh one works. */
    cancel = ty_cancel_new();
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, cancel_later, NULL) == 0);
    EXPECT_RC(TY_EINTR, ty_rpc_request_cancel(client, "slow", 4, &resp, &resp_len, -1, cancel));
    EXPECT(resp == NULL && resp_len == 0);
    pthread_join(t, NULL);
    EXPECT_RC(TY_EINTR, ty_rpc_request_cancel(client, "ping", 4, &resp, &resp_len, -1, cancel));
    EXPECT_RC(TY_EINVAL, ty_rpc_request_cancel(client, "ping", 4, &resp, &resp_len, -1, NULL));
    ty_cancel_free(cancel);
    ty_cancel_t* fresh = ty_cancel_new();
    CHECK(ty_rpc_request_cancel(client, "ping", 4, &resp, &resp_len, 5000000000LL, fresh));
    EXPECT(resp_len == 4 && memcmp(resp, "ping", 4) == 0);
    ty_rpc_free(resp, resp_len);
    ty_cancel_free(fresh);
    ty_rpc_close(client);
    ty_rpc_close(rpc);

    /* RPC options: fields out of range are TY_EINVAL; inline handlers and
     * spinning waits on one end, futex waits on the other. */
    ty_rpc_conf_t conf = ty_rpc_conf_default;
    conf.notify = 9;
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(name, &conf, echo, NULL, &rpc));
    conf = ty_rpc_conf_default;
    conf.timeout_ns = 0;
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(name, &conf, echo, NULL, &rpc));
    conf = ty_rpc_conf_default;
    conf.inline_handlers = 2;
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(name, &conf, echo, NULL, &rpc));
    conf = ty_rpc_conf_default;
    conf.node_size = 32; /* no room for a payload */
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(name, &conf, echo, NULL, &rpc));
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(NULL, NULL, echo, NULL, &rpc));
    conf = ty_rpc_conf_default;
    conf.node_count = 4;
    conf.node_size = 1024;
    conf.notify = TY_NOTIFY_SPIN;
    conf.inline_handlers = 1;
    CHECK(ty_rpc_create_with(name, &conf, echo, NULL, &rpc));
    CHECK(ty_rpc_open_with(name, NULL, NULL, NULL, &client)); /* the owner's geometry */
    char big[5000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i % 251);
    size_t sizes[] = {4, 992, 993, sizeof big};
    for (size_t k = 0; k < 4; k++) {
        CHECK(ty_rpc_request(client, big, sizes[k], &resp, &resp_len, 5000000000LL));
        EXPECT(resp_len == sizes[k] && memcmp(resp, big, sizes[k]) == 0);
        ty_rpc_free(resp, resp_len);
    }
    EXPECT_RC(TY_EREMOTE, ty_rpc_request(client, "bad", 3, &resp, &resp_len, 5000000000LL));
    /* Responses read where they lie: once per call, never on an error; a
     * call back through the channel from the reader fails. */
    static struct got g;
    for (size_t k = 0; k < 4; k++) {
        g.calls = 0;
        CHECK(ty_rpc_request_with(client, big, sizes[k], 5000000000LL, take, &g));
        EXPECT(g.calls == 1 && g.len == sizes[k] && memcmp(g.buf, big, sizes[k]) == 0);
    }
    g.calls = 0;
    EXPECT_RC(TY_EREMOTE, ty_rpc_request_with(client, "bad", 3, 5000000000LL, take, &g));
    EXPECT(g.calls == 0);
    EXPECT_RC(TY_EINVAL, ty_rpc_request_with(client, "ping", 4, 5000000000LL, NULL, &g));
    EXPECT_RC(TY_EINVAL, ty_rpc_request_with(NULL, "ping", 4, 5000000000LL, take, &g));
    g.rpc = client;
    CHECK(ty_rpc_request_with(client, "outer", 5, 5000000000LL, take, &g));
    EXPECT(g.calls == 1 && g.len == 5 && g.nested_rc == TY_EINVAL);
    ty_rpc_close(client);
    ty_rpc_close(rpc);

    /* A C spawner: a ctx without it is TY_EINVAL, one that refuses fails
     * the start (TY_EIO); one that starts threads runs every handler on
     * them, calls from three threads at once with slow ones among them
     * (so the standby reads and hands on), and every thread ends after
     * the close. */
    static struct spawner sp;
    conf = ty_rpc_conf_default;
    conf.spawn_ctx = &sp;
    EXPECT_RC(TY_EINVAL, ty_rpc_create_with(name, &conf, where, NULL, &rpc));
    conf.spawn = spawn_thread;
    sp.refuse = 1;
    EXPECT_RC(TY_EIO, ty_rpc_create_with(name, &conf, where, NULL, &rpc));
    sp.refuse = 0;
    CHECK(ty_rpc_create_with(name, &conf, where, NULL, &rpc));
    CHECK(ty_rpc_open(name, NULL, NULL, &client));
    pthread_t callers[3];
    for (int i = 0; i < 3; i++) EXPECT(pthread_create(&callers[i], NULL, call_where, client) == 0);
    for (int i = 0; i < 3; i++) pthread_join(callers[i], NULL);
    ty_rpc_close(client);
    ty_rpc_close(rpc);
    int spawned = __atomic_load_n(&sp.spawned, __ATOMIC_SEQ_CST);
    EXPECT(spawned >= 4); /* the reader, the standby, two handler threads */
    for (int i = 0; i < 500 && __atomic_load_n(&sp.ended, __ATOMIC_SEQ_CST) < spawned; i++) usleep(10000);
    EXPECT(__atomic_load_n(&sp.ended, __ATOMIC_SEQ_CST) == spawned);
    printf("prim: all checks passed\n");
    return 0;
}
