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
