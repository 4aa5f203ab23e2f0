"""Batches: Topic.send_many, Topic/Subscription.receive_many and
receive_many_bytes, tachyon.release_all; in one process, across threads and
across processes. Every wait is bounded; no time is asserted."""

from __future__ import annotations

import gc
import multiprocessing
import pydoc
import textwrap
import threading

import numpy as np
import pytest

import peers
import tachyon
from conftest import interrupt, run_python

SECOND = 1_000_000_000
MS = 1_000_000
BOUND = 60


def free_chunks(region) -> int:
    return sum(c.free for c in region.pool_stats())


# --- send_many ------------------------------------------------------------------


def test_send_many_then_receive_many(region):
    topic = region.create_topic("t", partitions=4, capacity=64)
    items = [f"m{i}".encode() for i in range(40)]
    assert topic.send_many(items, key=range(40)) == 40
    sub = topic.subscribe()
    got = []
    while len(got) < 40:
        batch = sub.receive_many(max=16, timeout_ns=SECOND)
        assert 1 <= len(batch) <= 16
        assert all(isinstance(m, tachyon.Message) for m in batch)
        for msg in batch:
            index = int(bytes(msg.data)[1:])
            assert msg.partition == topic.partition_of(index)
            got.append(index)
        tachyon.release_all(batch)
    assert sorted(got) == list(range(40))
    for p in range(4):  # per-key order: each partition's messages in the order sent
        mine = [i for i in got if topic.partition_of(i) == p]
        assert mine == sorted(mine)


def test_send_many_one_key_and_inputs(region):
    topic = region.create_topic("t", partitions=8)
    p = topic.partition_of(5)
    items = [b"bytes", bytearray(b"bytearray"), memoryview(b"xmemoryviewx")[1:-1],
             np.arange(3, dtype=np.uint16)]
    assert topic.send_many(iter(items), key=5) == 4  # any iterable, here an iterator
    assert topic.depth(p) == 4
    assert topic.receive_many_bytes(p, 10, timeout_ns=SECOND) == [
        b"bytes", b"bytearray", b"memoryview", np.arange(3, dtype=np.uint16).tobytes()]
    assert topic.send_many((b"g%d" % i for i in range(3)), key=np.uint64(5)) == 3  # a generator, a numpy key
    assert topic.receive_many_bytes(p, 10, timeout_ns=SECOND) == [b"g0", b"g1", b"g2"]
    # Keys from numpy: an array (one per item), a 0-d array (one for all).
    assert topic.send_many([b"1", b"2", b"3", b"4"], key=np.array([1, 2, 3, 4], dtype=np.uint64)) == 4
    assert topic.send_many([b"5", b"5"], key=np.array(5)) == 2
    found = []
    for partition in range(8):
        for data in topic.receive_many_bytes(partition, 10, timeout_ns=0) if topic.depth(partition) else []:
            assert topic.partition_of(int(data)) == partition
            found.append(int(data))
    assert sorted(found) == [1, 2, 3, 4, 5, 5]


def test_send_many_empty(region):
    topic = region.create_topic("t")
    assert topic.send_many([]) == 0
    assert topic.send_many(iter(())) == 0
    assert topic.send_many([], key=[]) == 0
    assert topic.depth(0) == 0


