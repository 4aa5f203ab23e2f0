/* ring: a ring of fixed-size nodes between processes (ty_ring_*), and a
 * shared byte buffer (ty_buffer_*) for the result.
 *
 * The parent creates a ring of 16 nodes of 64 bytes and a 64-byte buffer,
 * and forks a writer child that pushes 10000 numbered items through the
 * ring (far more than it holds: the writer waits for room). The parent
 * reads them all, checks their order, and the child, once done, writes its
 * count into the shared buffer where the parent reads it. Rings and
 * buffers are removed when the last process closes them.
 *
 *   ring [N]     (default 10000) */
#define _GNU_SOURCE
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

int main(int argc, char** argv) {
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000;
    char ring_name[64], buf_name[64];
    snprintf(ring_name, sizeof ring_name, "c-ring-%d", (int)getpid());
    snprintf(buf_name, sizeof buf_name, "c-ring-result-%d", (int)getpid());
    ty_ring_t* ring;
    ty_buffer_t* result;
    TRY(ty_ring_create(ring_name, 16, 64, &ring));
    TRY(ty_buffer_create(buf_name, 64, &result));

    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        ty_ring_t* r;
        ty_buffer_t* b;
        TRY(ty_ring_open(ring_name, &r));
        TRY(ty_buffer_open(buf_name, &b));
        for (uint64_t i = 0; i < n; i++) {
            char item[64];
            int len = snprintf(item, sizeof item, "item %llu", (unsigned long long)i);
            TRY(ty_ring_write(r, item, (size_t)len, WAIT_NS));
        }
        TRY(ty_buffer_write(b, 0, &n, sizeof n));
        ty_ring_close(r);
        ty_buffer_close(b);
        _exit(0);
    }

    char item[64], want[64];
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        TRY(ty_ring_read(ring, item, sizeof item, &len, WAIT_NS));
        int wl = snprintf(want, sizeof want, "item %llu", (unsigned long long)i);
        if (len != (size_t)wl || memcmp(item, want, len) != 0) {
            fprintf(stderr, "item %llu: got %.*s\n", (unsigned long long)i, (int)len, item);
            return 1;
        }
    }
    int status;
    waitpid(child, &status, 0);
    uint64_t written = 0;
    TRY(ty_buffer_read(result, 0, &written, sizeof written));
    printf("read %llu items in order through a ring of 16 x %zu bytes; the writer reports %llu in a %zu-byte buffer\n",
           (unsigned long long)n, ty_ring_node_size(ring), (unsigned long long)written, ty_buffer_size(result));
    ty_ring_close(ring);
    ty_buffer_close(result);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && written == n ? 0 : 1;
}
