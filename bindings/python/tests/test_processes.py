"""Across processes: multiprocessing (spawn) and subprocess; a SIGKILLed
consumer's message recovered; Ctrl+C during a blocking receive; the GIL
released while a receive waits. Every wait is bounded; no time is asserted."""

from __future__ import annotations

import multiprocessing
import signal
import textwrap
import threading

import pytest

import peers
import tachyon
from conftest import interrupt, run_python

SECOND = 1_000_000_000
#: The longest any step of these tests may take before it counts as hung.
BOUND = 60


def test_python_to_python_multiprocessing(region, region_name):
    region.create_topic("t", partitions=4, capacity=64)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    count = 500
    consumer = ctx.Process(target=peers.consume, args=(region_name, "t", count, results))
    producer = ctx.Process(target=peers.produce, args=(region_name, "t", count))
    consumer.start()
    producer.start()
    try:
        assert results.get(timeout=BOUND) == list(range(count))
    finally:
        for p in (producer, consumer):
            p.join(timeout=BOUND)
            if p.is_alive():
                p.kill()
    assert producer.exitcode == 0 and consumer.exitcode == 0


def test_subprocess_consumer(region, region_name):
    topic = region.create_topic("t")
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic("t")
            for _ in range(3):
                with topic.receive(0, timeout_ns=30 * 10**9) as msg:
                    print(bytes(msg.data).decode(), flush=True)
            """
        )
    )
    for word in ("one", "two", "three"):
        topic.send(word.encode())
    out, err = child.communicate(timeout=BOUND)
    assert child.returncode == 0, err
    assert out.split() == ["one", "two", "three"]


def test_sigkilled_consumer_message_is_redelivered(region, region_name):
    """A consumer that dies (SIGKILL) holding a message of an at-least-once
    topic: the message is delivered again to the next consumer."""
    topic = region.create_topic("t", at_least_once=True)
    topic.send(b"precious")
    child = run_python(
        textwrap.dedent(
            f"""
            import sys, time, tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic("t")
            msg = topic.receive(0, timeout_ns=30 * 10**9)
            print(bytes(msg.data).decode(), flush=True)
            time.sleep(60)   # holds the message until killed
            """
        )
    )
    try:
        assert child.stdout.readline().strip() == "precious"
    finally:
        child.kill()
        child.wait(timeout=BOUND)
    assert child.returncode == -signal.SIGKILL
    # The receive's wait runs recovery, which finds the dead holder.
    with topic.receive(0, timeout_ns=BOUND * SECOND) as msg:
        assert bytes(msg.data) == b"precious"
    assert region.recover().total == 0


def test_ctrl_c_interrupts_blocking_receive(region, region_name):
    region.create_topic("t")
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            topic = tachyon.Region({region_name!r}, create=False).topic("t")
            print("waiting", flush=True)
            topic.receive(partition=0, timeout_ns=-1)
            print("received?!", flush=True)
            """
        )
    )
    try:
        assert child.stdout.readline().strip() == "waiting"
        out, err = interrupt(child, BOUND)
    finally:
        if child.poll() is None:
            child.kill()
    assert "KeyboardInterrupt" in err
    assert "received?!" not in out
    assert child.returncode != 0


def test_gil_released_while_receive_waits(region):
    """A thread blocked in receive(timeout_ns=-1) lets the main thread run:
    the main thread does its work while the receive is still waiting, then
    sends the message that ends it."""
    topic = region.create_topic("t")
    started = threading.Event()
    got = []

    def receiver():
        started.set()
        with topic.receive(0, timeout_ns=BOUND * SECOND) as msg:
            got.append(bytes(msg.data))

    thread = threading.Thread(target=receiver)
    thread.start()
    assert started.wait(timeout=BOUND)
    # Make sure the receiver is inside the blocking call: its partition
    # stays empty until we send.
    threading.Event().wait(0.2)
    total = 0
    for i in range(200_000):  # pure-Python work: needs the GIL
        total += i
    still_waiting = thread.is_alive() and not got
    topic.send(b"done")
    thread.join(timeout=BOUND)
    assert still_waiting, "the main thread could not run while receive waited"
    assert got == [b"done"] and total > 0


@pytest.mark.parametrize("wait", ["spin", "futex", "hybrid"])
def test_wait_policies_across_threads(region, wait):
    topic = region.create_topic("t-" + wait, wait=wait)
    out = []

    def receiver():
        for _ in range(100):
            with topic.receive(0, timeout_ns=BOUND * SECOND) as msg:
                out.append(bytes(msg.data))

    thread = threading.Thread(target=receiver)
    thread.start()
    for i in range(100):
        topic.send(str(i).encode())
    thread.join(timeout=BOUND)
    assert out == [str(i).encode() for i in range(100)]
