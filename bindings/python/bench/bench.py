"""tachyon next to the kernel's transports, between two Python processes.

    python bindings/python/bench/bench.py [--rounds N] [--messages N]

Measures, in one run and between the same two kinds of process (the parent
and one child started with multiprocessing's "spawn"):

* round trip of a 256-byte message (the child echoes it): p50 and p99;
* throughput of 1 KiB messages, parent to child: messages per second, from
  the first send until the child has taken the last (the median of --runs).

Transports: tachyon (round trips on topics that spin while waiting,
throughput on a topic with the default hybrid waiting; the consumer gets a
zero-copy view and releases it, or, "copy out", a bytes object), a duplex
multiprocessing.Pipe (send_bytes / recv_bytes), a multiprocessing.Queue
(put / get) and a Unix socket pair (SOCK_SEQPACKET, one datagram per
message). Prints a table and the ratios of tachyon to the others.

Numbers depend on the machine and on what else runs on it; on a loaded
machine, spinning transports suffer most. This script asserts nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import time

import tachyon

RTT_SIZE = 256
TPUT_SIZE = 1024
WAIT_NS = 30 * 10**9


# --- the child's side of each transport ------------------------------------


def tachyon_child(name: str, mode: str, count: int, ready, done) -> None:
    reg = tachyon.Region(name, create=False)
    ping, pong = reg.topic("ping"), reg.topic("pong")
    if mode != "echo":
        ping = reg.topic("bulk")
    ready.set()
    if mode == "echo":
        for _ in range(count):
            msg = ping.receive(0, timeout_ns=WAIT_NS)
            pong.send(msg.data)
            msg.release()
    elif mode == "sink":
        for _ in range(count):
            ping.receive(0, timeout_ns=WAIT_NS).release()
        done.set()
    else:  # sink, copying each message out
        for _ in range(count):
            ping.receive_bytes(0, timeout_ns=WAIT_NS)
        done.set()


def pipe_child(conn, mode: str, count: int, ready, done) -> None:
    ready.set()
    if mode == "echo":
        for _ in range(count):
            conn.send_bytes(conn.recv_bytes())
    else:
        for _ in range(count):
            conn.recv_bytes()
        done.set()


def queue_child(queues, mode: str, count: int, ready, done) -> None:
    inbox, outbox = queues
    ready.set()
    if mode == "echo":
        for _ in range(count):
            outbox.put(inbox.get())
    else:
        for _ in range(count):
            inbox.get()
        done.set()


def socket_child(sock, mode: str, count: int, ready, done) -> None:
    ready.set()
    if mode == "echo":
        for _ in range(count):
            sock.send(sock.recv(65536))
    else:
        for _ in range(count):
            sock.recv(65536)
        done.set()


# --- the parent's side -------------------------------------------------------


def percentiles(times: list[int]) -> tuple[float, float]:
    times.sort()
    return times[len(times) // 2] / 1000, times[len(times) * 99 // 100] / 1000


class Transport:
    """One transport: the parent's send/receive and how to start the child."""

    name = ""

    def setup(self) -> None: ...
    def child_args(self) -> tuple: ...
    def send(self, data: bytes) -> None: ...
    def recv(self) -> None: ...
    def close(self) -> None: ...


class Tachyon(Transport):
    def __init__(self, copy: bool = False) -> None:
        self.copy = copy
        self.name = "tachyon (copy out)" if copy else "tachyon"
        self.target = tachyon_child

    def setup(self) -> None:
        self.region_name = f"bench-py-{os.getpid()}"
        self.reg = tachyon.Region(self.region_name, size=64 << 20)
        self.ping = self.reg.create_topic("ping", capacity=1024, wait="spin")
        self.pong = self.reg.create_topic("pong", capacity=1024, wait="spin")
        # Throughput: the default waiting (spin briefly, then sleep), which
        # copes with a busy machine.
        self.bulk = self.reg.create_topic("bulk", capacity=1024, wait="hybrid")
        self.out = self.ping

    def child_args(self) -> tuple:
        return (self.region_name,)

    def sink_mode(self) -> str:
        return "copy" if self.copy else "sink"

    def send(self, data: bytes) -> None:
        self.out.send(data, timeout_ns=WAIT_NS)

    def bulk_mode(self) -> None:
        self.out = self.bulk

    def recv(self) -> None:
        self.pong.receive(0, timeout_ns=WAIT_NS).release()

    def close(self) -> None:
        self.reg.close()
        tachyon.Region.remove(self.region_name)


