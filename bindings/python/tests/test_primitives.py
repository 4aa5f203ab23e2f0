"""SharedArray, CircularBuffer and RpcBuffer, in one process and across
processes."""

from __future__ import annotations

import contextlib
import multiprocessing
import subprocess
import textwrap
import threading

import numpy as np
import pytest

import tachyon
from conftest import interrupt, outcome, run_python, unique_name

BOUND = 60
SECOND = 1_000_000_000


@pytest.fixture
def name():
    return unique_name("prim")


def test_shared_array_numpy_without_copy(name):
    arr = tachyon.SharedArray(name, 8, "float64")
    view = np.asarray(arr)
    assert view.dtype == np.float64 and view.shape == (8,) and view.flags.writeable
    with arr.lock():
        view[:] = np.arange(8)
    other = tachyon.SharedArray(name, create=False, dtype="float64")
    assert len(other) == 8 and other.dtype == "float64"
    assert np.asarray(other).tolist() == list(range(8))  # the same memory
    np.asarray(other)[0] = 42
    assert view[0] == 42
    assert arr.data.format == "d" and arr.data.itemsize == 8


def test_shared_array_dtypes_and_errors(name):
    for i, dtype in enumerate(["uint8", "int16", "uint32", "int64", "float32"]):
        a = tachyon.SharedArray(f"{name}-{i}", 3, dtype)
        assert np.asarray(a).dtype == np.dtype(dtype)
    with pytest.raises(ValueError):
        tachyon.SharedArray(name, 3, "complex")
    with pytest.raises(tachyon.NotFound):
        tachyon.SharedArray(name + "-none", create=False)
    kept = tachyon.SharedArray(name, 4, "int32")  # removed when its last user closes it
    for other in ("float64", "float32", "uint32"):
        with pytest.raises(tachyon.TypeMismatch):
            tachyon.SharedArray(name, create=False, dtype=other)
    assert len(kept) == 4


def test_shared_array_lock_excludes(name):
    arr = tachyon.SharedArray(name, 1, "int64")
    held = arr.lock()
    held.acquire()
    with pytest.raises(tachyon.TimeoutError):
        with arr.read_lock(timeout_ns=10_000_000):
            pass
    held.release()
    with arr.read_lock(timeout_ns=SECOND), arr.read_lock(timeout_ns=SECOND):
        pass  # readers share


def _add_one_thousand_times(name: str) -> None:
    arr = tachyon.SharedArray(name, create=False, dtype="int64")
    view = np.asarray(arr)
    for _ in range(1000):
        with arr.lock():
            view[0] += 1


def test_shared_array_across_processes(name):
    arr = tachyon.SharedArray(name, 1, "int64")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_one_thousand_times, args=(name,)) for _ in range(2)]
    for p in procs:
        p.start()
    _add_one_thousand_times(name)
    for p in procs:
        p.join(timeout=BOUND)
        assert p.exitcode == 0
    with arr.read_lock():
        assert np.asarray(arr)[0] == 3000


def test_circular_buffer(name):
    ring = tachyon.CircularBuffer(name, node_count=4, node_size=16)
    peer = tachyon.CircularBuffer(name, create=False)
    assert (peer.node_count, peer.node_size) == (4, 16)
    ring.write(b"one")
    ring.write(bytearray(b"two"))
    assert len(peer) == 2
    assert peer.read(timeout_ns=SECOND) == b"one"
    assert peer.try_read() == b"two"
    assert peer.try_read() is None
    with pytest.raises(tachyon.TimeoutError):
        peer.read(timeout_ns=10_000_000)
    with pytest.raises(tachyon.MessageTooLarge):
        ring.write(bytes(17))
    for _ in range(4):
        ring.write(b"x", timeout_ns=0)
    with pytest.raises((tachyon.TimeoutError, tachyon.Full)):
        ring.write(b"x", timeout_ns=10_000_000)


