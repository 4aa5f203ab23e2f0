//! Wait sets: one blocking wait on several sources (topic partitions,
//! subscriptions, rings, events), returning the one that is ready.
//!
//! Like iceoryx2's `WaitSet` or crossbeam's `select!`, and built as a
//! subscription's wait is (`sync/waitv.rs`): register as a sleeper in the
//! wait cell of every source, fence, read their words, look at every
//! source, sleep on all the words with one `futex_waitv`. The producers'
//! side is unchanged.
//!
//! Readiness is level-triggered and a hint, as with `epoll`: a source is
//! ready when it holds an item nobody has claimed yet at the moment it is
//! looked at; another consumer may take it first, so the caller's
//! `try_receive` / `try_read` may still find nothing, and then waits
//! again. An event is ready while it is set (the wait set does not reset
//! it; an auto-reset event's wake-up that reached the wait set is passed on
//! to a thread blocked in `Event::wait`).

use crate::bus::Subscription;
use crate::bus::Topic;
use crate::bus::RECOVERY_INTERVAL;
use crate::error::{Error, Result};
use crate::platform::atomic::Ordering;
use crate::primitives::CircularBuffer;
use crate::sync::ring::Ring;
use crate::sync::waitv::{self, SleepPoint};
use crate::sync::{Event, WaitPolicy};
use std::time::Duration;

/// What [`WaitSet::wait`] waits for.
const WAIT_READY: &str = "a ready source in the wait set";

/// One source of a wait set.
#[derive(Clone, Copy)]
enum Source<'a> {
    Partition(&'a Topic, u32),
    Subscription(&'a Subscription),
    Ring(&'a CircularBuffer),
    Event(&'a Event),
}

/// A set of sources to wait on at once: topic partitions, subscriptions,
/// [`CircularBuffer`]s (readable) and [`Event`]s (set). [`wait`](Self::wait)
/// returns the id of one that is ready, taking turns among ready sources.
/// Readiness is a hint: receive with `try_receive` and wait again if
/// another consumer was quicker.
///
/// ```
/// use std::time::Duration;
/// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
/// use tachyon::WaitSet;
/// # let name = format!("doc-waitset-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let orders = region.create_topic("orders", TopicConfig::default().partitions(4))?;
/// let cancels = region.create_topic("cancels", TopicConfig::default())?;
/// let all_orders = orders.subscribe(Partitions::All)?;
///
/// let mut set = WaitSet::new();
/// let o = set.add_subscription(&all_orders);
/// let c = set.add_partition(&cancels, 0)?;
///
/// cancels.send(b"cancel 7", Key(7), None)?;
/// let ready = set.wait(Some(Duration::from_secs(5)))?;
/// assert_eq!(ready, c);
/// assert_eq!(&*cancels.try_receive(0)?.unwrap(), b"cancel 7");
/// # let _ = o;
/// assert!(set.try_ready().is_none());
/// # drop(set); drop(all_orders); drop(orders); drop(cancels); drop(region); Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Default)]
pub struct WaitSet<'a> {
    sources: Vec<Source<'a>>,
    /// Where the next look starts.
    next: usize,
}

impl std::fmt::Debug for WaitSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSet").field("sources", &self.sources.len()).finish()
    }
}

