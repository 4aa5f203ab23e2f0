"""Functions run in other processes (multiprocessing, spawn): importable by
module name, so they live outside the test files."""

from __future__ import annotations

import tachyon

WAIT_NS = 10_000_000_000


def produce(region_name: str, topic_name: str, count: int) -> None:
    """Sends `count` messages of 64 bytes, the first 8 the index, half built
    in place (loan), half copied (send)."""
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic(topic_name)
    for i in range(count):
        payload = i.to_bytes(8, "little") * 8
        if i % 2:
            topic.send(payload, key=i, timeout_ns=WAIT_NS)
        else:
            with topic.loan(len(payload), timeout_ns=WAIT_NS) as loan:
                loan.data[:] = payload
                loan.publish(key=i, timeout_ns=WAIT_NS)


def consume(region_name: str, topic_name: str, count: int, results) -> None:
    """Receives `count` messages from every partition through one
    subscription, checks each came from its key's partition, and puts the
    sorted indices on `results`."""
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic(topic_name)
    sub = topic.subscribe()
    assert sub.partitions == list(range(topic.partitions))
    seen = []
    while len(seen) < count:
        with sub.receive(timeout_ns=WAIT_NS) as msg:
            data = msg.data
            assert bytes(data[8:16]) == bytes(data[:8])
            index = int.from_bytes(data[:8], "little")
            assert msg.partition == topic.partition_of(index), (index, msg.partition)
            seen.append(index)
            del data
    results.put(sorted(seen))


def produce_batches(region_name: str, topic_name: str, count: int, batch: int) -> None:
    """Sends `count` messages of 64 bytes (the first 8 the index, repeated)
    with send_many, `batch` per call, each keyed by its index."""
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic(topic_name)
    for start in range(0, count, batch):
        indices = range(start, min(start + batch, count))
        items = [i.to_bytes(8, "little") * 8 for i in indices]
        assert topic.send_many(items, key=list(indices), timeout_ns=WAIT_NS) == len(items)


def consume_batches(region_name: str, topic_name: str, count: int, copy: bool, results) -> None:
    """Receives `count` messages from every partition with one
    subscription's receive_many (or receive_many_bytes if `copy`), checks
    each message and its partition, and puts the indices, in the order
    received, on `results`."""
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic(topic_name)
    sub = topic.subscribe()
    seen = []
    while len(seen) < count:
        if copy:
            batch = sub.receive_many_bytes(32, timeout_ns=WAIT_NS)
            datas = batch
        else:
            batch = sub.receive_many(32, timeout_ns=WAIT_NS)
            datas = [msg.data for msg in batch]
            for msg in batch:
                index = int.from_bytes(msg.data[:8], "little")
                assert msg.partition == topic.partition_of(index), (index, msg.partition)
        assert 1 <= len(batch) <= 32
        for data in datas:
            assert bytes(data[8:16]) == bytes(data[:8])
            seen.append(int.from_bytes(data[:8], "little"))
        del datas, data
        if not copy:
            tachyon.release_all(batch)
            assert all(msg.released for msg in batch)
    results.put(seen)