def test_circular_buffer_with_light_handovers(name):
    ring = tachyon.CircularBuffer(name, node_count=8, node_size=16, light_handovers=True)
    peer = tachyon.CircularBuffer(name, create=False)
    assert ring.light_handovers and peer.light_handovers
    for i in range(100):
        ring.write(b"%d" % i)
        assert peer.read(timeout_ns=SECOND) == b"%d" % i
    with pytest.raises(tachyon.Incompatible):
        tachyon.CircularBuffer(name, node_count=8, node_size=16, light_handovers=False)
    assert not tachyon.CircularBuffer(name + "-plain", node_count=2, node_size=8).light_handovers


def test_circular_buffer_across_processes(name):
    ring = tachyon.CircularBuffer(name, node_count=8, node_size=64)
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            ring = tachyon.CircularBuffer({name!r}, create=False)
            for i in range(100):
                ring.write(str(i).encode(), timeout_ns=30 * 10**9)
            """
        )
    )
    got = [ring.read(timeout_ns=BOUND * SECOND).decode() for _ in range(100)]
    _, err = child.communicate(timeout=BOUND)
    assert child.returncode == 0, err
    assert got == [str(i) for i in range(100)]


def test_circular_buffer_batch_reads_across_processes(name):
    # A handle's option, off by default and not the ring's; a child
    # process's stream, read in batches, arrives whole and in order.
    ring = tachyon.CircularBuffer(name, node_count=256, node_size=64, batch_reads=True)
    assert ring.batch_reads and not tachyon.CircularBuffer(name, create=False).batch_reads
    count = 20_000
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            ring = tachyon.CircularBuffer({name!r}, create=False)
            for i in range({count}):
                ring.write(i.to_bytes(8, "little") * 8, timeout_ns=30 * 10**9)
            """
        )
    )
    got = [ring.read(timeout_ns=BOUND * SECOND) for _ in range(count)]
    _, err = child.communicate(timeout=BOUND)
    assert child.returncode == 0, err
    assert got == [i.to_bytes(8, "little") * 8 for i in range(count)]


def test_rpc_with_python_handler(name):
    calls = []

    def handler(request: bytes) -> bytes:
        calls.append(threading.current_thread().name)
        if request == b"fail":
            raise KeyError("no such thing")
        return request.upper()

    with tachyon.RpcBuffer(name, handler=handler) as server:
        assert server.is_owner
        with tachyon.RpcBuffer(name, create=False) as client:
            assert client.call(b"hello") == b"HELLO"
            assert client.call(memoryview(b"abc")) == b"ABC"
            with pytest.raises(tachyon.RemoteError, match="KeyError"):
                client.call(b"fail")
            assert calls


def test_rpc_calls_from_many_threads_and_a_close_among_them(name):
    """Several Python threads call through one RpcBuffer at once (its own
    handler, in this process, takes the GIL too), then one thread closes it
    while the others still call. Until 2026-12-07 two threads calling at
    once hung both: one held the handle's lock without the GIL, the other
    waited for the lock with it. Run in a child, so that a hang is a
    timeout here rather than a test run that never ends (a thread stuck
    with the GIL would stop this process's own bounded joins)."""
    child = run_python(
        textwrap.dedent(
            f"""
            import threading, tachyon
            server = tachyon.RpcBuffer({name!r}, handler=lambda req: req[::-1])
            client = tachyon.RpcBuffer({name!r}, create=False)

            def calls(tag, n):
                for i in range(n):
                    msg = b"%d-%d" % (tag, i) * 7
                    assert client.call(msg) == msg[::-1]
                    assert client.call(bytearray(msg)) == msg[::-1]

            threads = [threading.Thread(target=calls, args=(t, 300)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("calls done", flush=True)

            ended = []
            def until_closed(tag):
                try:
                    while True:
                        client.call(b"%d" % tag)
                except (ValueError, tachyon.Closed, tachyon.PeerDied) as e:
                    ended.append(type(e).__name__)

            threads = [threading.Thread(target=until_closed, args=(t,)) for t in range(3)]
            for t in threads:
                t.start()
            threading.Event().wait(0.05)
            client.close()
            for t in threads:
                t.join()
            server.close()
            print("closed", sorted(set(ended)), len(ended), flush=True)
            """
        )
    )
    out, err = outcome(child, BOUND)
    assert child.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "calls done" and lines[1].startswith("closed") and lines[1].endswith(" 3"), out


