//! The zero-copy bus: `Region`, `Topic`, `Subscription`, `Message`, `Loan`
//! and the small records `TopicInfo`, `ClassStats`, `Recovered`.
//!
//! # Views into shared memory
//!
//! A `Message` (read-only) and a `Loan` (writable) implement the buffer
//! protocol over their chunk, and `.data` is a `memoryview` of that (one,
//! cached). Every export is counted; `release()` (or `publish()`) first
//! releases the cached memoryview, then refuses with `BufferError` while
//! any other export lives (a numpy array, a slice of `.data` or a
//! `memoryview(msg)` that is still referenced). So no view can read a chunk
//! after it went back to the pool: a released `.data` raises `ValueError`
//! on use, as any released memoryview does.

use crate::bytes::{bytes_attached, bytes_of, without_gil};
use crate::errors::to_py;
use crate::errors::{buffer_error, IntoPyResult};
use crate::wait::{in_slices, in_slices_until, no_room, timed_out, timeout_of};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyList, PyMemoryView, PyString};
use pyo3::PyTraverseError;
use std::borrow::Cow;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tachyon::bus::{
    Delivery, Group, Key, Loan, Message, Partitions, Region, RegionConfig, Subscription, Topic, TopicConfig,
    MAX_MESSAGE,
};
use tachyon::sync::WaitPolicy;

/// Locks `m`, ignoring poisoning (no code here panics while holding one;
/// if one did, the data is an `Option` that is valid either way).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) fn wait_policy(name: &str) -> PyResult<WaitPolicy> {
    match name {
        "spin" => Ok(WaitPolicy::Spin),
        "futex" => Ok(WaitPolicy::Futex),
        "hybrid" => Ok(WaitPolicy::Hybrid),
        other => {
            Err(PyValueError::new_err(format!("wait must be 'spin', 'futex' or 'hybrid', not {other:?}")))
        }
    }
}

fn policy_name(p: Option<WaitPolicy>) -> &'static str {
    match p {
        Some(WaitPolicy::Spin) => "spin",
        Some(WaitPolicy::Futex) => "futex",
        Some(WaitPolicy::Hybrid) => "hybrid",
        _ => "unknown",
    }
}

fn delivery_name(d: Option<Delivery>) -> &'static str {
    match d {
        Some(Delivery::AtMostOnce) => "at-most-once",
        Some(Delivery::AtLeastOnce) => "at-least-once",
        _ => "unknown",
    }
}

/// A zero-copy bus region: a payload pool and topics in one named
/// shared-memory segment (in /dev/shm).
///
/// With create=False it opens an existing region (tachyon.NotFound if there
/// is none). Otherwise it opens the region if it exists, or creates it: when
/// any of size, max_topics, ring_arena is given, an existing region must
/// have been made with the same values (tachyon.Incompatible names the one
/// that differs); with none given, any existing region is opened as it is
/// and a new one gets the defaults (64 MiB, 64 topics, 4 MiB of rings).
///
/// A region outlives the processes using it; Region.remove(name) deletes it.
/// Topics, messages and loans keep the region mapped, so they may outlive
/// this object. Region is also a context manager (closing only this handle).
///
/// max_groups (see Topic.join_group): group slots per topic, the
/// default group and max_groups - 1 named consumer groups (default 0: none).
///
///     reg = tachyon.Region("demo", size=64 << 20)
///     topic = reg.create_topic("orders", partitions=8, capacity=1024)
#[pyclass(module = "tachyon", name = "Region", frozen)]
pub struct PyRegion {
    region: Mutex<Option<Region>>,
    name: String,
}

impl PyRegion {
    fn get(&self) -> PyResult<Region> {
        lock(&self.region)
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("region {:?} was closed", self.name)))
    }
}

#[pymethods]
impl PyRegion {
    #[new]
    #[pyo3(signature = (name, size=None, *, create=true, max_topics=None, ring_arena=None, max_groups=None))]
    fn new(
        py: Python<'_>,
        name: String,
        size: Option<usize>,
        create: bool,
        max_topics: Option<usize>,
        ring_arena: Option<usize>,
        max_groups: Option<usize>,
    ) -> PyResult<Self> {
        let configured =
            size.is_some() || max_topics.is_some() || ring_arena.is_some() || max_groups.is_some();
        if !create && configured {
            return Err(PyValueError::new_err(
                "size, max_topics, ring_arena and max_groups are for creating a region; drop them with create=False",
            ));
        }
        let mut config = RegionConfig::default();
        if let Some(size) = size {
            config = config.size(size);
        }
        if let Some(n) = max_topics {
            config = config.max_topics(n);
        }
        if let Some(bytes) = ring_arena {
            config = config.ring_arena(bytes);
        }
        if let Some(n) = max_groups {
            config = config.max_groups(n);
        }
        let region = py.detach(|| {
            if !create {
                Region::open(&name)
            } else if configured {
                Region::create_or_open(&name, config)
            } else {
                match Region::open(&name) {
                    Err(tachyon::Error::NotFound { .. }) => Region::create_or_open(&name, config),
                    other => other,
                }
            }
        });
        let region = region.py(py)?;
        Ok(PyRegion { region: Mutex::new(Some(region)), name })
    }

    /// Deletes the region `name` (processes that have it open keep their
    /// mapping). tachyon.NotFound if there is none.
    #[staticmethod]
    fn remove(py: Python<'_>, name: &str) -> PyResult<()> {
        Region::remove(name).py(py)
    }

    /// The region's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of the region.
    #[getter]
    fn size(&self) -> PyResult<usize> {
        Ok(self.get()?.config().size)
    }

