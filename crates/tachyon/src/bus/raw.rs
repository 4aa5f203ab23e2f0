//! The raw interface of a topic, for language bindings: a loan and a
//! received message as a chunk's index and first byte ([`RawChunk`])
//! instead of an owned [`Loan`](super::Loan) or [`Message`](super::Message).
//!
//! A binding that hands loans and messages to code in another language
//! must keep them somewhere until that code gives them back; with owned
//! values that is a table of them (a lookup and a reference count per
//! message). With the raw interface the binding keeps only what it needs
//! to check what the foreign code gives back (the C library keeps one word
//! per chunk), and the calls cost what [`Topic::loan`] and friends cost
//! without the owned value around them.
//!
//! The shared state is the same as with owned values: a raw loan is a
//! chunk LOANED by this process, a raw message a chunk HELD by it, so a
//! process that dies holding either loses nothing (recovery reclaims them
//! by the holder's token). What the raw interface leaves to its caller is
//! the in-process bookkeeping: each index is published, returned or
//! released once, through a topic of the region it came from; hence the
//! `unsafe` of the calls that take an index back.

use super::layout::CLASS_SIZES;
use super::topic::{full_if_timeout, none_if_empty, Chunk, Key, Message, Topic};
use crate::error::{Error, Result};
use std::ptr::NonNull;
use std::time::Duration;

/// A chunk handed out by the raw interface: a loan ([`Topic::loan_raw`])
/// or a received message ([`Topic::receive_raw`]).
///
/// ```
/// use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
/// # let name = format!("doc-raw-{}", std::process::id());
/// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
/// let topic = region.create_topic("raw", TopicConfig::default())?;
///
/// let loan = topic.loan_raw(5, None)?;
/// // SAFETY: the loan's 5 bytes are ours alone until it is published.
/// unsafe { loan.ptr.as_ptr().copy_from_nonoverlapping(b"hello".as_ptr(), 5) };
/// // SAFETY: `loan.index` was loaned through this region, once.
/// unsafe { topic.publish_raw(loan.index, 5, Key(1), None)? };
///
/// let msg = topic.receive_raw(0, None)?;
/// // SAFETY: a received chunk stays valid and unchanged until released.
/// let bytes = unsafe { std::slice::from_raw_parts(msg.ptr.as_ptr(), msg.len) };
/// assert_eq!(bytes, b"hello");
/// // SAFETY: `msg.index` was received through this region, released once.
/// unsafe { topic.release_raw(msg.index)? };
/// # drop(topic); drop(region);
/// # Region::remove(&name)?;
/// # Ok::<(), tachyon::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawChunk {
    /// The chunk's first byte (64-byte aligned), inside the region's
    /// mapping, which stays mapped while the topic handle lives.
    pub ptr: NonNull<u8>,
    /// For a loan, the size asked for; for a message, its length.
    pub len: usize,
    /// The chunk's index in the region's pool, below
    /// [`Topic::chunk_count`]: what the calls that take the chunk back
    /// take.
    pub index: u32,
}

// SAFETY: a `RawChunk` is an address and two numbers; who may touch the
// bytes it names is the contract of the raw calls, not of this value.
unsafe impl Send for RawChunk {}
// SAFETY: as for `Send`.
unsafe impl Sync for RawChunk {}

impl RawChunk {
    fn of(chunk: Chunk, len: usize) -> RawChunk {
        RawChunk { ptr: chunk.data, len, index: chunk.index }
    }
}

impl Message {
    /// The message as a raw one ([`Topic::receive_raw`]'s): its chunk stays
    /// HELD by this process and its bytes valid until
    /// [`release_raw`](Topic::release_raw) through a topic of the same
    /// region handle, which must follow. For bindings that receive through
    /// a [`Subscription`](super::Subscription) and hand the message to
    /// another language. A consumer group's message turned raw no longer
    /// keeps the process a member of the group (a [`Message`] does): keep
    /// the [`Group`](super::Group) while its raw messages are held.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-into-raw-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("t", TopicConfig::default().partitions(2))?;
    /// topic.send(b"hi", Key(3), None)?;
    /// let msg = topic.subscribe(Partitions::All)?.receive(Some(Duration::from_secs(1)))?;
    /// let raw = msg.into_raw();
    /// // SAFETY: a received chunk stays valid and unchanged until released.
    /// assert_eq!(unsafe { std::slice::from_raw_parts(raw.ptr.as_ptr(), raw.len) }, b"hi");
    /// // SAFETY: received through this region handle, released once.
    /// unsafe { topic.release_raw(raw.index)? };
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn into_raw(self) -> RawChunk {
        let (chunk, len) = self.into_parts();
        RawChunk::of(chunk, len)
    }
}