def test_rpc_responses_read_in_place_are_exact_while_threads_want_the_gil(name):
    """A caller reads its response for itself, without the GIL, and copies
    one that fits a packet from its ring node into the bytes object, the
    GIL taken back meanwhile while it holds the node (since 2026-12-07;
    before, the reader thread copied it into a buffer first). Sizes on
    both sides of a packet's room (one packet, several), from three
    threads at once while a fourth spins in Python and the handler (in
    this process too) needs the GIL: every response exact, in a child, so
    that a hang is a timeout here."""
    child = run_python(
        textwrap.dedent(
            f"""
            import sys, threading, tachyon
            sys.setswitchinterval(0.0005)  # hand the GIL on often: more of it, sooner
            server = tachyon.RpcBuffer({name!r}, handler=lambda req: req[::-1] + b"!")
            client = tachyon.RpcBuffer({name!r}, create=False)
            sizes = [0, 1, 4000, 4040, 4050, 4060, 4070, 4096, 5000, 3 * 4096 + 7, 1 << 16]
            base = bytes(range(251)) * 300
            stop = False

            def spin():
                n = 0
                while not stop:
                    n += 1

            def calls(tag):
                for i in range(40):
                    for size in sizes:
                        msg = (bytes([tag, i]) + base[i:])[:size]
                        got = client.call(msg)
                        assert got == msg[::-1] + b"!", (tag, i, size, len(got))

            spinner = threading.Thread(target=spin)
            spinner.start()
            threads = [threading.Thread(target=calls, args=(t,)) for t in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            stop = True
            spinner.join()
            client.close()
            server.close()
            print("exact", flush=True)
            """
        )
    )
    out, err = outcome(child, BOUND)
    assert child.returncode == 0, err
    assert out.strip() == "exact", out


def test_rpc_handler_threads_keep_their_python_thread_state(name):
    """The handler runs on the RPC end's threads, each with one Python
    thread state for its whole life (made when the thread starts), not one
    made and deleted per call: so `threading.local` data a handler keeps
    (a connection, a cache) is there at its thread's next call, and a
    call does not pay for a thread state (a 64-byte call in one process
    took 20 – 50 µs that way, 2 – 8 now)."""
    local = threading.local()
    seen = []

    def handler(req):
        local.calls = getattr(local, "calls", 0) + 1
        seen.append((threading.get_ident(), local.calls))
        return req

    with tachyon.RpcBuffer(name, handler=handler) as server, tachyon.RpcBuffer(name, create=False) as client:
        for i in range(50):
            assert client.call(b"%d" % i) == b"%d" % i
    del server, client
    by_thread = {}
    for ident, calls in seen:
        by_thread.setdefault(ident, []).append(calls)
    # Each thread's count goes 1, 2, 3, ...: its thread-local data stayed.
    for ident, counts in by_thread.items():
        assert counts == list(range(1, len(counts) + 1)), (ident, counts)
    assert max(len(c) for c in by_thread.values()) > 1, by_thread


