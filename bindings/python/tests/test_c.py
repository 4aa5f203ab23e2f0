"""Python and C on one region: the C peer (tests/c/c_peer.c) is compiled
against include/tachyon/tachyon.h and libtachyon (crates/tachyon-ffi)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

import tachyon

from conftest import ROOT

BOUND = 60


@pytest.fixture(scope="session")
def c_peer(tmp_path_factory) -> str:
    """Builds libtachyon (debug) and the C peer; the peer finds the library
    through its run path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (cc) is needed for the Python <-> C tests"
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    subprocess.run(["cargo", "build", "-q", "-p", "tachyon-ffi"], cwd=ROOT, check=True, timeout=900)
    lib = target / "debug"
    assert (lib / "libtachyon.so").exists(), f"no libtachyon.so in {lib}"
    out = tmp_path_factory.mktemp("c") / "c_peer"
    src = pathlib.Path(__file__).resolve().parent / "c" / "c_peer.c"
    subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", str(src), "-I", str(ROOT / "include"),
         "-L", str(lib), "-ltachyon", f"-Wl,-rpath,{lib}", "-o", str(out)],
        check=True,
        timeout=300,
    )
    return str(out)


def test_c_producer_python_consumer(region, region_name, c_peer):
    topic = region.create_topic("orders", partitions=4)
    c = subprocess.run([c_peer, "send", region_name, "orders", "200"], capture_output=True, text=True,
                       timeout=BOUND)
    assert c.returncode == 0, c.stderr
    # The producer has exited; the region kept its messages. The C
    # library's README snippet, unchanged, reads them in Python.
    got = {}
    for p in range(topic.partitions):
        while (msg := topic.try_receive(p)) is not None:
            with msg:
                text = bytes(msg.data).decode()
                key = int(text.removeprefix("c-"))
                assert topic.partition_of(key) == p
                got.setdefault(p, []).append(key)
    assert sorted(k for keys in got.values() for k in keys) == list(range(200))
    for keys in got.values():
        assert keys == sorted(keys), "per-key (here per-partition) order kept"


def test_python_producer_c_consumer(region, region_name, c_peer):
    topic = region.create_topic("orders", partitions=2)
    c = subprocess.Popen([c_peer, "receive", region_name, "orders", "100"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        for i in range(100):
            text = f"py-{i}".encode()
            if i % 2:
                topic.send(text, key=i)
            else:
                with topic.loan(len(text)) as loan:
                    loan.data[:] = text
                    loan.publish(len(text), key=i)
    finally:
        out, err = c.communicate(timeout=BOUND)
    assert c.returncode == 0, err
    lines = [line.split(" ", 1) for line in out.splitlines()]
    keys = [int(text.removeprefix("py-")) for _, text in lines]
    assert sorted(keys) == list(range(100))
    for p, text in lines:
        assert topic.partition_of(int(text.removeprefix("py-"))) == int(p)


def test_the_readme_snippet_reads_what_c_published(region, region_name, c_peer):
    region.create_topic("orders", partitions=8)
    c = subprocess.run([c_peer, "send", region_name, "orders", "8"], capture_output=True, text=True, timeout=BOUND)
    assert c.returncode == 0, c.stderr
    reg = tachyon.Region(region_name, create=False)
    topic = reg.topic("orders")
    partition = topic.partition_of(3)
    msg = topic.receive(partition=partition, timeout_ns=-1)
    assert bytes(msg.data).startswith(b"c-")
    msg.release()
