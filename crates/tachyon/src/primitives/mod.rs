//! The shared-memory primitives, in the spirit of the .NET SharedMemory
//! library: [`CircularBuffer`] (a multi-producer multi-consumer ring of
//! fixed-size nodes, each item to one reader) and [`BroadcastBuffer`]
//! (every reader sees every item).

crate::without_loom! {
    mod array;
    mod asynch;
    mod broadcast;
    mod buffer;
    mod circular;
    mod locked;
    pub mod rpc;

    pub use array::{
        ArraySlice, SharedArray, SharedArrayBuilder, SharedArrayIter, SharedArrayReadGuard, SharedArrayWriteGuard,
    };
    pub use broadcast::{
        BroadcastBuffer, BroadcastBufferBuilder, BroadcastReader, Overflow, Received, MAX_READERS,
    };
    pub use buffer::{SharedBuffer, SharedBufferBuilder};
    pub use circular::{CircularBuffer, CircularBufferBuilder, RingStats, MAX_NODES};
    pub use rpc::{CancelToken, RpcBuffer, RpcBuilder, RpcClient, RpcStats};
}
