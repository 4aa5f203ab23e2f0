//! Subscriptions: one consumer of several partitions of a topic, with one
//! wait woken by any of them.
//!
//! A [`Subscription`] owns a set of partitions ([`Partitions::All`] or a
//! chosen [`Partitions::Set`]). [`receive`](Subscription::receive) takes
//! the next message of whichever partition has one, starting each look at
//! the partition after the one it last took from (round robin), so that a
//! busy partition cannot starve the others. Messages of one key stay in
//! order: a key maps to one partition, and a partition is a FIFO.
//!
//! # One wait for many partitions
//!
//! With nothing to take, the receive sleeps on every partition's
//! "not empty" wait cell at once, with one `futex_waitv` system call (see
//! `sync/waitv.rs`): it registers as a sleeper in each cell, fences, reads
//! each cell's sequence word, looks at the partitions once more and sleeps
//! on all the words. A producer publishing to any of them runs the
//! notifier side it always runs (fence, look at the sleepers of its
//! partition's cell, bump and wake), so the wake-up reaches the
//! subscription without a change to the publish path, and without being
//! lost. Under [`WaitPolicy::Spin`](crate::sync::WaitPolicy::Spin) topics
//! (whose producers never wake anybody) it spins over the partitions.
//!
//! While it sleeps it wakes every [`RECOVERY_INTERVAL`] (50 ms) to beat its
//! heartbeat and repair what dead peers left in its partitions, as
//! [`Topic::receive`] does.
//!
//! Consumers of one partition compete (each message goes to one of them),
//! whether they use a subscription or [`Topic::receive`]. A subscription is
//! the unit that consumer groups (every group seeing every message) will
//! extend; today every subscription is in the topic's one default group.

use super::region::RECOVERY_INTERVAL;
use super::topic::Group;
use super::topic::{Message, ReceiveStop, Topic};
use crate::error::{Error, Result};
use crate::platform::atomic::Ordering;
use crate::sync::waitv::{self, SleepPoint};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// What a receive on a subscription waits for.
const WAIT_MESSAGE: &str = "a message in the subscription's partitions";

/// Which partitions of a topic a [`Subscription`] receives from.
///
/// ```
/// use tachyon::bus::Partitions;
/// assert_eq!(Partitions::from(3), Partitions::Set(vec![3]));
/// assert_eq!(Partitions::default(), Partitions::All);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Partitions {
    /// Every partition of the topic.
    #[default]
    All,
    /// These partitions (each `0..partitions`; duplicates count once).
    Set(Vec<u32>),
}

impl From<u32> for Partitions {
    fn from(p: u32) -> Partitions {
        Partitions::Set(vec![p])
    }
}

impl From<Vec<u32>> for Partitions {
    fn from(ps: Vec<u32>) -> Partitions {
        Partitions::Set(ps)
    }
}

impl From<&[u32]> for Partitions {
    fn from(ps: &[u32]) -> Partitions {
        Partitions::Set(ps.to_vec())
    }
}

/// A consumer of several partitions of one topic: one blocking
/// [`receive`](Self::receive) takes from whichever has a message, fairly.
/// Made by [`Topic::subscribe`].
///
/// Owned like a [`Topic`] (no lifetime, `Send + Sync`): it can live in a
/// struct or move into a thread or task. It is also a
/// [`Stream`](futures_core::Stream) of messages, and has
/// [`receive_async`](Self::receive_async) (see `docs/async.md`).
///
/// ```
/// use std::time::Duration;
/// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-subscription-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let topic = region.create_topic("orders", TopicConfig::default().partitions(4))?;
/// let sub = topic.subscribe(Partitions::All)?;
///
/// // Keys spread over the 4 partitions; one receive loop gets them all.
/// for k in 0..8u64 {
///     topic.send(&k.to_le_bytes(), Key(k), None)?;
/// }
/// let mut got = Vec::new();
/// for _ in 0..8 {
///     let msg = sub.receive(Some(Duration::from_secs(5)))?;
///     got.push(u64::from_le_bytes(msg[..8].try_into().unwrap()));
/// }
/// got.sort();
/// assert_eq!(got, (0..8).collect::<Vec<_>>());
/// assert!(sub.try_receive()?.is_none());
/// # drop(sub); drop(topic); drop(region); Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
pub struct Subscription {
    /// The registration of the [`Stream`](futures_core::Stream) poll (it
    /// points into the mapping `topic` keeps: dropped first).
    pub(super) parked: crate::sync::reactor::Parked,
    topic: Topic,
    /// The consumer group it receives for (`None`: the default group).
    group: Option<Group>,
    /// The group slot whose rings it reads (0: the default group's).
    slot: usize,
    partitions: Box<[u32]>,
    /// Where the next look starts (an index into `partitions`).
    next: AtomicUsize,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("topic", &self.topic.name())
            .field("group_slot", &self.slot)
            .field("partitions", &self.partitions)
            .finish()
    }
}

