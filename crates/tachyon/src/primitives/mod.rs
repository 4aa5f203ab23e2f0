//! The shared-memory primitives, in the spirit of the .NET SharedMemory
//! library: [`CircularBuffer`] (a multi-producer multi-consumer ring of
//! fixed-size nodes, each item to one reader) and [`BroadcastBuffer`]
//! (every reader sees every item).

#[cfg(not(tachyon_loom))]
mod array;
#[cfg(not(tachyon_loom))]
mod asynch;
#[cfg(not(tachyon_loom))]
mod broadcast;
#[cfg(not(tachyon_loom))]
mod buffer;
#[cfg(not(tachyon_loom))]
mod circular;
#[cfg(not(tachyon_loom))]
mod locked;
#[cfg(not(tachyon_loom))]
pub mod rpc;

#[cfg(not(tachyon_loom))]
pub use array::{
    ArraySlice, SharedArray, SharedArrayBuilder, SharedArrayIter, SharedArrayReadGuard, SharedArrayWriteGuard,
};
#[cfg(not(tachyon_loom))]
pub use broadcast::{
    BroadcastBuffer, BroadcastBufferBuilder, BroadcastReader, Overflow, Received, MAX_READERS,
};
#[cfg(not(tachyon_loom))]
pub use buffer::{SharedBuffer, SharedBufferBuilder};
#[cfg(not(tachyon_loom))]
pub use circular::{CircularBuffer, CircularBufferBuilder, RingStats, MAX_NODES};
#[cfg(not(tachyon_loom))]
pub use rpc::{CancelToken, RpcBuffer, RpcBuilder, RpcClient, RpcStats};