def test_send_many_checks_everything_first(region):
    """A bad item, a bad key, a mismatched key list or a message too large:
    the error comes before anything is sent."""
    topic = region.create_topic("t", partitions=2)
    cases = [
        (TypeError, ([b"ok", b"ok", 3],), {}),
        (TypeError, ([b"ok", "text"],), {}),
        (TypeError, ([b"ok", None],), {}),
        (TypeError, (b"one bytes object",), {}),
        (TypeError, ("a str",), {}),
        (TypeError, (bytearray(b"one bytearray"),), {}),
        (TypeError, (np.zeros(4, dtype=np.uint8),), {}),
        (TypeError, (42,), {}),
        (TypeError, ([b"ok"],), {"key": 1.5}),
        (TypeError, ([b"ok"],), {"key": [b"k"]}),
        (ValueError, ([b"a", b"b"],), {"key": [1]}),
        (ValueError, ([b"a", b"b"],), {"key": [1, 2, 3]}),
        (OverflowError, ([b"a", b"b"],), {"key": -1}),
        (OverflowError, ([b"a", b"b"],), {"key": [1, -1]}),
        (tachyon.MessageTooLarge, ([b"ok", bytes(tachyon.MAX_MESSAGE + 1)],), {}),
    ]
    for exc, args, kwargs in cases:
        with pytest.raises(exc):
            topic.send_many(*args, **kwargs)
        assert topic.depth(0) + topic.depth(1) == 0, (exc, args, kwargs)
    with pytest.raises(TypeError, match=r"items\[2\]"):
        topic.send_many([b"ok", b"ok", 3])
    with pytest.raises(ValueError, match="one per item"):
        topic.send_many([b"a", b"b"], key=[1])
    with pytest.raises(tachyon.MessageTooLarge) as info:
        topic.send_many([b"ok", bytes(tachyon.MAX_MESSAGE + 1)])
    assert any("items[1]" in note for note in info.value.__notes__)
    # The largest message fits.
    assert topic.send_many([bytes(tachyon.MAX_MESSAGE)]) == 1


def test_send_many_timeout_mid_batch(region):
    """A full partition: the items that fit are sent, then TimeoutError
    says how many (.sent); the others are not sent."""
    topic = region.create_topic("t", capacity=4)
    items = [b"%d" % i for i in range(10)]
    with pytest.raises(tachyon.TimeoutError) as info:
        topic.send_many(items, timeout_ns=0)
    assert info.value.sent == 4
    assert isinstance(info.value, TimeoutError)
    assert topic.depth(0) == 4
    with pytest.raises(tachyon.TimeoutError) as info:
        topic.send_many(items, timeout_ns=2 * MS)  # waits, in all, 2 ms
    assert info.value.sent == 0
    assert topic.receive_many_bytes(0, 10, timeout_ns=0) == items[:4]
    # Room again: the rest goes out.
    assert topic.send_many(items[4:8], timeout_ns=0) == 4
    assert topic.receive_many_bytes(0, 10, timeout_ns=0) == items[4:8]


def test_send_many_waits_for_room(region):
    """A batch larger than the partition: send_many waits (without the GIL)
    while a consumer thread makes room, and sends everything."""
    topic = region.create_topic("t", capacity=8)
    count = 500
    got = []

    def consumer():
        while len(got) < count:
            got.extend(topic.receive_many_bytes(0, 7, timeout_ns=BOUND * SECOND))

    thread = threading.Thread(target=consumer)
    thread.start()
    try:
        assert topic.send_many([b"%d" % i for i in range(count)], timeout_ns=BOUND * SECOND) == count
    finally:
        thread.join(timeout=BOUND)
    assert got == [b"%d" % i for i in range(count)]


def test_send_many_holds_its_items(region):
    """The items are exported for the call: a bytearray of the batch cannot
    be resized while send_many waits for room (another thread tries)."""
    topic = region.create_topic("t", capacity=2)
    items = [bytearray(b"a"), bytearray(b"b"), bytearray(b"c")]
    errors = []

    def meddle():
        # The partition fills only inside send_many, which then waits for
        # room to send items[2], every item exported.
        for _ in range(BOUND * 1000):
            if topic.depth(0) == 2:
                break
            threading.Event().wait(0.001)
        try:
            items[2].extend(b"more")
        except BufferError as e:
            errors.append(e)
        topic.receive(0, timeout_ns=BOUND * SECOND).release()

    thread = threading.Thread(target=meddle)
    thread.start()
    assert topic.send_many(items, timeout_ns=BOUND * SECOND) == 3
    thread.join(timeout=BOUND)
    assert len(errors) == 1
    assert topic.receive_many_bytes(0, 10, timeout_ns=SECOND) == [b"b", b"c"]


# --- receive_many ---------------------------------------------------------------


