"""An RPC service: a Python function served to another process.

    python examples/python/rpc_service.py

The server process creates the channel with a handler (any callable taking
bytes and returning bytes); the client opens it and calls. An exception in
the handler reaches the caller as tachyon.RemoteError.
"""

import json
import multiprocessing
import os

import tachyon

NAME = f"rpc-py-{os.getpid()}"


def handle(request: bytes) -> bytes:
    """Adds up a JSON list of numbers."""
    numbers = json.loads(request)
    return json.dumps({"sum": sum(numbers), "served_by": os.getpid()}).encode()


def server(name: str, ready, stop) -> None:
    with tachyon.RpcBuffer(name, handler=handle):
        ready.set()
        stop.wait(60)  # serves from its own threads meanwhile


def main() -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=server, args=(NAME, ready, stop))
    proc.start()
    try:
        assert ready.wait(30)
        with tachyon.RpcBuffer(NAME, create=False) as client:
            print("client", os.getpid(), "got", json.loads(client.call(b"[1, 2, 3.5]")))
            try:
                client.call(b"not json")
            except tachyon.RemoteError as e:
                print("the handler failed, as it should:", e)
    finally:
        stop.set()
        proc.join(timeout=30)


if __name__ == "__main__":
    main()