impl<'a> WaitSet<'a> {
    /// An empty set.
    pub fn new() -> WaitSet<'a> {
        WaitSet::default()
    }

    /// Sources in the set.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Whether the set has no source.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    fn add(&mut self, s: Source<'a>) -> usize {
        self.sources.push(s);
        self.sources.len() - 1
    }

    /// Adds `partition` of `topic` (ready: a message in it); returns its
    /// id. [`Error::InvalidArgument`] for a partition the topic does not
    /// have.
    pub fn add_partition(&mut self, topic: &'a Topic, partition: u32) -> Result<usize> {
        topic.ring(partition)?;
        Ok(self.add(Source::Partition(topic, partition)))
    }

    /// Adds a subscription (ready: a message in any of its partitions);
    /// returns its id.
    pub fn add_subscription(&mut self, sub: &'a Subscription) -> usize {
        self.add(Source::Subscription(sub))
    }

    /// Adds a ring (ready: an item to read); returns its id.
    pub fn add_ring(&mut self, ring: &'a CircularBuffer) -> usize {
        self.add(Source::Ring(ring))
    }

    /// Adds an event (ready: set); returns its id.
    pub fn add_event(&mut self, event: &'a Event) -> usize {
        self.add(Source::Event(event))
    }

    /// The id of a source ready now, if any (one look, taking turns).
    pub fn try_ready(&mut self) -> Option<usize> {
        let n = self.sources.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if ready(self.sources[i]) {
                self.next = (i + 1) % n;
                return Some(i);
            }
        }
        None
    }

    /// Waits up to `timeout` (`None`: for ever) until a source is ready
    /// and returns its id. [`Error::Timeout`] if none is by then;
    /// [`Error::InvalidArgument`] for an empty set.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<usize> {
        if self.sources.is_empty() {
            return Err(Error::invalid("a wait set needs at least one source"));
        }
        if let Some(i) = self.try_ready() {
            return Ok(i);
        }
        let sources = self.sources.clone();
        let mut points: Vec<SleepPoint<'_>> = Vec::new();
        // Producers of a Spin topic wake nobody: then the set spins.
        let mut policy = WaitPolicy::Hybrid;
        for s in &sources {
            match *s {
                Source::Partition(t, p) => {
                    let w = t.waits(p)?;
                    points.push(w.not_empty.sleep_point_with(w.light));
                    if t.config().wait == WaitPolicy::Spin {
                        policy = WaitPolicy::Spin;
                    }
                }
                Source::Subscription(sub) => {
                    points.extend(sub.sleep_points()?);
                    if sub.topic().config().wait == WaitPolicy::Spin {
                        policy = WaitPolicy::Spin;
                    }
                }
                // A light ring's notifiers leave the fence's heavy half to
                // its sleepers.
                Source::Ring(r) => points.push(r.wait_cell(false).sleep_point_with(r.light_handovers())),
                Source::Event(e) => points.push(e.sleep_point()),
            }
        }
        let maintain = || {
            for s in &sources {
                match *s {
                    Source::Partition(t, p) => t.repair_partition(p),
                    Source::Subscription(sub) => sub.maintain(),
                    Source::Ring(r) => r.repair_in_the_way(false),
                    Source::Event(_) => {}
                }
            }
        };
        let r =
            waitv::wait_any(&points, policy, timeout, Some(RECOVERY_INTERVAL), maintain, || self.try_ready());
        // An auto-reset `set` wakes one sleeper: if that was this wait set
        // (which does not pass the event), pass the wake-up on to a thread
        // blocked in `Event::wait`.
        for s in &sources {
            if let Source::Event(e) = *s {
                e.pass_on();
            }
        }
        match r {
            Err(Error::Timeout { .. }) => Err(Error::timeout(WAIT_READY, timeout)),
            r => r,
        }
    }
}

/// Whether a source holds something to take now.
fn ready(s: Source<'_>) -> bool {
    match s {
        Source::Partition(t, p) => t.ring(p).is_ok_and(|r| has_item(&r)),
        Source::Subscription(sub) => {
            sub.partitions().iter().any(|&p| sub.topic().ring(p).is_ok_and(|r| has_item(&r)))
        }
        Source::Ring(r) => has_item(&r.ring()),
        Source::Event(e) => e.is_set(),
    }
}

