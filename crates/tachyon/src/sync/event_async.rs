//! [`Event::wait_async`]: an event's wait as a future, woken by the
//! process's waiter thread (`sync/reactor.rs`).

use super::event::Event;
use super::reactor::Parked;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

impl Event {
    /// The async form of [`wait`](Self::wait): resolves once the event is
    /// set (and, in auto-reset mode, resets it as it passes). Runtime-
    /// agnostic. Cancellation-safe: a set is consumed only by the poll that
    /// resolves, and a future dropped after an auto-reset `set` woke it
    /// passes the wake-up on to another waiter.
    ///
    /// ```
    /// use tachyon::sync::{Event, EventMode};
    /// let ready = Event::new(EventMode::AutoReset);
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// rt.block_on(async {
    ///     ready.set();
    ///     ready.wait_async().await;
    /// });
    /// assert!(!ready.is_set());
    /// ```
    pub fn wait_async(&self) -> EventWait<'_> {
        EventWait { parked: Parked::default(), event: self, start: None, done: false }
    }
}

/// The future of [`Event::wait_async`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct EventWait<'a> {
    parked: Parked,
    event: &'a Event,
    /// The generation seen at the first poll (manual-reset waits pass on
    /// any set after it).
    start: Option<u32>,
    done: bool,
}

impl Future for EventWait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let event = this.event;
        let start = *this.start.get_or_insert_with(|| event.generation());
        let r = this.parked.poll(cx, &[event.sleep_point()], || event.try_pass(start).then_some(()));
        this.done = r.is_ready();
        r
    }
}

impl Drop for EventWait<'_> {
    fn drop(&mut self) {
        self.parked.clear();
        if !self.done && self.start.is_some() {
            self.event.pass_on();
        }
    }
}
