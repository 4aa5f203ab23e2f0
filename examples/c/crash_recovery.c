/* crash_recovery: a process killed while holding loans does not leak them.
 *
 * A forked child loans 32 chunks of 1 KiB and is SIGKILLed before it
 * publishes any. The parent sees the pool's 1 KiB class short of 32
 * chunks, runs ty_region_recover, and asserts that every chunk came back.
 * (Recovery also runs by itself when a process opens the region and while
 * a loan or a subscribe waits; tachyond, the reaper, runs it too.) */
#define _GNU_SOURCE
#include <signal.h>
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

#define LOANS 32
#define CLASS_1K 2

static size_t free_1k(ty_region_t* reg) {
    ty_pool_stats_t ps;
    TRY(ty_region_pool_stats(reg, &ps));
    return ps.classes[CLASS_1K].free;
}

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "c-crash-recovery-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    ty_region_t* reg;
    TRY(ty_region_create(name, &rc, &reg));
    ty_topic_t* topic;
    TRY(ty_topic_create(reg, "jobs", NULL, &topic));
    size_t before = free_1k(reg);

    int ready[2];
    if (pipe(ready) != 0) return 1;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        ty_region_t* r;
        ty_topic_t* t;
        TRY(ty_region_open(name, NULL, &r));
        TRY(ty_topic_open(r, "jobs", &t));
        for (int i = 0; i < LOANS; i++) {
            void* buf;
            TRY(ty_loan(t, 1024, &buf, NULL));
            memset(buf, i, 1024); /* half-built messages, never published */
        }
        if (write(ready[1], "r", 1) != 1) _exit(1);
        for (;;) pause(); /* until killed */
    }
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
    size_t during = free_1k(reg);
    printf("child %d holds %d loans: %zu of %zu 1 KiB chunks free\n", (int)child, LOANS, during, before);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    printf("child killed (signal %d)\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);

    ty_recovered_t rec;
    TRY(ty_region_recover(reg, &rec));
    size_t after = free_1k(reg);
    printf("recovered %zu chunks (%zu loans, %zu kept in its cache): %zu of %zu free again\n", rec.total,
           rec.loans, rec.cached, after, before);
    int ok = during + LOANS <= before && after == before && rec.loans + rec.cached >= LOANS;
    ty_topic_close(topic);
    ty_region_close(reg);
    TRY(ty_region_remove(name));
    if (!ok) fprintf(stderr, "crash_recovery: the chunks did not all come back\n");
    return ok ? 0 : 1;
}
