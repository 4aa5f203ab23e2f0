//! Joining a consumer group "from the oldest" ([`JoinFrom::Oldest`]): a
//! group created by the join is given, ahead of its first live message, a
//! copy of every message still queued in the topic (Kafka's
//! `auto.offset.reset = earliest`).
//!
//! # How
//!
//! Run by the joiner under the region's control mutex (as every join), for
//! a group slot that is VACANT, before and after the control word goes
//! ACTIVE:
//!
//! 1. **Reserve** (slot still VACANT, so no publisher writes its rings):
//!    claim every cell of the slot's ring of each partition for writing.
//! 2. **Activate** (VACANT -> ACTIVE), then `membarrier(GLOBAL)`. Every
//!    publication that sees the slot ACTIVE is delivered to the new group
//!    too; its cells come after the reserved ones, so every live message
//!    is read after the backlog. A publisher that finds the ring full waits
//!    (an overrunning one too: the reserved cells have no message to
//!    overrun).
//! 3. **Copy the backlog**, per partition: the ring of the group furthest
//!    behind (most messages queued) holds, in publication order, every
//!    message of that partition that any group still has queued. Its
//!    cells are read without claiming them, up to the first free one; the
//!    reserved cells not needed are given up first (tombstones, freed at
//!    once from the ring's head so that writers get the room back), then
//!    each backlog message is copied into a new chunk and published into
//!    the next reserved cell, to the new group only. A message whose chunk
//!    already carries the new group's hold was published after step 2 and
//!    is in the group's ring already: its cell is given up.
//!
//! # Publishers: no message falls between the backlog and the live stream
//!
//! A publisher reads the groups, claims its cells (waiting for room, maybe
//! long), and commits. One that read the groups before step 2 and commits
//! after step 3 looked at its partition would give the new group neither a
//! copy nor the message: a silent gap between backlog and live stream,
//! and with a slow group (the very case a backlog exists for) a publisher
//! waits for room exactly there. So every publisher of a region with
//! group slots takes a **second look** once it holds all its cells and
//! before it commits (`Topic::second_look`, and the same in
//! `publish_shared`): it marks each claimed cell (its length word, which is
//! the claimant's until the commit overwrites it, gets
//! [`INTENT`](crate::sync::ring::INTENT)) and reads the control words
//! again; a group ACTIVE now that it did not see before makes it give its
//! cells up and publish again, with that group (the chunk is still its
//! own: nothing was published). The joiner, after its ACTIVE store and a
//! `membarrier(MEMBARRIER_CMD_GLOBAL)` (a full barrier on every CPU), looks
//! at each cell of the source ring: committed, it is copied; claimed and
//! marked, its writer is a few instructions from committing (copied then)
//! or giving up (skipped), and the joiner waits; claimed and not marked,
//! its writer has yet to take its second look, and will see the group. The
//! publisher's mark-then-look against the joiner's store-barrier-look is
//! Dekker's pair made asymmetric (the barrier costs the rare joiner about
//! 15 ms; the publisher pays one store to a line it holds and a compiler
//! fence): one of the two sees the other. Loom model:
//! `a_stale_publisher_races_a_join_from_the_oldest` (both sides' barriers
//! modelled as SeqCst fences).
//!
//! # Why a copy
//!
//! A live message is one chunk however many groups read it. Adding a hold
//! to a chunk already published would break the invariant the last release
//! depends on (docs/groups-design.md: no group word is set while the main
//! word is SHARED; the last releaser sees every group word FREE and then
//! takes the main word, and a hold added between the two would name a
//! freed chunk). Making that safe needs a lock on the chunk's main word that
//! every releaser must respect; the copy needs nothing new of the release
//! path: each copy is an ordinary publication to one group, with the
//! crash-safety of any other.
//!
//! The copy reads a chunk it does not hold, as a seqlock reader: the chunk's
//! words are read before and after (with an acquire fence between the
//! bytes and the second look), the bytes through atomic loads, and a copy
//! whose chunk changed meanwhile (consumed by every group and reused) is
//! thrown away.
//!
//! # What the group may miss
//!
//! Counted in [`Group::missed`](super::Group::missed), never silent: a
//! backlog message consumed by every group that held it before the copy
//! got to it, once a message of its partition was copied (before that,
//! the backlog simply starts later: it is the messages still held when
//! the copy reaches them); one for which the pool had no free chunk at that instant (the
//! backlog is copied only from free chunks; it never waits for room); one
//! whose marked cell's writer died or did not move for [`INTENT_WAIT`]
//! (counted even if that writer then gave the cell up; but not for a dead
//! writer whose cell holds an inline message's descriptor, which nobody
//! will ever receive); and, should the
//! kernel refuse the barrier after the support check, the whole backlog.
//!
//! # Crashes
//!
//! A joiner killed in step 1 leaves write claims in a VACANT slot's rings:
//! the next join of that slot drains them (dead claims repaired) first. One
//! killed after step 2 leaves an ACTIVE group whose only member is dead,
//! with some reserved cells claimed by a dead writer: readers and writers
//! repair those cells as any dead writer's (tombstones), and the group is
//! dropped after its lease like any group whose members all died (a
//! process that joins it before that takes over the backlog copied so
//! far). A copy in flight is a loan or a publication to one group, repaired
//! by recovery as such.

