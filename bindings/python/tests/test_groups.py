"""Consumer groups (unstable, issue #15): two groups of one topic fed by a
producer process, each receiving every message exactly once; bad names;
a region without group slots. Every wait is bounded; no time is asserted."""

from __future__ import annotations

import textwrap
import time

import pytest

import tachyon
from conftest import run_python

SECOND = 1_000_000_000
#: The longest any step of these tests may take before it counts as hung.
BOUND = 120


@pytest.fixture
def groups_region(region_name):
    with tachyon.Region(region_name, size=16 << 20, ring_arena=1 << 20, max_groups=4) as reg:
        yield reg


def test_two_groups_each_get_every_message_from_another_process(groups_region, region_name):
    count, parts = 5000, 2
    topic = groups_region.create_topic("orders", partitions=parts, capacity=64, default_group=False)
    audit = topic.join_group("audit")
    billing = topic.join_group("billing")
    assert (audit.name, billing.name, audit.topic) == ("audit", "billing", "orders")
    assert audit.slot != billing.slot
    sub = audit.subscribe()  # every partition, one receive
    producer = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic("orders")
            for i in range({count}):
                topic.send(i.to_bytes(8, "little"), key=i, timeout_ns=30 * 10**9)
            """
        )
    )
    seen_audit: list[int] = []
    seen_billing: list[int] = []
    deadline = time.monotonic() + BOUND
    try:
        while len(seen_audit) < count or len(seen_billing) < count:
            assert time.monotonic() < deadline, (len(seen_audit), len(seen_billing))
            assert producer.poll() in (None, 0), producer.stderr.read()
            try:
                with sub.receive(timeout_ns=SECOND // 1000) as msg:
                    seen_audit.append(int.from_bytes(msg.data, "little"))
            except tachyon.TimeoutError:
                pass
            for p in range(parts):
                while (msg := billing.try_receive(p)) is not None:
                    with msg:
                        assert msg.partition == p
                        seen_billing.append(int.from_bytes(msg.data, "little"))
        _, err = producer.communicate(timeout=BOUND)
        assert producer.returncode == 0, err
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(timeout=BOUND)
    # Each group: every message exactly once.
    assert sorted(seen_audit) == list(range(count))
    assert sorted(seen_billing) == list(range(count))
    assert sub.try_receive() is None
    assert [billing.depth(p) for p in range(parts)] == [0, 0]
    # No default group on this topic.
    with pytest.raises(tachyon.InvalidArgument):
        topic.try_receive(0)
    # Every chunk back in the pool.
    assert all(c.free == c.chunks for c in groups_region.pool_stats())


def test_one_message_to_the_default_group_and_two_named_ones(groups_region):
    topic = groups_region.create_topic("t")
    a, b = topic.join_group("a"), topic.join_group("b")
    b2 = topic.join_group("b")  # a second member of "b"
    assert b2.slot == b.slot
    topic.send(b"hello")
    assert a.depth(0) == 1 and b.depth(0) == 1
    ma = a.receive(0, timeout_ns=SECOND)
    mb = b2.try_receive(0)
    assert mb is not None
    assert b.try_receive(0) is None  # b's member b2 took it
    assert bytes(ma.data) == bytes(mb.data) == b"hello"
    assert topic.receive_bytes(0, timeout_ns=SECOND) == b"hello"  # the default group
    tachyon.release_all([ma, mb])
    topic.send(b"copy")
    assert a.receive_bytes(0, timeout_ns=SECOND) == b"copy"
    assert b.receive_bytes(timeout_ns=SECOND) == b"copy"
    with pytest.raises(tachyon.TimeoutError):
        a.receive(0, timeout_ns=1_000_000)
    assert repr(a) == 'Group("a", topic="t", slot=1)'


def test_bad_group_names(groups_region):
    topic = groups_region.create_topic("t")
    for bad in ("", "x" * 65, "nul\0inside"):
        with pytest.raises(tachyon.InvalidName):
            topic.join_group(bad)
    assert topic.join_group("x" * 64).name == "x" * 64
    with pytest.raises(TypeError):
        topic.join_group(None)  # type: ignore[arg-type]


def test_every_named_slot_used(groups_region):
    topic = groups_region.create_topic("t")
    for name in ("a", "b", "c"):  # max_groups 4: three named slots
        topic.join_group(name)
    with pytest.raises(tachyon.NoSpace):
        topic.join_group("d")
    assert topic.join_group("a").name == "a"  # joining an existing group still works


def test_a_region_without_group_slots(region):
    topic = region.create_topic("t")
    with pytest.raises(tachyon.InvalidArgument, match="max_groups"):
        topic.join_group("audit")
    with pytest.raises(tachyon.InvalidArgument):
        region.create_topic("no-default", default_group=False)


def test_max_groups_is_part_of_the_configuration(groups_region, region_name):
    with pytest.raises(tachyon.Incompatible):
        tachyon.Region(region_name, size=16 << 20, ring_arena=1 << 20, max_groups=2)
    with pytest.raises(ValueError):
        tachyon.Region(region_name, create=False, max_groups=4)
    groups_region.create_topic("t", default_group=False)
    with pytest.raises(tachyon.Incompatible):
        groups_region.create_or_open_topic("t")
    assert groups_region.create_or_open_topic("t", default_group=False).name == "t"


def produce_elsewhere(region_name: str, topic: str, start: int, count: int, timeout_ns: int) -> None:
    """Sends ``start`` .. ``start + count - 1`` (8 bytes, key 0) to ``topic``
    from a producer process, each send waiting at most ``timeout_ns``."""
    producer = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic({topic!r})
            for i in range({start}, {start + count}):
                topic.send(i.to_bytes(8, "little"), key=0, timeout_ns={timeout_ns})
            """
        )
    )
    _, err = producer.communicate(timeout=BOUND)
    assert producer.returncode == 0, err


