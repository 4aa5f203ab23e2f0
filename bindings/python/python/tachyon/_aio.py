"""asyncio support: the coroutine behind ``Topic.receive_async``."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._tachyon import Message, Topic

#: The longest pause between two looks at an empty partition.
MAX_PAUSE = 0.0005


async def receive(topic: "Topic", partition: int, timeout_ns: int) -> "Message":
    """Waits for a message without blocking the event loop.

    It looks at the partition with ``try_receive`` from the event loop's
    thread, pausing between looks (a few microseconds at first, at most
    0.5 ms), so cancelling it never loses a message: one is taken only when
    it is returned.
    """
    deadline = None if timeout_ns < 0 else time.monotonic() + timeout_ns / 1e9
    pause = 0.00001
    while True:
        msg = topic.try_receive(partition)
        if msg is not None:
            return msg
        if deadline is not None and time.monotonic() >= deadline:
            from .errors import TimeoutError

            raise TimeoutError(
                f"timed out after {timeout_ns} ns waiting for a message in partition "
                f"{partition} of topic {topic.name!r}"
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE)