use super::groups::{is_shared, Shares};
use super::pool::{Descriptor, Word, FREE, HELD, QUEUED};
use super::topic::Topic;
use crate::error::{Error, Result};
use crate::platform::atomic::{fence, Ordering};
use std::sync::atomic::AtomicU8;
use crate::sync::ring::{Claim, Look, Ring, INTENT};
use crate::sync::{Liveness, Token};
use rustix::thread::MembarrierCommand;
use std::time::{Duration, Instant};

/// How long a joiner waits for a marked cell of the backlog (its writer is
/// a few instructions from committing or giving up) before it counts the
/// message missed: a writer stopped (SIGSTOP) or descheduled that long.
const INTENT_WAIT: Duration = Duration::from_secs(2);

/// Where a group created by a join starts reading
/// ([`Topic::join_group_from`](super::Topic::join_group_from)). A join of a
/// group that exists already continues from the group's position whatever
/// this says (as a Kafka consumer's committed offset wins over its reset
/// policy).
///
/// ```
/// use tachyon::bus::{JoinFrom, Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-joinfrom-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20).max_groups(4))?;
/// let topic = region.create_topic("events", TopicConfig::default())?;
/// topic.send(b"before", Key(1), None)?; // queued for the default group
///
/// let late = topic.join_group_from("audit", JoinFrom::Oldest)?;
/// topic.send(b"after", Key(1), None)?;
/// assert_eq!(&*late.receive(0, None)?, b"before"); // the backlog first
/// assert_eq!(&*late.receive(0, None)?, b"after");
/// assert_eq!(late.missed(), 0);
/// # drop(late); drop(topic); drop(region);
/// # Region::remove(&name)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinFrom {
    /// With the next message published (Kafka's `latest`).
    #[default]
    Now,
    /// With the oldest message any group of the topic still has queued,
    /// copied into the new group ahead of the live stream (Kafka's
    /// `earliest`). See the module docs of `bus/backlog.rs`: the backlog is
    /// a copy (one per message, at the join), live messages are zero-copy;
    /// what could not be copied is counted in
    /// [`Group::missed`](super::Group::missed).
    Oldest,
}

/// The cells a joiner claimed in the new group's rings: one run of
/// consecutive positions per partition.
pub(crate) struct Reserved {
    cells: Vec<Vec<(u64, usize)>>,
}

