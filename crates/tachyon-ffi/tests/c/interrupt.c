/* ty_interrupt: a consumer blocked for ever (timeout -1) in ty_subscribe,
 * and a reader blocked in ty_ring_read, return TY_EINTR when a signal
 * handler calls ty_interrupt (whenever the signal lands: the flag stays
 * set); a message that is there is still received; after
 * ty_interrupt_clear calls wait as usual. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static ty_topic_t* topic;
static ty_ring_t* ring;
static volatile sig_atomic_t stop;

static void on_sigusr1(int sig) {
    (void)sig;
    stop = 1;
    ty_interrupt(); /* async-signal-safe */
}

static void* subscriber(void* arg) {
    (void)arg;
    ty_msg_t m;
    int rc = TY_OK;
    while (!stop && (rc = ty_subscribe(topic, 0, &m, -1)) == TY_OK) CHECK(ty_release(topic, &m));
    if (stop && rc == TY_OK) rc = TY_EINTR; /* stopped between two messages */
    return (void*)(intptr_t)rc;
}

static ty_topic_t* big;
static void* loans[16];
static void* extra;

static void* unloan_later(void* arg) {
    usleep(50000);
    CHECK(ty_unloan(big, *(void**)arg));
    return NULL;
}

static void* interrupt_later(void* arg) {
    (void)arg;
    usleep(50000);
    ty_interrupt();
    return NULL;
}

static ty_topic_t* full;

static void* receive_later(void* arg) {
    (void)arg;
    usleep(50000);
    ty_msg_t m;
    CHECK(ty_subscribe(full, 0, &m, 0));
    CHECK(ty_release(full, &m));
    return NULL;
}

static ty_cancel_t* cancel;

static void* cancel_later(void* arg) {
    (void)arg;
    usleep(50000);
    CHECK(ty_cancel(cancel));
    return NULL;
}

static void* reader(void* arg) {
    (void)arg;
    char b[16];
    size_t len;
    return (void*)(intptr_t)ty_ring_read(ring, b, sizeof b, &len, -1);
}

