/* Consumer groups (issue #15) from C: two groups of one topic
 * fed by a producer child process (fork), each receiving every message
 * exactly once (one through a subscription over both partitions, one
 * partition by partition); one message held by two groups of this process
 * at once and released through each; the pool full again afterwards; and
 * the errors: bad group names, NULL handles, a region without group slots,
 * every named slot used, a message released through the wrong handle;
 * ty_group_leave (a held message released, the left handle TY_ECLOSED,
 * the membership ended by the last handle, the pool full again); and an
 * overrunning topic (TY_TOPIC_OVERRUN) fed by a producer child that never
 * waits: groups that do not read miss what their rings cannot hold, and
 * what they receive plus what they missed is what was published; and a
 * group joined from the oldest (TY_JOIN_OLDEST) gets what a producer
 * child left queued, then the live stream. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define WAIT_NS 10000000000LL /* 10 s: a stuck peer fails the test */
#define N 20000
#define PARTS 2

static char name[64];

static void wait_ok(pid_t pid) {
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Records message `m` (a uint64_t sequence number) as seen once more. */
static void seen(const ty_msg_t* m, unsigned char* counts, size_t* total) {
    uint64_t v;
    EXPECT(m->len == sizeof v);
    memcpy(&v, m->data, sizeof v);
    EXPECT(v < N);
    EXPECT(counts[v] == 0); /* never twice */
    counts[v] = 1;
    (*total)++;
}

static void errors(void) {
    /* A region without named group slots: joining is TY_EINVAL. */
    char plain_name[80];
    snprintf(plain_name, sizeof plain_name, "%s-plain", name);
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* plain;
    CHECK(ty_region_create(plain_name, &rc, &plain));
    ty_topic_t* t;
    CHECK(ty_topic_create(plain, "t", NULL, &t));
    ty_group_t* g = (ty_group_t*)&g; /* not NULL: must be set to NULL */
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, "audit", &g));
    EXPECT(g == NULL);
    EXPECT(strstr(ty_last_error(), "max_groups") != NULL);
    /* ... and so is a topic without its default group there. */
    ty_topic_t* t2 = NULL;
    EXPECT_RC(TY_EINVAL, ty_topic_create_groups(plain, "t2", NULL, 0, &t2));
    EXPECT(t2 == NULL);
    ty_topic_close(t);
    ty_region_close(plain);
    CHECK(ty_region_remove(plain_name));

    /* max_groups 1: the default group only, still no named slots. */
    ty_region_t* one;
    CHECK(ty_region_create_groups(plain_name, &rc, 1, &one));
    CHECK(ty_topic_create(one, "t", NULL, &t));
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, "audit", &g));
    ty_topic_close(t);
    ty_region_close(one);
    CHECK(ty_region_remove(plain_name));

    /* Bad names and NULLs. */
    ty_region_t* reg;
    CHECK(ty_region_create_groups(plain_name, &rc, 3, &reg));
    /* Same configuration: opened; another max_groups: incompatible. */
    ty_region_t* again;
    CHECK(ty_region_open_groups(plain_name, &rc, 3, &again));
    ty_region_close(again);
    EXPECT_RC(TY_EINCOMPAT, ty_region_open_groups(plain_name, &rc, 4, &again));
    CHECK(ty_topic_create(reg, "t", NULL, &t));
    char long_name[70];
    memset(long_name, 'x', 65);
    long_name[65] = 0;
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, "", &g));
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, long_name, &g));
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, NULL, &g));
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(NULL, "audit", &g));
    EXPECT_RC(TY_EINVAL, ty_topic_join_group(t, "audit", NULL));
    long_name[64] = 0; /* 64 bytes: the longest name */
    ty_group_t *a, *b, *a2;
    CHECK(ty_topic_join_group(t, long_name, &a));
    CHECK(ty_topic_join_group(t, "b", &b));
    CHECK(ty_topic_join_group(t, "b", &a2)); /* a second member of "b" */
    /* Two named slots (max_groups 3), both used. */
    EXPECT_RC(TY_ENOSPC, ty_topic_join_group(t, "c", &g));
    char nm[65];
    EXPECT(ty_group_name(a, nm, sizeof nm) == 64);
    EXPECT(strcmp(nm, long_name) == 0);
    EXPECT(ty_group_name(b, nm, 1) == TY_EINVAL);
    EXPECT(ty_group_name(NULL, nm, sizeof nm) == TY_EINVAL);
    ty_msg_t m;
    EXPECT_RC(TY_EINVAL, ty_group_receive(NULL, 0, &m, 0));
    EXPECT_RC(TY_EINVAL, ty_group_receive(a, 0, NULL, 0));
    EXPECT_RC(TY_EINVAL, ty_group_receive(a, 1, &m, 0)); /* one partition */
    EXPECT_RC(TY_EAGAIN, ty_group_try_receive(a, 0, &m));
    EXPECT_RC(TY_ETIMEDOUT, ty_group_receive(a, 0, &m, 1000000));
    EXPECT_RC(TY_EINVAL, ty_group_try_receive(NULL, 0, &m));
    /* A cancelled wait: TY_EINTR; a NULL cancellation: TY_EINVAL. */
    ty_cancel_t* cancel = ty_cancel_new();
    CHECK(ty_cancel(cancel));
    EXPECT_RC(TY_EINTR, ty_group_receive_cancel(a, 0, &m, -1, cancel));
    EXPECT_RC(TY_EINVAL, ty_group_receive_cancel(a, 0, &m, 0, NULL));
    EXPECT(ty_group_depth(NULL, 0) == TY_EINVAL);
    EXPECT(ty_group_depth(a, 1) == TY_EINVAL);
    ty_subscription_t* s = (ty_subscription_t*)&s;
    EXPECT_RC(TY_EINVAL, ty_group_subscribe(NULL, NULL, 0, &s));
    EXPECT(s == NULL);
    EXPECT_RC(TY_EINVAL, ty_group_subscribe(a, NULL, 1, &s));
    uint32_t bad = 5;
    EXPECT_RC(TY_EINVAL, ty_group_subscribe(a, &bad, 1, &s));
    EXPECT_RC(TY_EINVAL, ty_group_release(NULL, &m));
    EXPECT_RC(TY_EINVAL, ty_group_release(a, NULL));
    /* A handle of another kind is no group. */
    EXPECT_RC(TY_EINVAL, ty_group_try_receive((const ty_group_t*)t, 0, &m));

    /* One message, held by both groups of this process at once. */
    CHECK(ty_send(t, "hello", 5, 1, 0));
    EXPECT(ty_group_depth(a, 0) == 1 && ty_group_depth(b, 0) == 1);
    ty_msg_t ma, mb, mb2;
    CHECK(ty_group_try_receive(a, 0, &ma));
    /* A message there is received even with the cancellation cancelled. */
    CHECK(ty_group_receive_cancel(b, 0, &mb, WAIT_NS, cancel));
    ty_cancel_free(cancel);
    EXPECT(ma.len == 5 && mb.len == 5 && memcmp(ma.data, "hello", 5) == 0);
    EXPECT(ma.data == mb.data); /* one payload, not copied */
    EXPECT_RC(TY_EAGAIN, ty_group_try_receive(a2, 0, &mb2)); /* b's: taken */
    /* The default group has it too. */
    ty_msg_t md;
    CHECK(ty_try_subscribe(t, 0, &md));
    CHECK(ty_release(t, &md));
    /* Released through the topic handle: TY_EINVAL, nothing happens (its
     * own message of that chunk was released just now). */
    ty_msg_t copy = ma;
    EXPECT_RC(TY_EINVAL, ty_release(t, &copy));
    CHECK(ty_group_release(a, &ma));
    EXPECT(ma.handle == 0);
    EXPECT_RC(TY_EINVAL, ty_group_release(a, &ma)); /* twice */
    CHECK(ty_group_release(b, &mb));

    /* ty_group_recv: copied into the caller's buffer and released at once;
     * a message longer than the buffer stays queued, *len its length. */
    char small[4], out[16];
    size_t got = 0;
    CHECK(ty_send(t, "copied", 6, 1, 0));
    EXPECT_RC(TY_ENOBUFS, ty_group_recv(a, 0, small, sizeof small, &got, 0));
    EXPECT(got == 6 && ty_group_depth(a, 0) == 1);
    CHECK(ty_group_recv(a, 0, out, sizeof out, &got, WAIT_NS));
    EXPECT(got == 6 && memcmp(out, "copied", 6) == 0);
    EXPECT_RC(TY_ETIMEDOUT, ty_group_recv(a, 0, out, sizeof out, &got, 0));
    EXPECT_RC(TY_EINVAL, ty_group_recv(NULL, 0, out, sizeof out, &got, 0));
    EXPECT_RC(TY_EINVAL, ty_group_recv(a, 0, out, sizeof out, NULL, 0));
    EXPECT_RC(TY_EINVAL, ty_group_recv(a, 1, out, sizeof out, &got, 0));
    EXPECT_RC(TY_EINVAL, ty_group_recv(a, 0, NULL, 4, &got, 0));
    CHECK(ty_group_recv(b, 0, out, sizeof out, &got, 0)); /* b's copy */
    CHECK(ty_recv(t, 0, out, sizeof out, &got, 0));        /* the default group's */
    EXPECT(got == 6);

    /* A message left held is released by ty_group_close. */
    CHECK(ty_send(t, "left", 4, 1, 0));
    CHECK(ty_group_try_receive(a, 0, &ma));
    CHECK(ty_group_try_receive(a2, 0, &mb2));
    CHECK(ty_try_subscribe(t, 0, &md));
    CHECK(ty_release(t, &md));

    ty_group_close(a);
    ty_group_close(b);
    ty_group_close(a2);
    ty_group_close(NULL);
    ty_topic_close(t);
    ty_region_close(reg);
    /* Every chunk is free again (all handles closed: no cache either). */
    CHECK(ty_region_open(plain_name, NULL, &reg));
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    EXPECT(ps.classes[0].free == ps.classes[0].chunks);
    ty_region_close(reg);
    CHECK(ty_region_remove(plain_name));
    printf("groups: errors (names, NULLs, no group slots, all slots used, wrong handle), "
           "a message held by two groups of one process\n");
}