/// Step 1: claims every cell of slot `g`'s rings (the slot is VACANT: no
/// other writer). Write claims a dead joiner left there are repaired first.
pub(crate) fn reserve(topic: &Topic, g: usize, me: Token) -> Result<Reserved> {
    if !rustix::thread::membarrier_query().contains_command(MembarrierCommand::Global) {
        return Err(Error::io(
            "joining a group from the oldest needs membarrier(MEMBARRIER_CMD_GLOBAL), which this kernel or its seccomp filter refuses",
            std::io::Error::from(std::io::ErrorKind::Unsupported),
        ));
    }
    let mut cells = Vec::with_capacity(topic.partitions() as usize);
    for p in 0..topic.partitions() {
        super::membership::drain(topic, g, p, me);
        let ring = topic.ring_of(g, p)?;
        let mut mine = Vec::with_capacity(topic.capacity());
        for _ in 0..topic.capacity() {
            match ring.claim_write(me) {
                Claim::Got { pos, idx, .. } => mine.push((pos, idx)),
                _ => break,
            }
        }
        cells.push(mine);
    }
    crate::platform::fault::point("groups-join-reserved");
    Ok(Reserved { cells })
}

/// Gives every reserved cell up (the join did not activate the slot).
pub(crate) fn abandon(topic: &Topic, g: usize, reserved: Reserved, me: Token) {
    for (p, cells) in reserved.cells.iter().enumerate() {
        if let Ok(ring) = topic.ring_of(g, p as u32) {
            for &(pos, idx) in cells {
                ring.abandon_write(pos, idx, me);
            }
            ring.skip_tombstones();
        }
    }
}

/// Step 3, after the slot went ACTIVE: the backlog of every partition into
/// the reserved cells (see the module docs). Returns the messages copied.
pub(crate) fn fill(topic: &Topic, g: usize, reserved: Reserved, me: Token) -> usize {
    // The joiner's side of the asymmetric Dekker pair with every
    // publisher's second look (module docs, "Publishers"): a full barrier
    // on every CPU, between our ACTIVE store (the caller's CAS) and our
    // looks at the source rings' cells below.
    let fenced = rustix::thread::membarrier(MembarrierCommand::Global).is_ok();
    let mut copied = 0;
    for (p, cells) in reserved.cells.iter().enumerate() {
        let p = p as u32;
        let Ok(ring) = topic.ring_of(g, p) else { continue };
        let backlog = match source(topic, g, p) {
            Some(s) if fenced => queued(topic, s, p, g),
            Some(s) => {
                // No barrier: the backlog cannot be told complete; none is
                // copied, all of it counted missed (never a silent gap).
                for _ in 0..topic.ring_of(s, p).map_or(0, |r| r.len()) {
                    topic.count_missed(g);
                }
                Vec::new()
            }
            None => Vec::new(),
        };
        // More than the ring holds cannot be queued in a ring of the same
        // size; should it be (damage), the oldest are the ones missed.
        let skip = backlog.len().saturating_sub(cells.len());
        let backlog = &backlog[skip..];
        for _ in 0..skip {
            topic.count_missed(g);
        }
        let lead = cells.len() - backlog.len();
        for &(pos, idx) in &cells[..lead] {
            ring.abandon_write(pos, idx, me);
        }
        ring.skip_tombstones();
        if let Ok(waits) = topic.waits_of(g, p) {
            waits.not_full.notify_all();
        }
        let mut started = false;
        for (i, &(source, at, word)) in backlog.iter().enumerate() {
            let (pos, idx) = cells[lead + i];
            let outcome = if Descriptor::is_inline(word) {
                copy_inline(topic, (source, at), g, p, word, (&ring, pos, idx), me)
            } else {
                copy(topic, source, g, p, word, (&ring, pos, idx), me)
            };
            match outcome {
                Copied::Yes => {
                    started = true;
                    copied += 1;
                    if copied == 1 {
                        crate::platform::fault::point("groups-join-copied");
                    }
                }
                // Consumed by its groups before the copy reached it, ahead
                // of everything copied in this partition: not in the
                // backlog (which starts with the oldest message still held
                // when the copy gets there), not a gap.
                Copied::Gone if !started => {
                    ring.abandon_write(pos, idx, me);
                }
                Copied::Ours => {
                    ring.abandon_write(pos, idx, me);
                }
                Copied::Gone | Copied::Missed => {
                    ring.abandon_write(pos, idx, me);
                    topic.count_missed(g);
                }
            }
        }
        if let Ok(waits) = topic.waits_of(g, p) {
            crate::bus::topic::topic_wake(&waits, waits.not_empty);
        }
    }
    copied
}