def test_rpc_stays_out_of_an_exiting_interpreter(name):
    """Once the interpreter exits (its atexit functions have run), no
    thread enters it from Rust: a Python handler's request is refused (the
    caller gets RemoteError), and a caller that reads its own response
    raises RuntimeError rather than taking the GIL back for the copy. A
    thread that entered CPython after it finalized found no interpreter
    and crashed the process at exit (seen with calls in flight on daemon
    threads). Here `atexit._run_exitfuncs()` stands for the exit, in a
    child; the server that answers the second call is a grandchild, so
    that its handler is not this interpreter's."""
    server_code = textwrap.dedent(
        f"""
        import sys, tachyon
        s = tachyon.RpcBuffer({name!r} + "-there", handler=lambda req: req.upper(), wait="spin")
        print("ready", flush=True)
        sys.stdin.read()
        s.close()
        """
    )
    child = run_python(
        textwrap.dedent(
            f"""
            import atexit, subprocess, sys, tachyon
            here = tachyon.RpcBuffer({name!r} + "-here", handler=lambda req: req.upper())
            client = tachyon.RpcBuffer({name!r} + "-here", create=False)
            assert client.call(b"before") == b"BEFORE"
            server = subprocess.Popen([sys.executable, "-c", {server_code!r}],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert server.stdout.readline().strip() == "ready"
            there = tachyon.RpcBuffer({name!r} + "-there", create=False, wait="spin")
            assert there.call(b"before") == b"BEFORE"
            atexit._run_exitfuncs()
            try:
                client.call(b"after")
                print("handler entered", flush=True)
            except tachyon.RemoteError as e:
                assert "exiting" in str(e), e
            try:
                there.call(b"after")
                print("copy entered", flush=True)
            except RuntimeError as e:
                assert "exiting" in str(e), e
            there.close()
            server.stdin.close()
            assert server.wait(timeout=20) == 0
            client.close()
            here.close()
            print("stayed out", flush=True)
            """
        )
    )
    out, err = outcome(child, BOUND)
    assert child.returncode == 0, err
    assert out.strip() == "stayed out", out


def test_rpc_calls_in_flight_at_exit_end_the_process_cleanly(name):
    """Four daemon threads calling an RPC end of this process in a loop
    while the main thread exits: every run exits with 0, however the exit
    meets the calls (their handlers, their own reads of responses). Before
    the interpreter's exit was marked, a few runs in a hundred crashed."""
    for run in range(6):
        child = run_python(
            textwrap.dedent(
                f"""
                import threading, time, tachyon
                server = tachyon.RpcBuffer({name!r} + "-{run}", handler=lambda req: req)
                client = tachyon.RpcBuffer({name!r} + "-{run}", create=False)

                def loop():
                    try:
                        while True:
                            client.call(b"x" * 100)
                    except Exception:
                        pass

                for _ in range(4):
                    threading.Thread(target=loop, daemon=True).start()
                time.sleep(0.1)
                """
            )
        )
        out, err = outcome(child, BOUND)
        assert child.returncode == 0, (run, child.returncode, err)


def test_rpc_handler_waits_for_room_without_the_gil(name):
    """A Python handler's response waits for room in a full ring without
    the GIL: the rest of the process runs meanwhile. The client (a child)
    is stopped with SIGSTOP while the handler runs, and two notifications
    fill the ring its responses go out in; the handler then returns. Only
    if this process's main thread can run during that wait does it send
    SIGCONT in time: a wait with the GIL held would last until the
    server's 3 s timeout, the response would be dropped, and the child's
    call would fail."""
    import os
    import signal

    entered, gate = threading.Event(), threading.Event()

    def handler(request: bytes) -> bytes:
        entered.set()
        gate.wait(BOUND)
        return request.upper()

    server = tachyon.RpcBuffer(name, handler=handler, node_count=2, timeout_ns=3 * SECOND)
    child = run_python(
        textwrap.dedent(
            f"""
            import tachyon
            client = tachyon.RpcBuffer({name!r}, create=False, node_count=2, timeout_ns=20 * 10**9)
            print("answer", client.call(b"wait for me"), flush=True)
            """
        ),
    )
    try:
        assert entered.wait(BOUND), "the request never reached the handler"
        child.send_signal(signal.SIGSTOP)
        server.notify(b"one")
        server.notify(b"two")  # the ring to the client is full now
        gate.set()  # the handler returns; its response waits for room
        threading.Event().wait(0.3)
        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=BOUND)
    finally:
        gate.set()
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.communicate(timeout=BOUND)
        server.close()
    assert child.returncode == 0, err
    assert out.strip() == "answer b'WAIT FOR ME'", out