class Pipe(Transport):
    name = "multiprocessing.Pipe"
    target = staticmethod(pipe_child)

    def setup(self) -> None:
        self.mine, self.theirs = mp.get_context("spawn").Pipe(duplex=True)

    def child_args(self) -> tuple:
        return (self.theirs,)

    def sink_mode(self) -> str:
        return "sink"

    def send(self, data: bytes) -> None:
        self.mine.send_bytes(data)

    def recv(self) -> None:
        self.mine.recv_bytes()

    def close(self) -> None:
        self.mine.close()
        self.theirs.close()


class Queue(Transport):
    name = "multiprocessing.Queue"
    target = staticmethod(queue_child)

    def setup(self) -> None:
        ctx = mp.get_context("spawn")
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()

    def child_args(self) -> tuple:
        return ((self.inbox, self.outbox),)

    def sink_mode(self) -> str:
        return "sink"

    def send(self, data: bytes) -> None:
        self.inbox.put(data)

    def recv(self) -> None:
        self.outbox.get()

    def close(self) -> None:
        self.inbox.close()
        self.outbox.close()


class UnixSocket(Transport):
    name = "Unix socket (seqpacket)"
    target = staticmethod(socket_child)

    def setup(self) -> None:
        self.mine, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for s in (self.mine, self.theirs):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)

    def child_args(self) -> tuple:
        return (self.theirs,)

    def sink_mode(self) -> str:
        return "sink"

    def send(self, data: bytes) -> None:
        self.mine.send(data)

    def recv(self) -> None:
        self.mine.recv(65536)

    def close(self) -> None:
        self.mine.close()
        self.theirs.close()


def run(t: Transport, mode: str, count: int, body) -> float | tuple[float, float]:
    ctx = mp.get_context("spawn")
    t.setup()
    if mode != "echo" and isinstance(t, Tachyon):
        t.bulk_mode()
    try:
        ready, done = ctx.Event(), ctx.Event()
        child = ctx.Process(target=t.target, args=(*t.child_args(), mode, count, ready, done))
        child.start()
        try:
            if not ready.wait(120):
                raise RuntimeError(f"{t.name}: the child did not start")
            return body(t, done)
        finally:
            child.join(timeout=120)
            if child.is_alive():
                child.kill()
    finally:
        t.close()


def round_trips(t: Transport, rounds: int) -> tuple[float, float]:
    payload = bytes(RTT_SIZE)
    warmup = min(1000, rounds // 10)

    def body(t: Transport, _done) -> tuple[float, float]:
        times = []
        clock = time.perf_counter_ns
        for i in range(rounds):
            start = clock()
            t.send(payload)
            t.recv()
            if i >= warmup:
                times.append(clock() - start)
        return percentiles(times)

    return run(t, "echo", rounds, body)


def throughput(t: Transport, messages: int) -> float:
    payload = bytes(TPUT_SIZE)

    def body(t: Transport, done) -> float:
        start = time.perf_counter()
        for _ in range(messages):
            t.send(payload)
        if not done.wait(120):
            raise RuntimeError(f"{t.name}: the consumer did not finish")
        return messages / (time.perf_counter() - start)

    return run(t, t.sink_mode(), messages, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000, help="round trips per transport")
    parser.add_argument("--messages", type=int, default=100_000, help="1 KiB messages per transport and run")
    parser.add_argument("--runs", type=int, default=3, help="throughput runs per transport (the median is shown)")
    args = parser.parse_args()

    transports = [Tachyon(), Tachyon(copy=True), Pipe(), Queue(), UnixSocket()]
    results = {}
    print(f"{'transport':<26} {'RTT p50 us':>11} {'RTT p99 us':>11} {'1 KiB msg/s':>12}")
    for t in transports:
        if t.name == "tachyon (copy out)":
            p50 = p99 = float("nan")  # the round trip is the same as tachyon's
        else:
            p50, p99 = round_trips(t, args.rounds)
        rate = sorted(throughput(t, args.messages) for _ in range(args.runs))[args.runs // 2]
        results[t.name] = (p50, p99, rate)
        print(f"{t.name:<26} {p50:>11.1f} {p99:>11.1f} {rate:>12,.0f}", flush=True)

    base = results["tachyon"]
    print("\nratios (tachyon vs. the others): round trip p50 faster by, throughput higher by")
    for name, (p50, _, rate) in results.items():
        if name.startswith("tachyon"):
            continue
        print(f"  vs {name:<24} {p50 / base[0]:5.1f}x  {base[2] / rate:5.1f}x"
              f"  (copy out: {results['tachyon (copy out)'][2] / rate:.1f}x)")
    print(f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; python {os.sys.version.split()[0]}")


if __name__ == "__main__":
    main()
