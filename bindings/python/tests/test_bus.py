"""The bus in one process: the API, the exceptions and the views."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

import tachyon

SECOND = 1_000_000_000


def test_send_and_receive(region):
    topic = region.create_topic("orders", partitions=8, capacity=64)
    topic.send(b"hello", key=42)
    p = topic.partition_of(42)
    assert 0 <= p < 8
    msg = topic.receive(partition=p, timeout_ns=SECOND)
    assert bytes(msg.data) == b"hello"
    assert len(msg) == 5 and msg.partition == p
    assert isinstance(msg.data, memoryview) and msg.data.readonly
    msg.release()
    assert msg.released
    msg.release()  # a second release does nothing


def test_bytes_like_inputs(region):
    topic = region.create_topic("t")
    inputs = [b"ab", bytearray(b"cd"), memoryview(b"xxef")[2:], np.array([1, 2], dtype=np.uint8), b""]
    for data in inputs:
        topic.send(data)
    got = [topic.receive_bytes(0, timeout_ns=SECOND) for _ in inputs]
    assert got == [b"ab", b"cd", b"ef", b"\x01\x02", b""]
    with pytest.raises(TypeError):
        topic.send("text is not bytes")
    with pytest.raises(TypeError):
        topic.send(np.arange(10, dtype=np.uint8)[::2])  # not contiguous
    floats = np.array([1.5, -2.0])
    topic.send(floats)  # any dtype: its bytes
    with topic.receive(0, timeout_ns=SECOND) as msg:
        assert np.frombuffer(msg.data, dtype=np.float64).tolist() == [1.5, -2.0]


def test_loan_publish(region):
    topic = region.create_topic("t")
    loan = topic.loan(64)
    assert len(loan) == 64 and not loan.data.readonly
    loan.data[:5] = b"hello"
    loan.publish(5, key=7)
    assert loan.done
    with topic.receive(0, timeout_ns=SECOND) as msg:
        assert msg.tobytes() == b"hello"
    with pytest.raises(ValueError):
        loan.publish()


def test_loan_context_manager_cancels(region):
    topic = region.create_topic("t")
    free = sum(c.free for c in region.pool_stats())
    with topic.loan(100) as loan:
        loan.data[0] = 1
    assert loan.done
    assert topic.try_receive(0) is None
    assert sum(c.free for c in region.pool_stats()) == free


def test_numpy_zero_copy(region):
    topic = region.create_topic("t")
    with topic.loan(8 * 4) as loan:
        arr = np.frombuffer(loan.data, dtype=np.float64)
        arr[:] = [1.5, 2.5, 3.5, 4.5]  # writes straight into shared memory
        del arr
        loan.publish(key=1)
    with topic.receive(0, timeout_ns=SECOND) as msg:
        view = np.frombuffer(msg.data, dtype=np.float64)
        assert view.tolist() == [1.5, 2.5, 3.5, 4.5]
        assert not view.flags.writeable and not view.flags.owndata
        del view


def test_release_refused_while_viewed(region):
    """A release while views are alive raises BufferError; nothing can
    read the chunk after it went back to the pool."""
    topic = region.create_topic("t")
    topic.send(b"0123456789")
    msg = topic.receive(0, timeout_ns=SECOND)
    arr = np.frombuffer(msg.data, dtype=np.uint8)
    part = msg.data[2:4]
    with pytest.raises(BufferError, match="still viewed"):
        msg.release()
    assert not msg.released and bytes(part) == b"23"
    del arr
    with pytest.raises(BufferError):
        msg.release()
    part.release()
    kept = msg.data
    msg.release()  # .data itself is released with the message
    assert msg.released
    with pytest.raises(ValueError):
        kept[0]
    with pytest.raises(ValueError):
        msg.data
    with pytest.raises(ValueError):
        memoryview(msg)
    with pytest.raises(ValueError):
        msg.tobytes()


def test_loan_view_gone_after_publish(region):
    topic = region.create_topic("t")
    loan = topic.loan(4)
    keep = loan.data
    keep[:] = b"abcd"
    alias = memoryview(loan)
    with pytest.raises(BufferError):
        loan.publish()
    alias.release()
    loan.publish()
    with pytest.raises(ValueError):
        keep[0] = 1  # the chunk belongs to its consumer now
    assert topic.receive_bytes(0, timeout_ns=SECOND) == b"abcd"


def test_message_is_a_buffer(region):
    topic = region.create_topic("t")
    topic.send(b"xyz")
    with topic.receive(0, timeout_ns=SECOND) as msg:
        assert bytes(msg) == b"xyz"


def test_exceptions(region, region_name):
    with pytest.raises(tachyon.NotFound) as e:
        tachyon.Region(region_name + "-missing", create=False)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, tachyon.Error)
    with pytest.raises(tachyon.Incompatible):
        tachyon.Region(region_name, size=32 << 20)
    same = tachyon.Region(region_name, size=16 << 20, ring_arena=1 << 20)
    assert same.size == 16 << 20
    with pytest.raises(tachyon.TopicNotFound) as e:
        region.topic("none")
    assert isinstance(e.value, tachyon.NotFound)
    region.create_topic("t")
    with pytest.raises(tachyon.TopicExists):
        region.create_topic("t")
    with pytest.raises(tachyon.InvalidArgument):
        region.create_topic("u", partitions=3)
    with pytest.raises(ValueError):
        region.create_topic("u", wait="sometimes")
    topic = region.topic("t")
    with pytest.raises(tachyon.TimeoutError) as e:
        topic.receive(0, timeout_ns=0)
    assert isinstance(e.value, builtins.TimeoutError)
    with pytest.raises(tachyon.TimeoutError, match="timeout_ns=-1"):
        topic.receive(0, timeout_ns=10_000_000)
    with pytest.raises(tachyon.MessageTooLarge):
        topic.loan(tachyon.MAX_MESSAGE + 1)
    with pytest.raises(tachyon.InvalidArgument):
        topic.receive(99, timeout_ns=0)
    with pytest.raises(OverflowError):
        topic.send(b"x", key=-1)
    with pytest.raises(tachyon.InvalidName):
        tachyon.Region("")


def test_full_partition(region):
    topic = region.create_topic("t", capacity=2)
    topic.send(b"1")
    topic.send(b"2")
    with pytest.raises((tachyon.Full, tachyon.TimeoutError)):
        topic.send(b"3", timeout_ns=0)
    with pytest.raises(tachyon.TimeoutError):
        topic.send(b"3", timeout_ns=20_000_000)
    loan = topic.loan(1)
    with pytest.raises(tachyon.TimeoutError):
        loan.publish(timeout_ns=20_000_000)
    assert topic.depth(0) == 2


def test_statistics(region):
    topic = region.create_topic("t", partitions=2, at_least_once=True)
    assert topic.delivery == "at-least-once"
    for i in range(3):
        topic.send(b"m", key=i)
    for _ in range(3):
        for p in range(2):
            m = topic.try_receive(p)
            if m:
                m.release()
    (info,) = region.topics()
    assert (info.name, info.partitions, info.published, info.received) == ("t", 2, 3, 3)
    assert info.delivery == "at-least-once" and info.wait == "hybrid"
    stats = region.pool_stats()
    assert len(stats) == 8 and stats[0].chunk_size == 64 and stats[0].free <= stats[0].chunks
    found = region.recover()
    assert found.total == 0
    assert (found.repaired, found.quarantined, found.directory) == (0, 0, 0)
    assert "directory=0" in repr(found)
    assert "Topic(" in repr(topic) and "TopicInfo(" in repr(info)


def test_region_open_and_close(region, region_name):
    region.create_topic("t").send(b"kept")
    other = tachyon.Region(region_name, create=False)
    topic = other.topic("t")
    other.close()
    assert "closed" in repr(other)
    with pytest.raises(ValueError):
        other.topic("t")
    assert topic.receive_bytes(0, timeout_ns=SECOND) == b"kept"  # the topic keeps it mapped


def test_docstrings():
    for cls in (tachyon.Region, tachyon.Topic, tachyon.Message, tachyon.Loan, tachyon.SharedArray,
                tachyon.CircularBuffer, tachyon.RpcBuffer):
        assert cls.__doc__ and len(cls.__doc__) > 80
        for name in dir(cls):
            if not name.startswith("_"):
                assert getattr(cls, name).__doc__, f"{cls.__name__}.{name} has no docstring"


def test_dropped_messages_and_loans_return_their_chunks(region):
    topic = region.create_topic("t")
    free = sum(c.free for c in region.pool_stats())
    for _ in range(10):
        topic.send(b"x" * 100)
    msgs = [topic.receive(0, timeout_ns=SECOND) for _ in range(10)]
    views = [m.data for m in msgs]  # each message and its cached view: a cycle
    loans = [topic.loan(100) for _ in range(3)]
    assert sum(c.free for c in region.pool_stats()) < free
    del msgs, views, loans
    import gc

    gc.collect()
    assert sum(c.free for c in region.pool_stats()) == free


def test_huge_timeouts_are_accepted(region):
    topic = region.create_topic("t")
    topic.send(b"x", timeout_ns=2**63 - 1)
    assert topic.receive_bytes(0, timeout_ns=2**63 - 1) == b"x"
    with pytest.raises(OverflowError):
        topic.receive(0, timeout_ns=2**63)


def test_subscription_receives_from_several_partitions(region):
    topic = region.create_topic("t", partitions=4, capacity=16)
    keys = list(range(40))
    for k in keys:
        topic.send(k.to_bytes(8, "little"), key=k)
    sub = topic.subscribe()
    assert sub.partitions == [0, 1, 2, 3]
    got = {}
    for _ in keys:
        with sub.receive(timeout_ns=SECOND) as msg:
            k = int.from_bytes(msg.data, "little")
            assert msg.partition == topic.partition_of(k)
            got.setdefault(msg.partition, []).append(k)
    # Every message once; in each partition, in the order sent.
    assert sorted(k for ks in got.values() for k in ks) == keys
    assert all(ks == sorted(ks) for ks in got.values())
    assert sub.try_receive() is None
    with pytest.raises(tachyon.TimeoutError):
        sub.receive(timeout_ns=1_000_000)


def test_subscription_to_some_partitions(region):
    topic = region.create_topic("t", partitions=4)
    k0 = next(k for k in range(100) if topic.partition_of(k) == 0)
    k2 = next(k for k in range(100) if topic.partition_of(k) == 2)
    for k in (k0, k2):
        topic.send(b"%d" % k, key=k)
    sub = topic.subscribe([2])
    assert sub.partitions == [2]
    with sub.receive(timeout_ns=SECOND) as msg:
        assert (msg.partition, bytes(msg.data)) == (2, b"%d" % k2)
    assert sub.try_receive() is None  # partition 0's message is not its
    assert topic.receive_bytes(0, timeout_ns=SECOND) == b"%d" % k0
    with pytest.raises(tachyon.InvalidArgument):
        topic.subscribe([4])
    assert "Subscription" in repr(sub)


def test_subscription_iterates(region):
    topic = region.create_topic("t", partitions=2)
    for i in range(3):
        topic.send(b"m%d" % i, key=i)
    sub = topic.subscribe()
    seen = []
    for msg in sub:
        with msg:
            seen.append(bytes(msg.data))
        if len(seen) == 3:
            break
    assert sorted(seen) == [b"m0", b"m1", b"m2"]


def test_inline_payload(region):
    with pytest.raises(tachyon.InvalidArgument):
        region.create_topic("x", capacity=8, inline_payload=128, at_least_once=True)
    topic = region.create_topic("t", capacity=8, inline_payload=100)
    assert topic.inline_payload == 128 and region.create_topic("plain").inline_payload == 0
    with pytest.raises(tachyon.Incompatible):
        region.create_or_open_topic("t", capacity=8)
    free = lambda: [c.free for c in region.pool_stats()]  # noqa: E731
    before = free()
    topic.send(b"in the slot", 1)
    assert free() == before  # no chunk taken
    topic.send(b"x" * 300, 1)  # past the slot: a chunk
    assert topic.receive_bytes(0, timeout_ns=0) == b"in the slot"
    assert topic.receive_bytes(0, timeout_ns=0) == b"x" * 300


def test_batch_reads_are_a_handles_option(region):
    # with_batch_reads gives a new handle; the old one, and every other
    # handle of the topic, keep theirs; a subscription opened through the
    # new handle receives; off again on request.
    topic = region.create_topic("t", capacity=64, inline_payload=64)
    batch = region.topic("t").with_batch_reads()
    assert batch.batch_reads and not topic.batch_reads and not region.topic("t").batch_reads
    assert not batch.with_batch_reads(False).batch_reads and batch.batch_reads
    for i in range(200):  # laps of the ring, inline and in chunks
        topic.send(bytes([i]) * 40, 0)
        topic.send(bytes([i]) * 100, 0)
        assert batch.receive_bytes(0, timeout_ns=SECOND) == bytes([i]) * 40
        assert batch.receive_bytes(0, timeout_ns=SECOND) == bytes([i]) * 100
    sub = batch.subscribe()
    topic.send(b"sub", 0)
    assert bytes(sub.receive(timeout_ns=SECOND).data) == b"sub"


def test_light_handovers(region):
    # The topic's own setting: read back in every handle, an open that asks
    # for the other one is refused; messages inline and in chunks flow.
    topic = region.create_topic("t", capacity=8, inline_payload=64, light_handovers=True)
    assert topic.light_handovers and not region.create_topic("plain").light_handovers
    assert region.topic("t").light_handovers
    with pytest.raises(tachyon.Incompatible):
        region.create_or_open_topic("t", capacity=8, inline_payload=64)
    assert region.create_or_open_topic("t", capacity=8, inline_payload=64, light_handovers=True).light_handovers
    for i in range(20):  # laps of the ring
        topic.send(bytes([i]) * 40, i)
        topic.send(bytes([i]) * 100, i)  # past the slot: a chunk
        assert topic.receive_bytes(0, timeout_ns=0) == bytes([i]) * 40
        assert topic.receive_bytes(0, timeout_ns=0) == bytes([i]) * 100
    info = topic.info()
    assert (info.published, info.received) == (40, 40)


def loan_everything(topic):
    """Every chunk of the pool the topic can loan (at least one), loaned."""
    loans = []
    while True:
        try:
            loans.append(topic.loan(64, timeout_ns=0))
        except tachyon.PoolExhausted:
            break
    assert loans
    return loans


def test_the_copy_receives_of_inline_messages_need_no_chunk(region):
    # receive_many_bytes, and a subscription's receive_bytes and
    # receive_many_bytes, copy inline messages out of their slots: they work
    # with every chunk loaned out, where receive_many cannot.
    topic = region.create_topic("t", partitions=2, capacity=8, inline_payload=64)
    key0, key1 = (next(k for k in range(64) if topic.partition_of(k) == p) for p in (0, 1))
    for i in range(3):
        topic.send(b"p0-%d" % i, key0)
    loans = loan_everything(topic)
    with pytest.raises(tachyon.PoolExhausted):
        topic.receive_many(0, timeout_ns=0)
    assert topic.receive_many_bytes(0, max=2, timeout_ns=0) == [b"p0-0", b"p0-1"]
    topic.send(b"p1", key1)
    sub = topic.subscribe()
    first = sub.receive_bytes(timeout_ns=0)
    rest = sub.receive_many_bytes(timeout_ns=0)
    assert sorted([first, *rest]) == [b"p0-2", b"p1"]
    with pytest.raises(tachyon.TimeoutError):
        sub.receive_bytes(timeout_ns=1_000_000)
    with pytest.raises(tachyon.TimeoutError):
        sub.receive_many_bytes(timeout_ns=0)
    for loan in loans:
        loan.cancel()


def test_receive_bytes_of_an_inline_message_needs_no_chunk(region):
    # receive_bytes copies an inline message out of its slot: it works with
    # every chunk of the pool loaned out, where receive (a Message, in a
    # chunk of the receiver's) cannot.
    topic = region.create_topic("t", capacity=8, inline_payload=64)
    topic.send(b"one", 0)
    topic.send(b"two", 0)
    loans = loan_everything(topic)
    with pytest.raises(tachyon.PoolExhausted):
        topic.receive(0, timeout_ns=0)
    assert topic.receive_bytes(0, timeout_ns=0) == b"one"
    for loan in loans:
        loan.cancel()
    assert topic.receive_bytes(0, timeout_ns=0) == b"two"
    with pytest.raises(tachyon.TimeoutError):
        topic.receive_bytes(0, timeout_ns=0)


# Sizes around the copies' thresholds (2 KiB: where the library's copy may
# go backward), odd ones, and the largest message.
COPY_SIZES = [0, 1, 63, 2047, 2048, 4097, 65_536 + 17, 1 << 20]


def _copy_out_both_ways(send, receive_now, receive_waiting):
    """Each size twice: sent before the receive (copied straight into the
    bytes object, with the GIL held) and sent by a thread while the receive
    waits without the GIL (lent to the waiting call, which takes the GIL
    back for the copy): the bytes exact either way."""
    import os
    import threading

    for size in COPY_SIZES:
        data = os.urandom(size)
        send(data)
        got = receive_now()
        assert type(got) is bytes and got == data, size
        sender = threading.Timer(0.02, send, (data[::-1],))
        sender.start()
        try:
            got = receive_waiting()
        finally:
            sender.join()
        assert type(got) is bytes and got == data[::-1], size


@pytest.mark.parametrize("inline", [0, 4096])
def test_copies_out_are_exact_on_both_paths(region_name, inline):
    with tachyon.Region(region_name, size=32 << 20, ring_arena=1 << 20, max_groups=2) as reg:
        topic = reg.create_topic("t", capacity=8, inline_payload=inline)
        group = topic.join_group("g")
        free = [c.free for c in reg.pool_stats()]
        # Every message goes to the default group and to "g": the one not
        # under test is emptied before each send, so that its ring has room.
        other = [group]

        def send(data):
            while other[0].try_receive(0) is not None:
                pass
            topic.send(data, timeout_ns=SECOND)

        def now_and_waiting(call):
            return (lambda: call(0), lambda: call(10 * SECOND))

        sub = topic.subscribe()
        for now, waiting in [
            now_and_waiting(lambda t: topic.receive_bytes(0, timeout_ns=t)),
            now_and_waiting(lambda t: topic.receive_many_bytes(0, 4, timeout_ns=t)[0]),
            now_and_waiting(lambda t: sub.receive_bytes(timeout_ns=t)),
            now_and_waiting(lambda t: sub.receive_many_bytes(4, timeout_ns=t)[0]),
        ]:
            _copy_out_both_ways(send, now, waiting)
        while group.try_receive(0) is not None:  # what the passes above left it
            pass
        other[0] = topic
        _copy_out_both_ways(send, *now_and_waiting(lambda t: group.receive_bytes(0, timeout_ns=t)))
        # A message's tobytes copies the same way.
        data = bytes(range(256)) * 300
        send(data)
        with topic.receive(0, timeout_ns=SECOND) as msg:
            assert msg.tobytes() == data
        while group.try_receive(0) is not None:
            pass
        # Every copy released its message at once: the pool is as before.
        assert [c.free for c in reg.pool_stats()] == free


@pytest.mark.parametrize("inline", [0, 8192])
def test_waited_copies_while_other_threads_want_the_gil(region_name, inline):
    """A receive that waited copies its message with the GIL taken back,
    holding the message meanwhile. Other threads want the GIL all along (a
    busy loop, a sender that also looks at the topic): every message still
    arrives, whole and in order, and goes back to the pool."""
    import threading
    import time

    count = 200
    with tachyon.Region(region_name, size=32 << 20, ring_arena=1 << 20) as reg:
        topic = reg.create_topic("t", partitions=2, capacity=8, inline_payload=inline)
        free = [c.free for c in reg.pool_stats()]
        stop = threading.Event()

        def hog():
            n = 0
            while not stop.is_set():
                n = (n * 31 + 7) % 1_000_003

        def sender():
            for i in range(count):
                time.sleep(0.0005)
                topic.send(i.to_bytes(4, "little") * 1500, timeout_ns=10 * SECOND)
                assert topic.try_receive(1) is None  # the same topic, the GIL held

        threads = [threading.Thread(target=hog), threading.Thread(target=sender)]
        for t in threads:
            t.start()
        try:
            for i in range(count):
                got = topic.receive_bytes(0, timeout_ns=10 * SECOND)
                assert got == i.to_bytes(4, "little") * 1500, i
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert [c.free for c in reg.pool_stats()] == free


def test_sends_that_wait_send_exact_bytes(region):
    """A send that waits for room does so without the GIL: on a bytes
    object's own bytes (no copy), on a private copy of any other bytes-like
    object's. Each kind arrives exact, through Topic.send, send_many and
    CircularBuffer.write. Room is made 50 ms into the wait (were the
    machine so slow that the call started later, it would not wait, and
    the bytes must still be exact)."""
    import os
    import threading

    topic = region.create_topic("t", capacity=2)
    big = os.urandom(100_000)

    def later(act):
        timer = threading.Timer(0.05, act)
        timer.start()
        return timer

    kinds = (bytes, bytearray, lambda b: memoryview(bytearray(b)), lambda b: np.frombuffer(b, np.uint8).copy())
    for make in kinds:
        topic.send(b"1")
        topic.send(b"2")
        timer = later(lambda: topic.receive(0, timeout_ns=SECOND).release())
        topic.send(make(big), timeout_ns=10 * SECOND)
        timer.join()
        assert topic.receive_many_bytes(0, 4, timeout_ns=SECOND) == [b"2", big], make

    topic.send(b"1")
    timer = later(lambda: topic.receive(0, timeout_ns=SECOND).release())
    assert topic.send_many([big, bytearray(big[::-1])], timeout_ns=10 * SECOND) == 2
    timer.join()
    assert topic.receive_many_bytes(0, 4, timeout_ns=SECOND) == [big, big[::-1]]

    ring = tachyon.CircularBuffer(f"{region.name}-cb", node_count=2, node_size=1 << 17)
    for make in kinds[:2]:
        ring.write(b"1")
        ring.write(b"2")
        timer = later(lambda: ring.read(timeout_ns=SECOND))
        ring.write(make(big), timeout_ns=10 * SECOND)
        timer.join()
        assert [ring.read(timeout_ns=SECOND) for _ in range(2)] == [b"2", big]
