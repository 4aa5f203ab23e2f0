"""Python and Rust on one region: the Rust peer is
crates/tachyon/examples/bus_peer.rs. (Python and C: tests/test_c.py.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import tachyon

SECOND = 1_000_000_000
BOUND = 60


def test_rust_producer_python_consumer(region, region_name, bus_peer):
    topic = region.create_topic("t", partitions=4)
    rust = subprocess.Popen([bus_peer, "send", region_name, "t", "100"], stderr=subprocess.PIPE, text=True)
    got = set()
    try:
        while len(got) < 100:
            for p in range(topic.partitions):
                msg = topic.try_receive(p)
                if msg is not None:
                    with msg:
                        text = bytes(msg.data).decode()
                        key = int(text.removeprefix("rust-"))
                        assert topic.partition_of(key) == p
                        got.add(key)
            if len(got) < 100:
                try:
                    with topic.receive(0, timeout_ns=10_000_000) as msg:
                        got.add(int(bytes(msg.data).decode().removeprefix("rust-")))
                except tachyon.TimeoutError:
                    assert rust.poll() in (None, 0), rust.stderr.read()
    finally:
        _, err = rust.communicate(timeout=BOUND)
    assert rust.returncode == 0, err
    assert got == set(range(100))


def test_python_producer_rust_consumer(region, region_name, bus_peer):
    topic = region.create_topic("t", partitions=2)
    rust = subprocess.Popen(
        [bus_peer, "receive", region_name, "t", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for i in range(50):
        if i % 2:
            topic.send(f"py-{i}".encode(), key=i)
        else:
            text = f"py-{i}".encode()
            loan = topic.loan(len(text))
            loan.data[:] = text
            loan.publish(key=i)
    out, err = rust.communicate(timeout=BOUND)
    assert rust.returncode == 0, err
    lines = [line.split(" ", 1) for line in out.splitlines()]
    assert sorted(int(text.removeprefix("py-")) for _, text in lines) == list(range(50))
    for p, text in lines:
        assert topic.partition_of(int(text.removeprefix("py-"))) == int(p)


def test_readme_snippet_against_rust_region(region_name, bus_peer):
    """The C library README's Python snippet, unchanged but for the
    region's name, on a region and topic a Rust process made."""
    try:
        subprocess.run([bus_peer, "create", region_name, "orders", "8"], check=True, timeout=BOUND)
        snippet = textwrap.dedent(
            """
            import tachyon
            reg   = tachyon.Region("demo", create=False)
            topic = reg.topic("orders")
            msg = topic.receive(partition=3, timeout_ns=-1)
            print(bytes(msg.data))      # memoryview over shared memory
            msg.release()
            """
        ).replace('"demo"', repr(region_name))
        done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=BOUND)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "b'ready'"
    finally:
        try:
            tachyon.Region.remove(region_name)
        except tachyon.NotFound:
            pass


def test_shared_array_written_by_rust(bus_peer):
    """A Rust SharedArray<f64> is a Python "float64" one: Rust writes it
    under the lock, numpy reads it in place."""
    import numpy as np

    from conftest import unique_name

    name = unique_name("array")
    arr = tachyon.SharedArray(name, 6, "float64")
    done = subprocess.run([bus_peer, "array", name, "-", "3"], capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    with arr.read_lock():
        assert np.asarray(arr).tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
