/* See shim.h. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define REG(h) ((const ty_region_t*)(h))
#define TOPIC(h) ((const ty_topic_t*)(h))
#define GROUP(h) ((const ty_group_t*)(h))
#define RING(h) ((const ty_ring_t*)(h))
#define BUF(h) ((const ty_buffer_t*)(h))

/* The result of a call that returned rc (and ptr). */
static go_ty_res res(int64_t rc, void* ptr) {
    go_ty_res r = {rc, NULL, ptr};
    if (rc < 0 && rc != TY_EAGAIN && rc != TY_ETIMEDOUT) {
        r.err = strdup(ty_last_error());
    }
    return r;
}

go_ty_res go_ty_region_open(const char* name, const ty_region_conf_t* conf, int create, uint32_t max_groups) {
    ty_region_t* out = NULL;
    int rc = create ? ty_region_create_groups(name, conf, max_groups, &out)
             : conf ? ty_region_open_groups(name, conf, max_groups, &out)
                    : ty_region_open(name, NULL, &out);
    return res(rc, out);
}
go_ty_res go_ty_region_remove(const char* name) { return res(ty_region_remove(name), NULL); }
void go_ty_region_close(uintptr_t reg) { ty_region_close((ty_region_t*)reg); }
go_ty_res go_ty_region_recover(uintptr_t reg, ty_recovered_t* out, int on_open) {
    return res(on_open ? ty_region_recovered_on_open(REG(reg), out) : ty_region_recover(REG(reg), out), NULL);
}
go_ty_res go_ty_region_pool_stats(uintptr_t reg, ty_pool_stats_t* out) {
    return res(ty_region_pool_stats(REG(reg), out), NULL);
}
go_ty_res go_ty_region_heartbeat(uintptr_t reg) { return res(ty_region_heartbeat(REG(reg)), NULL); }
go_ty_res go_ty_region_topics(uintptr_t reg, ty_topic_info_t* out, size_t cap) {
    return res(ty_region_topics(REG(reg), out, cap), NULL);
}
go_ty_res go_ty_topic_create(uintptr_t reg, const char* name, const ty_topic_conf_t* conf, uint32_t flags,
                             uint32_t inline_payload) {
    ty_topic_t* out = NULL;
    int rc = ty_topic_create_inline(REG(reg), name, conf, flags, inline_payload, &out);
    return res(rc, out);
}
go_ty_res go_ty_topic_open(uintptr_t reg, const char* name) {
    ty_topic_t* out = NULL;
    int rc = ty_topic_open(REG(reg), name, &out);
    return res(rc, out);
}
void go_ty_topic_close(uintptr_t t) { ty_topic_close((ty_topic_t*)t); }
int go_ty_topic_partitions(uintptr_t t) { return ty_topic_partitions(TOPIC(t)); }
int go_ty_topic_light_handovers(uintptr_t t) { return ty_topic_light_handovers(TOPIC(t)); }
go_ty_res go_ty_topic_set_batch_reads(uintptr_t t, int on) {
    return res(ty_topic_set_batch_reads((ty_topic_t*)t, on), NULL);
}
int go_ty_topic_batch_reads(uintptr_t t) { return ty_topic_batch_reads(TOPIC(t)); }
int go_ty_partition_of(uintptr_t t, uint64_t key) { return ty_partition_of(TOPIC(t), key); }
go_ty_res go_ty_topic_stats(uintptr_t t, ty_topic_stats_t* out) { return res(ty_topic_stats(TOPIC(t), out), NULL); }
go_ty_res go_ty_topic_depth(uintptr_t t, uint32_t partition) {
    return res(ty_topic_depth(TOPIC(t), partition), NULL);
}
go_ty_res go_ty_topic_missed(uintptr_t t) { return res(ty_topic_missed(TOPIC(t)), NULL); }
go_ty_res go_ty_topic_groups(uintptr_t t, ty_group_info_t* out, size_t cap) {
    return res(ty_topic_groups(TOPIC(t), out, cap), NULL);
}
go_ty_res go_ty_loan(uintptr_t t, size_t size, int64_t timeout_ns, int try_) {
    void* buf = NULL;
    int rc = try_ ? ty_try_loan(TOPIC(t), size, &buf) : ty_loan_timed(TOPIC(t), size, &buf, timeout_ns);
    return res(rc, buf);
}
go_ty_res go_ty_publish(uintptr_t t, uintptr_t buf, size_t len, uint64_t key, int64_t timeout_ns, int try_) {
    const void* b = (const void*)buf;
    int rc = try_ ? ty_try_publish(TOPIC(t), b, len, key) : ty_publish_timed(TOPIC(t), b, len, key, timeout_ns);
    return res(rc, NULL);
}
go_ty_res go_ty_unloan(uintptr_t t, uintptr_t buf) { return res(ty_unloan(TOPIC(t), (const void*)buf), NULL); }
go_ty_res go_ty_send(uintptr_t t, const void* data, size_t len, uint64_t key, int64_t timeout_ns) {
    return res(ty_send(TOPIC(t), data, len, key, timeout_ns), NULL);
}
go_ty_msg go_ty_subscribe(uintptr_t t, uint32_t partition, int64_t timeout_ns, int try_) {
    ty_msg_t m;
    int rc = try_ ? ty_try_subscribe(TOPIC(t), partition, &m) : ty_subscribe(TOPIC(t), partition, &m, timeout_ns);
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, (void*)m.data, m.len, m.handle, m.partition};
    return out;
}
go_ty_msg go_ty_recv(uintptr_t t, uint32_t partition, void* buf, size_t cap, int64_t timeout_ns, int try_,
                     int group) {
    size_t len = 0;
    int64_t wait = try_ ? 0 : timeout_ns;
    int rc = group ? ty_group_recv(GROUP(t), partition, buf, cap, &len, wait)
                   : ty_recv(TOPIC(t), partition, buf, cap, &len, wait);
    if (try_ && rc == TY_ETIMEDOUT) {
        rc = TY_EAGAIN;
    }
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, NULL, len, 0, partition};
    return out;
}
go_ty_msg go_ty_subscribe_cancel(uintptr_t t, uint32_t partition, int64_t timeout_ns, uintptr_t c) {
    ty_msg_t m;
    int rc = ty_subscribe_cancel(TOPIC(t), partition, &m, timeout_ns, (const ty_cancel_t*)c);
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, (void*)m.data, m.len, m.handle, m.partition};
    return out;
}
uintptr_t go_ty_cancel_new(void) { return (uintptr_t)ty_cancel_new(); }
void go_ty_cancel(uintptr_t c) { (void)ty_cancel((const ty_cancel_t*)c); }
void go_ty_cancel_free(uintptr_t c) { ty_cancel_free((ty_cancel_t*)c); }
go_ty_res go_ty_subscription_open(uintptr_t t, const uint32_t* parts, size_t n) {
    ty_subscription_t* out = NULL;
    int rc = ty_subscription_open(TOPIC(t), parts, n, &out);
    return res(rc, out);
}
go_ty_msg go_ty_subscription_receive(uintptr_t s, int64_t timeout_ns, int try_, uintptr_t c) {
    const ty_subscription_t* sub = (const ty_subscription_t*)s;
    ty_msg_t m;
    int rc = try_  ? ty_subscription_try_receive(sub, &m)
             : c   ? ty_subscription_receive_cancel(sub, &m, timeout_ns, (const ty_cancel_t*)c)
                   : ty_subscription_receive(sub, &m, timeout_ns);
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, (void*)m.data, m.len, m.handle, m.partition};
    return out;
}
go_ty_msg go_ty_subscription_recv(uintptr_t s, void* buf, size_t cap, int64_t timeout_ns, int try_) {
    size_t len = 0;
    uint32_t partition = 0;
    int rc = ty_subscription_recv((const ty_subscription_t*)s, buf, cap, &len, &partition, try_ ? 0 : timeout_ns);
    if (try_ && rc == TY_ETIMEDOUT) {
        rc = TY_EAGAIN;
    }
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, NULL, len, 0, partition};
    return out;
}
void go_ty_subscription_close(uintptr_t s) { ty_subscription_close((ty_subscription_t*)s); }
go_ty_res go_ty_release(uintptr_t t, uintptr_t data, size_t len, uint32_t partition, uint64_t handle) {
    ty_msg_t m = {(const void*)data, len, partition, 0, handle};
    return res(ty_release(TOPIC(t), &m), NULL);
}
go_ty_res go_ty_topic_join_group(uintptr_t t, const char* name, int from) {
    ty_group_t* out = NULL;
    int rc = ty_topic_join_group_from(TOPIC(t), name, from, &out);
    return res(rc, out);
}
go_ty_msg go_ty_group_receive(uintptr_t g, uint32_t partition, int64_t timeout_ns, int try_, uintptr_t c) {
    ty_msg_t m;
    int rc = try_  ? ty_group_try_receive(GROUP(g), partition, &m)
             : c   ? ty_group_receive_cancel(GROUP(g), partition, &m, timeout_ns, (const ty_cancel_t*)c)
                   : ty_group_receive(GROUP(g), partition, &m, timeout_ns);
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, (void*)m.data, m.len, m.handle, m.partition};
    return out;
}
go_ty_res go_ty_group_release(uintptr_t g, uintptr_t data, size_t len, uint32_t partition, uint64_t handle) {
    ty_msg_t m = {(const void*)data, len, partition, 0, handle};
    return res(ty_group_release(GROUP(g), &m), NULL);
}
go_ty_res go_ty_group_subscribe(uintptr_t g, const uint32_t* parts, size_t n) {
    ty_subscription_t* out = NULL;
    int rc = ty_group_subscribe(GROUP(g), parts, n, &out);
    return res(rc, out);
}
go_ty_res go_ty_group_depth(uintptr_t g, uint32_t partition) {
    int64_t d = ty_group_depth(GROUP(g), partition);
    return res(d, NULL);
}
void go_ty_group_close(uintptr_t g) { ty_group_close((ty_group_t*)g); }
go_ty_res go_ty_group_missed(uintptr_t g) { return res(ty_group_missed(GROUP(g)), NULL); }
go_ty_res go_ty_group_leave(uintptr_t g) {
    go_ty_res r = res(ty_group_leave((ty_group_t*)g), NULL);
    ty_group_close((ty_group_t*)g);
    return r;
}
go_ty_res go_ty_ring_create_with(const char* name, size_t count, size_t size, uint32_t flags) {
    ty_ring_t* out = NULL;
    int rc = ty_ring_create_with(name, count, size, flags, &out);
    return res(rc, out);
}
int go_ty_ring_light_handovers(uintptr_t r) { return ty_ring_light_handovers(RING(r)); }
go_ty_res go_ty_ring_set_batch_reads(uintptr_t r, int on) {
    return res(ty_ring_set_batch_reads((ty_ring_t*)r, on), NULL);
}
int go_ty_ring_batch_reads(uintptr_t r) { return ty_ring_batch_reads(RING(r)); }
go_ty_res go_ty_ring_set_notify(uintptr_t r, int notify) {
    return res(ty_ring_set_notify((ty_ring_t*)r, notify), NULL);
}
int go_ty_ring_notify(uintptr_t r) { return ty_ring_notify(RING(r)); }
go_ty_res go_ty_ring_open(const char* name) {
    ty_ring_t* out = NULL;
    int rc = ty_ring_open(name, &out);
    return res(rc, out);
}
void go_ty_ring_close(uintptr_t r) { ty_ring_close((ty_ring_t*)r); }
size_t go_ty_ring_node_size(uintptr_t r) { return ty_ring_node_size(RING(r)); }
go_ty_res go_ty_ring_write(uintptr_t r, const void* data, size_t len, int64_t timeout_ns) {
    return res(ty_ring_write(RING(r), data, len, timeout_ns), NULL);
}
go_ty_res go_ty_ring_read(uintptr_t r, void* buf, size_t cap, int64_t timeout_ns) {
    size_t len = 0;
    int rc = ty_ring_read(RING(r), buf, cap, &len, timeout_ns);
    return res(rc == TY_OK ? (int64_t)len : rc, NULL);
}
go_ty_res go_ty_buffer_create(const char* name, size_t size) {
    ty_buffer_t* out = NULL;
    int rc = ty_buffer_create(name, size, &out);
    return res(rc, out);
}
go_ty_res go_ty_buffer_open(const char* name) {
    ty_buffer_t* out = NULL;
    int rc = ty_buffer_open(name, &out);
    return res(rc, out);
}
void go_ty_buffer_close(uintptr_t b) { ty_buffer_close((ty_buffer_t*)b); }
size_t go_ty_buffer_size(uintptr_t b) { return ty_buffer_size(BUF(b)); }
go_ty_res go_ty_buffer_write(uintptr_t b, size_t offset, const void* data, size_t len) {
    return res(ty_buffer_write(BUF(b), offset, data, len), NULL);
}
go_ty_res go_ty_buffer_read(uintptr_t b, size_t offset, void* out, size_t len) {
    return res(ty_buffer_read(BUF(b), offset, out, len), NULL);
}

