/* The binding's C side: thin wrappers over libtachyon, for two reasons.
 *
 * 1. libtachyon keeps the text of the last failure per OS thread
 *    (ty_last_error), and a goroutine may move to another thread between
 *    two cgo calls: the text must be taken in the same C call as the
 *    failure. Each wrapper returns, by value, the status and, on failure
 *    (other than TY_EAGAIN and TY_ETIMEDOUT, whose text says nothing more
 *    than the code), a malloc'd copy of the text, which the Go side frees.
 * 2. Cost. cgo checks every pointer argument at run time (cgocheck) and
 *    makes Go variables whose address is passed escape to the heap. The
 *    handles and loaned chunks are C memory, so they are passed as
 *    uintptr_t (nothing to check), results come back in the returned
 *    struct rather than through out-parameters, and a received message
 *    comes back as a value (go_ty_msg) and goes back to ty_release as
 *    values. The only Go pointers given to C are names (of regions, topics and groups), configurations,
 *    statistics out-structs, the partition list of Subscribe and the bytes
 *    of Send, ring, buffer and RPC calls (requests, a handler's response,
 *    which ty_rpc_reply copies, and the buffer a response is copied
 *    into), none of which contains a Go pointer or is kept after the
 *    call (the cgo rules). The RPC handler's `user` value is an integer
 *    naming the Go handler, and a call's `id` an integer naming its
 *    long response's slice, not pointers.
 */
#ifndef TACHYON_GO_SHIM_H
#define TACHYON_GO_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <tachyon/tachyon.h>

typedef struct go_ty_res {
    int64_t rc; /* TY_OK, a TY_E* code, or a count (topics, depth, length) */
    char* err;  /* NULL, or the failure's text: free it */
    void* ptr;  /* the pointer result: a handle or a loaned chunk */
} go_ty_res;

/* A received message: ty_msg_t's fields, and the status. */
typedef struct go_ty_msg {
    int64_t rc;
    char* err;
    void* data;
    size_t len;
    uint64_t handle;
    uint32_t partition;
} go_ty_msg;

/* create: ty_region_create_groups; else conf: ty_region_open_groups; else
 * ty_region_open(name, NULL). */
go_ty_res go_ty_region_open(const char* name, const ty_region_conf_t* conf, int create, uint32_t max_groups);
go_ty_res go_ty_region_remove(const char* name);
void go_ty_region_close(uintptr_t reg);
go_ty_res go_ty_region_recover(uintptr_t reg, ty_recovered_t* out, int on_open);
go_ty_res go_ty_region_pool_stats(uintptr_t reg, ty_pool_stats_t* out);
go_ty_res go_ty_region_heartbeat(uintptr_t reg);
go_ty_res go_ty_region_topics(uintptr_t reg, ty_topic_info_t* out, size_t cap);
/* ty_topic_create_flags (flags: TY_TOPIC_*). */
go_ty_res go_ty_topic_create(uintptr_t reg, const char* name, const ty_topic_conf_t* conf, uint32_t flags,
                             uint32_t inline_payload);
go_ty_res go_ty_topic_open(uintptr_t reg, const char* name);
void go_ty_topic_close(uintptr_t t);
int go_ty_topic_partitions(uintptr_t t);
int go_ty_topic_light_handovers(uintptr_t t);
go_ty_res go_ty_topic_set_batch_reads(uintptr_t t, int on);
int go_ty_topic_batch_reads(uintptr_t t);
int go_ty_partition_of(uintptr_t t, uint64_t key);
go_ty_res go_ty_topic_stats(uintptr_t t, ty_topic_stats_t* out);
go_ty_res go_ty_topic_depth(uintptr_t t, uint32_t partition);
go_ty_res go_ty_topic_missed(uintptr_t t);
go_ty_res go_ty_topic_groups(uintptr_t t, ty_group_info_t* out, size_t cap);
/* try: ty_try_loan, else ty_loan with the timeout. */
go_ty_res go_ty_loan(uintptr_t t, size_t size, int64_t timeout_ns, int try_);
/* try: ty_try_publish, else ty_publish_timed. */
go_ty_res go_ty_publish(uintptr_t t, uintptr_t buf, size_t len, uint64_t key, int64_t timeout_ns, int try_);
go_ty_res go_ty_unloan(uintptr_t t, uintptr_t buf);
/* ty_recv into buf (Go memory holding no Go pointer); len: the message's
 * length, also with TY_ENOBUFS (the message stays queued). try_: timeout
 * 0, and TY_EAGAIN for an empty partition. */
go_ty_msg go_ty_recv(uintptr_t t, uint32_t partition, void* buf, size_t cap, int64_t timeout_ns, int try_,
                     int group);
