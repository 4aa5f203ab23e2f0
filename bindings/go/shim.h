/* The binding's C side: one wrapper per libtachyon call whose failure the
 * Go code reports. libtachyon keeps the text of the last failure per OS
 * thread (ty_last_error); a goroutine may move to another thread between
 * two cgo calls, so the text must be taken in the same C call as the
 * failure. On failure (other than TY_EAGAIN and TY_ETIMEDOUT, whose text
 * says nothing more than the code) each wrapper stores a malloc'd copy of
 * it in *err, which the Go side frees; on success it touches nothing.
 * No pointer to Go memory is kept by C past the call (the cgo rules). */
#ifndef TACHYON_GO_SHIM_H
#define TACHYON_GO_SHIM_H

#include <stdint.h>
#include <stdlib.h>
#include <tachyon/tachyon.h>

int go_ty_region_open(const char* name, const ty_region_conf_t* conf, int create, ty_region_t** out, char** err);
int go_ty_region_remove(const char* name, char** err);
int go_ty_region_recover(const ty_region_t* reg, ty_recovered_t* out, char** err);
int go_ty_region_recovered_on_open(const ty_region_t* reg, ty_recovered_t* out, char** err);
int go_ty_region_pool_stats(const ty_region_t* reg, ty_pool_stats_t* out, char** err);
int go_ty_region_heartbeat(const ty_region_t* reg, char** err);
int64_t go_ty_region_topics(const ty_region_t* reg, ty_topic_info_t* out, size_t cap, char** err);
int go_ty_topic_create(const ty_region_t* reg, const char* name, const ty_topic_conf_t* conf, ty_topic_t** out,
                       char** err);
int go_ty_topic_open(const ty_region_t* reg, const char* name, ty_topic_t** out, char** err);
int go_ty_topic_stats(const ty_topic_t* t, ty_topic_stats_t* out, char** err);
int64_t go_ty_topic_depth(const ty_topic_t* t, uint32_t partition, char** err);
int go_ty_loan(const ty_topic_t* t, size_t size, void** buf, int64_t timeout_ns, uint32_t flags, char** err);
int go_ty_publish(const ty_topic_t* t, const void* buf, size_t len, uint64_t key, int64_t timeout_ns, char** err);
int go_ty_try_publish(const ty_topic_t* t, const void* buf, size_t len, uint64_t key, char** err);
int go_ty_try_loan(const ty_topic_t* t, size_t size, void** buf, char** err);
int go_ty_try_subscribe(const ty_topic_t* t, uint32_t partition, ty_msg_t* m, char** err);
int go_ty_unloan(const ty_topic_t* t, const void* buf, char** err);
int go_ty_send(const ty_topic_t* t, const void* data, size_t len, uint64_t key, int64_t timeout_ns, char** err);
int go_ty_subscribe(const ty_topic_t* t, uint32_t partition, ty_msg_t* m, int64_t timeout_ns, char** err);
int go_ty_release(const ty_topic_t* t, ty_msg_t* m, char** err);
int go_ty_ring_create(const char* name, size_t count, size_t size, ty_ring_t** out, char** err);
int go_ty_ring_open(const char* name, ty_ring_t** out, char** err);
int go_ty_ring_write(const ty_ring_t* r, const void* data, size_t len, int64_t timeout_ns, char** err);
int go_ty_ring_read(const ty_ring_t* r, void* buf, size_t cap, size_t* len, int64_t timeout_ns, char** err);
int go_ty_buffer_create(const char* name, size_t size, ty_buffer_t** out, char** err);
int go_ty_buffer_open(const char* name, ty_buffer_t** out, char** err);
int go_ty_buffer_write(const ty_buffer_t* b, size_t offset, const void* data, size_t len, char** err);
int go_ty_buffer_read(const ty_buffer_t* b, size_t offset, void* out, size_t len, char** err);

/* Does nothing: the benchmarks' measure of a bare cgo call. */
int go_ty_nop(void);

#endif