def group_info(topic, name: str):
    (info,) = [g for g in topic.groups() if g.name == name]
    return info


def test_leave(groups_region, region_name):
    topic = groups_region.create_topic("t", capacity=64, default_group=False)
    g1 = topic.join_group("g")
    g2 = topic.join_group("g")  # the same membership
    info = group_info(topic, "g")
    assert (info.slot, len(info.members), info.live_members, info.empty_since_unix_ns) == (1, 1, 1, 0)
    produce_elsewhere(region_name, "t", 0, 10, 30 * SECOND)
    info = group_info(topic, "g")
    assert (info.lag, info.position, info.missed) == (10, 0, 0)

    # g2 keeps the membership: False. The message g1 received stays valid
    # (it is the message's own hold), and it keeps the membership too.
    held = g1.receive(0, timeout_ns=BOUND * SECOND)
    assert g1.leave() is False
    assert g1.left and "left" in repr(g1)
    assert int.from_bytes(held.data, "little") == 0
    held.release()
    for call in (lambda: g1.receive(0, 0), lambda: g1.try_receive(0), lambda: g1.depth(0), g1.missed,
                 g1.subscribe, g1.leave):
        with pytest.raises(ValueError, match="left"):
            call()
    assert (g1.name, g1.topic, g1.slot) == ("g", "t", 1)  # the properties still answer
    assert len(group_info(topic, "g").members) == 1

    # The rest go to g2; its leave, the last share, ends the membership.
    assert [int.from_bytes(g2.receive_bytes(0, timeout_ns=0), "little") for _ in range(9)] == list(range(1, 10))
    assert g2.try_receive(0) is None
    assert g2.leave() is True
    info = group_info(topic, "g")
    assert (info.members, info.live_members, info.lag, info.position) == ([], 0, 0, 10)
    assert info.empty_since_unix_ns > 0
    assert all(c.free == c.chunks for c in groups_region.pool_stats())

    # A Message received through a Group keeps the membership until it is
    # released: leave is False, the release ends it.
    g3 = topic.join_group("g")
    produce_elsewhere(region_name, "t", 10, 1, 30 * SECOND)
    msg = g3.receive(0, timeout_ns=BOUND * SECOND)
    assert g3.leave() is False
    assert len(group_info(topic, "g").members) == 1
    msg.release()
    assert group_info(topic, "g").members == []

    # The group keeps its position for its lease: what comes now waits for
    # it, and a member joining again goes on from there.
    produce_elsewhere(region_name, "t", 11, 3, 30 * SECOND)
    assert group_info(topic, "g").lag == 3
    g4 = topic.join_group("g")
    assert int.from_bytes(g4.receive_bytes(0, timeout_ns=0), "little") == 11
    assert g4.leave() is True
    del g4
    # What is left waits for the group, not for this process.
    assert group_info(topic, "g").lag == 2


def test_overrun(groups_region, region_name):
    published, ring = 5000, 8
    with pytest.raises(tachyon.InvalidArgument):
        groups_region.create_topic("x", capacity=ring, overrun=True, at_least_once=True)
    topic = groups_region.create_topic("q", capacity=ring, overrun=True)
    assert topic.overrun and not groups_region.create_topic("plain").overrun
    with pytest.raises(tachyon.Incompatible):
        groups_region.create_or_open_topic("q", capacity=ring)
    slow = topic.join_group("slow")
    assert slow.missed() == 0 and topic.missed() == 0

    # Timeout 0: a send that had to wait for room would raise.
    produce_elsewhere(region_name, "q", 0, published, 0)
    info = topic.info()
    assert info.published == published
    missed_slow, missed_default = slow.missed(), topic.missed()
    assert missed_slow > 0 and missed_default > 0
    assert info.missed == missed_slow + missed_default
    default, named = topic.groups()
    assert (default.slot, default.name, default.members, default.missed, default.lag) == (0, "", [], missed_default, ring)
    assert (named.name, named.missed, named.lag) == ("slow", missed_slow, ring)

    # What is left is the newest, in order; received + missed = published.
    got = []
    while (msg := slow.try_receive(0)) is not None:
        with msg:
            got.append(int.from_bytes(msg.data, "little"))
    assert got == list(range(published - ring, published))
    assert len(got) + slow.missed() == published
    got_default = topic.receive_many_bytes(0, max=published, timeout_ns=0)
    assert len(got_default) + topic.missed() == published
    assert all(c.free == c.chunks for c in groups_region.pool_stats())


def test_join_from_the_oldest(groups_region, region_name):
    """A group joined with from_oldest=True gets what a producer process left
    queued for the default group, in order, then the live stream; one joined
    from now only the latter; a second join does not copy again."""
    topic = groups_region.create_topic("t", capacity=64)
    produce_elsewhere(region_name, "t", 0, 10, 30 * SECOND)
    old = topic.join_group("old", from_oldest=True)
    now = topic.join_group("now")
    assert old.depth(0) == 10 and now.depth(0) == 0
    assert topic.join_group("old", from_oldest=True).depth(0) == 10  # no second copy
    produce_elsewhere(region_name, "t", 10, 1, 30 * SECOND)
    got = []
    for _ in range(11):
        with old.receive(0, timeout_ns=10 * SECOND) as m:
            got.append(int.from_bytes(bytes(m), "little"))
    assert got == list(range(11))
    assert old.missed() == 0
    with now.receive(0, timeout_ns=10 * SECOND) as m:
        assert int.from_bytes(bytes(m), "little") == 10