def test_receive_many_takes_what_is_there(region):
    topic = region.create_topic("t", capacity=64)
    topic.send_many([b"%d" % i for i in range(10)])
    first = topic.receive_many(0, 3, timeout_ns=SECOND)
    assert [bytes(m.data) for m in first] == [b"0", b"1", b"2"]
    # Without waiting for more than there is: 7 left, max 100.
    rest = topic.receive_many(0, 100, timeout_ns=BOUND * SECOND)
    assert [bytes(m.data) for m in rest] == [b"%d" % i for i in range(3, 10)]
    assert [m.partition for m in rest] == [0] * 7
    tachyon.release_all(first + rest)
    assert all(m.released for m in first + rest)


def test_receive_many_default_max(region):
    topic = region.create_topic("t", capacity=128)
    topic.send_many([b"x"] * 100)
    assert len(topic.receive_many_bytes()) == 64
    assert len(topic.subscribe().receive_many_bytes()) == 36


def test_receive_many_bad_max(region):
    topic = region.create_topic("t")
    topic.send(b"kept")
    sub = topic.subscribe()
    for call in (topic.receive_many, topic.receive_many_bytes):
        for bad in (0, -1, -(2**40)):
            with pytest.raises(ValueError, match="max"):
                call(0, bad, timeout_ns=0)
    for call in (sub.receive_many, sub.receive_many_bytes):
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max"):
                call(bad, timeout_ns=0)
    assert topic.depth(0) == 1  # nothing was taken
    assert topic.receive_many_bytes(0, 2**40, timeout_ns=0) == [b"kept"]  # a huge max is fine


def test_receive_many_timeouts(region):
    topic = region.create_topic("t", partitions=2)
    sub = topic.subscribe()
    for timeout in (0, 1, 2 * MS):
        with pytest.raises(tachyon.TimeoutError):
            topic.receive_many(1, 8, timeout_ns=timeout)
        with pytest.raises(tachyon.TimeoutError):
            topic.receive_many_bytes(1, 8, timeout_ns=timeout)
        with pytest.raises(tachyon.TimeoutError):
            sub.receive_many(8, timeout_ns=timeout)
        with pytest.raises(tachyon.TimeoutError):
            sub.receive_many_bytes(8, timeout_ns=timeout)


def test_receive_many_bytes_releases_at_once(region):
    topic = region.create_topic("t")
    free = free_chunks(region)
    topic.send_many([bytes([i]) * 100 for i in range(20)])
    assert free_chunks(region) < free
    copies = topic.receive_many_bytes(0, 50, timeout_ns=SECOND)
    assert copies == [bytes([i]) * 100 for i in range(20)]
    assert all(type(c) is bytes for c in copies)
    assert free_chunks(region) == free


def test_subscription_receive_many_several_partitions(region):
    topic = region.create_topic("t", partitions=4)
    keys = [0, 1, 2, 3] * 5
    topic.send_many([b"%d" % k for k in keys], key=keys)
    sub = topic.subscribe(partitions=[topic.partition_of(1), topic.partition_of(2)])
    msgs = sub.receive_many(100, timeout_ns=SECOND)
    assert sorted(bytes(m.data) for m in msgs) == sorted([b"1", b"2"] * 5)
    tachyon.release_all(msgs)


# --- release_all and views ------------------------------------------------------


def test_release_all_with_a_view_exported(region):
    topic = region.create_topic("t")
    free = free_chunks(region)
    topic.send_many([b"first", b"second", b"third"])
    msgs = topic.receive_many(0, 3, timeout_ns=SECOND)
    array = np.frombuffer(msgs[1].data, dtype=np.uint8)  # a view into shared memory
    with pytest.raises(BufferError, match="1 of the 3"):
        tachyon.release_all(msgs)
    assert [m.released for m in msgs] == [True, False, True]
    assert array.tobytes() == b"second"  # still readable: its chunk is still held
    with pytest.raises(ValueError):
        bytes(msgs[0].data)
    del array
    tachyon.release_all(msgs)  # again: the released ones are skipped
    assert all(m.released for m in msgs)
    assert free_chunks(region) == free


def test_release_all_checks_its_items_first(region):
    topic = region.create_topic("t")
    topic.send_many([b"a", b"b"])
    msgs = topic.receive_many(0, 2, timeout_ns=SECOND)
    with pytest.raises(TypeError, match=r"messages\[2\]"):
        tachyon.release_all([*msgs, b"not a message"])
    assert not any(m.released for m in msgs)  # nothing was released
    with pytest.raises(TypeError):
        tachyon.release_all(42)
    tachyon.release_all(iter(msgs))
    assert all(m.released for m in msgs)
    tachyon.release_all([])