/// The ACTIVE group slot other than `g` with the most messages queued in
/// partition `p` (the default group's slot 0 included).
fn source(topic: &Topic, g: usize, p: u32) -> Option<usize> {
    let mut best = None;
    let mut most = 0;
    for (s, c) in topic.controls().iter().enumerate() {
        if s == g || c.load().1 != super::groups::ACTIVE {
            continue;
        }
        let len = topic.ring_of(s, p).map_or(0, |r| r.len());
        if len > most {
            most = len;
            best = Some(s);
        }
    }
    best
}

/// The descriptors of the messages queued in slot `s`'s ring of `p`
/// (committed, not claimed by a reader), oldest first, each with its
/// slot. A cell its writer has marked (about to commit or to give up, see
/// "Publishers" in the module docs) is waited for; one whose writer died
/// or does not move within [`INTENT_WAIT`] is counted missed. A cell claimed
/// and not marked is skipped: its publisher will look at the groups again
/// and publish with the new group, or has done so.
fn queued(topic: &Topic, s: usize, p: u32, g: usize) -> Vec<(usize, u64, u64)> {
    let Ok(ring) = topic.ring_of(s, p) else { return Vec::new() };
    let region = topic.region();
    let head = ring.cursors.head.load(Ordering::Acquire);
    let mut found = Vec::new();
    for pos in head..head.saturating_add(topic.capacity() as u64) {
        let mut deadline = None;
        loop {
            match ring.look(pos) {
                Look::Committed(word) => found.push((s, pos, word)),
                Look::Free => return found,
                Look::Gone => {}
                // Claimed, not marked: its writer has its second look to
                // take, and will see the new group.
                Look::Writing { len, .. } if len != INTENT && !names_queued(topic, s, len) => {}
                // Marked, or committing (the commit wrote the descriptor
                // over the mark; the word follows): a few instructions.
                Look::Writing { by, len } => {
                    let d = *deadline.get_or_insert_with(|| Instant::now() + INTENT_WAIT);
                    let dead = region.is_dead(by);
                    if !dead && Instant::now() < d {
                        std::thread::yield_now();
                        continue;
                    }
                    // A dead writer whose cell holds an inline descriptor
                    // (an earlier lap's, or its own commit cut short)
                    // published nothing, to no group: recovery makes the
                    // cell a tombstone. Nothing to miss.
                    if !(dead && Descriptor::is_inline(len)) {
                        topic.count_missed(g);
                    }
                }
            }
            break;
        }
    }
    found
}

/// Whether `word`, the length word of a claimed cell of slot `s`'s ring,
/// is the descriptor of a publication still queued for slot `s` (a commit
/// in progress) rather than what an earlier lap left there (whose
/// publication was taken by that lap's reader: stamps and versions never
/// repeat).
fn names_queued(topic: &Topic, s: usize, word: u64) -> bool {
    if Descriptor::is_inline(word) {
        // An inline message's word names no publication: it may be an
        // earlier lap's, or a commit in progress. Waited for (the writer
        // marks its cell right after the claim, so the wait is short).
        return s == 0;
    }
    let region = topic.region();
    let Ok((_, desc, meta)) = region.resolve(word) else { return false };
    let w = meta.word();
    if is_shared(w) {
        let mask = (1u32 << Descriptor::VERSION_BITS) - 1;
        return region.shares(desc.chunk).is_ok_and(|sh| {
            let v = sh.group(s);
            v.state() == QUEUED && v.tag() & mask == desc.version
        });
    }
    s == 0 && w.state() == QUEUED && desc.is_current(meta) && meta.len.load(Ordering::Relaxed) == desc.len
}

