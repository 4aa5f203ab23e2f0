"""Hello, zero-copy bus, from Python: a producer process and a consumer
process on one region.

    python examples/python/hello.py

The parent creates a region and a topic, starts a consumer process
(multiprocessing, spawn), builds a message in place in a loaned chunk and
publishes it; the consumer receives a memoryview straight into shared memory,
prints it and releases it. The region is removed at the end.
"""

import multiprocessing
import os

import tachyon

NAME = f"hello-py-{os.getpid()}"


def consumer(name: str) -> None:
    reg = tachyon.Region(name, create=False)
    topic = reg.topic("greetings")
    with topic.receive(partition=topic.partition_of(42), timeout_ns=10**10) as msg:
        print(f"consumer {os.getpid()} received {len(msg)} bytes: {bytes(msg.data).decode()}")


def main() -> None:
    reg = tachyon.Region(NAME, size=16 << 20, ring_arena=1 << 20)
    try:
        topic = reg.create_topic("greetings", partitions=4)
        child = multiprocessing.get_context("spawn").Process(target=consumer, args=(NAME,))
        child.start()
        text = f"hello from pid {os.getpid()}, through shared memory".encode()
        with topic.loan(len(text)) as loan:  # a writable chunk of the pool
            loan.data[:] = text  # the message is built in place
            loan.publish(key=42)  # only a 16-byte descriptor moves
        print(f"producer published {len(text)} bytes to partition {topic.partition_of(42)}")
        child.join(timeout=30)
        print(reg.topics()[0])
    finally:
        tachyon.Region.remove(NAME)


if __name__ == "__main__":
    main()
