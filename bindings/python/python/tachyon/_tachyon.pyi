"""Type stubs of the extension module (re-exported by ``tachyon``)."""

from __future__ import annotations

from types import TracebackType
from collections.abc import Callable, Iterable
from typing import Literal, final

from typing_extensions import Buffer, Self

MAX_MESSAGE: int
CLASS_SIZES: list[int]

WaitPolicy = Literal["spin", "futex", "hybrid"]

def release_all(messages: Iterable[Message]) -> None:
    """Releases every message; BufferError if some are still viewed (those
    stay unreleased, the others are released)."""

@final
class Region:
    """A zero-copy bus region: a payload pool and topics in one named
    shared-memory segment."""

    def __init__(
        self,
        name: str,
        size: int | None = None,
        *,
        create: bool = True,
        max_topics: int | None = None,
        ring_arena: int | None = None,
        max_groups: int | None = None,
    ) -> None:
        """max_groups: group slots per topic, the default group
        and ``max_groups - 1`` named consumer groups (default 0)."""
    @staticmethod
    def remove(name: str) -> None:
        """Deletes the region ``name``."""
    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        capacity: int = 1024,
        *,
        wait: WaitPolicy = "hybrid",
        at_least_once: bool = False,
        default_group: bool = True,
        overrun: bool = False,
        inline_payload: int = 0,
        light_handovers: bool = False,
    ) -> Topic: ...
    def create_or_open_topic(
        self,
        name: str,
        partitions: int = 1,
        capacity: int = 1024,
        *,
        wait: WaitPolicy = "hybrid",
        at_least_once: bool = False,
        default_group: bool = True,
        overrun: bool = False,
        inline_payload: int = 0,
        light_handovers: bool = False,
    ) -> Topic: ...
    def topic(self, name: str) -> Topic: ...
    def topics(self) -> list[TopicInfo]: ...
    def pool_stats(self) -> list[ClassStats]: ...
    def recover(self) -> Recovered: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class Topic:
    """A topic of a region: partitions of bounded queues of messages."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def delivery(self) -> Literal["at-most-once", "at-least-once"]: ...
    @property
    def overrun(self) -> bool: ...
    @property
    def inline_payload(self) -> int: ...
    @property
    def light_handovers(self) -> bool: ...
    def with_batch_reads(self, on: bool = True) -> Topic:
        """A new handle on the topic whose receives read in batches (a
        throughput option: each message later; docs/rings.md)."""
    @property
    def batch_reads(self) -> bool: ...
    def partition_of(self, key: int) -> int: ...
    def depth(self, partition: int) -> int: ...
    def info(self) -> TopicInfo: ...
    def missed(self) -> int:
        """Messages of the default group dropped unread by overrunning
        publishers."""
    def groups(self) -> list[GroupInfo]:
        """The topic's consumer groups, the default group as slot 0 (a
        snapshot of the whole region)."""
    def send(self, data: Buffer, key: int = 0, timeout_ns: int = -1) -> None: ...
    def send_many(
        self, items: Iterable[Buffer], key: int | Iterable[int] = 0, timeout_ns: int = -1
    ) -> int:
        """Sends every item in order; returns how many. An error while
        sending carries ``sent``: how many went out before it."""
    def loan(self, size: int, timeout_ns: int = -1) -> Loan: ...
    def receive(self, partition: int = 0, timeout_ns: int = -1) -> Message: ...
    def try_receive(self, partition: int = 0) -> Message | None: ...
    def receive_bytes(self, partition: int = 0, timeout_ns: int = -1) -> bytes: ...
    def receive_many(self, partition: int = 0, max: int = 64, timeout_ns: int = -1) -> list[Message]:
        """Waits for the first message, then takes up to ``max`` in all."""
    def receive_many_bytes(self, partition: int = 0, max: int = 64, timeout_ns: int = -1) -> list[bytes]:
        """receive_many, each message copied out and released at once."""
    async def receive_async(self, partition: int = 0, timeout_ns: int = -1) -> Message: ...
    def subscribe(self, partitions: Iterable[int] | None = None) -> Subscription: ...
    def join_group(self, name: str, *, from_oldest: bool = False) -> Group:
        """Joins (or creates) the consumer group ``name``: it gets every
        message published from now on, each to one of its members."""

@final
class Group:
    """A member of a consumer group of a topic."""

    @property
    def name(self) -> str: ...
    @property
    def slot(self) -> int: ...
    @property
    def topic(self) -> str:
        """The name of the group's topic."""
    @property
    def left(self) -> bool: ...
    def depth(self, partition: int) -> int: ...
    def missed(self) -> int:
        """The group's messages dropped unread by overrunning publishers."""
    def receive(self, partition: int = 0, timeout_ns: int = -1) -> Message: ...
    def try_receive(self, partition: int = 0) -> Message | None: ...
    def receive_bytes(self, partition: int = 0, timeout_ns: int = -1) -> bytes: ...
    def subscribe(self, partitions: Iterable[int] | None = None) -> Subscription:
        """One receive over several partitions, of the group's messages."""
    def leave(self) -> bool:
        """Ends this Group's share of the membership; True if that ended
        it. Every later call raises ValueError."""