int main(void) {
    char name[64], ring_name[80];
    snprintf(name, sizeof name, "c-interrupt-%d", (int)getpid());
    snprintf(ring_name, sizeof ring_name, "%s-ring", name);
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create(name, &rc, &reg));
    CHECK(ty_topic_create(reg, "t", NULL, &topic));
    CHECK(ty_ring_create(ring_name, 4, 16, &ring));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    EXPECT(sigaction(SIGUSR1, &sa, NULL) == 0);

    pthread_t a, b;
    EXPECT(pthread_create(&a, NULL, subscriber, NULL) == 0);
    EXPECT(pthread_create(&b, NULL, reader, NULL) == 0);
    CHECK(ty_send(topic, "one", 3, 0, -1)); /* consumed; the subscriber waits again */
    ty_topic_stats_t st;
    for (int i = 0; i < 500; i++) { /* until it was received (at most 5 s) */
        CHECK(ty_topic_stats(topic, &st));
        if (st.received == 1) break;
        usleep(10000);
    }
    EXPECT(st.received == 1);
    usleep(20000);
    EXPECT(kill(getpid(), SIGUSR1) == 0);
    void* ra;
    void* rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    EXPECT((intptr_t)ra == TY_EINTR);
    EXPECT((intptr_t)rb == TY_EINTR);
    EXPECT(stop == 1);

    /* While interrupted, what is there is still received; waiting is not. */
    ty_msg_t m;
    CHECK(ty_send(topic, "two", 3, 0, -1));
    CHECK(ty_subscribe(topic, 0, &m, -1));
    CHECK(ty_release(topic, &m));
    EXPECT_RC(TY_EINTR, ty_subscribe(topic, 0, &m, -1));
    EXPECT(strstr(ty_last_error(), "interrupted") != NULL);

    /* After ty_interrupt_clear, calls wait as usual (and time out). */
    ty_interrupt_clear();
    EXPECT_RC(TY_ETIMEDOUT, ty_subscribe(topic, 0, &m, 30000000)); /* 30 ms: sliced, not interrupted */
    EXPECT(strstr(ty_last_error(), "30ms") != NULL);
    CHECK(ty_topic_stats(topic, &st));
    EXPECT(st.published == 2 && st.received == 2);
    /* ty_cancel wakes a ty_subscribe_cancel waiting for ever (no
     * ty_interrupt involved); a message there is still received; a
     * cancellation stays cancelled; NULL is TY_EINVAL. */
    {
        cancel = ty_cancel_new();
        EXPECT(cancel != NULL);
        pthread_t c;
        EXPECT(pthread_create(&c, NULL, cancel_later, NULL) == 0);
        EXPECT_RC(TY_EINTR, ty_subscribe_cancel(topic, 0, &m, -1, cancel));
        EXPECT(m.data == NULL && m.handle == 0);
        pthread_join(c, NULL);
        CHECK(ty_send(topic, "three", 5, 0, -1));
        CHECK(ty_subscribe_cancel(topic, 0, &m, -1, cancel));
        EXPECT(m.len == 5 && memcmp(m.data, "three", 5) == 0);
        CHECK(ty_release(topic, &m));
        EXPECT_RC(TY_EINTR, ty_subscribe_cancel(topic, 0, &m, -1, cancel));
        EXPECT_RC(TY_EINVAL, ty_subscribe_cancel(topic, 0, &m, -1, NULL));
        EXPECT_RC(TY_EINVAL, ty_cancel(NULL));
        ty_cancel_free(cancel);
        ty_cancel_free(NULL);
        ty_cancel_t* fresh = ty_cancel_new();
        EXPECT_RC(TY_ETIMEDOUT, ty_subscribe_cancel(topic, 0, &m, 1000000, fresh));
        ty_cancel_free(fresh);
    }

    /* A publish into a full partition waits for ever for room, beyond the
     * 10 ms slices, until a consumer makes some; one waiting when
     * ty_interrupt comes returns TY_EINTR, its message dropped and its
     * chunk back in the pool. */
    {
        ty_topic_conf_t fc = ty_topic_conf_default;
        fc.partitions = 1;
        fc.capacity = 2;
        CHECK(ty_topic_create(reg, "full", &fc, &full));
        CHECK(ty_send(full, "a", 1, 0, -1));
        CHECK(ty_send(full, "b", 1, 0, -1));
        ty_pool_stats_t before, after;
        CHECK(ty_region_pool_stats(reg, &before));
        void* b;
        CHECK(ty_loan(full, 1, &b, NULL));
        pthread_t r;
        EXPECT(pthread_create(&r, NULL, receive_later, NULL) == 0);
        CHECK(ty_publish(full, b, 1, 0)); /* waits ~50 ms: five slices */
        pthread_join(r, NULL);
        EXPECT(ty_topic_depth(full, 0) == 2);
        CHECK(ty_loan(full, 1, &b, NULL));
        EXPECT(pthread_create(&r, NULL, interrupt_later, NULL) == 0);
        EXPECT_RC(TY_EINTR, ty_publish(full, b, 1, 0));
        pthread_join(r, NULL);
        ty_interrupt_clear();
        EXPECT_RC(TY_EINVAL, ty_unloan(full, b)); /* used up */
        CHECK(ty_loan(full, 1, &b, NULL));
        EXPECT_RC(TY_ETIMEDOUT, ty_publish_timed(full, b, 1, 0, 30000000));
        EXPECT(ty_topic_depth(full, 0) == 2);
        CHECK(ty_region_pool_stats(reg, &after));
        EXPECT(after.classes[0].free == before.classes[0].free); /* every chunk back */
        ty_topic_close(full);
    }

    /* A loan waits for ever for a chunk, beyond the 10 ms slices, until
     * another thread returns one; a timed loan gives up with TY_EPOOL; a
     * loan waiting when ty_interrupt comes returns TY_EINTR. */
    ty_region_t* small;
    char small_name[80];
    snprintf(small_name, sizeof small_name, "%s-small", name);
    rc = ty_region_conf_default;
    rc.size = 4 << 20;
    rc.ring_arena = 1 << 20;
    for (int c = 0; c < TY_CLASSES; c++) rc.class_weights[c] = c == TY_CLASSES - 1; /* 1 MiB chunks only */
    CHECK(ty_region_create(small_name, &rc, &small));
    CHECK(ty_topic_create(small, "big", NULL, &big));
    int held = 0;
    for (; held < 16 && ty_try_loan(big, 100, &loans[held]) == TY_OK; held++) {
    }
    EXPECT(held > 0 && held < 16);
    EXPECT_RC(TY_EPOOL, ty_try_loan(big, 100, &extra));
    EXPECT_RC(TY_EPOOL, ty_loan_timed(big, 100, &extra, 30000000));
    pthread_t u;
    EXPECT(pthread_create(&u, NULL, unloan_later, &loans[held - 1]) == 0);
    CHECK(ty_loan(big, 100, &extra, NULL)); /* waits ~50 ms: five slices */
    pthread_join(u, NULL);
    EXPECT(pthread_create(&u, NULL, interrupt_later, NULL) == 0);
    void* none;
    EXPECT_RC(TY_EINTR, ty_loan(big, 100, &none, NULL));
    pthread_join(u, NULL);
    ty_interrupt_clear();
    ty_topic_close(big); /* returns its loans */
    ty_region_close(small);
    CHECK(ty_region_remove(small_name));

    printf("interrupt: a subscriber, a ring reader, a publish and a loan blocked for ever returned TY_EINTR\n");
    ty_ring_close(ring);
    ty_topic_close(topic);
    ty_region_close(reg);
    CHECK(ty_region_remove(name));
    return 0;
}
