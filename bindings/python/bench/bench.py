"""tachyon next to the kernel's transports, between two Python processes.

    python bindings/python/bench/bench.py [--rounds N] [--messages N] [--runs N] [--batch N] [--size BYTES]

Measures, in one run and between the same two kinds of process (the parent
and one child started with multiprocessing's "spawn"):

* round trip of a 256-byte message (the child echoes it): p50 and p99;
* throughput of 1 KiB messages (--size), parent to child: messages per second, from
  the first send until the child has taken the last (the median of --runs,
  which are interleaved: each round runs every transport once).

Transports: tachyon (round trips on topics that spin while waiting,
throughput on a topic with the default hybrid waiting; the consumer gets a
zero-copy view and releases it, or, "copy out", a bytes object), tachyon
batched (the same, --batch messages per call: the producer calls
send_many, the consumer receive_many and release_all, or
receive_many_bytes), a duplex
multiprocessing.Pipe (send_bytes / recv_bytes), a multiprocessing.Queue
(put / get) and a Unix socket pair (SOCK_SEQPACKET, one datagram per
message). Prints a table and the ratios of tachyon to the others.
multiprocessing.Queue batches too, inside: put() hands the object to a
feeder thread that pickles and writes while the caller goes on.

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
TPUT_SIZE = 1024  # the default of --size
WAIT_NS = 30 * 10**9
# The largest --size: a datagram the Unix socket takes whole under the
# kernel's default buffer limits, and what its child takes in one recv.
RECV_MAX = 65536


# --- the child's side of each transport ------------------------------------


def tachyon_child(name: str, batch: int, mode: str, count: int, ready, done) -> None:
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
    elif mode == "copy":  # sink, copying each message out
        for _ in range(count):
            ping.receive_bytes(0, timeout_ns=WAIT_NS)
        done.set()
    elif mode == "sink-many":  # up to `batch` views per call, released together
        got = 0
        while got < count:
            msgs = ping.receive_many(0, batch, timeout_ns=WAIT_NS)
            got += len(msgs)
            tachyon.release_all(msgs)
        done.set()
    else:  # "copy-many": up to `batch` bytes objects per call
        got = 0
        while got < count:
            got += len(ping.receive_many_bytes(0, batch, timeout_ns=WAIT_NS))
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
            sock.recv(RECV_MAX)
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

    def send_count(self, data: bytes, count: int) -> None:
        """Sends `data` `count` times (the throughput's producer)."""
        for _ in range(count):
            self.send(data)

    def recv(self) -> None: ...
    def close(self) -> None: ...


class Tachyon(Transport):
    def __init__(self, copy: bool = False, batch: int = 0) -> None:
        self.copy = copy
        self.batch = batch
        self.name = "tachyon" + (" batched" if batch else "") + (" (copy out)" if copy else "")
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
        return (self.region_name, self.batch)

    def sink_mode(self) -> str:
        return ("copy" if self.copy else "sink") + ("-many" if self.batch else "")

    def send(self, data: bytes) -> None:
        self.out.send(data, timeout_ns=WAIT_NS)

    def send_count(self, data: bytes, count: int) -> None:
        if not self.batch:
            return super().send_count(data, count)
        items = [data] * self.batch
        full, rest = divmod(count, self.batch)
        for _ in range(full):
            self.out.send_many(items, timeout_ns=WAIT_NS)
        self.out.send_many(items[:rest], timeout_ns=WAIT_NS)

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


def throughput(t: Transport, messages: int, size: int) -> float:
    payload = bytes(size)

    def body(t: Transport, done) -> float:
        start = time.perf_counter()
        t.send_count(payload, messages)
        if not done.wait(120):
            raise RuntimeError(f"{t.name}: the consumer did not finish")
        return messages / (time.perf_counter() - start)

    return run(t, t.sink_mode(), messages, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20_000, help="round trips per transport")
    parser.add_argument("--messages", type=int, default=100_000, help="messages per transport and run")
    parser.add_argument("--runs", type=int, default=5, help="throughput runs per transport, interleaved (the median is shown)")
    parser.add_argument("--batch", type=int, default=64, help="messages per call of the batched tachyon rows")
    parser.add_argument("--size", type=int, default=TPUT_SIZE,
                        help=f"bytes per message of the throughput runs, 1 to {RECV_MAX} (default {TPUT_SIZE})")
    args = parser.parse_args()
    if not 1 <= args.size <= RECV_MAX:
        parser.error(f"--size must be 1 to {RECV_MAX}")

    transports = [
        Tachyon(),
        Tachyon(copy=True),
        Tachyon(batch=args.batch),
        Tachyon(copy=True, batch=args.batch),
        Pipe(),
        Queue(),
        UnixSocket(),
    ]
    # Round trips first, then the throughput runs interleaved (every
    # transport once per round), so that a burst of load from elsewhere
    # hits all of them alike rather than one transport's runs.
    rtts = {}
    for t in transports:
        if t.name != "tachyon" and t.name.startswith("tachyon"):
            rtts[t.name] = (float("nan"), float("nan"))  # the round trip is the same as tachyon's
        else:
            rtts[t.name] = round_trips(t, args.rounds)
    rates: dict[str, list[float]] = {t.name: [] for t in transports}
    for _ in range(args.runs):
        for t in transports:
            rates[t.name].append(throughput(t, args.messages, args.size))
    results = {}
    print(f"{'transport':<26} {'RTT p50 us':>11} {'RTT p99 us':>11} {f'{args.size} B msg/s':>12}   {'(slowest, fastest run)':>22}")
    for t in transports:
        runs = sorted(rates[t.name])
        p50, p99 = rtts[t.name]
        results[t.name] = (p50, p99, runs[len(runs) // 2], runs[-1])
        print(f"{t.name:<26} {p50:>11.1f} {p99:>11.1f} {runs[len(runs) // 2]:>12,.0f}   ({runs[0]:>10,.0f}, {runs[-1]:>10,.0f})")

    base = results["tachyon"]
    ours = [n for n in results if n.startswith("tachyon")]
    columns = {"tachyon": "per call", "tachyon (copy out)": "copy out",
               "tachyon batched": "batched", "tachyon batched (copy out)": "batch copy"}
    # The medians, and the fastest runs: the least disturbed by whatever
    # else the machine runs, for tachyon and for the other alike.
    for which, column in (("medians", 2), ("fastest runs", 3)):
        print(f"\nratios ({which}): tachyon's round trip p50 faster by, "
              f"its {args.size} B throughput higher by (batches of {args.batch})")
        print(f"  {'':<27} {'RTT p50':>8}" + "".join(f" {columns[n]:>10}" for n in ours))
        for name, row in results.items():
            if name.startswith("tachyon"):
                continue
            print(f"  vs {name:<24} {row[0] / base[0]:7.1f}x"
                  + "".join(f" {results[n][column] / row[column]:9.1f}x" for n in ours))
    print(f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; python {os.sys.version.split()[0]}")


if __name__ == "__main__":
    main()