def test_dropped_batches_return_their_chunks(region):
    topic = region.create_topic("t")
    free = free_chunks(region)
    topic.send_many([b"x" * 100] * 10)
    msgs = topic.receive_many(0, 10, timeout_ns=SECOND)
    views = [m.data for m in msgs]  # cycles, as with single messages
    assert free_chunks(region) < free
    del msgs, views
    gc.collect()
    assert free_chunks(region) == free


# --- threads, signals, processes -----------------------------------------------


def test_gil_released_while_receive_many_waits(region):
    """A thread blocked in receive_many lets the main thread run and send
    the batch that ends the wait."""
    topic = region.create_topic("t", capacity=64)
    started = threading.Event()
    got = []

    def receiver():
        started.set()
        got.extend(topic.subscribe().receive_many_bytes(64, timeout_ns=BOUND * SECOND))

    thread = threading.Thread(target=receiver)
    thread.start()
    assert started.wait(timeout=BOUND)
    threading.Event().wait(0.1)
    total = sum(range(200_000))  # pure-Python work: needs the GIL
    still_waiting = thread.is_alive() and not got
    topic.send_many([b"a", b"b"])
    thread.join(timeout=BOUND)
    assert still_waiting and total > 0
    assert got in ([b"a"], [b"a", b"b"])  # the second may come after the first was taken


@pytest.mark.parametrize(
    "call",
    [
        "topic.receive_many(0, 16, timeout_ns=-1)",
        "topic.subscribe().receive_many_bytes(16, timeout_ns=-1)",
        "topic.send_many([b'x'] * 10, timeout_ns=-1)",  # 4 fit, then it waits for room
    ],
)
def test_ctrl_c_interrupts_batches(region, region_name, call):
    region.create_topic("t", capacity=4)
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic("t")
            print("waiting", flush=True)
            try:
                {call}
            except KeyboardInterrupt as e:
                print("sent", getattr(e, "sent", None), flush=True)
                raise
            print("returned?!", flush=True)
            """
        )
    )
    try:
        assert child.stdout.readline().strip() == "waiting"
        out, err = interrupt(child, BOUND)
    finally:
        if child.poll() is None:
            child.kill()
    assert "KeyboardInterrupt" in err
    assert "returned?!" not in out
    if "send_many" in call and "sent" in out:
        # Interrupted inside send_many (not before it): 4 were sent.
        assert "sent 4" in out, out


@pytest.mark.parametrize("copy", [False, True], ids=["views", "copies"])
def test_batches_across_processes(region, region_name, copy):
    region.create_topic("t", partitions=4, capacity=16)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    count = 2000
    consumer = ctx.Process(target=peers.consume_batches, args=(region_name, "t", count, copy, results))
    producer = ctx.Process(target=peers.produce_batches, args=(region_name, "t", count, 100))
    consumer.start()
    producer.start()
    try:
        seen = results.get(timeout=BOUND)
    finally:
        for p in (producer, consumer):
            p.join(timeout=BOUND)
            if p.is_alive():
                p.kill()
    assert producer.exitcode == 0 and consumer.exitcode == 0
    assert sorted(seen) == list(range(count))
    topic = region.topic("t")
    for p in range(4):  # per-key order: each partition in the order sent
        mine = [i for i in seen if topic.partition_of(i) == p]
        assert mine == sorted(mine)


def test_help_shows_the_batch_signatures():
    text = pydoc.render_doc(tachyon.Topic, renderer=pydoc.plaintext)
    assert "send_many(self, /, items, key=0, timeout_ns=-1)" in text
    assert "receive_many(self, /, partition=0, max=64, timeout_ns=-1)" in text
    assert "receive_many(self, /, max=64, timeout_ns=-1)" in pydoc.render_doc(
        tachyon.Subscription, renderer=pydoc.plaintext)
    assert tachyon.release_all.__doc__ and "BufferError" in tachyon.release_all.__doc__
    assert "release_all" in tachyon.__all__
