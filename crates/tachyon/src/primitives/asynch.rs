//! async forms of the primitives' waits: [`CircularBuffer`] read and
//! write, [`BroadcastReader`] read. Runtime-agnostic and cancellation-safe
//! (see `docs/async.md`): each poll tries once without blocking and either
//! completes or leaves nothing claimed; a pending future is woken by this
//! process's waiter thread when the ring's wait cell is notified.

use super::broadcast::{BroadcastReader, Received};
use super::circular::CircularBuffer;
use crate::error::{Error, Result};
use crate::sync::reactor::Parked;
use std::future::{poll_fn, Future};

impl CircularBuffer {
    /// The async form of [`read`](Self::read): resolves to the length of the
    /// next item, copied into `buf`. Cancellation-safe: dropping the future
    /// before it resolves takes no item. [`Error::Closed`] once the ring is
    /// closed and empty; [`Error::BufferTooSmall`] as for `read`.
    ///
    /// ```
    /// use tachyon::CircularBuffer;
    /// # let name = format!("doc-ring-read-async-{}", std::process::id());
    /// let ring = CircularBuffer::create(&name, 4, 16)?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let mut buf = [0u8; 16];
    /// let n = rt.block_on(async {
    ///     ring.write_async(b"ping").await?;
    ///     ring.read_async(&mut buf).await
    /// })?;
    /// assert_eq!(&buf[..n], b"ping");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn read_async<'a>(&'a self, buf: &'a mut [u8]) -> impl Future<Output = Result<usize>> + Send + 'a {
        let mut parked = Parked::default();
        poll_fn(move |cx| {
            if parked.overdue() {
                self.repair_in_the_way(false);
            }
            let cell = self.wait_cell(false);
            parked.poll(cx, &[cell.sleep_point_with(self.light_handovers())], || self.try_read(buf).transpose())
        })
    }

    /// The async form of [`write`](Self::write): resolves once `item` is in
    /// the ring (waiting while it is full). Cancellation-safe: the item is
    /// written in the poll that resolves, or not at all.
    pub fn write_async<'a>(&'a self, item: &'a [u8]) -> impl Future<Output = Result<()>> + Send + 'a {
        let mut parked = Parked::default();
        poll_fn(move |cx| {
            if parked.overdue() {
                self.repair_in_the_way(true);
            }
            let cell = self.wait_cell(true);
            parked.poll(cx, &[cell.sleep_point_with(self.light_handovers())], || match self.try_write(item) {
                Err(Error::Full { .. }) => {
                    // Woken once the readers have freed a gap, as a blocked write is.
                    self.ring().ask_for_room(&self.waits());
                    None
                }
                r => Some(r),
            })
        })
    }
}

impl BroadcastReader {
    /// The async form of [`read`](Self::read): resolves to the next item,
    /// copied into `buf` (with the count of items it missed, on an
    /// overwriting buffer). Cancellation-safe: the reader's position moves
    /// only in the poll that resolves.
    ///
    /// ```
    /// use tachyon::{BroadcastBuffer, Overflow};
    /// # let name = format!("doc-bc-read-async-{}", std::process::id());
    /// let bus = BroadcastBuffer::create(&name, 4, 32, Overflow::Block)?;
    /// let mut reader = bus.subscribe()?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// let mut buf = [0u8; 32];
    /// let got = rt.block_on(async {
    ///     bus.write(b"tick", None)?;
    ///     reader.read_async(&mut buf).await
    /// })?;
    /// assert_eq!(&buf[..got.len], b"tick");
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn read_async<'a>(
        &'a mut self,
        buf: &'a mut [u8],
    ) -> impl Future<Output = Result<Received>> + Send + 'a {
        let mut parked = Parked::default();
        poll_fn(move |cx| {
            // Split the borrow: the cell lives in the buffer's mapping, which
            // a clone of the handle keeps while the reader reads.
            let bus = self.buffer().clone();
            let cell = bus.wait_cell(false);
            let reader = &mut *self;
            let buf = &mut *buf;
            parked.poll(cx, &[cell.sleep_point()], || reader.try_read(buf).transpose())
        })
    }
}
