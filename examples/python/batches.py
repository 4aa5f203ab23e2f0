"""Batches between two Python processes: sensor readings sent 64 per call
and read in place with numpy, 64 per call; prints the rate.

    python examples/python/batches.py [MESSAGES]

The producer sends each reading (256 float32 values, 1 KiB) with
Topic.send_many, keyed by its sensor so that each sensor's readings stay in
order; the consumer takes them with Subscription.receive_many, views each
one as a numpy array without a copy, and gives the whole batch back with
tachyon.release_all. The numpy work per reading (a view, two reads, a sum)
costs more than moving it: the rate printed is the consumer's.
"""

import multiprocessing
import os
import sys
import time

import numpy as np

import tachyon

NAME = f"batches-py-{os.getpid()}"
BATCH = 64
SENSORS = 8


def consumer(name: str, count: int, results) -> None:
    sub = tachyon.Region(name, create=False).topic("readings").subscribe()
    last = {}  # sensor -> the last sequence number seen: per-key order
    total = 0.0
    received = 0
    while received < count:
        msgs = sub.receive_many(BATCH, timeout_ns=10**10)
        for msg in msgs:
            values = np.frombuffer(msg.data, dtype=np.float32)  # no copy
            sensor, seq = int(values[0]), int(values[1])
            assert last.get(sensor, -1) < seq, "a sensor's readings came out of order"
            last[sensor] = seq
            total += float(values[2:].sum())
            del values  # a live view would make release_all raise BufferError
        received += len(msgs)
        tachyon.release_all(msgs)
    results.put((received, total))


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    reg = tachyon.Region(NAME, size=32 << 20)
    try:
        topic = reg.create_topic("readings", partitions=4, capacity=1024)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        child = ctx.Process(target=consumer, args=(NAME, count, results))
        child.start()
        # Every reading: sensor, sequence number, 254 values.
        readings = np.ones((count, 256), dtype=np.float32)
        readings[:, 0] = np.arange(count) % SENSORS
        readings[:, 1] = np.arange(count) // SENSORS
        keys = (np.arange(count) % SENSORS).tolist()
        start = time.perf_counter()
        for first in range(0, count, BATCH):
            rows = readings[first:first + BATCH]
            topic.send_many(iter(rows), key=keys[first:first + BATCH], timeout_ns=10**10)
        received, total = results.get(timeout=60)
        elapsed = time.perf_counter() - start
        child.join(timeout=30)
        assert received == count and total == count * 254.0
        print(f"{count} readings of 1 KiB in batches of {BATCH}: {count / elapsed:,.0f} msg/s")
    finally:
        tachyon.Region.remove(NAME)


if __name__ == "__main__":
    main()