impl Topic {
    /// How many chunks the region's pool has: every [`RawChunk::index`] is
    /// below it (a binding sizes its per-chunk bookkeeping by it).
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-count-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// # let topic = region.create_topic("raw", TopicConfig::default())?;
    /// let loan = topic.loan_raw(64, None)?;
    /// assert!((loan.index as usize) < topic.chunk_count());
    /// # // SAFETY: loaned through this region, given back once.
    /// # unsafe { topic.unloan_raw(loan.index)? };
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn chunk_count(&self) -> usize {
        self.region().chunk_count()
    }

    /// The index of the chunk whose first byte is `ptr`, if `ptr` is the
    /// first byte of a chunk of this topic's region (it may be any chunk:
    /// free, loaned or held, by anyone). For a binding that gets back only
    /// the address of a loan.
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-index-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// # let topic = region.create_topic("raw", TopicConfig::default())?;
    /// let loan = topic.loan_raw(64, None)?;
    /// assert_eq!(topic.chunk_index(loan.ptr.as_ptr()), Some(loan.index));
    /// assert_eq!(topic.chunk_index(loan.ptr.as_ptr().wrapping_add(1)), None);
    /// # // SAFETY: loaned through this region, given back once.
    /// # unsafe { topic.unloan_raw(loan.index)? };
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn chunk_index(&self, ptr: *const u8) -> Option<u32> {
        self.region().chunk_at(ptr).map(|(_, index)| index)
    }

    /// [`loan`](Self::loan), handing out the chunk as a [`RawChunk`]
    /// (`len`: `size`). The caller must publish it
    /// ([`publish_raw`](Self::publish_raw)) or give it back
    /// ([`unloan_raw`](Self::unloan_raw)); until then its first `size`
    /// bytes are the caller's alone. A loan never given back stays this
    /// process's until it exits (recovery reclaims it then).
    ///
    /// See [`RawChunk`] for an example.
    pub fn loan_raw(&self, size: usize, timeout: Option<Duration>) -> Result<RawChunk> {
        self.take_chunk(size, timeout).map(|chunk| RawChunk::of(chunk, size))
    }

    /// The chunk `index` (a loan of this process) as a [`Chunk`].
    fn loaned(&self, index: u32, len: usize) -> Result<Chunk> {
        let class = self
            .region()
            .class_of(index)
            .ok_or_else(|| Error::invalid(format!("{index} is not a chunk index of this region")))?;
        if len > CLASS_SIZES[class] {
            return Err(Error::invalid(format!(
                "length {len} is more than chunk {index} holds ({} bytes)",
                CLASS_SIZES[class]
            )));
        }
        let data = NonNull::new(self.region().chunk_ptr(class, index)).expect("a chunk inside the mapping");
        Ok(Chunk { class, index, data, group: None })
    }

    /// [`Loan::publish`](super::Loan::publish) of the raw loan `index`: its
    /// first `len` bytes go out with `key`, waiting up to `timeout` for
    /// room. Whatever the result (but [`Error::InvalidArgument`] for an
    /// index that is no chunk or a `len` past the chunk), the loan is used
    /// up: on an error its chunk goes back to the pool.
    ///
    /// See [`RawChunk`] for an example.
    ///
    /// # Safety
    /// `index` came from [`loan_raw`](Self::loan_raw) through a topic of
    /// this same [`Region`](super::Region) handle (or a clone of it), and
    /// has not been published or given back since; nobody writes its bytes
    /// from now on.
    pub unsafe fn publish_raw(
        &self,
        index: u32,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let chunk = self.loaned(index, len)?;
        self.publish_chunk(chunk, len, key, timeout)
    }

    /// [`publish_raw`](Self::publish_raw), except that when `timeout`
    /// passes ([`Error::Timeout`]) the loan stays the caller's, to publish
    /// again or give back: for a binding that waits in slices (to look for
    /// an interruption between them) without losing the message.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-keep-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("raw", TopicConfig::default().capacity(2))?;
    /// topic.send(b"1", Key(0), None)?;
    /// topic.send(b"2", Key(0), None)?; // the partition is full now
    /// let loan = topic.loan_raw(1, None)?;
    /// let slice = Some(Duration::from_millis(1));
    /// // SAFETY: loaned through this region; kept on the timeout, so it is
    /// // published (once) again after room was made.
    /// let first = unsafe { topic.publish_raw_or_keep(loan.index, 1, Key(0), slice) };
    /// assert!(first.unwrap_err().is_timeout());
    /// drop(topic.receive(0, None)?);
    /// // SAFETY: the loan was kept by the timeout above; published once now.
    /// unsafe { topic.publish_raw_or_keep(loan.index, 1, Key(0), slice)? };
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    ///
    /// # Safety
    /// As [`publish_raw`](Self::publish_raw).
    pub unsafe fn publish_raw_or_keep(
        &self,
        index: u32,
        len: usize,
        key: Key,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let chunk = self.loaned(index, len)?;
        self.publish_chunk_or_keep(chunk, len, key, timeout, true)
    }

