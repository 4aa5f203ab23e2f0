/* See shim.h. */
#include <string.h>

#include "shim.h"

static int keep(int rc, char** err) {
    if (rc < 0 && rc != TY_EAGAIN && rc != TY_ETIMEDOUT && err != NULL) {
        *err = strdup(ty_last_error());
    }
    return rc;
}

int go_ty_region_open(const char* name, const ty_region_conf_t* conf, int create, ty_region_t** out, char** err) {
    return keep(create ? ty_region_create(name, conf, out) : ty_region_open(name, conf, out), err);
}
int go_ty_region_remove(const char* name, char** err) { return keep(ty_region_remove(name), err); }
int go_ty_region_recover(const ty_region_t* reg, ty_recovered_t* out, char** err) {
    return keep(ty_region_recover(reg, out), err);
}
int go_ty_region_recovered_on_open(const ty_region_t* reg, ty_recovered_t* out, char** err) {
    return keep(ty_region_recovered_on_open(reg, out), err);
}
int go_ty_region_pool_stats(const ty_region_t* reg, ty_pool_stats_t* out, char** err) {
    return keep(ty_region_pool_stats(reg, out), err);
}
int go_ty_region_heartbeat(const ty_region_t* reg, char** err) { return keep(ty_region_heartbeat(reg), err); }
int64_t go_ty_region_topics(const ty_region_t* reg, ty_topic_info_t* out, size_t cap, char** err) {
    int n = ty_region_topics(reg, out, cap);
    return n < 0 ? keep(n, err) : n;
}
int go_ty_topic_create(const ty_region_t* reg, const char* name, const ty_topic_conf_t* conf, ty_topic_t** out,
                       char** err) {
    return keep(ty_topic_create(reg, name, conf, out), err);
}
int go_ty_topic_open(const ty_region_t* reg, const char* name, ty_topic_t** out, char** err) {
    return keep(ty_topic_open(reg, name, out), err);
}
int go_ty_topic_stats(const ty_topic_t* t, ty_topic_stats_t* out, char** err) {
    return keep(ty_topic_stats(t, out), err);
}
int64_t go_ty_topic_depth(const ty_topic_t* t, uint32_t partition, char** err) {
    int64_t n = ty_topic_depth(t, partition);
    return n < 0 ? keep((int)n, err) : n;
}
int go_ty_loan(const ty_topic_t* t, size_t size, void** buf, int64_t timeout_ns, uint32_t flags, char** err) {
    ty_loan_opts_t opts = ty_loan_opts_default;
    opts.timeout_ns = timeout_ns;
    opts.flags = flags;
    return keep(ty_loan(t, size, buf, &opts), err);
}
int go_ty_publish(const ty_topic_t* t, const void* buf, size_t len, uint64_t key, int64_t timeout_ns, char** err) {
    return keep(ty_publish_timed(t, buf, len, key, timeout_ns), err);
}
int go_ty_try_publish(const ty_topic_t* t, const void* buf, size_t len, uint64_t key, char** err) {
    return keep(ty_try_publish(t, buf, len, key), err);
}
int go_ty_try_loan(const ty_topic_t* t, size_t size, void** buf, char** err) {
    return keep(ty_try_loan(t, size, buf), err);
}
int go_ty_try_subscribe(const ty_topic_t* t, uint32_t partition, ty_msg_t* m, char** err) {
    return keep(ty_try_subscribe(t, partition, m), err);
}
int go_ty_unloan(const ty_topic_t* t, const void* buf, char** err) { return keep(ty_unloan(t, buf), err); }
int go_ty_send(const ty_topic_t* t, const void* data, size_t len, uint64_t key, int64_t timeout_ns, char** err) {
    return keep(ty_send(t, data, len, key, timeout_ns), err);
}
int go_ty_subscribe(const ty_topic_t* t, uint32_t partition, ty_msg_t* m, int64_t timeout_ns, char** err) {
    return keep(ty_subscribe(t, partition, m, timeout_ns), err);
}
int go_ty_release(const ty_topic_t* t, ty_msg_t* m, char** err) { return keep(ty_release(t, m), err); }
int go_ty_ring_create(const char* name, size_t count, size_t size, ty_ring_t** out, char** err) {
    return keep(ty_ring_create(name, count, size, out), err);
}
int go_ty_ring_open(const char* name, ty_ring_t** out, char** err) { return keep(ty_ring_open(name, out), err); }
int go_ty_ring_write(const ty_ring_t* r, const void* data, size_t len, int64_t timeout_ns, char** err) {
    return keep(ty_ring_write(r, data, len, timeout_ns), err);
}
int go_ty_ring_read(const ty_ring_t* r, void* buf, size_t cap, size_t* len, int64_t timeout_ns, char** err) {
    return keep(ty_ring_read(r, buf, cap, len, timeout_ns), err);
}
int go_ty_buffer_create(const char* name, size_t size, ty_buffer_t** out, char** err) {
    return keep(ty_buffer_create(name, size, out), err);
}
int go_ty_buffer_open(const char* name, ty_buffer_t** out, char** err) {
    return keep(ty_buffer_open(name, out), err);
}
int go_ty_buffer_write(const ty_buffer_t* b, size_t offset, const void* data, size_t len, char** err) {
    return keep(ty_buffer_write(b, offset, data, len), err);
}
int go_ty_buffer_read(const ty_buffer_t* b, size_t offset, void* out, size_t len, char** err) {
    return keep(ty_buffer_read(b, offset, out, len), err);
}

int go_ty_nop(void) { return 0; }
