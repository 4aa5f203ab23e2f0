"""Ping-pong between two Python processes through two topics: measures the
round trip of a 256-byte message.

    python examples/python/pingpong.py [ROUNDS]

The ponger receives on "ping" and answers on "pong" with the same bytes; the
pinger times each round trip. Both topics spin while waiting (wait="spin"),
for the lowest latency (each waiting process keeps a core busy).
"""

import multiprocessing
import os
import statistics
import sys
import time

import tachyon

NAME = f"pingpong-py-{os.getpid()}"


def ponger(name: str, rounds: int) -> None:
    reg = tachyon.Region(name, create=False)
    ping, pong = reg.topic("ping"), reg.topic("pong")
    for _ in range(rounds):
        with ping.receive(0, timeout_ns=10**10) as msg:
            pong.send(msg.data)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    reg = tachyon.Region(NAME, size=16 << 20, ring_arena=1 << 20)
    try:
        ping = reg.create_topic("ping", wait="spin")
        pong = reg.create_topic("pong", wait="spin")
        child = multiprocessing.get_context("spawn").Process(target=ponger, args=(NAME, rounds))
        child.start()
        payload = bytes(256)
        times = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            ping.send(payload)
            pong.receive(0, timeout_ns=10**10).release()
            times.append(time.perf_counter_ns() - start)
        child.join(timeout=30)
        times.sort()
        p50, p99 = times[len(times) // 2], times[len(times) * 99 // 100]
        print(f"{rounds} round trips of 256 B: p50 {p50 / 1000:.1f} us, p99 {p99 / 1000:.1f} us, "
              f"mean {statistics.fmean(times) / 1000:.1f} us")
    finally:
        tachyon.Region.remove(NAME)


if __name__ == "__main__":
    main()