/* Forks a producer child that opens the region and topic itself and sends
 * `n` messages (uint64_t 0 .. n - 1, key 0), each with `timeout_ns`; the
 * parent waits for it. */
static void produce(const char* region, const char* topic, uint64_t n, int64_t timeout_ns) {
    fflush(stdout);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_region_t* r;
        ty_topic_t* t;
        CHECK(ty_region_open(region, NULL, &r));
        CHECK(ty_topic_open(r, topic, &t));
        ty_region_close(r);
        for (uint64_t i = 0; i < n; i++) {
            CHECK(ty_send(t, &i, sizeof i, 0, timeout_ns));
        }
        ty_topic_close(t);
        _exit(0);
    }
    wait_ok(pid);
}

/* Every chunk of the pool is free (the parent never loans: no cache). */
static void pool_full(const ty_region_t* reg) {
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    for (int c = 0; c < TY_CLASSES; c++) {
        EXPECT(ps.classes[c].free == ps.classes[c].chunks);
    }
}

/* The report of group `gname` of `t` (fails if there is none). */
static ty_group_info_t group_report(const ty_topic_t* t, const char* gname) {
    ty_group_info_t gi[4];
    int n = ty_topic_groups(t, gi, 4);
    EXPECT(n >= 0 && n <= 4);
    for (int i = 0; i < n; i++) {
        if (strcmp(gi[i].name, gname) == 0) return gi[i];
    }
    fprintf(stderr, "no group %s in ty_topic_groups\n", gname);
    exit(1);
}

