// Package tachyon is the Go face of tachyon, inter-process communication
// through shared memory on Linux: cgo over the C library libtachyon
// (include/tachyon/tachyon.h), translating its calls and nothing more.
//
// A Region is a persistent named shared-memory segment holding a payload
// pool and Topics. A producer loans a chunk of the pool, builds its message
// in place and publishes it with a key; the key picks one of the topic's
// partitions, so messages of one key stay in order. A consumer receives a
// Message whose Data is a []byte over shared memory, valid until Release.
// Nothing is copied on that path (Topic.Send is the copying shortcut).
//
//	reg, err := tachyon.OpenRegion("demo", &tachyon.RegionConfig{Size: 16 << 20})
//	topic, err := reg.CreateTopic("orders", &tachyon.TopicConfig{Partitions: 4})
//	loan, err := topic.Loan(5)
//	copy(loan.Bytes(), "hello")
//	err = loan.Publish(5, 42)
//
//	// another process
//	reg, err := tachyon.OpenRegion("demo", nil)
//	topic, err := reg.Topic("orders")
//	msg, err := topic.ReceiveContext(ctx, topic.PartitionOf(42))
//	use(msg.Data())
//	msg.Release()
//
// A Subscription (Topic.Subscribe) is one receive over several partitions
// of a topic, or all of them; each Message says which partition it came
// from.
//
// Ring (a queue of fixed-size nodes), Buffer (bytes at offsets under a
// robust lock, an io.ReaderAt and io.WriterAt) and RPC (request and
// response between two processes, answered by a Go Handler) are the
// library's other primitives.
//
// # Errors
//
// Every failure is an *Error carrying the operation, the C library's code
// and its full text (what happened and what to do). Compare with errors.Is
// against the sentinels (ErrTimeout, ErrNotFound, ErrWouldBlock, ...);
// ErrNotFound, ErrExists and ErrPermission also match fs.ErrNotExist,
// fs.ErrExist and fs.ErrPermission. A nil or closed handle is an error
// (ErrInvalid, ErrClosed), never a crash.
//
// # Blocking and cancellation
//
// Timeouts are time.Duration: Forever (any negative value) waits for ever,
// 0 tries once. The Context forms (ReceiveContext, LoanContext,
// SendContext, Ring.ReadContext, Ring.WriteContext) return ctx.Err() once
// ctx is done. The C library has no per-call wake-up, so they wait in
// slices of at most 5 ms and look at ctx between slices: cancellation is
// seen within about 5 ms, at the cost of one cgo call per slice while
// idle. A call that need not wait costs the same as its plain form.
// Interrupt is the C library's process-wide ty_interrupt.
//
// # Handles, threads and finalizers
//
// Region, Topic, Subscription, Ring, Buffer and RPC are safe for concurrent
// use by several goroutines and implement io.Closer. Close waits for calls
// in flight on the handle to return (a read-write lock per handle; C requires close to
// be the last call on a handle) and later calls return ErrClosed. A handle
// that becomes unreachable without Close is closed by a finalizer; that is
// a safety net, not a way to manage them. Loan and Message belong to one
// goroutine at a time and have no finalizer: one that is dropped keeps its
// chunk until its Topic is closed (Topic.Close returns every outstanding
// loan and releases every outstanding message). A Subscription keeps its
// Topic reachable and must be closed before it, as C requires:
// Topic.Close closes the subscriptions still open on it first.
//
// # Memory and the cgo pointer rules
//
// Loan.Bytes and Message.Data are slices over C memory (the shared
// mapping): the Go garbage collector does not track them, and they must
// not be used after Publish / Unloan / Release or after the Topic is
// closed. Copy what must outlive the message.
//
// The binding never stores a Go pointer in C memory, and C keeps no Go
// pointer past a call. The Go pointers it passes are names (C.CString
// copies), configurations and statistics out-structs, the partition list
// given to Topic.Subscribe, and the bytes given to Send, Ring.Write / Read, Buffer.WriteAt / ReadAt and RPC.Call (and a
// Handler's response), for the duration of the call; none of them contains
// a Go pointer. The C side of an RPC Handler knows it by an integer id. Handles, loaned chunks
// and messages are C memory: they cross as integers (uintptr_t) and come
// back in structs returned by value, which spares cgo's run-time pointer
// check and keeps Go variables off the heap (see shim.h). The tests pass
// under GODEBUG=cgocheck=2.
//
// # Linking
//
// By default the package links the libtachyon of the checkout it lives in
// (target/release, built with cargo build --release -p tachyon-ffi) with a
// run path to it. Build with -tags tachyon_system to use an installed
// libtachyon through pkg-config instead. docs/go.md in the repository is
// the guide.
package tachyon