/// Whether a ring holds a committed item that no reader has claimed: a
/// cell between the read cursor and one past the write cursor (which lags
/// while a writer moves it) in the state "full" of the ring's invariant
/// (`sync/ring.rs`): sequence one past its position, no tag. Reads
/// only; a damaged cursor is bounded by the ring's size.
fn has_item(ring: &Ring<'_>) -> bool {
    let n = ring.cells.len() as u64;
    if n == 0 {
        return false;
    }
    // SYNC: head before tail, as in `Ring::fix_cursors`; the cell's Acquire load below
    // pairs with `Ring::commit_write` (not needed for a yes/no look, harmless).
    let head = ring.cursors.head.load(Ordering::Acquire);
    let tail = ring.cursors.tail.load(Ordering::Acquire);
    let span = (tail.wrapping_sub(head).min(n - 1) + 1).min(n);
    (0..span).any(|k| {
        let pos = head.wrapping_add(k);
        let w = ring.cells[(pos % n) as usize].word.load(Ordering::Acquire);
        (w >> 32) as u32 == (pos as u32).wrapping_add(1) && w as u32 == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    use crate::sync::EventMode;

    /// A set that sleeps on a light ring, or on a partition or a
    /// subscription of a light topic, runs the heavy half of the
    /// asymmetric fence (their notifiers skip theirs); on plain ones it
    /// does not.
    #[cfg(not(tachyon_loom))]
    #[test]
    fn a_set_sleeping_on_light_sources_runs_the_heavy_barrier() {
        use crate::platform::membarrier::heavy_calls;
        for light in [false, true] {
            let name = format!("t-waitset-light-{light}-{}", std::process::id());
            let _ = Region::remove(&name);
            let ring_name = format!("{name}-ring");
            let ring = CircularBuffer::builder(&ring_name)
                .node_count(4)
                .node_size(16)
                .light_handovers(light)
                .wait_policy(WaitPolicy::Futex)
                .create()
                .unwrap();
            let region =
                Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
            let cfg = TopicConfig::default().wait(WaitPolicy::Futex).light_handovers(light);
            let topic = region.create_topic("t", cfg).unwrap();
            let sub = topic.subscribe(Partitions::All).unwrap();
            for source in 0..3 {
                let mut set = WaitSet::new();
                match source {
                    0 => drop(set.add_ring(&ring)),
                    1 => drop(set.add_partition(&topic, 0).unwrap()),
                    _ => drop(set.add_subscription(&sub)),
                }
                let before = heavy_calls();
                assert!(matches!(set.wait(Some(Duration::from_millis(2))), Err(Error::Timeout { .. })));
                assert_eq!(heavy_calls() > before, light, "light {light}, source {source}");
            }
            drop((sub, topic, region, ring));
            Region::remove(&name).unwrap();
        }
    }

    #[test]
    fn returns_the_ready_source() {
        for policy in [WaitPolicy::Futex, WaitPolicy::Hybrid, WaitPolicy::Spin] {
            let name = format!("t-waitset-{policy:?}-{}", std::process::id());
            let _ = Region::remove(&name);
            let region =
                Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20)).unwrap();
            let a = region.create_topic("a", TopicConfig::default().partitions(4).wait(policy)).unwrap();
            let b = region.create_topic("b", TopicConfig::default().wait(policy)).unwrap();
            let ring_name = format!("t-waitset-ring-{policy:?}-{}", std::process::id());
            let ring = CircularBuffer::create(&ring_name, 4, 16).unwrap();
            let event = Event::new(EventMode::AutoReset);
            let sub = a.subscribe(Partitions::All).unwrap();
            let mut set = WaitSet::new();
            let ids = [
                set.add_subscription(&sub),
                set.add_partition(&b, 0).unwrap(),
                set.add_ring(&ring),
                set.add_event(&event),
            ];
            assert!(set.add_partition(&b, 1).is_err());
            assert!(matches!(set.wait(Some(Duration::from_millis(5))), Err(Error::Timeout { .. })));
            for (round, &want) in ids.iter().enumerate() {
                std::thread::scope(|s| {
                    s.spawn(|| {
                        std::thread::sleep(Duration::from_millis(2));
                        match round {
                            0 => a.send(b"a", Key(round as u64 + 5), None).unwrap(),
                            1 => b.send(b"b", Key(1), None).unwrap(),
                            2 => ring.write(b"r", None).unwrap(),
                            _ => event.set(),
                        }
                    });
                    assert_eq!(set.wait(Some(Duration::from_secs(10))).unwrap(), want, "{policy:?}");
                });
                // Take it: the set is quiet again.
                match round {
                    0 => drop(sub.try_receive().unwrap().unwrap()),
                    1 => drop(b.try_receive(0).unwrap().unwrap()),
                    2 => assert!(ring.try_read(&mut [0u8; 16]).unwrap().is_some()),
                    _ => event.wait(Some(Duration::ZERO)).unwrap(),
                }
                assert_eq!(set.try_ready(), None);
            }
            // Two ready at once: they take turns.
            b.send(b"b", Key(1), None).unwrap();
            ring.write(b"r", None).unwrap();
            let first = set.try_ready().unwrap();
            let second = set.try_ready().unwrap();
            assert_ne!(first, second);
            drop(set);
            drop((sub, a, b, region));
            Region::remove(&name).unwrap();
        }
    }

    /// An auto-reset set whose one wake-up reaches the wait set is passed
    /// on: a thread blocked in `Event::wait` still passes.
    #[test]
    fn an_event_wake_is_passed_on_to_a_blocked_waiter() {
        for _ in 0..20 {
            let event = Event::new(EventMode::AutoReset);
            std::thread::scope(|s| {
                let blocked = s.spawn(|| event.wait(Some(Duration::from_secs(30))));
                let mut set = WaitSet::new();
                set.add_event(&event);
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(2));
                    event.set();
                });
                // Ready or not (the thread may take the set first).
                let _ = set.wait(Some(Duration::from_millis(50)));
                blocked.join().unwrap().unwrap();
            });
        }
    }

    #[test]
    fn empty_set_is_an_error() {
        assert!(matches!(WaitSet::new().wait(None), Err(Error::InvalidArgument { .. })));
        assert!(WaitSet::new().try_ready().is_none());
    }
}