static void leave(void) {
    char rname[80];
    snprintf(rname, sizeof rname, "%s-leave", name);
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create_groups(rname, &rc, 3, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = 64;
    ty_topic_t* t;
    CHECK(ty_topic_create_flags(reg, "t", &tc, TY_TOPIC_NO_DEFAULT_GROUP, &t));
    ty_group_t *g1, *g2;
    CHECK(ty_topic_join_group(t, "g", &g1));
    CHECK(ty_topic_join_group(t, "g", &g2)); /* the same membership */
    EXPECT(ty_group_leave(NULL) == TY_EINVAL);
    EXPECT(ty_group_leave((ty_group_t*)t) == TY_EINVAL);
    ty_group_info_t gi = group_report(t, "g");
    EXPECT(gi.slot == 1 && gi.members == 1 && gi.live_members == 1 && gi.draining == 0);
    EXPECT(gi.empty_since_unix_ns == 0);

    produce(rname, "t", 10, WAIT_NS);
    EXPECT(ty_group_depth(g1, 0) == 10);
    gi = group_report(t, "g");
    EXPECT(gi.lag == 10 && gi.position == 0 && gi.missed == 0);
    ty_msg_t held, m;
    CHECK(ty_group_receive(g1, 0, &held, WAIT_NS));
    /* g2 keeps the membership: 0. The message g1 held is released. */
    EXPECT(ty_group_leave(g1) == 0);
    EXPECT_RC(TY_ECLOSED, ty_group_receive(g1, 0, &m, 0));
    EXPECT(m.data == NULL && m.handle == 0);
    EXPECT(strstr(ty_last_error(), "ty_group_leave") != NULL);
    EXPECT_RC(TY_ECLOSED, ty_group_try_receive(g1, 0, &m));
    EXPECT_RC(TY_ECLOSED, ty_group_release(g1, &held));
    EXPECT(ty_group_depth(g1, 0) == TY_ECLOSED);
    EXPECT(ty_group_missed(g1) == TY_ECLOSED);
    char nm[65];
    EXPECT(ty_group_name(g1, nm, sizeof nm) == TY_ECLOSED);
    ty_subscription_t* s;
    EXPECT_RC(TY_ECLOSED, ty_group_subscribe(g1, NULL, 0, &s));
    EXPECT(ty_group_leave(g1) == TY_ECLOSED); /* twice */
    ty_group_close(g1);
    EXPECT(group_report(t, "g").members == 1);

    /* The other 9 go to g2 (the one g1 held was released, as consumed). */
    uint64_t next = 1, v;
    while (ty_group_try_receive(g2, 0, &m) == TY_OK) {
        memcpy(&v, m.data, sizeof v);
        EXPECT(v == next++);
        CHECK(ty_group_release(g2, &m));
    }
    EXPECT(next == 10);
    /* Hold one more, then leave with it: the last handle ends the
     * membership (1) and the message goes back. */
    produce(rname, "t", 1, WAIT_NS);
    CHECK(ty_group_receive(g2, 0, &held, WAIT_NS));
    EXPECT(ty_group_leave(g2) == 1);
    gi = group_report(t, "g");
    EXPECT(gi.members == 0 && gi.live_members == 0 && gi.empty_since_unix_ns != 0);
    EXPECT(gi.lag == 0 && gi.position == 11);
    pool_full(reg);
    ty_group_close(g2);

    /* The group keeps its position for its lease: what is published now
     * waits for it, and a member joining again goes on from there. */
    produce(rname, "t", 3, WAIT_NS);
    EXPECT(group_report(t, "g").lag == 3);
    CHECK(ty_topic_join_group(t, "g", &g1));
    EXPECT(ty_group_depth(g1, 0) == 3);
    CHECK(ty_group_try_receive(g1, 0, &m));
    memcpy(&v, m.data, sizeof v);
    EXPECT(v == 0); /* the second producer's first */
    EXPECT(ty_group_leave(g1) == 1);
    ty_group_close(g1);
    CHECK(ty_topic_join_group(t, "g", &g1));
    while (ty_group_try_receive(g1, 0, &m) == TY_OK) CHECK(ty_group_release(g1, &m));

    /* One message held by two groups of this process: closing one with
     * it held (the membership ends) lets go of that group's hold only. */
    ty_group_t* h;
    CHECK(ty_topic_join_group(t, "h", &h));
    produce(rname, "t", 1, WAIT_NS);
    ty_msg_t mh;
    CHECK(ty_group_receive(g1, 0, &m, WAIT_NS));
    CHECK(ty_group_receive(h, 0, &mh, WAIT_NS));
    ty_group_close(g1);
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    EXPECT(ps.classes[0].free == ps.classes[0].chunks - 1); /* h's, still held */
    memcpy(&v, mh.data, sizeof v);
    EXPECT(v == 0);
    CHECK(ty_group_release(h, &mh));
    pool_full(reg);
    ty_group_close(h);

    ty_topic_close(t);
    ty_region_close(reg);
    CHECK(ty_region_remove(rname));
    printf("groups: ty_group_leave (a held message released, TY_ECLOSED after, the last handle "
           "ends the membership, the pool full again, the position kept for the lease)\n");
}

#define RING 8
#define PUBLISHED 5000

static void overrun(void) {
    char rname[80];
    snprintf(rname, sizeof rname, "%s-overrun", name);
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create_groups(rname, &rc, 3, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = RING;
    ty_topic_t* t;
    /* Not with at-least-once; unknown flags; NULLs. */
    tc.delivery = TY_DELIVERY_AT_LEAST_ONCE;
    t = (ty_topic_t*)&t;
    EXPECT_RC(TY_EINVAL, ty_topic_create_flags(reg, "q", &tc, TY_TOPIC_OVERRUN, &t));
    EXPECT(t == NULL);
    tc.delivery = TY_DELIVERY_AT_MOST_ONCE;
    EXPECT_RC(TY_EINVAL, ty_topic_create_flags(reg, "q", &tc, 8, &t));
    EXPECT_RC(TY_EINVAL, ty_topic_create_flags(NULL, "q", &tc, TY_TOPIC_OVERRUN, &t));
    EXPECT(ty_topic_missed(NULL) == TY_EINVAL);
    EXPECT(ty_group_missed(NULL) == TY_EINVAL);
    EXPECT(ty_topic_groups(NULL, NULL, 0) == TY_EINVAL);

    /* With its default group (which does not read either) and a named
     * group "slow". */
    CHECK(ty_topic_create_flags(reg, "q", &tc, TY_TOPIC_OVERRUN, &t));
    ty_topic_t* again;
    EXPECT_RC(TY_EINCOMPAT, ty_topic_create(reg, "q", &tc, &again)); /* not overrunning */
    CHECK(ty_topic_create_flags(reg, "q", &tc, TY_TOPIC_OVERRUN, &again));
    ty_topic_close(again);
    ty_group_t* slow;
    CHECK(ty_topic_join_group(t, "slow", &slow));
    EXPECT(ty_topic_missed(t) == 0 && ty_group_missed(slow) == 0);
    EXPECT(ty_topic_groups(t, NULL, 0) == 2);
    EXPECT(ty_topic_groups(t, NULL, 1) == TY_EINVAL);

    /* Timeout 0: a send that had to wait for room would fail. */
    produce(rname, "q", PUBLISHED, 0);
    ty_topic_stats_t st;
    CHECK(ty_topic_stats(t, &st));
    EXPECT(st.published == PUBLISHED);
    int64_t missed_slow = ty_group_missed(slow), missed_default = ty_topic_missed(t);
    EXPECT(missed_slow > 0 && missed_default > 0);
    ty_group_info_t gi[2];
    EXPECT(ty_topic_groups(t, gi, 2) == 2);
    EXPECT(gi[0].slot == 0 && gi[0].name[0] == 0 && gi[0].members == 0);
    EXPECT(gi[0].missed == (uint64_t)missed_default && gi[0].lag == RING);
    EXPECT(strcmp(gi[1].name, "slow") == 0 && gi[1].missed == (uint64_t)missed_slow && gi[1].lag == RING);

    /* What is left is the newest, in order; received + missed = published. */
    uint64_t got = 0, v, want = PUBLISHED - RING;
    ty_msg_t m;
    while (ty_group_try_receive(slow, 0, &m) == TY_OK) {
        memcpy(&v, m.data, sizeof v);
        EXPECT(v == want++);
        got++;
        CHECK(ty_group_release(slow, &m));
    }
    EXPECT(got == RING);
    EXPECT(got + (uint64_t)ty_group_missed(slow) == PUBLISHED);
    got = 0;
    while (ty_try_subscribe(t, 0, &m) == TY_OK) {
        got++;
        CHECK(ty_release(t, &m));
    }
    EXPECT(got + (uint64_t)ty_topic_missed(t) == PUBLISHED);
    pool_full(reg);
    printf("groups: overrun, %d messages from a producer that never waits into rings of %d: "
           "missed %lld (slow) and %lld (default), received + missed = published for each\n",
           PUBLISHED, RING, (long long)missed_slow, (long long)missed_default);

    ty_group_close(slow);
    ty_topic_close(t);
    ty_region_close(reg);
    CHECK(ty_region_remove(rname));
}

/* ty_topic_join_group_from: a group joined with TY_JOIN_OLDEST gets the
 * ten messages a producer child left queued for the default group, in
 * order, then the next one published; one joined with TY_JOIN_NOW gets
 * only the latter; a second join of the old group does not copy the
 * backlog again; a bad `from` is TY_EINVAL; the pool is full at the end. */
static void join_oldest(void) {
    char rname[80];
    snprintf(rname, sizeof rname, "%s-oldest", name);
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create_groups(rname, &rc, 4, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.capacity = 64;
    ty_topic_t* t;
    CHECK(ty_topic_create(reg, "t", &tc, &t));
    produce(rname, "t", 10, WAIT_NS);
    ty_group_t *old, *now, *again;
    EXPECT_RC(TY_EINVAL, ty_topic_join_group_from(t, "x", 7, &old));
    EXPECT(old == NULL);
    CHECK(ty_topic_join_group_from(t, "old", TY_JOIN_OLDEST, &old));
    CHECK(ty_topic_join_group_from(t, "now", TY_JOIN_NOW, &now));
    EXPECT(ty_group_depth(old, 0) == 10);
    EXPECT(ty_group_depth(now, 0) == 0);
    CHECK(ty_topic_join_group_from(t, "old", TY_JOIN_OLDEST, &again));
    EXPECT(ty_group_depth(old, 0) == 10); /* no second copy */
    ty_group_close(again);
    uint64_t ten = 10;
    CHECK(ty_send(t, &ten, sizeof ten, 0, WAIT_NS));
    ty_msg_t m;
    for (uint64_t i = 0; i <= 10; i++) {
        CHECK(ty_group_receive(old, 0, &m, WAIT_NS));
        uint64_t v;
        EXPECT(m.len == sizeof v);
        memcpy(&v, m.data, sizeof v);
        EXPECT(v == i); /* the backlog in order, then the live one */
        CHECK(ty_group_release(old, &m));
    }
    EXPECT(ty_group_missed(old) == 0);
    CHECK(ty_group_receive(now, 0, &m, WAIT_NS));
    EXPECT(m.len == sizeof ten && memcmp(m.data, &ten, sizeof ten) == 0);
    CHECK(ty_group_release(now, &m));
    for (uint64_t i = 0; i <= 10; i++) {
        CHECK(ty_subscribe(t, 0, &m, WAIT_NS));
        CHECK(ty_release(t, &m));
    }
    ty_group_close(old);
    ty_group_close(now);
    pool_full(reg);
    ty_topic_close(t);
    ty_region_close(reg);
    CHECK(ty_region_remove(rname));
}

int main(void) {
    snprintf(name, sizeof name, "c-groups-%d", (int)getpid());
    join_oldest();
    errors();
    leave();
    overrun();

    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 16 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    CHECK(ty_region_create_groups(name, &rc, 4, &reg));
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = PARTS;
    tc.capacity = 64;
    ty_topic_t* topic;
    /* No default group: only the named groups get the messages. */
    CHECK(ty_topic_create_groups(reg, "orders", &tc, 0, &topic));
    ty_msg_t m;
    EXPECT_RC(TY_EINVAL, ty_try_subscribe(topic, 0, &m));
    ty_group_t *audit, *billing;
    CHECK(ty_topic_join_group(topic, "audit", &audit));
    CHECK(ty_topic_join_group(topic, "billing", &billing));
    /* audit receives through one subscription over both partitions. */
    ty_subscription_t* sub;
    CHECK(ty_group_subscribe(audit, NULL, 0, &sub));

    /* The producer: a child process opening the region itself. */
    fflush(stdout);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        ty_region_t* r;
        ty_topic_t* t;
        CHECK(ty_region_open(name, NULL, &r));
        CHECK(ty_topic_open(r, "orders", &t));
        ty_region_close(r);
        for (uint64_t i = 0; i < N; i++) {
            CHECK(ty_send(t, &i, sizeof i, i, WAIT_NS));
        }
        ty_topic_close(t);
        _exit(0);
    }

    static unsigned char seen_a[N], seen_b[N];
    size_t got_a = 0, got_b = 0;
    double deadline = now_s() + 120;
    while (got_a < N || got_b < N) {
        EXPECT(now_s() < deadline);
        int rc1 = ty_subscription_receive(sub, &m, 1000000);
        if (rc1 == TY_OK) {
            seen(&m, seen_a, &got_a);
            CHECK(ty_group_release(audit, &m));
        } else {
            EXPECT_RC(TY_ETIMEDOUT, rc1);
        }
        for (uint32_t p = 0; p < PARTS; p++) {
            while (ty_group_try_receive(billing, p, &m) == TY_OK) {
                EXPECT(m.partition == p);
                seen(&m, seen_b, &got_b);
                CHECK(ty_group_release(billing, &m));
            }
        }
    }
    wait_ok(pid);
    /* Nothing more for either. */
    EXPECT_RC(TY_EAGAIN, ty_subscription_try_receive(sub, &m));
    EXPECT(ty_group_depth(billing, 0) == 0 && ty_group_depth(billing, 1) == 0);
    printf("groups: %d messages from a producer process, each received exactly once by each of two groups\n", N);

    ty_subscription_close(sub);
    ty_group_close(audit);
    ty_group_close(billing);
    ty_topic_close(topic);
    ty_region_close(reg);
    CHECK(ty_region_open(name, NULL, &reg));
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    EXPECT(ps.classes[0].free == ps.classes[0].chunks);
    ty_region_close(reg);
    CHECK(ty_region_remove(name));
    printf("groups: the pool is full again\n");
    return 0;
}
