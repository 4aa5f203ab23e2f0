//! The shared-memory primitives: the ring (`ty_ring_*`), the byte buffer
//! (`ty_buffer_*`) and RPC (`ty_rpc_*`).