    /// Creates a topic (tachyon.TopicExists if the region has one of that
    /// name).
    ///
    /// partitions: a power of two, 1 to 256 (a key always maps to the same
    /// partition, so messages with one key stay in order); capacity:
    /// descriptors per partition, a power of two; wait: "spin", "futex" or
    /// "hybrid" (how producers and consumers wait); at_least_once: a message
    /// whose consumer dies before releasing it is delivered again (else it
    /// is lost and counted); default_group (see
    /// Topic.join_group): False makes a topic without its default group, whose
    /// messages go to the named groups joined only (Topic.receive and
    /// Topic.subscribe then raise tachyon.InvalidArgument); it needs a
    /// region of max_groups >= 1. overrun: a publisher that finds a
    /// group's ring of its partition full drops that group's oldest
    /// message there (released on the group's behalf) and publishes,
    /// instead of waiting: a slow group no longer holds producers back, it
    /// misses messages instead, counted per group (Group.missed(),
    /// Topic.missed() for the default group, GroupInfo.missed). For data
    /// where the latest matters more than every message (market data,
    /// sensor readings); not with at_least_once (tachyon.InvalidArgument).
    /// inline_payload: bytes of a slot per ring cell (rounded up to 64, at
    /// most 65536; 0: none): a message of up to that size sent with send()
    /// travels in its cell's slot, no chunk taken from the pool (the copy
    /// path two to three times faster on a stream); loans and larger
    /// messages still use chunks; costs capacity * inline_payload bytes
    /// per partition of the region's ring arena (64 more per cell when
    /// inline_payload is a multiple of 256 above 256); not with
    /// at_least_once. light_handovers: the ring cells are handed over by a
    /// look and a plain store, the wake-up check's fence moved to sleepers
    /// (a stream of small inline messages about half again as fast; each
    /// sleep of a waiter interrupts every CPU running a process with a
    /// light ring or topic open; see docs/bus.md, "Light hand-overs").
    #[pyo3(signature = (name, partitions=1, capacity=1024, *, wait="hybrid", at_least_once=false, default_group=true, overrun=false, inline_payload=0, light_handovers=false))]
    #[allow(clippy::too_many_arguments)]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: u32,
        capacity: u32,
        wait: &str,
        at_least_once: bool,
        default_group: bool,
        overrun: bool,
        inline_payload: u32,
        light_handovers: bool,
    ) -> PyResult<PyTopic> {
        let config = topic_config(partitions, capacity, wait, at_least_once)?
            .default_group(default_group)
            .overrun(overrun)
            .inline_payload(inline_payload)
            .light_handovers(light_handovers);
        let topic = self.get()?.create_topic(name, config).py(py)?;
        Ok(PyTopic { topic })
    }

    /// Opens the topic, or creates it with this configuration; an existing
    /// topic must have the same (tachyon.Incompatible names what differs).
    #[pyo3(signature = (name, partitions=1, capacity=1024, *, wait="hybrid", at_least_once=false, default_group=true, overrun=false, inline_payload=0, light_handovers=false))]
    #[allow(clippy::too_many_arguments)]
    fn create_or_open_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: u32,
        capacity: u32,
        wait: &str,
        at_least_once: bool,
        default_group: bool,
        overrun: bool,
        inline_payload: u32,
        light_handovers: bool,
    ) -> PyResult<PyTopic> {
        let config = topic_config(partitions, capacity, wait, at_least_once)?
            .default_group(default_group)
            .overrun(overrun)
            .inline_payload(inline_payload)
            .light_handovers(light_handovers);
        let topic = self.get()?.create_or_open_topic(name, config).py(py)?;
        Ok(PyTopic { topic })
    }

    /// Opens an existing topic (tachyon.TopicNotFound if there is none).
    fn topic(&self, py: Python<'_>, name: &str) -> PyResult<PyTopic> {
        let topic = self.get()?.topic(name).py(py)?;
        Ok(PyTopic { topic })
    }

    /// The region's topics with their counters, as a list of TopicInfo.
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<PyTopicInfo>> {
        let list = self.get()?.topics().py(py)?;
        Ok(list.into_iter().map(PyTopicInfo::from).collect())
    }

    /// Free chunks per size class of the payload pool: a list of 8
    /// ClassStats, smallest chunks first.
    fn pool_stats(&self, py: Python<'_>) -> PyResult<Vec<PyClassStats>> {
        let stats = self.get()?.pool_stats().py(py)?;
        Ok(stats
            .iter()
            .map(|s| PyClassStats { chunk_size: s.chunk_size, chunks: s.chunks, free: s.free })
            .collect())
    }

    /// Returns to the pool what dead processes held (their loans, the
    /// messages they had not released; on at-least-once topics those
    /// messages are published again). The library also does this by itself
    /// on open and while waiting. Returns a Recovered.
    fn recover(&self, py: Python<'_>) -> PyResult<PyRecovered> {
        let region = self.get()?;
        let r = py.detach(|| region.recover()).py(py)?;
        Ok(PyRecovered::from(r))
    }

    /// Closes this handle (topics, messages and loans made from it stay
    /// usable; the region itself stays, see remove).
    fn close(&self) {
        lock(&self.region).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        let state = if lock(&self.region).is_some() { "" } else { ", closed" };
        format!("Region({:?}{state})", self.name)
    }
}

fn topic_config(partitions: u32, capacity: u32, wait: &str, at_least_once: bool) -> PyResult<TopicConfig> {
    let delivery = if at_least_once { Delivery::AtLeastOnce } else { Delivery::AtMostOnce };
    Ok(TopicConfig::default()
        .partitions(partitions)
        .capacity(capacity)
        .wait(wait_policy(wait)?)
        .delivery(delivery))
}

/// A topic of a region: partitions of bounded queues of messages.
///
/// Producers send(data, key) (a copy) or loan(size) a chunk, fill it in
/// place and publish it; the key chooses the partition. Consumers
/// receive(partition) a Message: a read-only view into shared memory.
/// Every wait releases the GIL and is interrupted by Ctrl+C.
#[pyclass(module = "tachyon", name = "Topic", frozen)]
pub struct PyTopic {
    topic: Topic,
}

#[pymethods]
impl PyTopic {
    /// The topic's name.
    #[getter]
    fn name(&self) -> &str {
        self.topic.name()
    }

    /// Number of partitions.
    #[getter]
    fn partitions(&self) -> u32 {
        self.topic.partitions()
    }

    /// Descriptors per partition: the most messages one partition queues.
    #[getter]
    fn capacity(&self) -> usize {
        self.topic.capacity()
    }