impl Topic {
    /// A [`Subscription`] to `partitions` of this topic: one blocking
    /// receive over all of them. [`Error::InvalidArgument`] for an empty
    /// set or a partition the topic does not have.
    ///
    /// ```
    /// use tachyon::bus::{Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-subscribe-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(4))?;
    /// assert_eq!(topic.subscribe(Partitions::All)?.partitions(), &[0, 1, 2, 3]);
    /// assert_eq!(topic.subscribe(Partitions::Set(vec![3, 1, 3]))?.partitions(), &[1, 3]);
    /// assert!(topic.subscribe(Partitions::Set(vec![4])).is_err());
    /// assert!(topic.subscribe(Partitions::Set(vec![])).is_err());
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn subscribe(&self, partitions: impl Into<Partitions>) -> Result<Subscription> {
        if !self.config().default_group {
            return Err(self.no_default_group());
        }
        let parts = self.partition_set(partitions.into())?;
        Ok(Subscription {
            parked: Default::default(),
            topic: self.clone(),
            group: None,
            slot: 0,
            partitions: parts.into_boxed_slice(),
            next: AtomicUsize::new(0),
        })
    }

    /// The partitions `partitions` names, checked, ascending, without
    /// duplicates.
    fn partition_set(&self, partitions: Partitions) -> Result<Vec<u32>> {
        Ok(match partitions {
            Partitions::All => (0..self.partitions()).collect(),
            Partitions::Set(mut set) => {
                set.sort_unstable();
                set.dedup();
                if set.is_empty() {
                    return Err(Error::invalid("a subscription needs at least one partition"));
                }
                if let Some(bad) = set.iter().find(|&&p| p >= self.partitions()) {
                    return Err(Error::invalid(format!(
                        "partition {bad} of topic {:?}, which has {} (0 to {})",
                        self.name(),
                        self.partitions(),
                        self.partitions() - 1
                    )));
                }
                set
            }
        })
    }
}

impl Group {
    /// A [`Subscription`] to `partitions` of the group's topic that
    /// receives the group's messages: one blocking receive over all of
    /// them, [`receive_async`](Subscription::receive_async) and the
    /// [`Stream`](futures_core::Stream) of messages, as for the default
    /// group. It keeps this membership (a clone of the handle) for as long
    /// as it lives. [`Error::InvalidArgument`] for an empty set or a
    /// partition the topic does not have.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-group-subscribe-{}", std::process::id());
    /// let region =
    ///     Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(4))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(4))?;
    /// let audit = topic.join_group("audit")?.subscribe(Partitions::All)?;
    /// let billing = topic.join_group("billing")?.subscribe(Partitions::All)?;
    /// for k in 0..8u64 {
    ///     topic.send(&k.to_le_bytes(), Key(k), None)?;
    /// }
    /// // Each group sees all eight, whatever their partitions.
    /// for sub in [&audit, &billing] {
    ///     for _ in 0..8 {
    ///         sub.receive(Some(Duration::from_secs(5)))?;
    ///     }
    ///     assert!(sub.try_receive()?.is_none());
    /// }
    /// # drop((audit, billing, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn subscribe(&self, partitions: impl Into<Partitions>) -> Result<Subscription> {
        let parts = self.topic().partition_set(partitions.into())?;
        Ok(Subscription {
            parked: Default::default(),
            topic: self.topic().clone(),
            group: Some(self.clone()),
            slot: self.slot(),
            partitions: parts.into_boxed_slice(),
            next: AtomicUsize::new(0),
        })
    }
}

