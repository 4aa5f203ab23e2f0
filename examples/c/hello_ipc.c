/* hello_ipc: the smallest round of the bus across two processes.
 *
 * The parent creates a region and a topic; a forked child attaches to the
 * region by name (NULL configuration), subscribes and prints what it gets;
 * the parent loans a chunk, writes a greeting in place and publishes it.
 * The region persists until ty_region_remove.
 *
 *   cc -std=c11 hello_ipc.c -ltachyon -o hello_ipc && ./hello_ipc */
#define _GNU_SOURCE
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

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "hello-ipc-%d", (int)getpid());

    ty_region_t* reg;
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    TRY(ty_region_open(name, &rc, &reg));
    ty_topic_t* topic;
    TRY(ty_topic_create(reg, "greetings", NULL, &topic)); /* NULL: ty_topic_conf_default */

    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        /* Another process: attach by name. */
        ty_region_t* r;
        ty_topic_t* t;
        TRY(ty_region_open(name, NULL, &r));
        TRY(ty_topic_open(r, "greetings", &t));
        ty_msg_t m;
        TRY(ty_subscribe(t, 0, &m, 10000000000LL)); /* at most 10 s */
        printf("child %d got %zu bytes: %.*s\n", (int)getpid(), m.len, (int)m.len, (const char*)m.data);
        TRY(ty_release(t, &m));
        ty_topic_close(t);
        ty_region_close(r);
        fflush(stdout);
        _exit(0);
    }

    char* buf;
    TRY(ty_loan(topic, 64, (void**)&buf, NULL));
    int len = snprintf(buf, 64, "hello from process %d", (int)getpid());
    TRY(ty_publish(topic, buf, (size_t)len, 0));

    int status;
    waitpid(child, &status, 0);
    ty_topic_close(topic);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