enum Copied {
    Yes,
    /// Published after the activation: in the group's ring already.
    Ours,
    /// Consumed by every group that held it (and maybe reused) before or
    /// while it was copied.
    Gone,
    /// Still held, but not copied (no free chunk, damage).
    Missed,
}

/// Copies the message of descriptor `word` (read from slot `s`'s ring) into
/// a new chunk and publishes it into the reserved `cell` of slot `g`'s
/// ring of partition `p`, to group `g` only.
fn copy(topic: &Topic, s: usize, g: usize, p: u32, word: u64, cell: (&Ring<'_>, u64, usize), me: Token) -> Copied {
    let region = topic.region();
    let Ok((class, desc, meta)) = region.resolve(word) else { return Copied::Missed };
    let len = desc.len as usize;
    // The publication's words, before the bytes (the first look).
    let w1 = meta.word();
    let v1 = meta.version.load(Ordering::Acquire);
    let shared = is_shared(w1);
    if shared {
        let Ok(shares) = region.shares(desc.chunk) else { return Copied::Missed };
        if shares.groups.get(g).is_some_and(|a| Word(a.load(Ordering::Acquire)).state() != FREE) {
            return Copied::Ours;
        }
        let v = shares.group(s);
        let mask = (1u32 << Descriptor::VERSION_BITS) - 1;
        if !matches!(v.state(), QUEUED | HELD) || v.tag() & mask != desc.version {
            return Copied::Gone;
        }
    } else if s != 0 || !matches!(w1.state(), QUEUED | HELD) || !desc.is_current(meta) {
        return Copied::Gone;
    }
    let Ok(chunk) = topic.take_chunk(len, Some(Duration::ZERO)) else { return Copied::Missed };
    let src = region.chunk_ptr(class, desc.chunk);
    // SAFETY: `resolve` checked that the chunk index is in the pool and
    // `len` within its class, so the `len` bytes at `src` are inside the
    // region's mapping, which `topic` keeps mapped; `AtomicU8` has the size
    // and alignment of `u8`, and every access made through this slice is
    // atomic (another process may write the bytes if the chunk is freed
    // and reused meanwhile: the second look below then discards the copy).
    let from = unsafe { std::slice::from_raw_parts(src.cast::<AtomicU8>().cast_const(), len) };
    // SAFETY: the chunk was loaned to this process just now (`take_chunk`)
    // and is not published: nobody else reads or writes it, and `len` is
    // at most its class's size (the source's class and `take_chunk`'s
    // class both fit `len`).
    let to = unsafe { topic.chunk_mut(chunk, len) };
    for (b, a) in to.iter_mut().zip(from) {
        *b = a.load(Ordering::Relaxed);
    }
    // SYNC: orders the byte loads above before the second look (a seqlock
    // reader's fence, Boehm 2012): if the words are unchanged, no writer of
    // a later publication had written the bytes.
    fence(Ordering::Acquire);
    let w2 = meta.word();
    let same = if shared {
        // SHARED(t) unchanged: the chunk was not freed (the free list
        // changes the tag on every push and pop).
        w2 == w1
    } else {
        // A member may have taken it meanwhile (QUEUED -> HELD); a new
        // publication of the chunk has another version.
        w2.tag() == w1.tag() && matches!(w2.state(), QUEUED | HELD) && meta.version.load(Ordering::Acquire) == v1
    };
    if !same {
        region.free(chunk.class, chunk.index);
        return Copied::Gone;
    }
    if publish(topic, g, p, chunk.class, chunk.index, len, cell, me) {
        Copied::Yes
    } else {
        Copied::Missed
    }
}

/// [`copy`] of a message in the inline slot of position `at` of slot `s`'s
/// ring (`TopicConfig::inline_payload`; only the default group's ring has
/// them filled). The slot is read as the chunk of `copy` is, as a seqlock
/// reader: the bytes through atomic loads, then the cell looked at again;
/// a cell no longer committed at `at` (a member claimed it, and a writer
/// may have filled the slot again since) throws the copy away.
fn copy_inline(
    topic: &Topic,
    (s, at): (usize, u64),
    g: usize,
    p: u32,
    word: u64,
    cell: (&Ring<'_>, u64, usize),
    me: Token,
) -> Copied {
    let len = Descriptor::decode(word).len as usize;
    let Ok(from_ring) = topic.ring_of(s, p) else { return Copied::Missed };
    let Some(src) = topic.inline_slot_at(s, p, at, len) else { return Copied::Missed };
    let Ok(chunk) = topic.take_chunk(len, Some(Duration::ZERO)) else { return Copied::Missed };
    // SAFETY: `inline_slot_at` checked that the topic has inline slots of
    // at least `len` bytes, so these `len` bytes are inside the region's
    // mapping, which `topic` keeps mapped; `AtomicU8` has the size and
    // alignment of `u8`, and every access made through this slice is
    // atomic (a writer of a later lap may fill the slot meanwhile: the
    // second look below then discards the copy).
    let from = unsafe { std::slice::from_raw_parts(src.cast::<AtomicU8>().cast_const(), len) };
    // SAFETY: the chunk was loaned to this process just now (`take_chunk`)
    // and is not published: nobody else reads or writes it; its class
    // holds `len` bytes.
    let to = unsafe { topic.chunk_mut(chunk, len) };
    for (b, a) in to.iter_mut().zip(from) {
        *b = a.load(Ordering::Relaxed);
    }
    // SYNC: as in `copy`: the byte loads before the second look.
    fence(Ordering::Acquire);
    if from_ring.look(at) != Look::Committed(word) {
        topic.region().free(chunk.class, chunk.index);
        return Copied::Gone;
    }
    if publish(topic, g, p, chunk.class, chunk.index, len, cell, me) {
        Copied::Yes
    } else {
        Copied::Missed
    }
}

/// Publishes chunk `index` (LOANED by this process, `len` bytes) to group
/// `g` alone, into its reserved `cell`: the publisher's steps 2, 3 and 5
/// of docs/groups-design.md (no claim: the cell is reserved; no check of
/// the control word: the group cannot be dropped while the joiner holds
/// the control mutex).
#[allow(clippy::too_many_arguments)]
fn publish(
    topic: &Topic,
    g: usize,
    p: u32,
    class: usize,
    index: u32,
    len: usize,
    (ring, pos, idx): (&Ring<'_>, u64, usize),
    me: Token,
) -> bool {
    let region = topic.region();
    let (shares, free): (Shares<'_>, _) = match region.shares(index).and_then(|s| Ok((s, region.free_to(class)?))) {
        Ok(s) => s,
        Err(_) => {
            region.free(class, index);
            return false;
        }
    };
    let meta = shares.main;
    meta.route.store(((topic.index() as u32 + 1) << 16) | p, Ordering::Relaxed);
    meta.len.store(len as u32, Ordering::Relaxed);
    // SYNC: as in `Topic::publish_shared`: route and len go with the draw.
    let stamp = shares.next_stamp();
    if shares.prepare_stamped(me, &[g], stamp).is_err() {
        region.free(class, index);
        return false;
    }
    let Ok(m) = shares.share(me) else {
        // Not ours any more (damage, or reclaimed by a recoverer that
        // judged us dead).
        shares.cas_group(g, Word::new(stamp, QUEUED, me.raw()), Word::new(stamp, FREE, 0));
        return false;
    };
    if ring.commit_write(pos, idx, Descriptor::new(index, stamp, len as u32).encode(), me) {
        return true;
    }
    // Our claim was repaired away: no descriptor names the hold.
    shares.end_hold(g, Word::new(stamp, QUEUED, me.raw()), m, me, &free);
    region.push_refused(&free, class, index);
    false
}
