"""Large messages to a waiting receiver, between two Python processes.

    python bindings/python/bench/large.py [--sizes 65536,262144,1048576] [--rounds N] [--runs N] [--wait futex] [--echo]

The parent sends one message of each size; the child, which is waiting for
it, takes it and answers with one byte (--echo: with the whole message,
which the parent takes as the child did); the parent times the whole round
trip. So the receive is always one that waited (the message was not there
when the call was made), which is the common case of request/response
traffic, and the copy of a large message is a visible part of the time.

Transports, interleaved (each round runs every one once per size):

* tachyon (copy out): `receive_bytes`, a `bytes` copy of the message;
* tachyon (zero-copy): `receive` and `release`, a view with no copy;
* tachyon RpcBuffer: `call`, the child's handler (given the request as
  `bytes`) returning one byte (--echo: the request);
* tachyon RpcBuffer into: the same with `call_into`, the response written
  into one `bytearray` that every call reuses;
* multiprocessing.Pipe: `send_bytes` / `recv_bytes`.

Prints p50 and p90 in microseconds (the medians over --runs) and the ratios
of tachyon's p50 to the pipe's. Asserts nothing: numbers depend on the
machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import tachyon

WAIT_NS = 30 * 10**9


def tachyon_child(name: str, copy: bool, echo: bool, ready) -> None:
    reg = tachyon.Region(name, create=False)
    ping, pong = reg.topic("ping"), reg.topic("pong")
    ready.set()
    while True:
        if copy:
            data = ping.receive_bytes(0, timeout_ns=WAIT_NS)
            size = len(data)
            if size:
                pong.send(data if echo else b"k")
        else:
            with ping.receive(0, timeout_ns=WAIT_NS) as msg:
                size = len(msg)
                if size:
                    pong.send(msg.data if echo else b"k")
        if size == 0:
            return


def rpc_child(name: str, node_size: int, echo: bool, ready, stop) -> None:
    handler = (lambda request: request) if echo else (lambda request: b"k")
    server = tachyon.RpcBuffer(name, handler=handler, node_count=4, node_size=node_size)
    ready.set()
    stop.wait()
    server.close()


def pipe_child(conn, echo: bool, ready) -> None:
    ready.set()
    while True:
        data = conn.recv_bytes()
        if not data:
            return
        conn.send_bytes(data if echo else b"k")


class Tachyon:
    def __init__(self, copy: bool, wait: str, echo: bool) -> None:
        self.copy, self.wait, self.echo = copy, wait, echo
        self.name = "tachyon " + ("(copy out)" if copy else "(zero-copy)")

    def start(self, ctx, ready):
        self.region_name = f"bench-large-{os.getpid()}"
        self.reg = tachyon.Region(self.region_name, size=64 << 20)
        self.ping = self.reg.create_topic("ping", capacity=64, wait=self.wait)
        self.pong = self.reg.create_topic("pong", capacity=64, wait=self.wait)
        return ctx.Process(target=tachyon_child, args=(self.region_name, self.copy, self.echo, ready))

    def round_trip(self, data: bytes) -> None:
        self.ping.send(data, timeout_ns=WAIT_NS)
        if self.copy:
            self.pong.receive_bytes(0, timeout_ns=WAIT_NS)
        else:
            self.pong.receive(0, timeout_ns=WAIT_NS).release()

    def stop(self) -> None:
        self.ping.send(b"", timeout_ns=WAIT_NS)

    def close(self) -> None:
        self.reg.close()
        tachyon.Region.remove(self.region_name)


class Rpc:
    name = "tachyon RpcBuffer"

    def __init__(self, largest: int, echo: bool) -> None:
        # One packet per call: a node holds the request and its header.
        self.node_size, self.echo = largest + 4096, echo

    def start(self, ctx, ready):
        self.rpc_name = f"bench-large-rpc-{os.getpid()}"
        self.stop_event = ctx.Event()
        return ctx.Process(target=rpc_child, args=(self.rpc_name, self.node_size, self.echo, ready, self.stop_event))

    def connect(self) -> None:
        self.client = tachyon.RpcBuffer(self.rpc_name, create=False)  # the owner's nodes

    def round_trip(self, data: bytes) -> None:
        self.client.call(data)

    def stop(self) -> None:
        self.client.close()
        self.stop_event.set()

    def close(self) -> None:
        pass


class RpcInto(Rpc):
    name = "tachyon RpcBuffer into"

    def connect(self) -> None:
        super().connect()
        self.buf = bytearray(self.node_size)  # one buffer for every call

    def round_trip(self, data: bytes) -> None:
        self.client.call_into(data, self.buf)


class Pipe:
    name = "multiprocessing.Pipe"

    def __init__(self, echo: bool) -> None:
        self.echo = echo

    def start(self, ctx, ready):
        self.mine, theirs = ctx.Pipe(duplex=True)
        return ctx.Process(target=pipe_child, args=(theirs, self.echo, ready))

    def round_trip(self, data: bytes) -> None:
        self.mine.send_bytes(data)
        self.mine.recv_bytes()

    def stop(self) -> None:
        self.mine.send_bytes(b"")

    def close(self) -> None:
        self.mine.close()


def run(t, sizes: list[int], rounds: int) -> dict[int, tuple[float, float]]:
    """p50 and p90 (µs) of `rounds` round trips per size, after a tenth as
    many not counted."""
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = t.start(ctx, ready)
    child.start()
    out = {}
    try:
        if not ready.wait(120):
            raise RuntimeError(f"{t.name}: the child did not start")
        if hasattr(t, "connect"):
            t.connect()
        clock = time.perf_counter_ns
        for size in sizes:
            data = os.urandom(size)
            for _ in range(rounds // 10):
                t.round_trip(data)
            times = []
            for _ in range(rounds):
                start = clock()
                t.round_trip(data)
                times.append(clock() - start)
            times.sort()
            out[size] = (times[len(times) // 2] / 1000, times[len(times) * 9 // 10] / 1000)
        t.stop()
    finally:
        child.join(timeout=120)
        if child.is_alive():
            child.kill()
        t.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="65536,262144,1048576",
                        help="message sizes in bytes, comma-separated, 1 to 1048576")
    parser.add_argument("--rounds", type=int, default=2000, help="round trips per size, transport and run")
    parser.add_argument("--runs", type=int, default=3, help="runs per transport, interleaved (medians shown)")
    parser.add_argument("--wait", default="futex", choices=["spin", "hybrid", "futex"],
                        help="the topics' waiting (default futex: the receiver sleeps, as the pipe's does)")
    parser.add_argument("--echo", action="store_true", help="answer with the whole message, not one byte")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not all(1 <= s <= 1 << 20 for s in sizes):
        parser.error("sizes must be 1 to 1048576")

    transports = [
        Tachyon(copy=True, wait=args.wait, echo=args.echo),
        Tachyon(copy=False, wait=args.wait, echo=args.echo),
        Rpc(max(sizes), echo=args.echo),
        RpcInto(max(sizes), echo=args.echo),
        Pipe(echo=args.echo),
    ]
    runs: dict[str, list[dict[int, tuple[float, float]]]] = {t.name: [] for t in transports}
    for _ in range(args.runs):
        for t in transports:
            runs[t.name].append(run(t, sizes, args.rounds))

    def median(name: str, size: int, i: int) -> float:
        values = sorted(r[size][i] for r in runs[name])
        return values[len(values) // 2]

    print(f"{'transport':<24} {'size B':>9} {'p50 us':>9} {'p90 us':>9}   (p50 of each run)")
    for t in transports:
        for size in sizes:
            each = ", ".join(f"{r[size][0]:.1f}" for r in runs[t.name])
            print(f"{t.name:<24} {size:>9} {median(t.name, size, 0):>9.1f} {median(t.name, size, 1):>9.1f}   ({each})")
    print("\nratios: the pipe's p50 / tachyon's (higher is faster)")
    for t in transports[:-1]:
        print(f"  {t.name:<22}" + "".join(
            f"  {size} B {median(Pipe.name, size, 0) / median(t.name, size, 0):5.2f}x" for size in sizes))
    answer = "the whole message" if args.echo else "one byte"
    print(f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; waits: {args.wait}; answer: {answer}")


if __name__ == "__main__":
    main()