@final
class Subscription:
    """One receive over several partitions of a topic."""

    @property
    def partitions(self) -> list[int]: ...
    def receive(self, timeout_ns: int = -1) -> Message: ...
    def try_receive(self) -> Message | None: ...
    def receive_bytes(self, timeout_ns: int = -1) -> bytes:
        """receive, the message copied out and released at once."""
    def receive_many(self, max: int = 64, timeout_ns: int = -1) -> list[Message]:
        """Waits for the first message, then takes up to ``max`` in all."""
    def receive_many_bytes(self, max: int = 64, timeout_ns: int = -1) -> list[bytes]:
        """receive_many, each message copied out and released at once."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> Message: ...

@final
class Message(Buffer):
    """A received message: a read-only view into shared memory."""

    @property
    def data(self) -> memoryview: ...
    @property
    def partition(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def tobytes(self) -> bytes: ...
    def release(self) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class Loan(Buffer):
    """A chunk of the pool lent for writing."""

    @property
    def data(self) -> memoryview: ...
    @property
    def done(self) -> bool: ...
    def publish(self, length: int | None = None, key: int = 0, timeout_ns: int = -1) -> None: ...
    def cancel(self) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class TopicInfo:
    name: str
    partitions: int
    capacity: int
    wait: Literal["spin", "futex", "hybrid", "unknown"]
    delivery: Literal["at-most-once", "at-least-once", "unknown"]
    published: int
    received: int
    corrupt: int
    lost: int
    undelivered: int
    missed: int

@final
class GroupInfo:
    name: str
    slot: int
    generation: int
    draining: bool
    members: list[int]
    live_members: int
    empty_since_unix_ns: int
    position: int
    lag: int
    missed: int

@final
class ClassStats:
    chunk_size: int
    chunks: int
    free: int

@final
class Recovered:
    loans: int
    cached: int
    held: int
    unpublished: int
    redelivered: int
    deferred: int
    slots: int
    repaired: int
    quarantined: int
    directory: int
    total: int

DType = Literal[
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32", "float64"
]

@final
class SharedArray(Buffer):
    """A fixed-length array of numbers in shared memory, with a
    process-shared reader/writer lock; a writable buffer (numpy.asarray
    views it without a copy)."""

    def __init__(
        self, name: str, length: int | None = None, dtype: DType = "float64", *, create: bool = True
    ) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def data(self) -> memoryview: ...
    def lock(self, timeout_ns: int = -1) -> ArrayLock: ...
    def read_lock(self, timeout_ns: int = -1) -> ArrayLock: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class ArrayLock:
    """A SharedArray's lock, as a context manager."""

    def acquire(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class CircularBuffer:
    """A ring of fixed-size nodes in shared memory (many writers and
    readers, each item read once)."""

    def __init__(
        self,
        name: str,
        node_count: int = 64,
        node_size: int = 4096,
        *,
        create: bool = True,
        wait: WaitPolicy = "hybrid",
        light_handovers: bool | None = None,
        batch_reads: bool = False,
    ) -> None: ...
    @property
    def node_count(self) -> int: ...
    @property
    def node_size(self) -> int: ...
    @property
    def light_handovers(self) -> bool: ...
    @property
    def batch_reads(self) -> bool: ...
    def write(self, data: Buffer, timeout_ns: int = -1) -> None: ...
    def read(self, timeout_ns: int = -1) -> bytes: ...
    def try_read(self) -> bytes | None: ...
    def read_into(self, buffer: Buffer, timeout_ns: int = -1) -> int:
        """Reads the next item into ``buffer`` (any writable contiguous
        buffer: a bytearray, a memoryview, a NumPy array) and returns its
        length; an item longer than the buffer stays queued
        (``BufferTooSmall``)."""
    def try_read_into(self, buffer: Buffer) -> int | None: ...
    def __len__(self) -> int: ...

@final
class RpcBuffer:
    """Request/response between two processes, with a Python callable as
    the handler."""

    def __init__(
        self,
        name: str,
        handler: Callable[[bytes], Buffer | None] | None = None,
        *,
        create: bool = True,
        node_count: int | None = None,
        node_size: int | None = None,
        timeout_ns: int = 30_000_000_000,
        wait: WaitPolicy = "hybrid",
    ) -> None: ...
    def call(self, data: Buffer) -> bytes: ...
    def call_into(self, data: Buffer, buffer: Buffer) -> int:
        """``call`` that writes the response into ``buffer`` (any writable
        contiguous buffer) and returns its length; a longer response raises
        ``BufferTooSmall`` with the whole response in its ``response``
        attribute."""
    def notify(self, data: Buffer) -> None: ...
    @property
    def is_owner(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
