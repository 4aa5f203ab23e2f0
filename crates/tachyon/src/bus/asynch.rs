//! async forms of the bus's waits: receive (topic partition or
//! subscription), loan, publish, send; a subscription as a `Stream`.
//!
//! Runtime-agnostic: the futures are woken by this process's waiter
//! thread (`sync/reactor.rs`), not by a runtime's reactor, so they run
//! under tokio, async-std, smol, `futures::executor` or any executor.
//!
//! Cancellation safety: every poll tries its operation once, without
//! blocking, and either completes it or leaves nothing behind: no ring
//! cell is claimed and no chunk taken across a `Pending`. Dropping a
//! receive or loan future loses no message and leaks no chunk. Dropping a
//! publish future drops its loan's message (the chunk goes back to the
//! pool), as dropping an unpublished [`Loan`] does.
//!
//! Under a [`WaitPolicy::Spin`](crate::sync::WaitPolicy::Spin) topic
//! (whose producers wake nobody), a pending future asks to be polled again
//! at once: it spins, as that policy says.

use super::subscription::Subscription;
use super::topic::{Key, Loan, Message, Topic};
use crate::error::{Error, Result};
use crate::sync::reactor::Parked;
use crate::sync::waitv::SleepPoint;
use crate::sync::WaitPolicy;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The poll of a bus future: spins on `Spin` topics, else parks with the
/// waiter thread. `maintain` runs when the future has been pending long
/// (see `Parked::overdue`).
fn poll_bus<T>(
    parked: &mut Parked,
    cx: &mut Context<'_>,
    policy: WaitPolicy,
    points: Result<Vec<SleepPoint<'_>>>,
    maintain: impl FnOnce(),
    mut attempt: impl FnMut() -> Option<Result<T>>,
) -> Poll<Result<T>> {
    if parked.overdue() {
        maintain();
    }
    let points = match points {
        Ok(p) => p,
        Err(e) => return Poll::Ready(Err(e)),
    };
    if policy == WaitPolicy::Spin {
        if let Some(r) = attempt() {
            return Poll::Ready(r);
        }
        cx.waker().wake_by_ref();
        return Poll::Pending;
    }
    parked.poll(cx, &points, attempt)
}

/// What a bus future owns: its registration first (dropped first, while
/// the topic still keeps the mapping its words are in), then the topic.
struct Owned<T> {
    parked: Parked,
    topic: Topic,
    extra: T,
}

impl Topic {
    /// The async form of [`receive`](Self::receive): resolves to the next
    /// message of `partition`. Cancellation-safe: dropping the future
    /// before it resolves takes no message. The future owns a handle to the
    /// topic (`Send + 'static`: it can be spawned).
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-receive-async-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let got = rt.block_on(async {
    ///     let pending = topic.receive_async(0);
    ///     topic.send(b"hi", Key(1), None)?;
    ///     Ok::<_, tachyon::Error>(pending.await?.to_vec())
    /// })?;
    /// assert_eq!(got, b"hi");
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_async(&self, partition: u32) -> impl Future<Output = Result<Message>> + Send + 'static {
        let mut me = Owned { parked: Parked::default(), topic: self.share(), extra: partition };
        poll_fn(move |cx| {
            let Owned { parked, topic, extra: p } = &mut me;
            let points = topic.waits(*p).map(|w| vec![w.not_empty.sleep_point_with(w.light)]);
            let maintain = || {
                topic.region().heartbeat();
                topic.region().recover_now_and_then();
                topic.repair_partition(*p);
            };
            poll_bus(parked, cx, topic.config().wait, points, maintain, || topic.try_receive(*p).transpose())
        })
    }

    /// The async form of [`loan`](Self::loan): resolves to a loan once a
    /// chunk of `size` bytes is free. Cancellation-safe: a chunk is taken
    /// only in the poll that resolves. [`Error::MessageTooLarge`] above the
    /// largest chunk.
    ///
    /// ```
    /// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-loan-async-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default())?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// rt.block_on(async {
    ///     let mut loan = topic.loan_async(5).await?;
    ///     loan.copy_from_slice(b"hello");
    ///     loan.publish_async(Key(1)).await
    /// })?;
    /// assert_eq!(&*topic.receive(0, None)?, b"hello");
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn loan_async(&self, size: usize) -> impl Future<Output = Result<Loan>> + Send + 'static {
        let mut me = Owned { parked: Parked::default(), topic: self.share(), extra: size };
        poll_fn(move |cx| {
            let Owned { parked, topic, extra: size } = &mut me;
            let region = topic.region();
            let points = Ok(vec![region.freed().sleep_point()]);
            let maintain = || {
                region.heartbeat();
                region.recover_now_and_then();
            };
            // The pool's waits do not depend on the topic's policy.
            poll_bus(parked, cx, WaitPolicy::Futex, points, maintain, || match topic.try_loan(*size) {
                Err(Error::PoolExhausted { .. }) => None,
                r => Some(r),
            })
        })
    }

