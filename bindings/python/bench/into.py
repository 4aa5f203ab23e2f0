"""Large responses and items into an array the caller has already.

    python bindings/python/bench/into.py [--size 1048576] [--rounds N] [--runs N]

A program that keeps its data in a NumPy array (a tensor, a frame) wants a
response or an item there, not in a new `bytes` object. Two ways, timed
against each other, interleaved:

* `RpcBuffer`: a child process answers every call with the same `--size`
  bytes (the channel's nodes hold it: one packet); the parent takes the
  response with `call` and copies it into its array (`np.copyto` of an
  `np.frombuffer` view), or with `call_into` straight into the array;
* `CircularBuffer`: an item of `--size` bytes is written before each
  timed read (untimed, in this process: the read finds it there, so that
  what is timed is the read and not a writer's pace); the read takes it
  with `read` and copies it into the array, or with `read_into`.

Prints p50 and p90 in microseconds per call or item (the medians over
--runs). Asserts nothing: numbers depend on the machine and on what else
runs on it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

import tachyon

WAIT_NS = 30 * 10**9


def rpc_child(name: str, size: int, ready, stop) -> None:
    payload = os.urandom(size)
    server = tachyon.RpcBuffer(name, handler=lambda request: payload, node_count=4, node_size=size + 4096)
    ready.set()
    stop.wait()
    server.close()


def timed(f, rounds: int, before=None) -> tuple[float, float]:
    """p50 and p90 (µs) of `rounds` calls of f, after a tenth as many;
    `before` (untimed) runs before each."""
    times = []
    clock = time.perf_counter_ns
    for i in range(rounds + rounds // 10):
        if before is not None:
            before()
        start = clock()
        f()
        if i >= rounds // 10:
            times.append(clock() - start)
    times.sort()
    return times[len(times) // 2] / 1000, times[len(times) * 9 // 10] / 1000


def rpc_run(ctx, size: int, rounds: int) -> dict[str, tuple[float, float]]:
    name = f"bench-into-rpc-{os.getpid()}"
    ready, stop = ctx.Event(), ctx.Event()
    child = ctx.Process(target=rpc_child, args=(name, size, ready, stop))
    child.start()
    out = {}
    try:
        if not ready.wait(120):
            raise RuntimeError("the RPC child did not start")
        with tachyon.RpcBuffer(name, create=False) as client:
            arr = np.empty(size, dtype=np.uint8)
            out["RpcBuffer call + copyto"] = timed(
                lambda: np.copyto(arr, np.frombuffer(client.call(b"x"), dtype=np.uint8)), rounds)
            out["RpcBuffer call_into"] = timed(lambda: client.call_into(b"x", arr), rounds)
    finally:
        stop.set()
        child.join(timeout=120)
        if child.is_alive():
            child.kill()
    return out


def ring_run(_ctx, size: int, rounds: int) -> dict[str, tuple[float, float]]:
    name = f"bench-into-ring-{os.getpid()}"
    ring = tachyon.CircularBuffer(name, node_count=2, node_size=size)
    arr = np.empty(size, dtype=np.uint8)
    item = os.urandom(size)

    def write() -> None:
        ring.write(item, timeout_ns=0)

    return {
        "CircularBuffer read + copyto": timed(
            lambda: np.copyto(arr, np.frombuffer(ring.read(timeout_ns=0), dtype=np.uint8)), rounds, write),
        "CircularBuffer read_into": timed(lambda: ring.read_into(arr, timeout_ns=0), rounds, write),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20, help="bytes per response and item, 1 to 1048576")
    parser.add_argument("--rounds", type=int, default=2000, help="calls or items per way and run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, interleaved (medians shown)")
    args = parser.parse_args()
    if not 1 <= args.size <= 1 << 20:
        parser.error("--size must be 1 to 1048576")
    ctx = mp.get_context("spawn")
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.runs):
        for run in (rpc_run, ring_run):
            for way, figures in run(ctx, args.size, args.rounds).items():
                runs.setdefault(way, []).append(figures)

    def median(way: str, i: int) -> float:
        values = sorted(r[i] for r in runs[way])
        return values[len(values) // 2]

    print(f"{'way (tachyon)':<30} {'p50 us':>9} {'p90 us':>9}   (p50 of each run)")
    for way in runs:
        each = ", ".join(f"{r[0]:.1f}" for r in runs[way])
        print(f"{way:<30} {median(way, 0):>9.1f} {median(way, 1):>9.1f}   ({each})")
    print("\nratios: the copy's p50 / the _into's (higher: _into faster)")
    for kind, copied, into in (("RpcBuffer", "call + copyto", "call_into"),
                               ("CircularBuffer", "read + copyto", "read_into")):
        ratio = median(f"{kind} {copied}", 0) / median(f"{kind} {into}", 0)
        print(f"  {kind:<16} {ratio:5.2f}x")
    print(f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; {args.size} bytes")


if __name__ == "__main__":
    main()
