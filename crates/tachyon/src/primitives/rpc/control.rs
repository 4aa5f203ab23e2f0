//! The layout of a channel's control segment: the geometry the server
//! chose, who holds each end, the close flags and the current session.

pub(super) const CTL_NODE_COUNT: usize = 0;
pub(super) const CTL_NODE_SIZE: usize = 8;
pub(super) const CTL_VERSION: usize = 16;
pub(super) const CTL_OWNER: usize = 64;
pub(super) const CTL_OPENER: usize = 68;
pub(super) const CTL_OWNER_CLOSED: usize = 72;
pub(super) const CTL_OPENER_CLOSED: usize = 76;
pub(super) const CTL_OWNER_MAX: usize = 80;
pub(super) const CTL_OPENER_MAX: usize = 88;
/// The id of the session whose rings the next (or the current) client
/// uses; the rings are named after it (see `ring_name`).
pub(super) const CTL_SESSION: usize = 96;
pub(super) const CTL_SIZE: usize = 128;