    /// The async form of [`send`](Self::send): copies `data` into a chunk
    /// (waiting for one) and publishes it with `key` (waiting for room).
    /// Dropping the future before it resolves sends nothing.
    pub async fn send_async(&self, data: &[u8], key: Key) -> Result<()> {
        let mut loan = self.loan_async(data.len()).await?;
        crate::platform::copy::copy(&mut loan, data);
        loan.publish_async(key).await
    }
}

impl Loan {
    /// The async form of [`publish`](Self::publish): resolves once the
    /// descriptor is in the key's partition (waiting while it is full).
    /// Dropping the future before it resolves drops the message (its chunk
    /// goes back to the pool), as dropping the loan does.
    pub fn publish_async(self, key: Key) -> impl Future<Output = Result<()>> + Send + 'static {
        let topic = self.topic().share();
        let mut me = Owned { parked: Parked::default(), topic, extra: self };
        poll_fn(move |cx| {
            let Owned { parked, topic, extra: loan } = &mut me;
            let p = topic.partition_of(key);
            let points = topic.waits(p).map(|w| vec![w.not_full.sleep_point_with(w.light)]);
            let maintain = || {
                topic.region().heartbeat();
                topic.repair_partition(p);
            };
            poll_bus(parked, cx, topic.config().wait, points, maintain, || {
                let r = loan.publish_now(key);
                if r.is_none() {
                    // Full: woken once the consumers have freed a gap, as a blocked publish is.
                    if let (Ok(ring), Ok(waits)) = (topic.ring(p), topic.waits(p)) {
                        ring.ask_for_room(&waits);
                    }
                }
                r
            })
        })
    }
}

impl Subscription {
    /// The async form of [`receive`](Self::receive): resolves to the next
    /// message of any of the subscription's partitions. Cancellation-safe:
    /// dropping it before it resolves takes no message.
    ///
    /// ```
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-sub-async-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(4))?;
    /// let sub = topic.subscribe(Partitions::All)?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// rt.block_on(async {
    ///     topic.send(b"x", Key(3), None)?;
    ///     assert_eq!(&*sub.receive_async().await?, b"x");
    ///     Ok::<(), tachyon::Error>(())
    /// })?;
    /// # drop(sub); drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_async(&self) -> impl Future<Output = Result<Message>> + Send + '_ {
        let mut parked = Parked::default();
        poll_fn(move |cx| self.poll_receive(&mut parked, cx))
    }

    fn poll_receive(&self, parked: &mut Parked, cx: &mut Context<'_>) -> Poll<Result<Message>> {
        let policy = self.topic().config().wait;
        poll_bus(parked, cx, policy, self.sleep_points(), || self.maintain(), || self.take())
    }
}

/// A subscription is an endless stream of its messages (an error, such as a
/// corrupt descriptor, is an item too; the stream goes on after it).
/// Cancellation-safe like [`Subscription::receive_async`].
///
/// ```
/// use futures_core::Stream;
/// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-sub-stream-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let topic = region.create_topic("t", TopicConfig::default().partitions(2))?;
/// let mut sub = topic.subscribe(Partitions::All)?;
/// topic.send(b"a", Key(1), None)?;
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let first = rt.block_on(std::future::poll_fn(|cx| std::pin::Pin::new(&mut sub).poll_next(cx)));
/// assert_eq!(&*first.unwrap()?, b"a");
/// # drop(sub); drop(topic); drop(region); Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
impl futures_core::Stream for Subscription {
    type Item = Result<Message>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Message>>> {
        let this = self.get_mut();
        // The registration lives in the subscription (it is withdrawn when
        // the subscription drops, before its topic handle).
        let mut parked = std::mem::take(&mut this.parked);
        let r = this.poll_receive(&mut parked, cx);
        this.parked = parked;
        r.map(Some)
    }
}
