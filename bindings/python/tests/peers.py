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
    """Receives `count` messages from every partition in turn and puts the
    sorted indices on `results`."""
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic(topic_name)
    seen = []
    while len(seen) < count:
        for p in range(topic.partitions):
            msg = topic.try_receive(p)
            if msg is None:
                continue
            with msg:
                data = msg.data
                assert bytes(data[8:16]) == bytes(data[:8])
                seen.append(int.from_bytes(data[:8], "little"))
                del data
        if len(seen) < count:
            try:
                with topic.receive(0, timeout_ns=1_000_000) as msg:
                    seen.append(int.from_bytes(msg.data[:8], "little"))
            except tachyon.TimeoutError:
                pass
    results.put(sorted(seen))
