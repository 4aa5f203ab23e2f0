//! [`CancelToken`]: cancels blocking requests from another thread.

use super::future::Slot;
use crate::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Cancels blocking [`RpcBuffer::request_with_cancel`](super::RpcBuffer::request_with_cancel) calls from another
/// thread: the .NET `CancellationToken` of a blocking RPC call.
///
/// Clones share one state. Once [`cancel`](Self::cancel) is called, every
/// call watching the token returns [`Error::Interrupted`] (at once if it
/// waits for its response, within about 20 ms if it waits for room to
/// send), and calls that start later fail at once. Cancelling is for
/// good: make a new token for new calls.
///
/// ```
/// use tachyon::primitives::rpc::CancelToken;
/// let token = CancelToken::new();
/// let other = token.clone(); // e.g. moved into a signal-watching thread
/// assert!(!token.is_cancelled());
/// other.cancel();
/// assert!(token.is_cancelled());
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelState>,
}

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    /// The pending requests watching the token.
    slots: Mutex<Vec<Weak<Slot>>>,
}

impl CancelToken {
    /// A token not cancelled yet.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// assert!(!CancelToken::new().is_cancelled());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every call watching the token, now and later. Thread-safe;
    /// calling it again does nothing more.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// let token = CancelToken::new();
    /// token.cancel();
    /// token.cancel();
    /// assert!(token.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let slots = std::mem::take(&mut *self.inner.slots.lock().unwrap_or_else(|p| p.into_inner()));
        for slot in slots.iter().filter_map(Weak::upgrade) {
            slot.complete(Err(Error::Interrupted));
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    ///
    /// ```
    /// # use tachyon::primitives::rpc::CancelToken;
    /// assert!(!CancelToken::new().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Makes `slot` complete with `Interrupted` when the token is
    /// cancelled (at once if it is already).
    pub(super) fn watch(&self, slot: &Arc<Slot>) {
        let mut slots = self.inner.slots.lock().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock that `cancel` drains under: either it sees
        // this slot, or this sees its flag.
        if self.is_cancelled() {
            drop(slots);
            slot.complete(Err(Error::Interrupted));
            return;
        }
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(slot));
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}