    /// "at-most-once" or "at-least-once".
    #[getter]
    fn delivery(&self) -> &'static str {
        delivery_name(Some(self.topic.delivery()))
    }

    /// The partition messages with `key` go to.
    fn partition_of(&self, key: u64) -> u32 {
        self.topic.partition_of(Key(key))
    }

    /// Messages waiting in `partition` now (a snapshot).
    fn depth(&self, py: Python<'_>, partition: u32) -> PyResult<usize> {
        self.topic.depth(partition).py(py)
    }

    /// The topic's configuration and counters, as a TopicInfo.
    fn info(&self) -> PyTopicInfo {
        PyTopicInfo::from(self.topic.info())
    }

    /// Whether the topic overruns (create_topic's overrun).
    #[getter]
    fn overrun(&self) -> bool {
        self.topic.config().overruns()
    }

    /// Bytes of each ring cell's inline slot (create_topic's
    /// inline_payload, rounded up to 64; 0: none).
    #[getter]
    fn inline_payload(&self) -> u32 {
        self.topic.config().inline_payload_size()
    }

    /// Whether the topic's hand-overs are light (create_topic's
    /// light_handovers; the topic's own, in every process).
    #[getter]
    fn light_handovers(&self) -> bool {
        self.topic.config().uses_light_handovers()
    }

    /// A new handle on the same topic whose receives read in batches (on
    /// True) or not: a receive that catches up with a publisher in
    /// mid-stream waits until it is a batch ahead (at most 32 messages,
    /// and 2 KiB of them; none over 256 bytes) before it takes the first.
    /// More messages per second of small inline messages for a consumer
    /// that wants throughput, each message later (docs/rings.md, "Batch
    /// reads"). This handle is unchanged; subscriptions and groups opened
    /// through the new one take its setting.
    #[pyo3(signature = (on=true))]
    fn with_batch_reads(&self, on: bool) -> PyTopic {
        PyTopic { topic: self.topic.clone().with_batch_reads(on) }
    }

    /// Whether this handle's receives read in batches
    /// (Topic.with_batch_reads; off on a handle from create_topic or
    /// topic).
    #[getter]
    fn batch_reads(&self) -> bool {
        self.topic.batch_reads()
    }

    /// Messages of the default group dropped unread from its full
    /// partitions by publishers of an overrunning topic, since the topic
    /// was created (0 on other topics). Each named group has its own count
    /// (Group.missed()); TopicInfo.missed is all groups' together.
    fn missed(&self) -> u64 {
        self.topic.missed()
    }

    /// The topic's consumer groups in slot order, the default group (slot
    /// 0, named "") included while the topic has it, as a list of
    /// GroupInfo: a snapshot of the whole region is taken for it (as tyctl
    /// does), a monitoring call, not one for every message.
    fn groups(&self, py: Python<'_>) -> PyResult<Vec<PyGroupInfo>> {
        let topic = &self.topic;
        let report = py.detach(|| topic.region().inspect()).py(py)?;
        let groups = report.topics.into_iter().find(|t| t.info.name == topic.name()).map(|t| t.groups);
        Ok(groups.unwrap_or_default().into_iter().map(PyGroupInfo::from).collect())
    }

    /// Copies `data` (any bytes-like object) into a chunk and publishes it
    /// with `key`, waiting up to timeout_ns (-1: for ever, 0: not at all)
    /// for a chunk and for room in the key's partition. Raises
    /// tachyon.TimeoutError or tachyon.PoolExhausted when the wait runs
    /// out, tachyon.MessageTooLarge above 1 MiB.
    #[pyo3(signature = (data, key=0, timeout_ns=-1), text_signature = "(self, /, data, key=0, timeout_ns=-1)")]
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>, key: u64, timeout_ns: i64) -> PyResult<()> {
        let timeout = timeout_of(timeout_ns);
        // The fast path, with the GIL held (the bytes cannot change under
        // it): one try.
        let first = with_bytes(data, |bytes| {
            let r = self.topic.send(bytes, Key(key), Some(Duration::ZERO));
            match r {
                Err(e) if no_room(&e) && timeout.is_none_or(|t| !t.is_zero()) => {
                    Ok(Some(without_gil(data, bytes)))
                }
                other => other.map(|()| None),
            }
        })?;
        let msg = match first.py(py)? {
            None => return Ok(()),
            Some(msg) => msg,
        };
        // The slow path waits without the GIL: on a `bytes` object's own
        // bytes, or a private copy of another object's.
        let topic = &self.topic;
        in_slices(py, timeout, no_room, |slice| topic.send(&msg, Key(key), slice))
    }

    /// Sends every item of `items` (an iterable of bytes-like objects) in
    /// order, as send would one by one, and returns how many it sent.
    ///
    /// key: an int for all of them, or an iterable of ints with one per
    /// item. timeout_ns (-1: for ever, 0: not at all) bounds the whole
    /// call: the waits for a chunk or for room in a full partition, all
    /// together. Every item and key is checked first (TypeError,
    /// ValueError, OverflowError, tachyon.MessageTooLarge: nothing is
    /// sent). An error while sending (a wait that ran out, Ctrl+C) is
    /// raised with the attribute `sent`: the first `sent` items were
    /// sent, the others were not. The GIL is held while messages go out
    /// and released while waiting.
    #[pyo3(signature = (items, key=None, timeout_ns=-1), text_signature = "(self, /, items, key=0, timeout_ns=-1)")]
    fn send_many(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        timeout_ns: i64,
    ) -> PyResult<usize> {
        let payloads = payloads(items)?;
        let keys = Keys::of(key, payloads.len())?;
        let timeout = timeout_of(timeout_ns);
        let may_wait = timeout.is_none_or(|t| !t.is_zero());
        let mut deadline = None;
        let topic = &self.topic;
        for (i, payload) in payloads.iter().enumerate() {
            let key = keys.get(i);
            match topic.send(payload.bytes(), key, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(e) if no_room(&e) && may_wait => {
                    // The deadline starts with the first wait, as send's
                    // does; a deadline past what the clock holds is none.
                    let until =
                        *deadline.get_or_insert_with(|| timeout.and_then(|t| Instant::now().checked_add(t)));
                    // Waits without the GIL (as send does).
                    let msg = payload.without_gil();
                    in_slices_until(py, until, timeout, no_room, |slice| topic.send(&msg, key, slice))
                        .map_err(|e| with_sent(py, e, i))?;
                }
                Err(e) => return Err(with_sent(py, to_py(py, e), i)),
            }
            if i % 1024 == 1023 {
                // A long batch with room all along still answers Ctrl+C.
                py.check_signals().map_err(|e| with_sent(py, e, i + 1))?;
            }
        }
        Ok(payloads.len())
    }

    /// Borrows a writable chunk of `size` bytes from the pool, waiting up
    /// to timeout_ns for one (tachyon.PoolExhausted when it runs out). Fill
    /// loan.data (a writable memoryview) and call loan.publish(length,
    /// key).
    #[pyo3(signature = (size, timeout_ns=-1), text_signature = "(self, /, size, timeout_ns=-1)")]
    fn loan(&self, py: Python<'_>, size: usize, timeout_ns: i64) -> PyResult<PyLoan> {
        let loan = match self.topic.try_loan(size) {
            Err(e) if no_room(&e) && timeout_ns != 0 => {
                let topic = &self.topic;
                in_slices(py, timeout_of(timeout_ns), no_room, |slice| topic.loan(size, slice))?
            }
            other => other.py(py)?,
        };
        Ok(PyLoan {
            loan: Mutex::new(Some(loan)),
            view: Mutex::new(None),
            exports: AtomicUsize::new(0),
            size,
        })
    }

    /// Waits up to timeout_ns (-1: for ever; 0: look once) for a message in
    /// `partition` and returns it as a Message, a view into shared memory
    /// (release it, or use it as a context manager). Raises
    /// tachyon.TimeoutError when the wait runs out. The GIL is released
    /// while waiting, and Ctrl+C raises KeyboardInterrupt.
    #[pyo3(signature = (partition=0, timeout_ns=-1), text_signature = "(self, /, partition=0, timeout_ns=-1)")]
    fn receive(&self, py: Python<'_>, partition: u32, timeout_ns: i64) -> PyResult<PyMessage> {
        let topic = &self.topic;
        let msg = first_message(
            py,
            timeout_ns,
            || topic.try_receive(partition),
            |slice| topic.receive(partition, slice),
        )?;
        Ok(PyMessage::new(msg))
    }

    /// Receives up to `max` messages of `partition` in one call, as a list
    /// of Message: waits up to timeout_ns for the first, as receive does
    /// (tachyon.TimeoutError if none comes; the GIL released, Ctrl+C
    /// raises KeyboardInterrupt), then takes those already queued behind
    /// it, without waiting. Release them with tachyon.release_all(msgs)
    /// (or each one; a dropped Message is released too). ValueError if max
    /// is less than 1.
    #[pyo3(signature = (partition=0, max=64, timeout_ns=-1), text_signature = "(self, /, partition=0, max=64, timeout_ns=-1)")]
    fn receive_many<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        max: i64,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let topic = &self.topic;
        let (now, wait) = (|| topic.try_receive(partition), |slice| topic.receive(partition, slice));
        receive_batch(py, max, timeout_ns, now, wait, |msg| Ok(PyMessage::new(msg)))
    }

    /// Like receive_many, but copies each message into a new bytes object
    /// and releases it at once (the copy path, as receive_bytes: an inline
    /// message needs no chunk): a list of bytes.
    #[pyo3(signature = (partition=0, max=64, timeout_ns=-1), text_signature = "(self, /, partition=0, max=64, timeout_ns=-1)")]
    fn receive_many_bytes<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        max: i64,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let topic = &self.topic;
        let lend = || topic.try_receive_with(partition, |m| bytes_of(py, m));
        receive_copies(py, max, timeout_ns, lend, |wait| topic.receive_with(partition, wait, bytes_attached))
    }

    /// The next message of `partition` if there is one now, else None.
    #[pyo3(signature = (partition=0))]
    fn try_receive(&self, py: Python<'_>, partition: u32) -> PyResult<Option<PyMessage>> {
        Ok(self.topic.try_receive(partition).py(py)?.map(PyMessage::new))
    }

    /// Like receive, but copies the message into a new bytes object and
    /// releases it at once (the copy path: on a topic with inline slots an
    /// inline message is copied out of its slot, with no chunk).
    #[pyo3(signature = (partition=0, timeout_ns=-1), text_signature = "(self, /, partition=0, timeout_ns=-1)")]
    fn receive_bytes<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let topic = &self.topic;
        let lend = || topic.try_receive_with(partition, |m| bytes_of(py, m));
        receive_copy(py, timeout_ns, lend, |wait| topic.receive_with(partition, wait, bytes_attached))
    }

    /// An awaitable receive for asyncio: `msg = await
    /// topic.receive_async(partition, timeout_ns=-1)`. It polls without
    /// blocking the event loop (a few hundred microseconds of latency at
    /// most); cancelling it loses no message.
    #[pyo3(signature = (partition=0, timeout_ns=-1), text_signature = "(self, /, partition=0, timeout_ns=-1)")]
    fn receive_async<'py>(
        slf: &Bound<'py, Self>,
        partition: u32,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let aio = slf.py().import("tachyon._aio")?;
        aio.getattr("receive")?.call1((slf, partition, timeout_ns))
    }

    /// A Subscription: one receive over several partitions of this topic
    /// (`partitions`: an iterable of partition numbers; None, the default:
    /// all of them), taking from each in turn so that none starves.
    /// Per-key order holds (a key stays in one partition).
    #[pyo3(signature = (partitions=None))]
    fn subscribe(&self, py: Python<'_>, partitions: Option<Vec<u32>>) -> PyResult<PySubscription> {
        let which = partitions.map_or(Partitions::All, Partitions::Set);
        let sub = self.topic.subscribe(which).py(py)?;
        Ok(PySubscription { sub })
    }

    /// Joins the consumer group `name` of this topic (creating the group if
    /// none of that name is joined) and returns this member as a Group:
    /// from now on every message published to the topic goes to the group
    /// too, to one of its members (Groups of one name, in any process,
    /// compete for its messages; each group gets every message). Names are
    /// 1 to 64 bytes without NUL (tachyon.InvalidName); a region created
    /// without max_groups >= 2 has no named group slots
    /// (tachyon.InvalidArgument), and tachyon.NoSpace says every slot of
    /// the topic is used.
    ///
    /// A process killed while it holds a group's message loses it for that
    /// group only (at most once) or has it delivered again within the group
    /// (at least once); a group without members keeps its position for the
    /// region's group lease, then recovery drops it.
    ///
    /// from_oldest=True: a group this join creates first gets every message
    /// still queued in the topic (per partition, what the group furthest
    /// behind has not read), oldest first, then the live stream, with no
    /// gap and no duplicate between the two (Kafka's "earliest"). The
    /// backlog is copied into the group once, at the join; what could not
    /// be copied is counted in Group.missed(). Joining a group that exists
    /// already continues from its position either way.
    #[pyo3(signature = (name, *, from_oldest = false))]
    fn join_group(&self, py: Python<'_>, name: &str, from_oldest: bool) -> PyResult<PyGroup> {
        let topic = &self.topic;
        let from = if from_oldest { tachyon::bus::JoinFrom::Oldest } else { tachyon::bus::JoinFrom::Now };
        let group = py.detach(|| topic.join_group_from(name, from)).py(py)?;
        Ok(PyGroup::new(group))
    }

    fn __repr__(&self) -> String {
        format!(
            "Topic({:?}, partitions={}, capacity={}, delivery={:?})",
            self.topic.name(),
            self.topic.partitions(),
            self.topic.capacity(),
            delivery_name(Some(self.topic.delivery()))
        )
    }
}

