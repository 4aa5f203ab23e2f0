//! Handlers of the peer's requests: their types, and running one for a
//! request or notification (on a handler thread, or inline on the reader
//! thread) and sending its response.

use super::channel::{Deadline, Inner};
use super::packet::{self, Header, MsgType};
use super::session::Session;
use super::stats::Stats;
use super::RpcClient;
use crate::error::Error;
use std::cell::Cell;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A handler, its error made text.
pub(super) type HandlerFn = dyn Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, String> + Send + Sync;
/// Makes the handler once the end's [`RpcClient`] exists.
pub(super) type MakeHandler = Box<dyn FnOnce(RpcClient) -> Arc<HandlerFn> + Send>;

thread_local! {
    /// The channel whose reader thread runs an inline handler on this
    /// thread now (its address), so that a call back through that channel,
    /// which only this thread could answer, fails instead of deadlocking.
    static INLINE_HANDLER_OF: Cell<usize> = const { Cell::new(0) };
    /// The channel whose handler runs on this thread now (its address),
    /// inline or on a handler thread: its `close` cannot wait for that
    /// handler, which is the caller.
    static HANDLER_OF: Cell<usize> = const { Cell::new(0) };
}

/// `f` as a [`HandlerFn`].
pub(super) fn wrap<F, E>(f: F) -> Arc<HandlerFn>
where
    F: Fn(u64, &[u8]) -> std::result::Result<Vec<u8>, E> + Send + Sync + 'static,
    E: Display,
{
    Arc::new(move |id, msg| f(id, msg).map_err(|e| e.to_string()))
}

impl Inner {
    /// This end's address, which the thread-locals above hold.
    fn key(&self) -> usize {
        self as *const Inner as usize
    }

    /// Whether a handler of this end runs on this thread now.
    pub(super) fn in_handler(&self) -> bool {
        HANDLER_OF.with(|c| c.get()) == self.key()
    }

    /// Whether an inline handler of this end runs on this thread now.
    pub(super) fn in_inline_handler(&self) -> bool {
        INLINE_HANDLER_OF.with(|c| c.get()) == self.key()
    }

    /// [`handle`](Self::handle) on the reader thread itself.
    pub(super) fn handle_inline(&self, session: &Session, h: Header, payload: Vec<u8>) {
        let outer = INLINE_HANDLER_OF.with(|c| c.replace(self.key()));
        self.handle(session, h, payload);
        INLINE_HANDLER_OF.with(|c| c.set(outer));
    }

    /// Runs the handler for a request or notification (on a pool thread,
    /// or inline) and sends the response, in the session the request came
    /// in: if that client has left meanwhile, the response goes nowhere.
    pub(super) fn handle(&self, session: &Session, h: Header, payload: Vec<u8>) {
        let outer = HANDLER_OF.with(|c| c.replace(self.key()));
        self.answer(session, h, payload);
        HANDLER_OF.with(|c| c.set(outer));
        self.handled();
    }

    /// Runs the handler (a panic becomes an error response) and sends what
    /// it returned, unless the message is a notification.
    fn answer(&self, session: &Session, h: Header, payload: Vec<u8>) {
        let handler = self.handler.read().unwrap_or_else(|p| p.into_inner()).clone();
        let result = match handler {
            None => Err("no handler: the other end has not set one".to_owned()),
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(h.msg_id, &payload)))
                .unwrap_or_else(|panic| Err(panicked(panic))),
        };
        // For the next request read on this thread.
        packet::recycle(payload);
        if result.is_err() {
            Stats::add(&self.stats.c.errors, 1);
        }
        if h.kind == MsgType::Notify {
            Stats::add(&self.stats.c.notifications_received, 1);
            return;
        }
        Stats::add(&self.stats.c.requests_handled, 1);
        let (kind, body) = match result {
            Ok(body) => (MsgType::Response, body),
            Err(text) => (MsgType::Error, text.into_bytes()),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let deadline = Deadline::After(self.default_timeout);
        match self.send(session, kind, id, h.msg_id, &body, deadline, None) {
            Ok(()) => Stats::add(&self.stats.c.responses_sent, 1),
            Err(Error::MessageTooLarge { size, max, .. }) => {
                // Tell the caller rather than leave it waiting.
                let text = format!("response of {size} bytes exceeds the maximum message size {max}");
                let _ = self.send(session, MsgType::Error, id, h.msg_id, text.as_bytes(), deadline, None);
            }
            Err(_) => {}
        }
    }
}

/// The error text of a handler that panicked with `panic`.
pub(super) fn panicked(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_owned());
    format!("handler panicked: {what}")
}
