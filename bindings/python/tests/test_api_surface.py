"""asyncio, the type stubs and help(): the Python manners."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.resources
import pydoc
import threading

import pytest

import tachyon

SECOND = 1_000_000_000


def test_receive_async(region):
    topic = region.create_topic("t")

    async def main():
        waiter = asyncio.ensure_future(topic.receive_async(0, timeout_ns=30 * SECOND))
        await asyncio.sleep(0.01)
        assert not waiter.done()  # the loop runs while it waits
        # Sent from another thread, as another process would.
        threading.Thread(target=topic.send, args=(b"async",)).start()
        msg = await asyncio.wait_for(waiter, timeout=30)
        with msg:
            return bytes(msg.data)

    assert asyncio.run(main()) == b"async"


def test_receive_async_timeout_and_cancel(region):
    topic = region.create_topic("t")

    async def main():
        with pytest.raises(tachyon.TimeoutError):
            await topic.receive_async(0, timeout_ns=5_000_000)
        task = asyncio.ensure_future(topic.receive_async(0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    topic.send(b"after")  # cancelling lost nothing and took nothing
    assert topic.receive_bytes(0, timeout_ns=SECOND) == b"after"


def test_stubs_cover_the_runtime_api():
    stub = importlib.resources.files("tachyon").joinpath("_tachyon.pyi").read_text()
    tree = ast.parse(stub)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    assert (importlib.resources.files("tachyon") / "py.typed").is_file()
    for name in ("Region", "Topic", "Subscription", "Group", "Message", "Loan", "TopicInfo", "GroupInfo",
                 "ClassStats", "Recovered", "SharedArray", "ArrayLock", "CircularBuffer", "RpcBuffer"):
        runtime = getattr(tachyon, name)
        declared = {
            n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else n.target.id
            for n in classes[name].body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.AnnAssign))
        }
        public = {a for a in dir(runtime) if not a.startswith("_")}
        assert public <= declared, f"{name}: not in the stub: {sorted(public - declared)}"
    # The module's functions (release_all) too.
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    module = importlib.import_module("tachyon._tachyon")
    public = {a for a in dir(module) if not a.startswith("_") and callable(getattr(module, a))
              and not isinstance(getattr(module, a), type)}
    assert public and public <= functions, f"not in the stub: {sorted(public - functions)}"


def test_help_reads_well():
    text = pydoc.render_doc(tachyon.Region, renderer=pydoc.plaintext)
    for word in ("create=False", "create_topic", "remove", "Incompatible"):
        assert word in text
    assert "receive(self, /, partition=0, timeout_ns=-1)" in pydoc.render_doc(tachyon.Topic, renderer=pydoc.plaintext)