/* Declared by cgo from rpc.go's //export. */
extern int goTachyonRPCHandle(uintptr_t id, void* req, size_t len, uintptr_t reply);

static int go_ty_rpc_handler(void* user, const void* req, size_t len, ty_rpc_reply_t* reply) {
    return goTachyonRPCHandle((uintptr_t)user, (void*)req, len, (uintptr_t)reply);
}
/* Declared by cgo from rpc.go's //export: starts a goroutine that calls
 * go_ty_run(run, task). */
extern void goTachyonSpawn(uintptr_t run, uintptr_t task);

/* An RPC end's threads are goroutines' threads: Go enters a handler from
 * one of its own threads in about 0.13 us, from a thread it did not start
 * in about 7 us (Go 1.19). */
static int go_ty_spawn(void* ctx, const char* name, void (*run)(void*), void* task) {
    (void)ctx;
    (void)name;
    goTachyonSpawn((uintptr_t)run, (uintptr_t)task);
    return 0;
}
void go_ty_run(uintptr_t run, uintptr_t task) { ((void (*)(void*))run)((void*)task); }

go_ty_res go_ty_rpc_open(const char* name, const ty_rpc_conf_t* conf, uintptr_t id, int create) {
    ty_rpc_t* out = NULL;
    ty_rpc_handler_fn h = id ? go_ty_rpc_handler : NULL;
    ty_rpc_conf_t c = conf != NULL ? *conf : ty_rpc_conf_default;
    c.spawn = go_ty_spawn;
    c.spawn_ctx = NULL;
    int rc = create ? ty_rpc_create_with(name, &c, h, (void*)id, &out)
                    : ty_rpc_open_with(name, &c, h, (void*)id, &out);
    return res(rc, out);
}
/* Declared by cgo from rpc.go's //export: copies a response into a new Go
 * slice, kept under the call's id. */