    /// [`publish_raw`](Self::publish_raw) without waiting: [`Error::Full`]
    /// if the key's partition is full (the chunk goes back to the pool).
    ///
    /// ```
    /// # use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-try-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let topic = region.create_topic("raw", TopicConfig::default().capacity(2))?;
    /// for _ in 0..2 {
    ///     let loan = topic.loan_raw(8, None)?;
    ///     // SAFETY: loaned through this region, published once.
    ///     unsafe { topic.try_publish_raw(loan.index, 8, Key(0))? };
    /// }
    /// let third = topic.loan_raw(8, None)?;
    /// // SAFETY: as above; the failed publish uses the loan up.
    /// let full = unsafe { topic.try_publish_raw(third.index, 8, Key(0)) };
    /// assert!(matches!(full, Err(tachyon::Error::Full { .. })));
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    ///
    /// # Safety
    /// As [`publish_raw`](Self::publish_raw).
    pub unsafe fn try_publish_raw(&self, index: u32, len: usize, key: Key) -> Result<()> {
        // SAFETY: the caller's contract is `publish_raw`'s.
        unsafe { self.publish_raw(index, len, key, Some(Duration::ZERO)) }.map_err(full_if_timeout)
    }

    /// Gives the raw loan `index` back to the pool unpublished
    /// ([`Error::InvalidArgument`] for an index that is no chunk).
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-unloan-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// # let topic = region.create_topic("raw", TopicConfig::default())?;
    /// let loan = topic.loan_raw(100, None)?;
    /// // SAFETY: loaned through this region, given back once.
    /// unsafe { topic.unloan_raw(loan.index)? };
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    ///
    /// # Safety
    /// As [`publish_raw`](Self::publish_raw): a loan of this region handle,
    /// not published or given back before.
    pub unsafe fn unloan_raw(&self, index: u32) -> Result<()> {
        let chunk = self.loaned(index, 0)?;
        self.region().free(chunk.class, chunk.index);
        Ok(())
    }

    /// [`receive`](Self::receive), handing out the message as a
    /// [`RawChunk`] (`len`: the message's length). Its bytes stay valid and
    /// unchanged until [`release_raw`](Self::release_raw), which must follow
    /// for the chunk to go back to the pool (a message never released stays
    /// this process's until it exits).
    ///
    /// See [`RawChunk`] for an example.
    pub fn receive_raw(&self, partition: u32, timeout: Option<Duration>) -> Result<RawChunk> {
        self.take_message(partition, timeout).map(|(chunk, len)| RawChunk::of(chunk, len))
    }

    /// [`receive_raw`](Self::receive_raw) that another thread can end early
    /// with [`ReceiveStop::stop`](super::ReceiveStop::stop)
    /// ([`Error::Interrupted`]); see [`Topic::receive_until`].
    ///
    /// ```
    /// # use tachyon::bus::{Key, ReceiveStop, Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-until-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// # let topic = region.create_topic("raw", TopicConfig::default())?;
    /// let stop = ReceiveStop::new();
    /// topic.send(b"there", Key(0), None)?;
    /// stop.stop();
    /// let msg = topic.receive_raw_until(0, None, &stop)?; // a message there is still taken
    /// // SAFETY: received through this region, released once.
    /// unsafe { topic.release_raw(msg.index)? };
    /// assert!(matches!(topic.receive_raw_until(0, None, &stop), Err(tachyon::Error::Interrupted)));
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn receive_raw_until(
        &self,
        partition: u32,
        timeout: Option<Duration>,
        stop: &super::ReceiveStop,
    ) -> Result<RawChunk> {
        self.take_message_until(partition, timeout, Some(stop)).map(|(chunk, len)| RawChunk::of(chunk, len))
    }

    /// [`receive_raw`](Self::receive_raw) without waiting: `Ok(None)` if
    /// the partition is empty now.
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-raw-tryrecv-{}", std::process::id());
    /// # let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// # let topic = region.create_topic("raw", TopicConfig::default())?;
    /// assert_eq!(topic.try_receive_raw(0)?, None);
    /// # drop(topic); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn try_receive_raw(&self, partition: u32) -> Result<Option<RawChunk>> {
        none_if_empty(self.receive_raw(partition, Some(Duration::ZERO)))
    }

    /// Releases the raw message `index`: its chunk goes back to the pool
    /// ([`Error::InvalidArgument`] for an index that is no chunk).
    ///
    /// See [`RawChunk`] for an example.
    ///
    /// # Safety
    /// `index` came from [`receive_raw`](Self::receive_raw) through a topic
    /// of this same [`Region`](super::Region) handle (or a clone of it), and
    /// has not been released since; nobody reads its bytes from now on.
    pub unsafe fn release_raw(&self, index: u32) -> Result<()> {
        let chunk = self.loaned(index, 0)?;
        // A message of a chunk shared by groups is released through the
        // group whose word this process holds, never the cache.
        self.region().release_received(chunk.class, chunk.index);
        Ok(())
    }
}
