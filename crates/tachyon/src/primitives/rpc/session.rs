//! Sessions: the pair of rings one client and the server share. The
//! server makes a fresh pair for each client (named after a new session
//! id), so nothing a previous client left in the rings reaches the next;
//! this file names, makes and cleans up those rings, and says whether a
//! session (or an end) is still open.

use crate::error::{Error, Result};
use crate::primitives::CircularBuffer;
use crate::sync::WaitPolicy;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// An end or a session that is still open (the state words of
/// [`Session::over`] and of the channel's end).
pub(super) const OPEN: u8 = 0;
/// It was closed (by this end or the peer).
pub(super) const CLOSED: u8 = 1;
/// The peer's process died.
pub(super) const PEER_DIED: u8 = 2;

/// `Ok` while `state` is [`OPEN`], else the error that says why not.
pub(super) fn check_state(state: u8) -> Result<()> {
    match state {
        OPEN => Ok(()),
        why => Err(error_of(why)),
    }
}

/// The error of calls into an end or session that is over for `why`.
pub(super) fn error_of(why: u8) -> Error {
    if why == PEER_DIED {
        Error::PeerDied
    } else {
        Error::Closed
    }
}

/// The name of one direction's ring of session `id` of channel `name`.
pub(super) fn ring_name(name: &str, id: u64, dir: &str) -> String {
    format!("{name}.rpc{id:016x}.{dir}")
}

/// Removes the rings of earlier sessions of channel `name` that nobody
/// holds any more: a server killed before its client came (or while it made
/// a session's rings) leaves them, and their names are never opened again.
/// Only files whose every attacher is dead are touched (checked again under
/// the segment's own lock by `reap`).
pub(super) fn remove_stale_rings(name: &str) {
    let prefix = format!("{name}.rpc");
    let is_ring = |n: &str| {
        n.strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".o2p").or_else(|| rest.strip_suffix(".p2o")))
            .is_some_and(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let Ok(list) = crate::segment::list() else { return };
    for info in list.iter().filter(|i| is_ring(&i.name) && i.is_stale()) {
        let _ = crate::segment::reap(info);
    }
}

/// A session id no earlier session of this name is likely to have had
/// (rings of an earlier server of the same name may still be held by its
/// last client).
fn session_id() -> u64 {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ (u64::from(std::process::id()) << 40) ^ COUNT.fetch_add(1, Ordering::Relaxed) << 20;
    // splitmix64's finaliser: spread the bits.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Makes the two fresh rings of a new session (the server does, for each
/// client).
pub(super) fn new_session(
    name: &str,
    node_count: usize,
    node_size: usize,
    policy: WaitPolicy,
) -> Result<Arc<Session>> {
    let mut tries = 0;
    loop {
        let id = session_id();
        let ring = |dir: &str| {
            CircularBuffer::builder(&ring_name(name, id, dir))
                .node_count(node_count)
                .node_size(node_size)
                .wait_policy(policy)
                .create()
        };
        match ring("o2p").and_then(|o2p| Ok((o2p, ring("p2o")?))) {
            Ok((o2p, p2o)) => return Ok(Session::new(id, o2p, p2o)),
            // A name still held by someone (improbable): another id.
            Err(Error::AlreadyExists { .. }) if tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// One client's connection: the two rings it and the server share. The
/// server makes fresh ones for each client, so nothing a previous client
/// left in the rings (or was sent) reaches the next.
pub(super) struct Session {
    pub(super) id: u64,
    /// The ring this end writes.
    pub(super) tx: CircularBuffer,
    /// The ring this end reads.
    pub(super) rx: CircularBuffer,
    /// `OPEN`, or why the session is over (its sends stop then).
    pub(super) over: AtomicU8,
}

impl Session {
    pub(super) fn new(id: u64, tx: CircularBuffer, rx: CircularBuffer) -> Arc<Session> {
        Arc::new(Session { id, tx, rx, over: AtomicU8::new(OPEN) })
    }

    pub(super) fn check_open(&self) -> Result<()> {
        check_state(self.over.load(Ordering::SeqCst))
    }
}