/// The error of a receive that found nothing and may not wait.
fn timeout_error() -> tachyon::Error {
    tachyon::Error::Timeout { what: "a message in the topic's partition", waited: Some(Duration::ZERO) }
}

/// What to do about a message larger than the largest chunk.
const TOO_LARGE: &str =
    "the largest pool chunk is 1 MiB: split the message, or share the data through a SharedArray";

/// The first message of a receive: `try_once` with the GIL held (the fast
/// path), then, unless timeout_ns is 0, `wait` in slices without the GIL.
fn first_message<T: Send>(
    py: Python<'_>,
    timeout_ns: i64,
    try_once: impl FnOnce() -> tachyon::Result<Option<T>>,
    wait: impl FnMut(Option<Duration>) -> tachyon::Result<T> + Send,
) -> PyResult<T> {
    let timeout = timeout_of(timeout_ns);
    match try_once().py(py)? {
        Some(msg) => Ok(msg),
        None if timeout.is_some_and(|t| t.is_zero()) => Err(timeout_error()).py(py),
        None => in_slices(py, timeout, timed_out, wait),
    }
}

/// The copy path of `receive_bytes`: the next message copied into a new
/// bytes object and released at once. `lend` (a `try_receive_with`, with
/// the GIL held) copies a message that is there now straight into the
/// bytes object; else, unless timeout_ns is 0, `wait` (a `receive_with`
/// lending to [`bytes_attached`]) waits for one without the GIL, as
/// `receive` does (`first_message`), and copies it, once as well, with the
/// GIL taken back for the copy.
fn receive_copy<'py>(
    py: Python<'py>,
    timeout_ns: i64,
    lend: impl Fn() -> tachyon::Result<Option<PyResult<Py<PyBytes>>>>,
    wait: impl FnMut(Option<Duration>) -> tachyon::Result<PyResult<Py<PyBytes>>> + Send,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(first_message(py, timeout_ns, lend, wait)??.into_bound(py))
}

/// The copy path of `receive_many_bytes`: a batch (`receive_batch`) of
/// messages copied into new bytes objects, each released at once (an
/// inline message needs no chunk): the first as `receive_copy` takes it,
/// the rest by `lend`.
fn receive_copies<'py>(
    py: Python<'py>,
    max: i64,
    timeout_ns: i64,
    lend: impl Fn() -> tachyon::Result<Option<PyResult<Py<PyBytes>>>>,
    wait: impl FnMut(Option<Duration>) -> tachyon::Result<PyResult<Py<PyBytes>>> + Send,
) -> PyResult<Bound<'py, PyList>> {
    receive_batch(py, max, timeout_ns, lend, wait, |bytes| Ok(bytes?.into_bound(py)))
}

/// A batch (`receive_many`, `receive_many_bytes`): waits for the first
/// message as `receive` does (`first_message`), then takes what `now`
/// finds without waiting, up to `max` (at least 1: ValueError) messages in
/// all, each made into a `T` by `each` as it is taken (so a copying `each`
/// frees its chunk at once). An error after the first message ends the
/// batch early, keeping what it has: the messages taken are never lost,
/// and an error that persists is raised by the next call.
fn receive_batch<'py, M: Send, T: IntoPyObject<'py>>(
    py: Python<'py>,
    max: i64,
    timeout_ns: i64,
    now: impl Fn() -> tachyon::Result<Option<M>>,
    wait: impl FnMut(Option<Duration>) -> tachyon::Result<M> + Send,
    mut each: impl FnMut(M) -> PyResult<T>,
) -> PyResult<Bound<'py, PyList>> {
    let max = match usize::try_from(max) {
        Ok(n) if n > 0 => n,
        _ => return Err(PyValueError::new_err(format!("max must be at least 1, not {max}"))),
    };
    let first = first_message(py, timeout_ns, &now, wait)?;
    let mut out = Vec::with_capacity(max.min(1024));
    out.push(each(first)?);
    while out.len() < max {
        match now() {
            Ok(Some(msg)) => out.push(each(msg)?),
            Ok(None) | Err(_) => break,
        }
    }
    PyList::new(py, out)
}

/// The keys of a batch: one for all, or one per item.
enum Keys {
    One(Key),
    Each(Vec<Key>),
}

impl Keys {
    /// `key` of send_many: None (0), an int, or an iterable of ints with
    /// one per item.
    fn of(key: Option<&Bound<'_, PyAny>>, items: usize) -> PyResult<Keys> {
        let Some(key) = key else {
            return Ok(Keys::One(Key(0)));
        };
        if key.is_instance_of::<PyInt>() {
            return Ok(Keys::One(Key(key.extract()?)));
        }
        let iter = match key.try_iter() {
            Ok(iter) => iter,
            // Not iterable: an integer of another kind (numpy's) is one key.
            Err(_) if key.hasattr("__index__")? => return Ok(Keys::One(Key(key.extract()?))),
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "key must be an int or an iterable of ints, not {}",
                    type_name(key)
                )))
            }
        };
        let mut keys = Vec::with_capacity(items);
        for k in iter {
            keys.push(Key(k?.extract()?));
        }
        if keys.len() != items {
            return Err(PyValueError::new_err(format!(
                "{} keys for {items} items: give one key, or one per item",
                keys.len()
            )));
        }
        Ok(Keys::Each(keys))
    }

    fn get(&self, i: usize) -> Key {
        match self {
            Keys::One(k) => *k,
            Keys::Each(keys) => keys[i],
        }
    }
}

/// Records on `err` (as its attribute `sent`) how many items of a batch
/// were sent before it.
fn with_sent(py: Python<'_>, err: PyErr, sent: usize) -> PyErr {
    let value = err.value(py);
    // Exceptions take attributes; if one did not, `sent` is only missing.
    let _ = value.setattr("sent", sent);
    add_note(
        py,
        &err,
        &format!("{sent} items of the batch were sent before this error; the others were not"),
    );
    err
}

/// Adds `note` to `err` (BaseException.add_note: shown under its message).
fn add_note(py: Python<'_>, err: &PyErr, note: &str) {
    // A note is a courtesy: an exception without add_note keeps its message.
    let _ = err.value(py).call_method1("add_note", (note,));
}

/// Calls `f` on the bytes of a bytes-like object (bytes, bytearray,
/// memoryview, a numpy array of any dtype, ...: any C-contiguous buffer),
/// with the GIL held.
pub(crate) fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    let export = Export::new(data)?;
    Ok(f(export.bytes()))
}

/// An export of a bytes-like object's buffer, released when dropped; made
/// and dropped with the GIL held (it is not `Send`: it holds a pointer).
struct Export(ffi::Py_buffer);