@contextlib.contextmanager
def rpc_server_child(name, options=""):
    """A child process that owns RpcBuffer `name` (made with `options`,
    keyword arguments as Python source) and answers each request
    reversed, until the block ends; its exit status is checked then."""
    child = run_python(
        textwrap.dedent(
            f"""
            import sys, tachyon
            server = tachyon.RpcBuffer({name!r}, handler=lambda req: req[::-1], {options})
            print("ready", flush=True)
            sys.stdin.readline()   # serve until told to stop
            server.close()
            """
        ),
        stdin=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        yield
    finally:
        child.stdin.write("stop\n")
        child.stdin.flush()
        child.communicate(timeout=BOUND)
    assert child.returncode == 0


def test_rpc_across_processes(name):
    with rpc_server_child(name):
        with tachyon.RpcBuffer(name, create=False) as client:
            assert client.call(b"stressed") == b"desserts"


def test_rpc_call_into_writes_the_response_into_the_callers_buffer(name):
    """call_into across processes (the child answers reversed), through the
    default nodes of 4096 bytes: one-packet responses read in their node,
    and responses of several packets, reassembled first. The bytes land at
    the start of the buffer and nothing after them changes; a buffer of
    any dtype takes raw bytes; a response too long for the buffer comes
    whole in BufferTooSmall.response, and the channel goes on."""
    with rpc_server_child(name):
        with tachyon.RpcBuffer(name, create=False) as client:
            buf = bytearray(b"\xee" * 300_000)
            for size in (0, 1, 4064, 4065, 65_536, 200_000):
                msg = bytes(i % 251 for i in range(size))
                assert client.call_into(msg, buf) == size
                assert buf[:size] == msg[::-1] and buf[size:size + 7] == b"\xee" * 7, size
                buf[:size] = b"\xee" * size
            floats = np.zeros(4, dtype=np.float64)
            assert client.call_into(np.arange(4, dtype=np.float64).tobytes()[::-1], floats) == 32
            assert floats.tolist() == [0.0, 1.0, 2.0, 3.0]
            view = memoryview(bytearray(8))
            assert client.call_into(b"abc", view[2:]) == 3 and bytes(view) == b"\0\0cba\0\0\0"
            for size in (9, 5000):  # one packet, several
                msg = bytes(range(256)) * (size // 256) + bytes(size % 256)
                with pytest.raises(tachyon.BufferTooSmall, match=f"{size}") as raised:
                    client.call_into(msg, bytearray(8))
                assert raised.value.response == msg[::-1]
            assert client.call(b"still here") == b"ereh llits"


def test_rpc_call_into_refuses_a_buffer_it_cannot_write_before_it_sends(name):
    calls = []
    with tachyon.RpcBuffer(name, handler=lambda req: calls.append(req) or req) as server:
        with tachyon.RpcBuffer(name, create=False) as client:
            for readonly in (bytes(8), memoryview(bytes(8)), np.frombuffer(bytes(16))):  # the last read-only
                with pytest.raises(TypeError, match="writable"):
                    client.call_into(b"nothing", readonly)
            with pytest.raises(TypeError, match="writable"):
                client.call_into(b"nothing", 42)
            assert calls == []
            assert client.call_into(b"one", bytearray(3)) == 3 and calls == [b"one"]
        assert server.is_owner


def test_circular_buffer_read_into(name):
    import os

    ring = tachyon.CircularBuffer(name, node_count=4, node_size=1 << 16)
    peer = tachyon.CircularBuffer(name, create=False)
    buf = bytearray(b"\xee" * (1 << 16))
    assert peer.try_read_into(buf) is None and buf == b"\xee" * (1 << 16)
    with pytest.raises(tachyon.TimeoutError):
        peer.read_into(buf, timeout_ns=10_000_000)
    for size in (0, 1, 4097, 1 << 16):
        data = os.urandom(size)
        ring.write(data)
        assert peer.read_into(buf, timeout_ns=0) == size and buf[:size] == data  # there: no wait
        ring.write(data[::-1])
        assert peer.try_read_into(buf) == size and buf[:size] == data[::-1]
        sender = threading.Timer(0.02, ring.write, (data,))
        sender.start()
        try:
            got = peer.read_into(buf, timeout_ns=10 * SECOND)  # waited for, without the GIL
        finally:
            sender.join()
        assert got == size and buf[:size] == data
    ring.write(b"0123456789abcdef")
    arr = np.zeros(2, dtype=np.uint64)
    assert peer.read_into(arr) == 16 and arr.tobytes() == b"0123456789abcdef"
    ring.write(b"too long for eight")
    with pytest.raises(tachyon.BufferTooSmall, match="18") as raised:
        peer.read_into(bytearray(8))
    assert raised.value.response is None
    with pytest.raises(tachyon.BufferTooSmall):
        peer.try_read_into(bytearray(8))
    assert peer.read(timeout_ns=0) == b"too long for eight"  # it stayed queued
    for unfit in (b"bytes", memoryview(b"view"), None, np.zeros(8)[::2]):  # the last not contiguous
        with pytest.raises(TypeError, match="writable contiguous"):
            peer.read_into(unfit, timeout_ns=0)


def test_rpc_geometry_is_the_owners_and_wait_is_each_ends(name):
    """The owner (a child) chooses nodes of 64 KiB and spinning waits; an
    opener that names another geometry is refused with Incompatible, one
    that names none gets the owner's (calls up to 65,504 bytes in one
    packet) and waits its own way. Sizes around a packet's room and
    beyond come back exact; an unknown wait is a ValueError."""
    with rpc_server_child(name, 'node_count=8, node_size=65536, wait="spin"'):
        with pytest.raises(tachyon.Incompatible):
            tachyon.RpcBuffer(name, create=False, node_size=4096)
        with tachyon.RpcBuffer(name, create=False, wait="futex") as client:
            for size in (0, 1, 65504, 65505, 200_000):
                msg = bytes(i % 251 for i in range(size))
                assert client.call(msg) == msg[::-1], size
    with pytest.raises(ValueError, match="wait must be"):
        tachyon.RpcBuffer(name + "-x", wait="sometimes")


def test_ctrl_c_cancels_rpc_call(name):
    child = run_python(
        textwrap.dedent(
            f"""
            import time, tachyon
            server = tachyon.RpcBuffer({name!r}, handler=lambda req: time.sleep(20) or req)
            client = tachyon.RpcBuffer({name!r}, create=False)
            print("calling", flush=True)
            client.call(b"slow")
            print("returned?!", flush=True)
            """
        )
    )
    try:
        assert child.stdout.readline().strip() == "calling"
        out, err = interrupt(child, BOUND)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=BOUND)
        # The child left its channel behind: take it over and close it.
        tachyon.RpcBuffer(name).close()
    assert "KeyboardInterrupt" in err and "returned?!" not in out


def test_circular_buffer_reads_are_exact_on_both_paths(name):
    import os
    import threading

    ring = tachyon.CircularBuffer(name, node_count=4, node_size=1 << 20)
    for size in (0, 1, 2048, 4097, 65_536 + 17, 1 << 20):
        data = os.urandom(size)
        ring.write(data)
        assert ring.read(timeout_ns=0) == data  # there: one copy
        ring.write(data[::-1])
        assert ring.try_read() == data[::-1]
        sender = threading.Timer(0.02, ring.write, (data,))
        sender.start()
        try:
            got = ring.read(timeout_ns=10 * SECOND)  # waited for without the GIL
        finally:
            sender.join()
        assert type(got) is bytes and got == data