go_ty_msg go_ty_subscription_recv(uintptr_t s, void* buf, size_t cap, int64_t timeout_ns, int try_);
go_ty_res go_ty_send(uintptr_t t, const void* data, size_t len, uint64_t key, int64_t timeout_ns);
/* try: ty_try_subscribe, else ty_subscribe. */
go_ty_msg go_ty_subscribe(uintptr_t t, uint32_t partition, int64_t timeout_ns, int try_);
/* ty_subscribe_cancel with the cancellation c (a ty_cancel_t*). */
go_ty_msg go_ty_subscribe_cancel(uintptr_t t, uint32_t partition, int64_t timeout_ns, uintptr_t c);
uintptr_t go_ty_cancel_new(void);
void go_ty_cancel(uintptr_t c);
void go_ty_cancel_free(uintptr_t c);
/* A subscription (ty_subscription_t*): parts / n as ty_subscription_open
 * takes them (NULL, 0: every partition); ptr is the handle. */
go_ty_res go_ty_subscription_open(uintptr_t t, const uint32_t* parts, size_t n);
/* try: ty_subscription_try_receive; else, c (a ty_cancel_t*) not 0:
 * ty_subscription_receive_cancel; else ty_subscription_receive. */
go_ty_msg go_ty_subscription_receive(uintptr_t s, int64_t timeout_ns, int try_, uintptr_t c);
void go_ty_subscription_close(uintptr_t s);
go_ty_res go_ty_release(uintptr_t t, uintptr_t data, size_t len, uint32_t partition, uint64_t handle);
/* Consumer groups (unstable): ptr is the ty_group_t*. */
/* from: TY_JOIN_NOW or TY_JOIN_OLDEST (ty_topic_join_group_from). */
go_ty_res go_ty_topic_join_group(uintptr_t t, const char* name, int from);
/* try: ty_group_try_receive; else, c (a ty_cancel_t*) not 0:
 * ty_group_receive_cancel; else ty_group_receive. */
go_ty_msg go_ty_group_receive(uintptr_t g, uint32_t partition, int64_t timeout_ns, int try_, uintptr_t c);
go_ty_res go_ty_group_release(uintptr_t g, uintptr_t data, size_t len, uint32_t partition, uint64_t handle);
go_ty_res go_ty_group_subscribe(uintptr_t g, const uint32_t* parts, size_t n);
/* rc: the depth, or a negative error. */
go_ty_res go_ty_group_depth(uintptr_t g, uint32_t partition);
void go_ty_group_close(uintptr_t g);
go_ty_res go_ty_group_missed(uintptr_t g);
/* ty_group_leave, then ty_group_close whatever it returned. */
go_ty_res go_ty_group_leave(uintptr_t g);
go_ty_res go_ty_ring_create_with(const char* name, size_t count, size_t size, uint32_t flags);
go_ty_res go_ty_ring_open(const char* name);
int go_ty_ring_light_handovers(uintptr_t r);
go_ty_res go_ty_ring_set_batch_reads(uintptr_t r, int on);
int go_ty_ring_batch_reads(uintptr_t r);
go_ty_res go_ty_ring_set_notify(uintptr_t r, int notify);
int go_ty_ring_notify(uintptr_t r);
void go_ty_ring_close(uintptr_t r);
size_t go_ty_ring_node_size(uintptr_t r);
go_ty_res go_ty_ring_write(uintptr_t r, const void* data, size_t len, int64_t timeout_ns);
/* rc: the item's length. */
go_ty_res go_ty_ring_read(uintptr_t r, void* buf, size_t cap, int64_t timeout_ns);
go_ty_res go_ty_buffer_create(const char* name, size_t size);
go_ty_res go_ty_buffer_open(const char* name);
void go_ty_buffer_close(uintptr_t b);
size_t go_ty_buffer_size(uintptr_t b);
go_ty_res go_ty_buffer_write(uintptr_t b, size_t offset, const void* data, size_t len);
go_ty_res go_ty_buffer_read(uintptr_t b, size_t offset, void* out, size_t len);

/* RPC: `id` names the Go handler (0: none); the library calls it through
 * go_ty_rpc_handler, which calls the exported Go function
 * goTachyonRPCHandle. go_ty_rpc_request_into copies the response into
 * buf when it fits cap, else into a new Go slice through the exported
 * goTachyonRPCResponse (id names the call); len is the
 * response's length either way. */
go_ty_res go_ty_rpc_open(const char* name, const ty_rpc_conf_t* conf, uintptr_t id, int create);
/* Runs an RPC end's thread work (`run(task)`) on the calling goroutine's
 * thread: every thread of an end is started by goTachyonSpawn. */
void go_ty_run(uintptr_t run, uintptr_t task);
go_ty_msg go_ty_rpc_request_into(uintptr_t rpc, const void* req, size_t len, void* buf, size_t cap,
                                 uintptr_t id, int64_t timeout_ns);
int go_ty_rpc_reply(uintptr_t reply, const void* data, size_t len);
void go_ty_rpc_close(uintptr_t rpc);

/* Does nothing: the benchmarks' measure of a bare cgo call. */
int go_ty_nop(void);

#endif
