"""Shared fixtures: unique region names (removed afterwards), the Rust peer
binary, and a Python interpreter for subprocesses."""

from __future__ import annotations

import itertools
import os
import pathlib
import signal
import subprocess
import sys

import pytest

import tachyon

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))

_counter = itertools.count()


def unique_name(stem: str) -> str:
    return f"pytest-{stem}-{os.getpid()}-{next(_counter)}"


@pytest.fixture
def region_name(request):
    name = unique_name(request.node.name.replace("[", "-").replace("]", "")[:40])
    yield name
    try:
        tachyon.Region.remove(name)
    except tachyon.NotFound:
        pass


@pytest.fixture
def region(region_name):
    with tachyon.Region(region_name, size=16 << 20, ring_arena=1 << 20) as reg:
        yield reg


@pytest.fixture(scope="session")
def bus_peer() -> str:
    """The Rust peer (crates/tachyon/examples/bus_peer.rs): $TACHYON_BUS_PEER,
    or built here with cargo (debug, as `cargo test` leaves it)."""
    path = os.environ.get("TACHYON_BUS_PEER")
    if path:
        return path
    built = ROOT / "target" / "debug" / "examples" / "bus_peer"
    subprocess.run(
        ["cargo", "build", "-q", "-p", "tachyon-shm", "--example", "bus_peer"],
        cwd=ROOT,
        check=True,
        timeout=900,
    )
    return str(built)


def run_python(code: str, **kwargs) -> subprocess.Popen:
    """Starts `python -c code` with this interpreter, pipes for its output."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def outcome(child: subprocess.Popen, bound: float) -> tuple[str, str]:
    """`child`'s output once it exits, within `bound` seconds; killed if it
    has not by then (a hang is then the test's failure, not the run's)."""
    try:
        return child.communicate(timeout=bound)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=bound)


def interrupt(child: subprocess.Popen, bound: float) -> tuple[str, str]:
    """Sends SIGINT to `child` every 0.1 s until it exits (whether the
    signal comes before or inside the blocking call, it must end the
    process with KeyboardInterrupt), at most `bound` seconds; returns its
    output. The caller kills it if it is still running afterwards."""
    for _ in range(int(bound * 10)):
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
    return child.communicate(timeout=bound)