impl Export {
    /// Exports `data`'s bytes (PyBUF_SIMPLE: C-contiguous bytes, whatever
    /// the items' type); a TypeError naming the type if it has none.
    fn new(data: &Bound<'_, PyAny>) -> PyResult<Export> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `data` is a live object and `view` room for a Py_buffer;
        // PyBUF_SIMPLE asks for C-contiguous bytes (exporters of anything
        // else refuse), whatever the items' type.
        if unsafe { ffi::PyObject_GetBuffer(data.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) } == -1 {
            return Err(not_bytes_like(data, "data", PyErr::fetch(data.py())));
        }
        // SAFETY: the call succeeded, so it filled `view`.
        Ok(Export(unsafe { view.assume_init() }))
    }

    /// The exported bytes.
    fn bytes(&self) -> &[u8] {
        let len = usize::try_from(self.0.len).unwrap_or(0);
        if len == 0 || self.0.buf.is_null() {
            return &[];
        }
        // SAFETY: the buffer stays exported until `self` drops, which the
        // borrow outlives not; PyBUF_SIMPLE makes it `len` contiguous bytes
        // from `buf`; an `Export` is only used with the GIL held, so no
        // Python code writes the bytes while they are read.
        unsafe { std::slice::from_raw_parts(self.0.buf as *const u8, len) }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // SAFETY: `self.0` was filled by a successful `PyObject_GetBuffer`
        // and is released once, here, with the GIL held (an `Export` is
        // neither `Send` nor dropped inside `Python::detach`).
        unsafe { ffi::PyBuffer_Release(&mut self.0) }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// The TypeError for `what` (`obj`), which has no contiguous bytes.
fn not_bytes_like(obj: &Bound<'_, PyAny>, what: &str, cause: PyErr) -> PyErr {
    let err = PyTypeError::new_err(format!(
        "{what} must be a contiguous bytes-like object (bytes, bytearray, memoryview, numpy array, ...), not {}",
        type_name(obj)
    ));
    err.set_cause(obj.py(), Some(cause));
    err
}

/// One item of a batch to send: its bytes, held (exported) for the call,
/// so that they cannot be resized meanwhile.
enum Payload<'py> {
    Bytes(Bound<'py, PyBytes>),
    Buffer(Export),
}

impl Payload<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b.as_bytes(),
            Payload::Buffer(e) => e.bytes(),
        }
    }

    /// Its bytes to read without the GIL: a `bytes` object's own, a
    /// private copy of another's (see [`without_gil`]).
    fn without_gil(&self) -> Cow<'_, [u8]> {
        match self {
            Payload::Bytes(b) => Cow::Borrowed(b.as_bytes()),
            Payload::Buffer(e) => Cow::Owned(tachyon::platform::copy::to_vec(e.bytes())),
        }
    }
}

/// The items of `send_many`, every one checked before anything is sent.
fn payloads<'py>(items: &Bound<'py, PyAny>) -> PyResult<Vec<Payload<'py>>> {
    // SAFETY: `items` is a live object; PyObject_CheckBuffer only looks at
    // its type.
    let one_buffer = unsafe { ffi::PyObject_CheckBuffer(items.as_ptr()) } == 1;
    if one_buffer || items.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "items must be an iterable of bytes-like objects, not one {} (send it with send, or put it in a list)",
            type_name(items)
        )));
    }
    let iter = items.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "items must be an iterable of bytes-like objects, not {}",
            type_name(items)
        ))
    })?;
    let mut out = Vec::with_capacity(items.len().unwrap_or(0).min(1 << 16));
    for (i, item) in iter.enumerate() {
        let item = item?;
        let payload = match item.cast::<PyBytes>() {
            Ok(bytes) => Payload::Bytes(bytes.clone()),
            Err(_) => Payload::Buffer(
                Export::new(&item).map_err(|e| not_bytes_like(&item, &format!("items[{i}]"), e))?,
            ),
        };
        if payload.bytes().len() > MAX_MESSAGE {
            let py = items.py();
            let err = to_py(
                py,
                tachyon::Error::MessageTooLarge {
                    size: payload.bytes().len(),
                    max: MAX_MESSAGE,
                    hint: TOO_LARGE,
                },
            );
            add_note(py, &err, &format!("items[{i}] is too large; nothing of the batch was sent"));
            return Err(err);
        }
        out.push(payload);
    }
    Ok(out)
}

/// Fills `view` for an export of `len` bytes at `ptr` by `obj`.
///
/// # Safety
/// `view` is the `Py_buffer` the interpreter passed to `__getbuffer__`, and
/// `ptr..ptr + len` stays valid (and, if `readonly` is false, writable)
/// until the matching `__releasebuffer__`.
unsafe fn fill_view(
    obj: &Bound<'_, PyAny>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
    ptr: *mut u8,
    len: usize,
    readonly: bool,
) -> PyResult<()> {
    let len = ffi::Py_ssize_t::try_from(len).map_err(|_| PyValueError::new_err("buffer too large"))?;
    // SAFETY: the caller's contract; PyBuffer_FillInfo checks `flags`
    // (refusing a writable export of read-only data), takes a new reference
    // to `obj` and sets format, shape and strides for bytes.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(view, obj.as_ptr(), ptr as *mut c_void, len, c_int::from(readonly), flags)
    };
    if rc == -1 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

/// Releases the cached memoryview `view` of an object with `exports` live
/// exports, then checks that none is left: Ok if the memory can go.
fn release_views(
    py: Python<'_>,
    view: &Mutex<Option<Py<PyMemoryView>>>,
    exports: &AtomicUsize,
    what: &str,
) -> PyResult<()> {
    let cached = lock(view).take();
    if let Some(mv) = cached {
        // The lock is not held here: releasing the memoryview calls
        // `__releasebuffer__`, which counts the export down.
        if mv.bind(py).call_method0("release").is_err() {
            *lock(view) = Some(mv);
            return Err(still_viewed(what));
        }
    }
    if exports.load(Ordering::Acquire) > 0 {
        return Err(still_viewed(what));
    }
    Ok(())
}

fn still_viewed(what: &str) -> PyErr {
    buffer_error(format!(
        "the {what} is still viewed (a numpy array, a slice of .data or another memoryview of it is alive); \
         delete those views, or copy what you need with bytes(...), before releasing it"
    ))
}

/// One receive over several partitions of a topic: from Topic.subscribe.
///
///     sub = topic.subscribe()            # every partition
///     msg = sub.receive(timeout_ns=-1)   # from whichever has a message
///     print(msg.partition, bytes(msg.data))
///
/// Iterating over it receives for ever (Ctrl+C ends it). Every wait
/// releases the GIL and is interrupted by Ctrl+C.
#[pyclass(module = "tachyon", name = "Subscription", frozen)]
pub struct PySubscription {
    sub: Subscription,
}

#[pymethods]
impl PySubscription {
    /// The partitions it receives from, in the order it looks at them.
    #[getter]
    fn partitions(&self) -> Vec<u32> {
        self.sub.partitions().to_vec()
    }

    /// Waits up to timeout_ns (-1: for ever; 0: look once) for a message
    /// in any of the partitions and returns it (Message.partition says
    /// which). Raises tachyon.TimeoutError when the wait runs out.
    #[pyo3(signature = (timeout_ns=-1), text_signature = "(self, /, timeout_ns=-1)")]
    fn receive(&self, py: Python<'_>, timeout_ns: i64) -> PyResult<PyMessage> {
        let sub = &self.sub;
        let msg = first_message(py, timeout_ns, || sub.try_receive(), |slice| sub.receive(slice))?;
        Ok(PyMessage::new(msg))
    }

