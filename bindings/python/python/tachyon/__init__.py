"""tachyon: inter-process communication through shared memory on Linux.

The zero-copy bus: a :class:`Region` holds a payload pool and topics; a
:class:`Topic` has partitions of bounded queues; producers ``send`` bytes or
``loan`` a chunk and ``publish`` it in place; consumers ``receive`` a
:class:`Message` whose ``data`` is a read-only memoryview straight into
shared memory::

    import tachyon
    reg   = tachyon.Region("demo", create=False)
    topic = reg.topic("orders")
    msg = topic.receive(partition=3, timeout_ns=-1)
    print(bytes(msg.data))      # memoryview over shared memory
    msg.release()

Batches move many messages per call, which is what makes Python fast
here: ``topic.send_many(items)``, ``msgs = sub.receive_many(256)`` then
``tachyon.release_all(msgs)``, or ``receive_many_bytes`` for copies.

Consumer groups:
``Region(..., max_groups=4)``, then ``topic.join_group("audit")`` gives a
:class:`Group` that receives every message published from then on, shared
among the members of that group.

The shared-memory primitives: :class:`SharedArray` (a typed array that
numpy views without a copy, with a process-shared lock),
:class:`CircularBuffer` (a ring of fixed-size nodes) and :class:`RpcBuffer`
(request/response with a Python callable as the handler).

Every wait releases the GIL and is interrupted by Ctrl+C; every error is a
:class:`tachyon.Error` (see :mod:`tachyon.errors`).
"""

from __future__ import annotations

from . import errors
from ._tachyon import (
    CLASS_SIZES,
    MAX_MESSAGE,
    ArrayLock,
    CircularBuffer,
    ClassStats,
    Group,
    GroupInfo,
    Loan,
    Message,
    Recovered,
    Region,
    RpcBuffer,
    SharedArray,
    Subscription,
    Topic,
    TopicInfo,
    release_all,
)
from .errors import *  # noqa: F403 - the exception classes are part of the API
from .errors import __all__ as _errors_all

__all__ = [
    "Region",
    "Topic",
    "Subscription",
    "Group",
    "Message",
    "release_all",
    "Loan",
    "TopicInfo",
    "GroupInfo",
    "ClassStats",
    "Recovered",
    "SharedArray",
    "ArrayLock",
    "CircularBuffer",
    "RpcBuffer",
    "MAX_MESSAGE",
    "CLASS_SIZES",
    "errors",
    *_errors_all,
]