impl Subscription {
    /// The topic it receives from.
    pub fn topic(&self) -> &Topic {
        &self.topic
    }

    /// The consumer group it receives for (`None`: the topic's default
    /// group).
    pub fn group(&self) -> Option<&Group> {
        self.group.as_ref()
    }

    /// Its partitions, ascending.
    pub fn partitions(&self) -> &[u32] {
        &self.partitions
    }

    /// Waits up to `timeout` (`None`: for ever) for a message in any of the
    /// subscription's partitions and returns it (see [`Topic::receive`]).
    /// Looks at the partitions in turn, starting after the one it last
    /// took from. `Some(Duration::ZERO)` looks once: [`Error::Timeout`] if
    /// all are empty ([`try_receive`](Self::try_receive) says `Ok(None)`).
    /// A corrupt descriptor is dropped and reported as
    /// [`Error::Corrupt`]; the next call goes on.
    pub fn receive(&self, timeout: Option<Duration>) -> Result<Message> {
        self.receive_inner(timeout, None)
    }

    /// [`receive`](Self::receive) without waiting: `Ok(None)` if every
    /// partition is empty now.
    pub fn try_receive(&self) -> Result<Option<Message>> {
        self.take().transpose()
    }

    /// [`receive`](Self::receive) that another thread can end early with
    /// [`ReceiveStop::stop`]: it then returns [`Error::Interrupted`] (a
    /// message there already is still received).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Partitions, ReceiveStop, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-sub-until-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(2))?;
    /// let sub = topic.subscribe(Partitions::All)?;
    /// let stop = ReceiveStop::new();
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         std::thread::sleep(Duration::from_millis(20));
    ///         stop.stop();
    ///     });
    ///     let r = sub.receive_until(Some(Duration::from_secs(10)), &stop);
    ///     assert!(matches!(r, Err(tachyon::Error::Interrupted)));
    /// });
    /// # drop(sub); drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_until(&self, timeout: Option<Duration>, stop: &ReceiveStop) -> Result<Message> {
        self.receive_inner(timeout, Some(stop))
    }

    fn receive_inner(&self, timeout: Option<Duration>, stop: Option<&ReceiveStop>) -> Result<Message> {
        self.receive_by(timeout, stop, |p| self.try_receive_from(p)).map(|(_, msg)| msg)
    }

    /// Receives the next message of any of the subscription's partitions
    /// into `buf` (replacing its contents) and releases it at once (the
    /// copy path); returns its partition and its length. Waits and looks
    /// at the partitions as [`receive`](Self::receive) does. On a topic
    /// with [inline slots](super::TopicConfig::inline_payload) an inline
    /// message goes from its slot into `buf`: no chunk.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-sub-recv-into-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("ticks", TopicConfig::default().partitions(2).inline_payload(64))?;
    /// let sub = topic.subscribe(Partitions::All)?;
    /// topic.send(b"tick", Key(7), None)?;
    /// let mut buf = Vec::new();
    /// let (partition, len) = sub.recv_into(&mut buf, Some(Duration::from_secs(5)))?;
    /// assert_eq!((partition, len, &buf[..]), (topic.partition_of(Key(7)), 4, &b"tick"[..]));
    /// assert_eq!(sub.try_recv_into(&mut buf)?, None);
    /// # drop((sub, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recv_into(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(u32, usize)> {
        self.receive_by(timeout, None, |p| self.try_recv_into_from(p, &mut *buf))
    }

    /// [`recv_into`](Self::recv_into) without waiting: `Ok(None)` if every
    /// partition is empty now.
    pub fn try_recv_into(&self, buf: &mut Vec<u8>) -> Result<Option<(u32, usize)>> {
        self.take_with(|p| self.try_recv_into_from(p, &mut *buf)).transpose()
    }

    /// Receives the next message of any of the subscription's partitions
    /// into the start of `buf`, a buffer of fixed size, and releases it at
    /// once; returns its partition and its length. A message longer than
    /// `buf` stays queued, untouched, and the call fails with
    /// [`Error::BufferTooSmall`], which names its length; the next call
    /// looks at that partition first, so a call with a buffer that large
    /// takes it (unless another consumer of the partition does). Inline
    /// messages need no chunk (as [`Topic::recv_into_slice`]).
    ///
    /// ```
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// use tachyon::Error;
    /// # let name = format!("doc-sub-recv-slice-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("ticks", TopicConfig::default().partitions(2).inline_payload(64))?;
    /// let sub = topic.subscribe(Partitions::All)?;
    /// topic.send(&[1; 40], Key(3), None)?;
    /// let mut small = [0u8; 16];
    /// let e = sub.recv_into_slice(&mut small, None).unwrap_err();
    /// assert!(matches!(e, Error::BufferTooSmall { item: 40, buffer: 16 }));
    /// let mut buf = [0u8; 64];
    /// assert_eq!(sub.recv_into_slice(&mut buf, None)?, (topic.partition_of(Key(3)), 40));
    /// # drop((sub, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn recv_into_slice(&self, buf: &mut [u8], timeout: Option<Duration>) -> Result<(u32, usize)> {
        self.receive_by(timeout, None, |p| self.try_recv_into_slice_from(p, &mut *buf))
    }

    /// [`recv_into_slice`](Self::recv_into_slice) without waiting:
    /// `Ok(None)` if every partition is empty now.
    pub fn try_recv_into_slice(&self, buf: &mut [u8]) -> Result<Option<(u32, usize)>> {
        self.take_with(|p| self.try_recv_into_slice_from(p, &mut *buf)).transpose()
    }

    /// Lends the next message of any of the subscription's partitions to
    /// `f` in place (zero-copy), then releases it: [`receive`](Self::receive)
    /// without a [`Message`] value (as [`Topic::receive_with`]). Waits and
    /// looks at the partitions as `receive` does; returns the message's
    /// partition and what `f` returned. On a topic with [inline
    /// slots](super::TopicConfig::inline_payload) an inline message is lent
    /// from its slot. The message is released also if `f` panics.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-sub-receive-with-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("ticks", TopicConfig::default().partitions(4))?;
    /// let sub = topic.subscribe(Partitions::All)?;
    /// topic.send(b"tick 42", Key(9), None)?;
    /// let (partition, len) = sub.receive_with(Some(Duration::from_secs(5)), |tick| tick.len())?;
    /// assert_eq!((partition, len), (topic.partition_of(Key(9)), 7));
    /// assert_eq!(sub.try_receive_with(|tick| tick.to_vec())?, None);
    /// # drop((sub, topic, region)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_with<R>(&self, timeout: Option<Duration>, f: impl FnOnce(&[u8]) -> R) -> Result<(u32, R)> {
        let mut f = Some(f);
        self.receive_by(timeout, None, |p| self.try_receive_with_from(p, &mut f))
    }

    /// [`receive_with`](Self::receive_with) without waiting: `Ok(None)` if
    /// every partition is empty now (and `f` is not called).
    pub fn try_receive_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<(u32, R)>> {
        let mut f = Some(f);
        self.take_with(|p| self.try_receive_with_from(p, &mut f)).transpose()
    }

    /// A receive of what `once` takes from one partition (without
    /// waiting), from whichever partition has something, waiting up to
    /// `timeout` (ended early by `stop`); with the partition it came from.
    fn receive_by<T>(
        &self,
        timeout: Option<Duration>,
        stop: Option<&ReceiveStop>,
        mut once: impl FnMut(u32) -> Result<Option<T>>,
    ) -> Result<(u32, T)> {
        // The fast path: one look, no clock read, no system call.
        if let Some(r) = self.take_with(&mut once) {
            return r;
        }
        // SYNC: pairs with the store in `ReceiveStop::stop` (topic.rs); see there.
        let stopped = || stop.is_some_and(|s| s.stopped.load(Ordering::SeqCst) != 0);
        if stopped() {
            return Err(Error::Interrupted);
        }
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::timeout(WAIT_MESSAGE, timeout));
        }
        // Registered with the stop for the whole wait, so that its `stop`
        // wakes the partitions' sleepers (us among them).
        let _watches: Vec<_> = stop
            .map(|s| self.partitions.iter().map(|&p| s.watch(&self.topic, self.slot, p)).collect())
            .unwrap_or_default();
        let points = self.sleep_points()?;
        let region = self.topic.region();
        let got = waitv::wait_any(
            &points,
            self.topic.config().wait,
            timeout,
            Some(RECOVERY_INTERVAL),
            || self.maintain(),
            || match self.take_with(&mut once) {
                Some(r) => Some(r),
                None if stopped() => Some(Err(Error::Interrupted)),
                None => None,
            },
        );
        region.beat_sometimes();
        match got {
            Ok(r) => r,
            Err(Error::Timeout { .. }) => Err(Error::timeout(WAIT_MESSAGE, timeout)),
            Err(e) => Err(e),
        }
    }

    /// One look at every partition, in turn from `next`: the first message
    /// (or error) found, `None` if all are empty.
    pub(super) fn take(&self) -> Option<Result<Message>> {
        self.take_with(|p| self.try_receive_from(p)).map(|r| r.map(|(_, msg)| msg))
    }

    /// [`take`](Self::take) of what `once` takes from one partition, with
    /// the partition. The next look starts after the partition it took
    /// from or failed on, but at the same one after
    /// [`Error::BufferTooSmall`] (the message stays first there, for a
    /// larger buffer).
    fn take_with<T>(&self, mut once: impl FnMut(u32) -> Result<Option<T>>) -> Option<Result<(u32, T)>> {
        let n = self.partitions.len();
        let start = self.next.load(Ordering::Relaxed) % n;
        for k in 0..n {
            let i = (start + k) % n;
            let p = self.partitions[i];
            let r = match once(p) {
                Ok(None) => continue,
                Ok(Some(v)) => Ok((p, v)),
                Err(e) => Err(e),
            };
            let next = if matches!(r, Err(Error::BufferTooSmall { .. })) { i } else { (i + 1) % n };
            self.next.store(next, Ordering::Relaxed);
            return Some(r);
        }
        None
    }

    /// One look at `partition`'s ring of the subscription's group.
    fn try_receive_from(&self, partition: u32) -> Result<Option<Message>> {
        if let Some(group) = &self.group {
            return group.try_receive(partition);
        }
        self.topic.try_receive(partition)
    }

    /// One look at `partition` lending its message to `f`
    /// ([`receive_with`](Self::receive_with)). `f` is there until a look
    /// lends a message, and the look that does ends the receive
    /// ([`take_with`](Self::take_with) stops at the first `Some`), so a
    /// lent message always meets it.
    fn try_receive_with_from<R>(
        &self,
        partition: u32,
        f: &mut Option<impl FnOnce(&[u8]) -> R>,
    ) -> Result<Option<R>> {
        let lend = |bytes: &[u8]| f.take().map(|f| f(bytes));
        let lent = match &self.group {
            Some(group) => group.try_receive_with(partition, lend)?,
            None => self.topic.try_receive_with(partition, lend)?,
        };
        Ok(lent.flatten())
    }

    /// One copying look at `partition` ([`recv_into`](Self::recv_into)).
    fn try_recv_into_from(&self, partition: u32, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        if let Some(group) = &self.group {
            return group.try_recv_into(partition, buf);
        }
        self.topic.try_recv_into(partition, buf)
    }

    /// One look at `partition` into a buffer of fixed size
    /// ([`recv_into_slice`](Self::recv_into_slice)).
    fn try_recv_into_slice_from(&self, partition: u32, buf: &mut [u8]) -> Result<Option<usize>> {
        if let Some(group) = &self.group {
            return group.try_recv_into_slice(partition, buf);
        }
        self.topic.try_recv_into_slice(partition, buf)
    }

    /// The "not empty" wait cells of the partitions (in the group's slot).
    pub(crate) fn sleep_points(&self) -> Result<Vec<SleepPoint<'_>>> {
        let point = |p| -> Result<SleepPoint<'_>> {
            let w = self.topic.waits_of(self.slot, p)?;
            Ok(w.not_empty.sleep_point_with(w.light))
        };
        self.partitions.iter().map(|&p| point(p)).collect()
    }

    /// What a waiting receive does between its sleeps: beat, recover what
    /// dead processes held, repair dead claimants' cells in the way.
    pub(crate) fn maintain(&self) {
        let region = self.topic.region();
        region.heartbeat();
        region.recover_now_and_then();
        for &p in self.partitions.iter() {
            self.topic.repair_partition_in(self.slot, p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{Key, Region, RegionConfig, TopicConfig};
    use crate::sync::WaitPolicy;

    fn region(tag: &str) -> (Region, String) {
        let name = format!("t-sub-{tag}-{}", std::process::id());
        let _ = Region::remove(&name);
        let r = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
        (r, name)
    }

    /// Every partition gets its turn: with all four partitions full, four
    /// receives take one message from each.
    #[test]
    fn round_robin_over_partitions() {
        let (region, name) = region("rr");
        let topic = region.create_topic("t", TopicConfig::default().partitions(4)).unwrap();
        // 16 messages in each partition, each naming its partition.
        let mut k = 0u64;
        for p in 0..4u32 {
            for _ in 0..16 {
                while topic.partition_of(Key(k)) != p {
                    k += 1;
                }
                topic.send(&[p as u8], Key(k), None).unwrap();
                k += 1;
            }
        }
        let sub = topic.subscribe(Partitions::All).unwrap();
        for _ in 0..16 {
            let mut seen = [0u32; 4];
            for _ in 0..4 {
                let msg = sub.try_receive().unwrap().unwrap();
                seen[msg[0] as usize] += 1;
            }
            // The 4 receives took one message from each partition.
            assert_eq!(seen, [1; 4]);
        }
        assert!(sub.try_receive().unwrap().is_none());
        drop((sub, topic, region));
        Region::remove(&name).unwrap();
    }

    /// A sleeping subscription is woken by a publish to any partition,
    /// under each wait policy.
    #[test]
    fn one_wait_woken_by_any_partition() {
        for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin] {
            let (region, name) = region(&format!("wake-{policy:?}"));
            let topic = region.create_topic("t", TopicConfig::default().partitions(4).wait(policy)).unwrap();
            let sub = topic.subscribe(Partitions::All).unwrap();
            for k in 0..40u64 {
                std::thread::scope(|s| {
                    s.spawn(|| {
                        std::thread::sleep(Duration::from_micros(200));
                        topic.send(&k.to_le_bytes(), Key(k), None).unwrap();
                    });
                    let msg = sub.receive(Some(Duration::from_secs(10))).unwrap();
                    assert_eq!(&msg[..], &k.to_le_bytes());
                });
            }
            drop((sub, topic, region));
            Region::remove(&name).unwrap();
        }
    }

    /// 256 partitions: more words than one futex_waitv takes (the rest go
    /// through the waiter thread); a publish to any partition still wakes
    /// the one blocked receive.
    #[test]
    fn a_wait_over_256_partitions() {
        let (region, name) = region("256");
        let topic = region
            .create_topic("t", TopicConfig::default().partitions(256).capacity(2).wait(WaitPolicy::Futex))
            .unwrap();
        let sub = topic.subscribe(Partitions::All).unwrap();
        // One key per partition, the high ones included.
        let keys: Vec<u64> = (0..256u32)
            .step_by(37)
            .chain([127, 128, 255])
            .map(|p| (0u64..).find(|&k| topic.partition_of(Key(k)) == p).unwrap())
            .collect();
        for &k in &keys {
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(2));
                    topic.send(&k.to_le_bytes(), Key(k), None).unwrap();
                });
                let msg = sub.receive(Some(Duration::from_secs(10))).unwrap();
                assert_eq!(&msg[..], &k.to_le_bytes());
            });
        }
        drop((sub, topic, region));
        Region::remove(&name).unwrap();
    }

    /// `receive_with` lends each message in place, from chunks and from
    /// inline slots, of the topic and of a group, partitions in turn;
    /// `f` runs once per message and not at all on empty partitions; a
    /// message whose `f` panics is released (the next receive gets the
    /// next message); a wait ends with a message sent meanwhile.
    #[test]
    fn receive_with_lends_each_message_once() {
        for inline in [0, 64] {
            let name = format!("t-sub-with-{inline}-{}", std::process::id());
            let _ = Region::remove(&name);
            let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(2);
            let region = Region::create(&name, config).unwrap();
            let topic = region.create_topic("t", TopicConfig::default().partitions(4).inline_payload(inline)).unwrap();
            let group = topic.join_group("g").unwrap();
            let subs = [topic.subscribe(Partitions::All).unwrap(), group.subscribe(Partitions::All).unwrap()];
            for sub in &subs {
                let mut calls = 0;
                assert_eq!(sub.try_receive_with(|_| calls += 1).unwrap(), None);
                assert_eq!(calls, 0, "f called on empty partitions");
            }
            // Two messages per partition, each naming its partition and
            // its turn; 40 bytes (inline when the topic has slots) and 200.
            let key_of = |p: u32| (0..).map(Key).find(|&k| topic.partition_of(k) == p).unwrap();
            for turn in 0..2u8 {
                for p in 0..4u32 {
                    let len = if turn == 0 { 40 } else { 200 };
                    let mut msg = vec![turn; len];
                    msg[0] = p as u8;
                    topic.send(&msg, key_of(p), None).unwrap();
                }
            }
            for sub in &subs {
                let mut seen = Vec::new();
                for _ in 0..8 {
                    let mut calls = 0;
                    let (p, (first, turn, len)) = sub
                        .try_receive_with(|m| {
                            calls += 1;
                            (m[0], m[m.len() - 1], m.len())
                        })
                        .unwrap()
                        .expect("a message in some partition");
                    assert_eq!(calls, 1);
                    assert_eq!(first as u32, p, "the message of its partition");
                    assert_eq!(len, if turn == 0 { 40 } else { 200 });
                    seen.push((p, turn));
                }
                seen.sort();
                let all: Vec<(u32, u8)> = (0..4).flat_map(|p| [(p, 0), (p, 1)]).collect();
                assert_eq!(seen, all, "every message once");
                assert_eq!(sub.try_receive_with(|m| m.len()).unwrap(), None);
            }
            // A panicking `f`: its message is released, the next one is the
            // next receive's.
            topic.send(b"first", key_of(2), None).unwrap();
            topic.send(b"second", key_of(2), None).unwrap();
            let sub = &subs[0];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sub.receive_with(None, |_| panic!("f"))));
            assert!(r.is_err());
            assert_eq!(sub.try_receive_with(|m| m.to_vec()).unwrap(), Some((2, b"second".to_vec())));
            // The group still has both.
            let got: Vec<_> = (0..2).map(|_| subs[1].try_receive_with(|m| m.to_vec()).unwrap().unwrap().1).collect();
            assert_eq!(got, [b"first".to_vec(), b"second".to_vec()]);
            // A wait, ended by a send from another thread; and a timeout.
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(5));
                    topic.send(b"late", key_of(3), None).unwrap();
                });
                let got = sub.receive_with(Some(Duration::from_secs(10)), |m| m.to_vec()).unwrap();
                assert_eq!(got, (3, b"late".to_vec()));
            });
            let r = sub.receive_with(Some(Duration::from_millis(2)), |m| m.len());
            assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
            drop((subs, group, topic, region));
            Region::remove(&name).unwrap();
        }
    }

    #[test]
    fn timeouts_and_stops() {
        let (region, name) = region("timeout");
        let topic = region.create_topic("t", TopicConfig::default().partitions(2)).unwrap();
        let sub = topic.subscribe(1).unwrap();
        let r = sub.receive(Some(Duration::from_millis(5)));
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        let r = sub.receive(Some(Duration::ZERO));
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        let stop = ReceiveStop::new();
        stop.stop();
        assert!(matches!(sub.receive_until(None, &stop), Err(Error::Interrupted)));
        // A message there already is still received.
        let key = (0..).map(Key).find(|&k| topic.partition_of(k) == 1).unwrap();
        topic.send(b"x", key, None).unwrap();
        assert_eq!(&sub.receive_until(None, &stop).unwrap()[..], b"x");
        drop((sub, topic, region));
        Region::remove(&name).unwrap();
    }
}