    /// Receives up to `max` messages in one call, as a list of Message:
    /// waits up to timeout_ns for the first, as receive does
    /// (tachyon.TimeoutError if none comes; the GIL released, Ctrl+C
    /// raises KeyboardInterrupt), then takes those already queued in any
    /// of the partitions, without waiting, each partition in turn.
    /// Per-key order holds within the list and across calls. Release them
    /// with tachyon.release_all(msgs). ValueError if max is less than 1.
    #[pyo3(signature = (max=64, timeout_ns=-1), text_signature = "(self, /, max=64, timeout_ns=-1)")]
    fn receive_many<'py>(&self, py: Python<'py>, max: i64, timeout_ns: i64) -> PyResult<Bound<'py, PyList>> {
        let sub = &self.sub;
        let (now, wait) = (|| sub.try_receive(), |slice| sub.receive(slice));
        receive_batch(py, max, timeout_ns, now, wait, |msg| Ok(PyMessage::new(msg)))
    }

    /// Like receive_many, but copies each message into a new bytes object
    /// and releases it at once (the copy path, as receive_bytes): a list
    /// of bytes.
    #[pyo3(signature = (max=64, timeout_ns=-1), text_signature = "(self, /, max=64, timeout_ns=-1)")]
    fn receive_many_bytes<'py>(
        &self,
        py: Python<'py>,
        max: i64,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let sub = &self.sub;
        let lend = || Ok(sub.try_receive_with(|m| bytes_of(py, m))?.map(|(_, b)| b));
        let wait = |wait| sub.receive_with(wait, bytes_attached).map(|(_, b)| b);
        receive_copies(py, max, timeout_ns, lend, wait)
    }

    /// Like receive, but copies the message into a new bytes object and
    /// releases it at once (the copy path: on a topic with inline slots an
    /// inline message is copied out of its slot, with no chunk).
    #[pyo3(signature = (timeout_ns=-1), text_signature = "(self, /, timeout_ns=-1)")]
    fn receive_bytes<'py>(&self, py: Python<'py>, timeout_ns: i64) -> PyResult<Bound<'py, PyBytes>> {
        let sub = &self.sub;
        let lend = || Ok(sub.try_receive_with(|m| bytes_of(py, m))?.map(|(_, b)| b));
        let wait = |wait| sub.receive_with(wait, bytes_attached).map(|(_, b)| b);
        receive_copy(py, timeout_ns, lend, wait)
    }

    /// The next message of any of the partitions if there is one now,
    /// else None.
    fn try_receive(&self, py: Python<'_>) -> PyResult<Option<PyMessage>> {
        Ok(self.sub.try_receive().py(py)?.map(PyMessage::new))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<PyMessage> {
        self.receive(py, -1)
    }

    fn __repr__(&self) -> String {
        format!("Subscription({:?}, partitions={:?})", self.sub.topic().name(), self.sub.partitions())
    }
}

/// A member of a consumer group of a topic (from Topic.join_group): every
/// group receives every message published after it joined; the members of
/// one group compete, each message going to one of them. The payload is
/// not copied however many groups read it.
///
///     audit = topic.join_group("audit")
///     msg = audit.receive(0, timeout_ns=-1)
///     sub = audit.subscribe()            # every partition, one receive
///     audit.leave()                      # True: no member any more
///
/// A member is a process: its Groups of one group (and the Messages and
/// Subscriptions received or opened through them) share one membership,
/// which ends with the last of them left or garbage-collected. Every wait
/// releases the GIL and is interrupted by Ctrl+C.
#[pyclass(module = "tachyon", name = "Group", frozen)]
pub struct PyGroup {
    /// `None` once left. In an `Arc` so that a call takes it out of the
    /// lock at once and waits without it.
    group: Mutex<Option<Arc<Group>>>,
    name: String,
    topic: String,
    slot: usize,
}

impl PyGroup {
    fn new(group: Group) -> Self {
        PyGroup {
            name: group.name().to_owned(),
            topic: group.topic().name().to_owned(),
            slot: group.slot(),
            group: Mutex::new(Some(Arc::new(group))),
        }
    }

    /// The group, or ValueError once left.
    fn get(&self) -> PyResult<Arc<Group>> {
        lock(&self.group)
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("group {:?} was left (Group.leave)", self.name)))
    }
}

#[pymethods]
impl PyGroup {
    /// The group's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The group's slot in its topic (1 to max_groups - 1).
    #[getter]
    fn slot(&self) -> usize {
        self.slot
    }

    /// The name of the group's topic.
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }

    /// True once left (Group.leave).
    #[getter]
    fn left(&self) -> bool {
        lock(&self.group).is_none()
    }

    /// Messages waiting for the group in `partition` now (a snapshot).
    fn depth(&self, py: Python<'_>, partition: u32) -> PyResult<usize> {
        self.get()?.depth(partition).py(py)
    }

    /// Messages of the group dropped unread from its full partitions by
    /// publishers of an overrunning topic (create_topic's overrun), since
    /// the group was created (0 on other topics). Each group has its own
    /// count: a slow group misses messages, a fast one does not.
    fn missed(&self) -> PyResult<u64> {
        Ok(self.get()?.missed())
    }

    /// Waits up to timeout_ns (-1: for ever; 0: look once) for the group's
    /// next message in `partition` and returns it as a Message (release
    /// it, or use it as a context manager). Raises tachyon.TimeoutError
    /// when the wait runs out. The GIL is released while waiting, and
    /// Ctrl+C raises KeyboardInterrupt.
    #[pyo3(signature = (partition=0, timeout_ns=-1), text_signature = "(self, /, partition=0, timeout_ns=-1)")]
    fn receive(&self, py: Python<'_>, partition: u32, timeout_ns: i64) -> PyResult<PyMessage> {
        let group = self.get()?;
        let msg = first_message(
            py,
            timeout_ns,
            || group.try_receive(partition),
            |slice| group.receive(partition, slice),
        )?;
        Ok(PyMessage::new(msg))
    }

    /// The group's next message of `partition` if there is one now, else
    /// None.
    #[pyo3(signature = (partition=0))]
    fn try_receive(&self, py: Python<'_>, partition: u32) -> PyResult<Option<PyMessage>> {
        Ok(self.get()?.try_receive(partition).py(py)?.map(PyMessage::new))
    }

    /// Like receive, but copies the message into a new bytes object and
    /// releases it at once (the copy path, as Topic.receive_bytes).
    #[pyo3(signature = (partition=0, timeout_ns=-1), text_signature = "(self, /, partition=0, timeout_ns=-1)")]
    fn receive_bytes<'py>(
        &self,
        py: Python<'py>,
        partition: u32,
        timeout_ns: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let group = self.get()?;
        let lend = || group.try_receive_with(partition, |m| bytes_of(py, m));
        receive_copy(py, timeout_ns, lend, |wait| group.receive_with(partition, wait, bytes_attached))
    }

    /// A Subscription that receives the group's messages: one receive over
    /// several partitions (`partitions`: an iterable of partition numbers;
    /// None, the default: all of them), as Topic.subscribe does for the
    /// default group. It keeps the membership while it lives.
    #[pyo3(signature = (partitions=None))]
    fn subscribe(&self, py: Python<'_>, partitions: Option<Vec<u32>>) -> PyResult<PySubscription> {
        let which = partitions.map_or(Partitions::All, Partitions::Set);
        let sub = self.get()?.subscribe(which).py(py)?;
        Ok(PySubscription { sub })
    }

    /// Leaves the group: this Group's share of the process's membership
    /// ends, and every later call on it but the properties raises
    /// ValueError (a second leave too). Returns True if that ended the
    /// membership, False while other Groups of the group in this process,
    /// Messages received through one and not released, Subscriptions of
    /// one, or calls in flight on this one (in other threads) keep it: the
    /// last of them gone ends it. Ending it releases any hold the process
    /// still has in the group and takes it out of the group's record, so
    /// the group's messages go to its other members. A group left without
    /// a live member keeps its position (what is published meanwhile
    /// waits for it) for the region's group lease: a member joining within
    /// it goes on from there; then recovery drops it. tachyon.TimeoutError
    /// if the region's control lock stayed taken 5 s (the process then
    /// stays recorded as a member until it exits).
    fn leave(&self, py: Python<'_>) -> PyResult<bool> {
        let group = lock(&self.group).take();
        let group =
            group.ok_or_else(|| PyValueError::new_err(format!("group {:?} was left already", self.name)))?;
        match Arc::try_unwrap(group) {
            Ok(group) => py.detach(|| group.leave()).py(py),
            // A call in flight holds a clone: the share ends with it.
            Err(_) => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.left() { ", left" } else { "" };
        format!("Group({:?}, topic={:?}, slot={}{state})", self.name, self.topic, self.slot)
    }
}