extern void goTachyonRPCResponse(uintptr_t id, void* resp, size_t len);

/* Where go_ty_rpc_request_into's response goes: into the caller's buffer
 * when it fits, else into a new Go slice (copied once either way). */
typedef struct go_ty_into {
    void* buf;
    size_t cap;
    size_t len;
    uintptr_t id;
} go_ty_into;

static void go_ty_into_read(void* ctx, const void* resp, size_t len) {
    go_ty_into* in = ctx;
    in->len = len;
    if (len <= in->cap) {
        if (len > 0) memcpy(in->buf, resp, len);
    } else {
        goTachyonRPCResponse(in->id, (void*)resp, len);
    }
}

go_ty_msg go_ty_rpc_request_into(uintptr_t rpc, const void* req, size_t len, void* buf, size_t cap,
                                 uintptr_t id, int64_t timeout_ns) {
    go_ty_into in = {buf, cap, 0, id};
    int rc = ty_rpc_request_with((const ty_rpc_t*)rpc, req, len, timeout_ns, go_ty_into_read, &in);
    go_ty_res r = res(rc, NULL);
    go_ty_msg out = {r.rc, r.err, NULL, in.len, 0, 0};
    return out;
}
int go_ty_rpc_reply(uintptr_t reply, const void* data, size_t len) {
    return ty_rpc_reply((ty_rpc_reply_t*)reply, data, len);
}
void go_ty_rpc_close(uintptr_t rpc) { ty_rpc_close((ty_rpc_t*)rpc); }

int go_ty_nop(void) { return 0; }
