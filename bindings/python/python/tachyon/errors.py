"""The exceptions of tachyon: one class per ``tachyon::Error`` variant.

Every error raised by tachyon is a :class:`tachyon.Error`. Where Python has
a built-in exception of the same meaning, the class also inherits from it,
so existing ``except`` clauses keep working::

    try:
        reg = tachyon.Region("demo", create=False)
    except FileNotFoundError:          # tachyon.NotFound is one
        ...
"""

from __future__ import annotations

import builtins

__all__ = [
    "Error",
    "NotFound",
    "AlreadyExists",
    "TimeoutError",
    "Full",
    "NoSpace",
    "PermissionDenied",
    "TopicNotFound",
    "TopicExists",
    "Incompatible",
    "ChannelBusy",
    "BufferTooSmall",
    "InvalidName",
    "InvalidArgument",
    "Corrupt",
    "VersionMismatch",
    "KindMismatch",
    "MessageTooLarge",
    "TypeMismatch",
    "PoolExhausted",
    "Closed",
    "PeerDied",
    "RemoteError",
    "IoError",
]


class Error(Exception):
    """The base of every tachyon error."""

    #: Set on an error raised by ``Topic.send_many`` after it started
    #: sending: how many items (the first ones) were sent before it.
    #: (``KeyboardInterrupt`` from ``send_many`` carries it too.)
    sent: int


class NotFound(Error, FileNotFoundError):
    """No shared-memory object of that name exists."""


class AlreadyExists(Error, FileExistsError):
    """An object of that name exists already."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - mirrors the Rust name
    """A wait ran out before it could complete (also a builtins.TimeoutError)."""


class Full(Error):
    """A ring or partition is full now (a call that may not wait)."""


class NoSpace(Error, OSError):
    """The shared-memory file system, or a table inside a segment, is full."""


class PermissionDenied(Error, PermissionError):
    """The caller may not use this object."""


class TopicNotFound(NotFound):
    """The region has no topic of that name."""


class TopicExists(AlreadyExists):
    """The region already has a topic of that name."""


class Incompatible(Error, ValueError):
    """The object exists with another configuration than the one asked for."""


class ChannelBusy(Error):
    """An RPC channel serves one client at a time, and one is connected."""


class BufferTooSmall(Error, ValueError):
    """A read buffer is smaller than the item to be read into it.

    Raised by ``RpcBuffer.call_into``, it carries the whole response, which
    was not lost, as bytes in its ``response`` attribute (None elsewhere:
    an item too long for ``CircularBuffer.read_into`` stays queued)."""

    response: bytes | None = None


class InvalidName(Error, ValueError):
    """The name cannot be used as a shared-memory name."""


class InvalidArgument(Error, ValueError):
    """An argument is out of range or inconsistent."""


class Corrupt(Error):
    """Shared memory holds something that cannot be right."""


class VersionMismatch(Error):
    """The segment was written by another layout version of tachyon."""


class KindMismatch(Error, TypeError):
    """The segment holds another kind of object than the one asked for."""


class MessageTooLarge(Error, ValueError):
    """An item is larger than the space that holds one."""


class TypeMismatch(Error, TypeError):
    """The segment holds elements of another type than the one asked for."""


class PoolExhausted(Error):
    """No chunk of the payload pool came free before the timeout."""


class Closed(Error, ConnectionError):
    """The object was closed, or the peer closed its end."""


class PeerDied(Error, ConnectionError):
    """The peer process died."""


class RemoteError(Error):
    """The other end's handler failed; the message is its error."""


class IoError(Error, OSError):
    """An operating-system call failed in a way not covered above."""