/// A received message: a read-only view into shared memory.
///
/// msg.data is a memoryview of the bytes (no copy; np.frombuffer(msg.data,
/// dtype=...) makes an array without a copy too). release() returns the
/// chunk to the pool; it raises BufferError while a view other than
/// msg.data itself is alive (msg.data is released with it). A Message is a
/// context manager that releases on exit; one that is garbage-collected is
/// released too.
#[pyclass(module = "tachyon", name = "Message", frozen)]
pub struct PyMessage {
    msg: Mutex<Option<Message>>,
    view: Mutex<Option<Py<PyMemoryView>>>,
    exports: AtomicUsize,
    partition: u32,
    len: usize,
}

impl PyMessage {
    fn new(msg: Message) -> Self {
        let len = msg.len();
        let partition = msg.partition();
        PyMessage {
            msg: Mutex::new(Some(msg)),
            view: Mutex::new(None),
            exports: AtomicUsize::new(0),
            partition,
            len,
        }
    }
}

#[pymethods]
impl PyMessage {
    /// The message's bytes: a read-only memoryview into shared memory.
    #[getter]
    fn data<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        let this = slf.get();
        if let Some(mv) = lock(&this.view).as_ref() {
            return Ok(mv.bind(slf.py()).clone());
        }
        let mv = PyMemoryView::from(slf.as_any())?;
        *lock(&this.view) = Some(mv.clone().unbind());
        Ok(mv)
    }

    /// The partition it was received from.
    #[getter]
    fn partition(&self) -> u32 {
        self.partition
    }

    /// True once released.
    #[getter]
    fn released(&self) -> bool {
        lock(&self.msg).is_none()
    }

    /// A copy of the bytes.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let guard = lock(&self.msg);
        let msg = guard.as_ref().ok_or_else(released_error)?;
        Ok(bytes_of(py, msg)?.into_bound(py))
    }

    /// Returns the chunk to the pool. BufferError if views of it other
    /// than .data are alive (delete them first); a second call does nothing.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        if lock(&self.msg).is_none() {
            return Ok(());
        }
        release_views(py, &self.view, &self.exports, "message")?;
        let msg = lock(&self.msg).take();
        drop(msg);
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if lock(&self.msg).is_some() { "" } else { ", released" };
        format!("Message(len={}, partition={}{state})", self.len, self.partition)
    }

    /// # Safety
    /// Called by the interpreter with a `Py_buffer` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let guard = lock(&this.msg);
        let msg = guard.as_ref().ok_or_else(released_error)?;
        // SAFETY: `view` comes from the interpreter; the chunk stays HELD by
        // `msg` until `release`, which refuses while `exports` > 0 (counted
        // up here, down in `__releasebuffer__`), and a Message is never
        // dropped while an export holds a reference to it.
        unsafe { fill_view(slf.as_any(), view, flags, msg.as_ptr() as *mut u8, msg.len(), true)? };
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// # Safety
    /// Called by the interpreter once per successful `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(view) = self.view.try_lock() {
            if let Some(mv) = view.as_ref() {
                visit.call(mv)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let view = lock(&self.view).take();
        drop(view);
    }
}

/// Releases every Message of `messages` (an iterable, such as the list
/// receive_many returned). A message still viewed (a numpy array or a
/// slice of its data alive) stays unreleased and the others are released;
/// then BufferError says how many are left: delete their views and call
/// release_all again (released messages are skipped). TypeError, before
/// anything is released, if an item is not a Message.
#[pyfunction]
pub fn release_all(py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
    let iter = messages.try_iter().map_err(|_| {
        PyTypeError::new_err(format!("messages must be an iterable of Message, not {}", type_name(messages)))
    })?;
    let mut all = Vec::with_capacity(messages.len().unwrap_or(0));
    for (i, item) in iter.enumerate() {
        let item = item?;
        match item.cast_into::<PyMessage>() {
            Ok(msg) => all.push(msg),
            Err(e) => {
                return Err(PyTypeError::new_err(format!(
                    "messages[{i}] is a {}, not a tachyon.Message; nothing was released",
                    type_name(&e.into_inner())
                )))
            }
        }
    }
    let mut viewed = 0;
    for msg in &all {
        let msg = msg.get();
        // The common case, a message whose bytes were never viewed: one
        // look at its view and exports (the GIL is held, so no export can
        // start meanwhile), then the chunk goes back.
        if lock(&msg.view).is_none() && msg.exports.load(Ordering::Acquire) == 0 {
            let held = lock(&msg.msg).take();
            drop(held);
            continue;
        }
        if let Err(e) = msg.release(py) {
            if !e.is_instance_of::<PyBufferError>(py) {
                return Err(e);
            }
            viewed += 1;
        }
    }
    if viewed > 0 {
        return Err(buffer_error(format!(
            "{viewed} of the {} messages are still viewed (a numpy array, a slice of .data or another memoryview \
             of each is alive) and were not released; the others were. Delete those views, or copy what you need \
             with bytes(...), and call release_all again",
            all.len()
        )));
    }
    Ok(())
}

fn released_error() -> PyErr {
    PyValueError::new_err("the message was released; its memory is back in the pool")
}

/// A chunk of the pool lent for writing: build the message in place, then
/// publish it.
///
/// loan.data is a writable memoryview of the chunk (len(loan) bytes).
/// publish(length, key) sends its first `length` bytes (all by default);
/// cancel() returns the chunk unpublished. As a context manager, a loan not
/// published by the end of the block is cancelled. Views must be gone
/// before publish (BufferError otherwise): a published chunk belongs to its
/// consumer.
#[pyclass(module = "tachyon", name = "Loan", frozen)]
pub struct PyLoan {
    loan: Mutex<Option<Loan>>,
    view: Mutex<Option<Py<PyMemoryView>>>,
    exports: AtomicUsize,
    size: usize,
}

