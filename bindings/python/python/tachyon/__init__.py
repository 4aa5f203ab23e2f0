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

Every wait releases the GIL and is interrupted by Ctrl+C; every error is a
:class:`tachyon.Error` (see :mod:`tachyon.errors`).
"""

from __future__ import annotations

from . import errors
from ._tachyon import (
    CLASS_SIZES,
    MAX_MESSAGE,
    ClassStats,
    Loan,
    Message,
    Recovered,
    Region,
    Topic,
    TopicInfo,
)
from .errors import *  # noqa: F403 - the exception classes are part of the API
from .errors import __all__ as _errors_all

__all__ = [
    "Region",
    "Topic",
    "Message",
    "Loan",
    "TopicInfo",
    "ClassStats",
    "Recovered",
    "MAX_MESSAGE",
    "CLASS_SIZES",
    "errors",
    *_errors_all,
]
