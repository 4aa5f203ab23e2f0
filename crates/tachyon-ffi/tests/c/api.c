/* The boundary, in one process: NULL and invalid arguments are TY_EINVAL
 * (never a crash), a panic inside the library is TY_EINTERNAL, a wrong or
 * repeated release is caught, the non-blocking and timed forms report
 * what they should, statistics add up. */
#include <string.h>
#include <unistd.h>

#include "check.h"

int ty__test_panic(void); /* the library's own test hook, not in the header */

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "c-api-%d", (int)getpid());
    ty_region_t* reg = (ty_region_t*)1;
    ty_topic_t* topic = (ty_topic_t*)1;
    ty_msg_t m;
    void* buf = (void*)1;

    /* NULL everywhere: TY_EINVAL, out-pointers cleared. */
    EXPECT_RC(TY_EINVAL, ty_region_open(NULL, NULL, &reg));
    EXPECT(reg == NULL);
    EXPECT_RC(TY_EINVAL, ty_region_open(name, NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_region_create(NULL, NULL, &reg));
    EXPECT_RC(TY_EINVAL, ty_region_remove(NULL));
    EXPECT_RC(TY_EINVAL, ty_region_recover(NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_region_pool_stats(NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_region_recovered_on_open(NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_region_heartbeat(NULL));
    EXPECT_RC(TY_EINVAL, ty_topic_create(NULL, "t", NULL, &topic));
    EXPECT(topic == NULL);
    EXPECT_RC(TY_EINVAL, ty_topic_open(NULL, "t", &topic));
    EXPECT_RC(TY_EINVAL, ty_partition_of(NULL, 1));
    EXPECT_RC(TY_EINVAL, ty_topic_partitions(NULL));
    EXPECT_RC(TY_EINVAL, ty_topic_stats(NULL, NULL));
    EXPECT(ty_topic_depth(NULL, 0) == TY_EINVAL);
    EXPECT_RC(TY_EINVAL, ty_loan(NULL, 8, &buf, NULL));
    EXPECT(buf == NULL);
    EXPECT_RC(TY_EINVAL, ty_try_loan(NULL, 8, NULL));
    EXPECT_RC(TY_EINVAL, ty_loan_timed(NULL, 8, &buf, 0));
    EXPECT_RC(TY_EINVAL, ty_publish(NULL, NULL, 0, 0));
    EXPECT_RC(TY_EINVAL, ty_try_publish(NULL, NULL, 0, 0));
    EXPECT_RC(TY_EINVAL, ty_publish_timed(NULL, NULL, 0, 0, 0));
    EXPECT_RC(TY_EINVAL, ty_unloan(NULL, NULL));
    EXPECT_RC(TY_EINVAL, ty_send(NULL, NULL, 0, 0, 0));
    EXPECT_RC(TY_EINVAL, ty_subscribe(NULL, 0, &m, 0));
    EXPECT(m.data == NULL && m.len == 0 && m.handle == 0);
    EXPECT_RC(TY_EINVAL, ty_try_subscribe(NULL, 0, NULL));
    EXPECT_RC(TY_EINVAL, ty_release(NULL, NULL));
    ty_region_close(NULL);
    ty_topic_close(NULL);
    EXPECT(strlen(ty_last_error()) > 0);

    /* Codes and texts. */
    EXPECT(strcmp(ty_strerror(TY_OK), "success") == 0);
    EXPECT(strcmp(ty_strerror(TY_EINVAL), "invalid argument") == 0);
    EXPECT(strcmp(ty_strerror(12345), "unknown error") == 0);
    for (int c = TY_EINTERNAL; c < 0; c++) EXPECT(strcmp(ty_strerror(c), "unknown error") != 0);
    EXPECT(strlen(ty_version()) > 0);

    /* A panic inside the library does not cross into C. */
    EXPECT_RC(TY_EINTERNAL, ty__test_panic());
    EXPECT(strstr(ty_last_error(), "internal error") != NULL);

    /* Opening what does not exist; bad names and configurations. */
    EXPECT_RC(TY_ENOENT, ty_region_open(name, NULL, &reg));
    EXPECT(strstr(ty_last_error(), name) != NULL);
    EXPECT_RC(TY_EINVAL, ty_region_create("", NULL, &reg));
    EXPECT_RC(TY_EINVAL, ty_region_open("", NULL, &reg));
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 1000;
    EXPECT_RC(TY_EINVAL, ty_region_open(name, &rc, &reg));
    rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    CHECK(ty_region_create(name, &rc, &reg));
    ty_region_t* other;
    EXPECT_RC(TY_EEXIST, ty_region_create(name, &rc, &other));
    EXPECT(other == NULL);
    CHECK(ty_region_open(name, &rc, &other)); /* compatible: opens */
    ty_region_close(other);
    rc.size = 16 << 20;
    EXPECT_RC(TY_EINCOMPAT, ty_region_open(name, &rc, &other));
    EXPECT(strstr(ty_last_error(), "size") != NULL);

    /* Topics. */
    ty_topic_conf_t tc = ty_topic_conf_default;
    tc.partitions = 3;
    EXPECT_RC(TY_EINVAL, ty_topic_create(reg, "t", &tc, &topic));
    tc.partitions = 4;
    tc.capacity = 4;
    tc.notify = 7;
    EXPECT_RC(TY_EINVAL, ty_topic_create(reg, "t", &tc, &topic));
    tc.notify = TY_NOTIFY_SPIN;
    EXPECT_RC(TY_ENOENT, ty_topic_open(reg, "t", &topic));
    CHECK(ty_topic_create(reg, "t", &tc, &topic));
    ty_topic_t* again;
    CHECK(ty_topic_create(reg, "t", &tc, &again)); /* same configuration: opens */
    tc.capacity = 8;
    ty_topic_t* third = (ty_topic_t*)1;
    EXPECT_RC(TY_EINCOMPAT, ty_topic_create(reg, "t", &tc, &third));
    EXPECT(third == NULL);
    /* A handle of another kind is caught. */
    EXPECT_RC(TY_EINVAL, ty_topic_partitions((ty_topic_t*)reg));
    EXPECT_RC(TY_EINVAL, ty_region_heartbeat((ty_region_t*)topic));
    EXPECT(ty_topic_partitions(topic) == 4);
    int p = ty_partition_of(topic, 42);
    EXPECT(p >= 0 && p < 4);

    /* Loans: the pointer is checked, len is checked, unloan returns it. */
    EXPECT_RC(TY_EMSGSIZE, ty_loan(topic, (2 << 20), &buf, NULL));
    ty_loan_opts_t lo = ty_loan_opts_default;
    lo.flags = TY_LOAN_ZERO;
    CHECK(ty_loan(topic, 100, &buf, &lo));
    EXPECT(((uintptr_t)buf & 63) == 0);
    for (int i = 0; i < 100; i++) EXPECT(((unsigned char*)buf)[i] == 0);
    EXPECT_RC(TY_EINVAL, ty_publish(topic, (char*)buf + 1, 1, 42));
    EXPECT_RC(TY_EINVAL, ty_publish(topic, buf, 101, 42));
    EXPECT_RC(TY_EINVAL, ty_publish(again, buf, 10, 42)); /* another handle's loan */
    CHECK(ty_unloan(topic, buf));
    EXPECT_RC(TY_EINVAL, ty_unloan(topic, buf));
    lo.flags = 2;
    EXPECT_RC(TY_EINVAL, ty_loan(topic, 100, &buf, &lo));

    /* Publish and receive, every form; a full partition; an empty one. */
    EXPECT_RC(TY_EAGAIN, ty_try_subscribe(topic, (uint32_t)p, &m));
    EXPECT_RC(TY_ETIMEDOUT, ty_subscribe(topic, (uint32_t)p, &m, 0));
    EXPECT_RC(TY_ETIMEDOUT, ty_subscribe(topic, (uint32_t)p, &m, 1000000));
    EXPECT_RC(TY_EINVAL, ty_subscribe(topic, (uint32_t)p, &m, -2));
    EXPECT_RC(TY_EINVAL, ty_subscribe(topic, 4, &m, 0));
    for (int i = 0; i < 4; i++) {
        char* b;
        CHECK(ty_try_loan(topic, 8, (void**)&b));
        memcpy(b, "message", 8);
        b[7] = (char)('0' + i);
        if (i % 2) CHECK(ty_try_publish(topic, b, 8, 42));
        else CHECK(ty_publish_timed(topic, b, 8, 42, 1000000000));
    }
    EXPECT(ty_topic_depth(topic, (uint32_t)p) == 4);
    EXPECT_RC(TY_EAGAIN, ty_send(topic, "full", 4, 42, 0));
    EXPECT_RC(TY_ETIMEDOUT, ty_send(topic, "full", 4, 42, 1000000));
    char* b;
    CHECK(ty_loan_timed(topic, 8, (void**)&b, -1));
    EXPECT_RC(TY_EAGAIN, ty_try_publish(topic, b, 8, 42));
    EXPECT_RC(TY_EINVAL, ty_unloan(topic, b)); /* used up by the failed publish */
    for (int i = 0; i < 4; i++) {
        CHECK(i % 2 ? ty_try_subscribe(topic, (uint32_t)p, &m) : ty_subscribe(topic, (uint32_t)p, &m, -1));
        EXPECT(m.len == 8 && m.partition == (uint32_t)p && memcmp(m.data, "message", 7) == 0);
        EXPECT(((const char*)m.data)[7] == '0' + i);
        ty_msg_t copy = m;
        EXPECT_RC(TY_EINVAL, ty_release(again, &m)); /* another handle's message */
        CHECK(ty_release(topic, &m));
        EXPECT(m.data == NULL && m.handle == 0);
        EXPECT_RC(TY_EINVAL, ty_release(topic, &m));
        EXPECT_RC(TY_EINVAL, ty_release(topic, &copy)); /* a stale copy */
    }
    CHECK(ty_send(topic, "copied", 6, 42, -1));
    CHECK(ty_subscribe(topic, (uint32_t)p, &m, 1000000000));
    EXPECT(m.len == 6 && memcmp(m.data, "copied", 6) == 0);
    CHECK(ty_release(topic, &m));
    CHECK(ty_send(topic, NULL, 0, 42, 0));
    CHECK(ty_subscribe(topic, (uint32_t)p, &m, 0));
    EXPECT(m.len == 0);
    CHECK(ty_release(topic, &m));

    /* The region's topics. */
    EXPECT(ty_region_topics(reg, NULL, 0) == 1);
    EXPECT_RC(TY_EINVAL, ty_region_topics(reg, NULL, 1));
    EXPECT_RC(TY_EINVAL, ty_region_topics(NULL, NULL, 0));
    ty_topic_info_t infos[4];
    EXPECT(ty_region_topics(reg, infos, 4) == 1);
    EXPECT(strcmp(infos[0].name, "t") == 0 && infos[0].stats.partitions == 4 && infos[0].stats.published == 6);

    /* Statistics and recovery. */
    ty_topic_stats_t st;
    CHECK(ty_topic_stats(topic, &st));
    EXPECT(st.partitions == 4 && st.capacity == 4 && st.notify == TY_NOTIFY_SPIN);
    EXPECT(st.delivery == TY_DELIVERY_AT_MOST_ONCE);
    EXPECT(st.published == 6 && st.received == 6 && st.lost == 0 && st.corrupt == 0);
    ty_pool_stats_t ps;
    CHECK(ty_region_pool_stats(reg, &ps));
    EXPECT(ps.classes[0].chunk_size == 64 && ps.classes[7].chunk_size == (1 << 20));
    for (int c = 0; c < TY_CLASSES; c++) EXPECT(ps.classes[c].free <= ps.classes[c].chunks);
    ty_recovered_t rec;
    CHECK(ty_region_recover(reg, &rec));
    EXPECT(rec.total == 0);
    CHECK(ty_region_recover(reg, NULL));
    CHECK(ty_region_heartbeat(reg));

    /* A stale copy of a message handle never releases the message that
     * reused its chunk (the chunk comes back to this process's next send:
     * its own cache, or the top of the free list). */
    {
        CHECK(ty_send(topic, "one", 3, 42, -1));
        CHECK(ty_subscribe(topic, (uint32_t)p, &m, 0));
        ty_msg_t stale = m;
        const void* first = m.data;
        CHECK(ty_release(topic, &m));
        CHECK(ty_send(topic, "two", 3, 42, -1));
        CHECK(ty_subscribe(topic, (uint32_t)p, &m, 0));
        EXPECT(m.data == first);
        EXPECT_RC(TY_EINVAL, ty_release(topic, &stale));
        EXPECT(m.handle != 0 && memcmp(m.data, "two", 3) == 0);
        CHECK(ty_release(topic, &m));
    }

    /* Many loans and messages on one handle at once: every pointer and
     * handle works once, in any order; closing with loans and messages of
     * both kinds outstanding returns them. */
    {
        ty_topic_conf_t mc = ty_topic_conf_default;
        mc.capacity = 256;
        ty_topic_t* many;
        CHECK(ty_topic_create(reg, "many", &mc, &many));
        enum { N = 150 };
        void* bufs[N];
        for (int i = 0; i < N; i++) CHECK(ty_try_loan(many, 64, &bufs[i]));
        for (int i = N - 1; i >= 0; i--) {
            if (i % 3 == 0) {
                CHECK(ty_unloan(many, bufs[i]));
                EXPECT_RC(TY_EINVAL, ty_unloan(many, bufs[i]));
                continue;
            }
            memcpy(bufs[i], &i, sizeof i);
            EXPECT_RC(TY_EINVAL, ty_publish(many, bufs[i], 65, 0));
            CHECK(ty_publish(many, bufs[i], sizeof i, 0));
            EXPECT_RC(TY_EINVAL, ty_publish(many, bufs[i], sizeof i, 0));
        }
        static ty_msg_t ms[N];
        int got = 0;
        while (got < N && ty_try_subscribe(many, 0, &ms[got]) == TY_OK) got++;
        EXPECT(got == N - N / 3);
        for (int i = 0; i < got; i++) {
            int v;
            memcpy(&v, ms[i].data, sizeof v);
            EXPECT(ms[i].len == sizeof v && v % 3 != 0 && ms[i].handle != 0);
            for (int j = 0; j < i; j++) EXPECT(ms[j].handle != ms[i].handle);
        }
        for (int i = got - 1; i >= 0; i -= 2) {
            ty_msg_t copy = ms[i];
            CHECK(ty_release(many, &ms[i]));
            EXPECT_RC(TY_EINVAL, ty_release(many, &copy));
        }
        for (int i = 0; i < 70; i++) CHECK(ty_try_loan(many, 64, &bufs[i]));
        ty_topic_close(many); /* 50 messages and 70 loans outstanding */
    }

    /* A subscription: one receive over several partitions; each message
     * says its partition and is released through the topic handle. */
    {
        ty_topic_conf_t sc = ty_topic_conf_default;
        sc.partitions = 4;
        sc.capacity = 16;
        ty_topic_t* st;
        CHECK(ty_topic_create(reg, "subscribed", &sc, &st));
        ty_subscription_t* sub = (ty_subscription_t*)1;
        uint32_t bad[] = {4};
        EXPECT_RC(TY_EINVAL, ty_subscription_open(NULL, NULL, 0, &sub));
        EXPECT(sub == NULL);
        EXPECT_RC(TY_EINVAL, ty_subscription_open(st, bad, 1, &sub));
        EXPECT_RC(TY_EINVAL, ty_subscription_open(st, NULL, 2, &sub));
        EXPECT_RC(TY_EINVAL, ty_subscription_receive(NULL, &m, 0));
        EXPECT_RC(TY_EINVAL, ty_subscription_try_receive(NULL, &m));
        ty_subscription_close(NULL);
        CHECK(ty_subscription_open(st, NULL, 0, &sub));
        EXPECT_RC(TY_EAGAIN, ty_subscription_try_receive(sub, &m));
        EXPECT_RC(TY_ETIMEDOUT, ty_subscription_receive(sub, &m, 1000000));
        int seen[8] = {0};
        for (uint64_t k = 0; k < 8; k++) CHECK(ty_send(st, &k, sizeof k, k, 0));
        for (int i = 0; i < 8; i++) {
            CHECK(ty_subscription_receive(sub, &m, 1000000000));
            uint64_t k;
            EXPECT(m.len == sizeof k);
            memcpy(&k, m.data, sizeof k);
            EXPECT(k < 8 && !seen[k] && (int)m.partition == ty_partition_of(st, k));
            seen[k] = 1;
            CHECK(ty_release(st, &m));
        }
        EXPECT_RC(TY_EAGAIN, ty_subscription_try_receive(sub, &m));
        /* Cancelled: TY_EINTR at once, but a message there is still taken. */
        ty_cancel_t* cancel = ty_cancel_new();
        EXPECT_RC(TY_EINVAL, ty_subscription_receive_cancel(sub, &m, 0, NULL));
        CHECK(ty_cancel(cancel));
        EXPECT_RC(TY_EINTR, ty_subscription_receive_cancel(sub, &m, -1, cancel));
        CHECK(ty_send(st, "x", 1, 3, 0));
        CHECK(ty_subscription_receive_cancel(sub, &m, -1, cancel));
        CHECK(ty_release(st, &m));
        ty_cancel_free(cancel);
        ty_subscription_close(sub);
        /* Only partition 1: a message of another partition stays there. */
        uint32_t one[] = {1};
        CHECK(ty_subscription_open(st, one, 1, &sub));
        uint64_t k0 = 0, k1 = 0;
        while (ty_partition_of(st, k0) == 1) k0++;
        while (ty_partition_of(st, k1) != 1) k1++;
        CHECK(ty_send(st, &k0, sizeof k0, k0, 0));
        CHECK(ty_send(st, &k1, sizeof k1, k1, 0));
        CHECK(ty_subscription_receive(sub, &m, 1000000000));
        EXPECT(m.partition == 1 && memcmp(m.data, &k1, sizeof k1) == 0);
        CHECK(ty_release(st, &m));
        EXPECT_RC(TY_EAGAIN, ty_subscription_try_receive(sub, &m));
        ty_subscription_close(sub);
        CHECK(ty_subscribe(st, (uint32_t)ty_partition_of(st, k0), &m, 1000000000));
        EXPECT(memcmp(m.data, &k0, sizeof k0) == 0);
        CHECK(ty_release(st, &m));
        ty_topic_close(st);
    }

    /* Inline payloads: a message up to the slot travels in its ring cell;
     * at-least-once is refused. */
    {
        ty_topic_conf_t ic = ty_topic_conf_default;
        ic.capacity = 8;
        ic.delivery = TY_DELIVERY_AT_LEAST_ONCE;
        ty_topic_t *it, *it2;
        EXPECT_RC(TY_EINVAL, ty_topic_create_inline(reg, "inline", &ic, 0, 128, &it));
        ic.delivery = TY_DELIVERY_AT_MOST_ONCE;
        CHECK(ty_topic_create_inline(reg, "inline", &ic, 0, 100, &it)); /* 128 */
        CHECK(ty_topic_create_inline(reg, "inline", &ic, 0, 128, &it2)); /* the same: opens */
        ty_topic_close(it2);
        EXPECT_RC(TY_EINCOMPAT, ty_topic_create(reg, "inline", &ic, &it2));
        char big[200];
        memset(big, 'x', sizeof big);
        CHECK(ty_send(it, "in the slot", 11, 0, 0));
        CHECK(ty_send(it, big, sizeof big, 0, 0)); /* past the slot: a chunk */
        CHECK(ty_subscribe(it, 0, &m, 0));
        EXPECT(m.len == 11 && memcmp(m.data, "in the slot", 11) == 0);
        CHECK(ty_release(it, &m));
        CHECK(ty_subscribe(it, 0, &m, 0));
        EXPECT(m.len == sizeof big && memcmp(m.data, big, sizeof big) == 0);
        CHECK(ty_release(it, &m));

        /* ty_recv: straight into a buffer of the caller's; a message
         * longer than the buffer stays queued and *len names its size. */
        char small[16], out[256];
        size_t got = 0;
        CHECK(ty_send(it, "slot", 4, 0, 0));
        CHECK(ty_send(it, big, sizeof big, 0, 0));
        CHECK(ty_recv(it, 0, small, sizeof small, &got, 0));
        EXPECT(got == 4 && memcmp(small, "slot", 4) == 0);
        got = 0;
        EXPECT_RC(TY_ENOBUFS, ty_recv(it, 0, small, sizeof small, &got, 0));
        EXPECT(got == sizeof big);
        EXPECT(ty_topic_depth(it, 0) == 1);
        CHECK(ty_recv(it, 0, out, got, &got, 0));
        EXPECT(got == sizeof big && memcmp(out, big, sizeof big) == 0);
        EXPECT_RC(TY_ETIMEDOUT, ty_recv(it, 0, out, sizeof out, &got, 0));
        EXPECT_RC(TY_EINVAL, ty_recv(it, 0, out, sizeof out, NULL, 0));
        EXPECT_RC(TY_EINVAL, ty_recv(it, 0, NULL, 8, &got, 0));
        EXPECT_RC(TY_EINVAL, ty_recv(it, 9, out, sizeof out, &got, 0));

        /* Light hand-overs: the topic's own setting, read back by
         * ty_topic_light_handovers; an open asking for the other one is
         * TY_EINCOMPAT, an unknown flag TY_EINVAL. */
        {
            ty_topic_t *lt, *lt2;
            EXPECT(ty_topic_light_handovers(it) == 0);
            EXPECT(ty_topic_light_handovers(NULL) == 0);
            EXPECT_RC(TY_EINVAL, ty_topic_create_inline(reg, "light", &ic, 64, 64, &lt));
            CHECK(ty_topic_create_inline(reg, "light", &ic, TY_TOPIC_LIGHT_HANDOVERS, 64, &lt));
            EXPECT(ty_topic_light_handovers(lt) == 1);
            EXPECT_RC(TY_EINCOMPAT, ty_topic_create_inline(reg, "light", &ic, 0, 64, &lt2));
            CHECK(ty_topic_open(reg, "light", &lt2));
            EXPECT(ty_topic_light_handovers(lt2) == 1);
            CHECK(ty_send(lt, "light", 5, 0, 0));
            CHECK(ty_send(lt, big, sizeof big, 0, 0)); /* a chunk, handed over light too */
            CHECK(ty_recv(lt2, 0, out, sizeof out, &got, 0));
            EXPECT(got == 5 && memcmp(out, "light", 5) == 0);
            CHECK(ty_recv(lt2, 0, out, sizeof out, &got, 0));
            EXPECT(got == sizeof big && memcmp(out, big, sizeof big) == 0);
            ty_topic_close(lt2);
            ty_topic_close(lt);
        }

        /* Batch reads: a handle's option, off by default, not seen by other
         * handles of the topic; a message received before the switch is
         * released after it through the same handle; a subscription opened
         * afterwards takes it. */
        {
            ty_topic_t* bt;
            EXPECT(ty_topic_batch_reads(it) == 0);
            EXPECT(ty_topic_batch_reads(NULL) == 0);
            EXPECT_RC(TY_EINVAL, ty_topic_set_batch_reads(NULL, 1));
            EXPECT_RC(TY_EINVAL, ty_topic_set_batch_reads((ty_topic_t*)reg, 1)); /* another kind */
            CHECK(ty_topic_open(reg, "inline", &bt));
            CHECK(ty_send(it, big, sizeof big, 0, 0)); /* a chunk */
            CHECK(ty_send(it, "batch", 5, 0, 0));      /* inline */
            ty_msg_t held;
            CHECK(ty_subscribe(bt, 0, &held, 0));
            CHECK(ty_topic_set_batch_reads(bt, 7)); /* any non-zero is on */
            EXPECT(ty_topic_batch_reads(bt) == 1 && ty_topic_batch_reads(it) == 0);
            EXPECT(held.len == sizeof big && memcmp(held.data, big, sizeof big) == 0);
            CHECK(ty_release(bt, &held));
            CHECK(ty_recv(bt, 0, out, sizeof out, &got, 0));
            EXPECT(got == 5 && memcmp(out, "batch", 5) == 0);
            ty_subscription_t* bsub;
            CHECK(ty_subscription_open(bt, NULL, 0, &bsub));
            CHECK(ty_send(it, "sub", 3, 0, 0));
            uint32_t from = 9;
            CHECK(ty_subscription_recv(bsub, out, sizeof out, &got, &from, 1000000000));
            EXPECT(got == 3 && from == 0 && memcmp(out, "sub", 3) == 0);
            ty_subscription_close(bsub);
            CHECK(ty_topic_set_batch_reads(bt, 0));
            EXPECT(ty_topic_batch_reads(bt) == 0);
            EXPECT_RC(TY_ETIMEDOUT, ty_recv(bt, 0, out, sizeof out, &got, 0));
            ty_topic_close(bt);
        }

        /* ty_subscription_recv: the same over a subscription, with the
         * partition each message came from. */
        ty_subscription_t* isub;
        CHECK(ty_subscription_open(it, NULL, 0, &isub));
        CHECK(ty_send(it, "sub", 3, 0, 0));
        CHECK(ty_send(it, big, sizeof big, 0, 0));
        uint32_t from = 99;
        CHECK(ty_subscription_recv(isub, small, sizeof small, &got, &from, 0));
        EXPECT(got == 3 && from == 0 && memcmp(small, "sub", 3) == 0);
        EXPECT_RC(TY_ENOBUFS, ty_subscription_recv(isub, small, sizeof small, &got, &from, 0));
        EXPECT(got == sizeof big && ty_topic_depth(it, 0) == 1);
        CHECK(ty_subscription_recv(isub, out, sizeof out, &got, NULL, 1000000000));
        EXPECT(got == sizeof big && memcmp(out, big, sizeof big) == 0);
        EXPECT_RC(TY_ETIMEDOUT, ty_subscription_recv(isub, out, sizeof out, &got, &from, 1000000));
        EXPECT_RC(TY_EINVAL, ty_subscription_recv(NULL, out, sizeof out, &got, &from, 0));
        EXPECT_RC(TY_EINVAL, ty_subscription_recv(isub, out, sizeof out, NULL, &from, 0));
        EXPECT_RC(TY_EINVAL, ty_subscription_recv(isub, NULL, 8, &got, &from, 0));
        ty_subscription_close(isub);
        ty_topic_close(it);
    }

    /* Closing: a topic outlives its region handle; loans and messages held
     * by a closed topic handle go back to the pool. */
    CHECK(ty_loan(again, 8, &buf, NULL));
    CHECK(ty_send(again, "held", 4, 42, 0));
    CHECK(ty_subscribe(again, (uint32_t)p, &m, 0));
    ty_region_close(reg);
    CHECK(ty_send(topic, "after", 5, 1, 0));
    ty_topic_close(again);
    ty_topic_close(topic);
    CHECK(ty_region_remove(name));
    printf("api: all checks passed\n");
    return 0;
}