#[pymethods]
impl PyLoan {
    /// The chunk's bytes: a writable memoryview into shared memory.
    #[getter]
    fn data<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        let this = slf.get();
        if let Some(mv) = lock(&this.view).as_ref() {
            return Ok(mv.bind(slf.py()).clone());
        }
        let mv = PyMemoryView::from(slf.as_any())?;
        *lock(&this.view) = Some(mv.clone().unbind());
        Ok(mv)
    }

    /// True once published or cancelled.
    #[getter]
    fn done(&self) -> bool {
        lock(&self.loan).is_none()
    }

    /// Publishes the first `length` bytes (None: all) with `key`, waiting
    /// up to timeout_ns (-1: for ever) for room in the key's partition.
    /// If it fails, the chunk goes back to the pool and the message is
    /// dropped.
    #[pyo3(signature = (length=None, key=0, timeout_ns=-1), text_signature = "(self, /, length=None, key=0, timeout_ns=-1)")]
    fn publish(&self, py: Python<'_>, length: Option<usize>, key: u64, timeout_ns: i64) -> PyResult<()> {
        if let Some(n) = length {
            if n > self.size {
                return Err(PyValueError::new_err(format!(
                    "length {n} is more than the loan's {} bytes",
                    self.size
                )));
            }
        }
        release_views(py, &self.view, &self.exports, "loan")?;
        let mut loan = lock(&self.loan)
            .take()
            .ok_or_else(|| PyValueError::new_err("the loan was already published or cancelled"))?;
        if let Some(n) = length {
            loan.truncate(n);
        }
        let timeout = timeout_of(timeout_ns);
        let topic = loan.topic();
        let partition = topic.partition_of(Key(key));
        if timeout.is_none_or(|t| !t.is_zero()) {
            // A publish cannot be retried (it consumes the loan): wait for
            // room in slices first, handling signals, then publish with
            // what is left of the timeout.
            let capacity = topic.capacity();
            let start = std::time::Instant::now();
            in_slices(py, timeout, timed_out, |slice| {
                let end = std::time::Instant::now() + slice.unwrap_or(Duration::ZERO);
                loop {
                    if topic.depth(partition)? < capacity {
                        return Ok(());
                    }
                    if std::time::Instant::now() >= end {
                        return Err(tachyon::Error::Timeout {
                            what: "room in the topic's partition",
                            waited: slice,
                        });
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
            })?;
            let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
            return py.detach(|| loan.publish(Key(key), left)).py(py);
        }
        loan.publish(Key(key), timeout).py(py)
    }

    /// Returns the chunk to the pool unpublished (nothing if already done).
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        release_views(py, &self.view, &self.exports, "loan")?;
        let loan = lock(&self.loan).take();
        drop(loan);
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.size
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.cancel(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if lock(&self.loan).is_some() { "" } else { ", done" };
        format!("Loan(len={}{state})", self.size)
    }

    /// # Safety
    /// Called by the interpreter with a `Py_buffer` to fill.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let mut guard = lock(&this.loan);
        let loan = guard.as_mut().ok_or_else(|| {
            PyValueError::new_err("the loan was published or cancelled; its memory is no longer yours")
        })?;
        let bytes: &mut [u8] = loan;
        // SAFETY: `view` comes from the interpreter; the chunk stays LOANED
        // to `loan`, and writable by its holder alone, until publish or
        // cancel, which refuse while `exports` > 0; a Loan is never dropped
        // while an export holds a reference to it.
        unsafe { fill_view(slf.as_any(), view, flags, bytes.as_mut_ptr(), bytes.len(), false)? };
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// # Safety
    /// Called by the interpreter once per successful `__getbuffer__`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(view) = self.view.try_lock() {
            if let Some(mv) = view.as_ref() {
                visit.call(mv)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let view = lock(&self.view).take();
        drop(view);
    }
}

/// A topic as Region.topics() lists it: configuration and counters.
#[pyclass(module = "tachyon", name = "TopicInfo", frozen, get_all)]
pub struct PyTopicInfo {
    /// The topic's name.
    name: String,
    /// Partitions.
    partitions: u32,
    /// Descriptors per partition.
    capacity: u32,
    /// "spin", "futex" or "hybrid".
    wait: &'static str,
    /// "at-most-once" or "at-least-once".
    delivery: &'static str,
    /// Messages published so far.
    published: u64,
    /// Messages received so far.
    received: u64,
    /// Corrupt descriptors met by consumers.
    corrupt: u64,
    /// Messages lost with a consumer that died holding them.
    lost: u64,
    /// Messages published while no group was joined on a topic without its
    /// default group: delivered to nobody.
    undelivered: u64,
    /// Messages dropped unread from full partitions of an overrunning
    /// topic, counted once per group that missed them.
    missed: u64,
}

impl From<tachyon::bus::TopicInfo> for PyTopicInfo {
    fn from(i: tachyon::bus::TopicInfo) -> Self {
        PyTopicInfo {
            name: i.name,
            partitions: i.partitions,
            capacity: i.capacity,
            wait: policy_name(i.wait),
            delivery: delivery_name(i.delivery),
            published: i.published,
            received: i.received,
            corrupt: i.corrupt,
            lost: i.lost,
            undelivered: i.undelivered,
            missed: i.missed,
        }
    }
}

#[pymethods]
impl PyTopicInfo {
    fn __repr__(&self) -> String {
        format!(
            "TopicInfo(name={:?}, partitions={}, capacity={}, wait={:?}, delivery={:?}, published={}, received={}, corrupt={}, lost={}, undelivered={}, missed={})",
            self.name, self.partitions, self.capacity, self.wait, self.delivery, self.published, self.received, self.corrupt, self.lost, self.undelivered, self.missed
        )
    }
}

/// One consumer group of a topic, as Topic.groups() lists it: a snapshot.
#[pyclass(module = "tachyon", name = "GroupInfo", frozen, get_all)]
pub struct PyGroupInfo {
    /// The group's name ("" for the default group).
    name: String,
    /// Its group slot (0: the default group).
    slot: usize,
    /// The slot's generation (a group dropped and created again in the
    /// same slot has the next one).
    generation: u32,
    /// True while the group is being dropped.
    draining: bool,
    /// Its member processes' tokens, as its record holds them (dead ones
    /// until recovery forgets them); empty for the default group, which
    /// has no membership record.
    members: Vec<u32>,
    /// How many of members are alive now.
    live_members: usize,
    /// When the group was first seen without a live member, ns since the
    /// Unix epoch (0: it has one, or it is the default group); recovery
    /// drops it once this is older than the region's group lease.
    empty_since_unix_ns: u64,
    /// Messages consumed through the group so far, all partitions.
    position: u64,
    /// Messages waiting for the group now, all partitions.
    lag: u64,
    /// Messages of the group dropped unread by overrunning publishers.
    missed: u64,
}

impl From<tachyon::bus::GroupReport> for PyGroupInfo {
    fn from(g: tachyon::bus::GroupReport) -> Self {
        PyGroupInfo {
            name: g.name,
            slot: g.slot,
            generation: g.generation,
            draining: g.draining,
            members: g.members,
            live_members: g.live_members,
            empty_since_unix_ns: g.empty_since_unix_ns,
            position: g.position,
            lag: g.lag,
            missed: g.missed,
        }
    }
}

#[pymethods]
impl PyGroupInfo {
    fn __repr__(&self) -> String {
        format!(
            "GroupInfo(name={:?}, slot={}, generation={}, draining={}, members={:?}, live_members={}, empty_since_unix_ns={}, position={}, lag={}, missed={})",
            self.name, self.slot, self.generation, if self.draining { "True" } else { "False" }, self.members,
            self.live_members, self.empty_since_unix_ns, self.position, self.lag, self.missed
        )
    }
}

/// Free chunks of one size class of the payload pool.
#[pyclass(module = "tachyon", name = "ClassStats", frozen, get_all)]
pub struct PyClassStats {
    /// Bytes per chunk.
    chunk_size: usize,
    /// Chunks in the class.
    chunks: usize,
    /// Chunks free now.
    free: usize,
}

#[pymethods]
impl PyClassStats {
    fn __repr__(&self) -> String {
        format!("ClassStats(chunk_size={}, chunks={}, free={})", self.chunk_size, self.chunks, self.free)
    }
}

/// What one Region.recover() reclaimed from dead processes.
#[pyclass(module = "tachyon", name = "Recovered", frozen, get_all)]
pub struct PyRecovered {
    /// Chunks a dead producer had loaned and not published.
    loans: usize,
    /// Free chunks a dead process kept for its next loans.
    cached: usize,
    /// Messages a dead consumer had received and not released (lost).
    held: usize,
    /// Chunks a dead producer was publishing when it died (lost).
    unpublished: usize,
    /// Messages a dead consumer had received on an at-least-once topic,
    /// published again.
    redelivered: usize,
    /// Such messages left for a later recovery (their partition is full).
    deferred: usize,
    /// Attach slots of dead processes marked free.
    slots: usize,
    /// Damaged ring cells and cursors repaired.
    repaired: usize,
    /// Chunks set aside for good (their state word could not be trusted).
    quarantined: usize,
    /// Damaged parts of the region header and topic directory restored.
    directory: usize,
    /// Chunks returned to the pool in all.
    total: usize,
}

impl From<tachyon::bus::Recovered> for PyRecovered {
    fn from(r: tachyon::bus::Recovered) -> Self {
        PyRecovered {
            loans: r.loans,
            cached: r.cached,
            held: r.held,
            unpublished: r.unpublished,
            redelivered: r.redelivered,
            deferred: r.deferred,
            slots: r.slots,
            repaired: r.repaired,
            quarantined: r.quarantined,
            directory: r.directory,
            total: r.total(),
        }
    }
}

#[pymethods]
impl PyRecovered {
    fn __repr__(&self) -> String {
        format!(
            "Recovered(loans={}, cached={}, held={}, unpublished={}, redelivered={}, deferred={}, slots={}, repaired={}, quarantined={}, directory={}, total={})",
            self.loans,
            self.cached,
            self.held,
            self.unpublished,
            self.redelivered,
            self.deferred,
            self.slots,
            self.repaired,
            self.quarantined,
            self.directory,
            self.total
        )
    }
}
