package tachyon

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"time"
	"unsafe"
)

// Ring is a handle on a shared ring of fixed-size nodes (a
// CircularBuffer): any number of writer and reader processes, each item
// read by one reader, one copy in and one out. It is removed when the last
// process closes it. Safe for concurrent use.
type Ring struct {
	g     guard
	p     C.uintptr_t // the ty_ring_t*, C memory
	node  int
	light bool
}

// RingOptions are a ring's options, chosen when it is created and used by
// every process that opens it.
type RingOptions struct {
	// LightHandovers: nodes are handed over by plain stores and the
	// wake-up check has no fence; a waiter that goes to sleep runs
	// membarrier(2) first, which interrupts the CPUs running processes
	// that have such a ring open. About 1.5 times the items per second at
	// 64 bytes; what it gives up is in docs/rings.md, "Light hand-overs".
	LightHandovers bool
}

// CreateRing creates the ring name of count nodes (2 or more; it holds
// exactly count items) of nodeSize bytes each (the largest item);
// ErrExists if it exists.
func CreateRing(name string, count, nodeSize int) (*Ring, error) {
	return createRing("CreateRing", name, count, nodeSize, RingOptions{})
}

// CreateRingWith creates a ring as CreateRing does, with options.
func CreateRingWith(name string, count, nodeSize int, opts RingOptions) (*Ring, error) {
	return createRing("CreateRingWith", name, count, nodeSize, opts)
}

func createRing(op, name string, count, nodeSize int, opts RingOptions) (*Ring, error) {
	if count < 0 || nodeSize < 0 {
		return nil, invalid(op, "negative geometry")
	}
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	var flags C.uint32_t
	if opts.LightHandovers {
		flags |= C.TY_RING_LIGHT_HANDOVERS
	}
	r := C.go_ty_ring_create_with(cn, C.size_t(count), C.size_t(nodeSize), flags)
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	return newRing(handle(r.ptr)), nil
}

// OpenRing opens the existing ring name.
func OpenRing(name string) (*Ring, error) {
	const op = "OpenRing"
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	r := C.go_ty_ring_open(cn)
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	return newRing(handle(r.ptr)), nil
}

func newRing(p C.uintptr_t) *Ring {
	r := &Ring{p: p, node: int(C.go_ty_ring_node_size(p)), light: C.go_ty_ring_light_handovers(p) != 0}
	runtime.SetFinalizer(r, (*Ring).Close)
	return r
}

// NodeSize returns the ring's node size: the largest item (0 for nil).
func (r *Ring) NodeSize() int {
	if r == nil {
		return 0
	}
	return r.node
}

// LightHandovers reports whether the ring was created with light
// hand-overs (RingOptions); false for nil.
func (r *Ring) LightHandovers() bool {
	if r == nil {
		return false
	}
	return r.light
}

// SetBatchReads turns this handle's batch reads on or off (off by
// default). A read that catches up with a writer in mid-stream then waits
// until the writer is a batch ahead (at most 32 items, and 2 KiB of them;
// none for items over 256 bytes) before it takes the first: 1.2 to 2
// times the items per second of 64 bytes on the Intel Xeons measured, for
// a reader that wants throughput,
// each item later (it waits for the batch behind it, or about a
// microsecond of looks where its writer stops short). Not for a reader
// that wants each item the moment it is written; docs/rings.md, "Batch
// reads". The handle's option: nothing in the ring changes, and other
// handles read as they choose. It waits for the handle's calls in flight,
// as Close does: set it before reading.
func (r *Ring) SetBatchReads(on bool) error {
	return r.setOption("Ring.SetBatchReads", func() C.go_ty_res { return C.go_ty_ring_set_batch_reads(r.p, cbool(on)) })
}

// setOption runs set, one of the handle's option setters, once the
// handle's calls in flight are done (as Close waits for them).
func (r *Ring) setOption(op string, set func() C.go_ty_res) error {
	if r == nil {
		return closed(op, true)
	}
	var err error
	if !r.g.exclusive(func() {
		if res := set(); res.rc != C.TY_OK {
			err = fail(op, res)
		}
	}) {
		return closed(op, false)
	}
	return err
}

// BatchReads reports whether this handle reads in batches
// (SetBatchReads); false for nil or a closed handle.
func (r *Ring) BatchReads() bool {
	if r.enter("Ring.BatchReads") != nil {
		return false
	}
	defer r.g.leave()
	return C.go_ty_ring_batch_reads(r.p) != 0
}

// SetNotify sets how this handle's waits wait: NotifyHybrid (the
// default: spin a few microseconds, then sleep), NotifySpin (never
// sleep: lowest latency, a CPU per waiting goroutine) or NotifyFutex
// (sleep at once). The handle's option, as SetBatchReads: writers and
// readers wake each other whatever each one's choice. It waits for the
// handle's calls in flight, as Close does: set it before use.
func (r *Ring) SetNotify(n Notify) error {
	return r.setOption("Ring.SetNotify", func() C.go_ty_res { return C.go_ty_ring_set_notify(r.p, C.int(n)) })
}

// Notify reports how this handle's waits wait (SetNotify); NotifyHybrid
// for nil or a closed handle.
func (r *Ring) Notify() Notify {
	if r.enter("Ring.Notify") != nil {
		return NotifyHybrid
	}
	defer r.g.leave()
	return Notify(C.go_ty_ring_notify(r.p))
}

// Close closes the handle; the last close in any process removes the
// ring. It waits for calls in flight. A second Close returns ErrClosed.
func (r *Ring) Close() error {
	if r == nil {
		return closed("Ring.Close", true)
	}
	if !r.g.shut(func() { C.go_ty_ring_close(r.p); r.p = 0 }) {
		return closed("Ring.Close", false)
	}
	runtime.SetFinalizer(r, nil)
	return nil
}

func (r *Ring) enter(op string) error {
	if r == nil {
		return closed(op, true)
	}
	if !r.g.enter() {
		return closed(op, false)
	}
	return nil
}

// Write copies item (at most NodeSize bytes: ErrMessageSize) into the
// ring, waiting at most timeout for a free node (Forever, or 0: not at
// all): ErrTimeout when the ring stayed full.
func (r *Ring) Write(item []byte, timeout time.Duration) error {
	return r.write("Ring.Write", item, nanos(timeout))
}

// WriteContext is Write until ctx is done (then it returns ctx.Err(),
// having written nothing).
func (r *Ring) WriteContext(ctx context.Context, item []byte) error {
	return sliced(ctx, func(w C.int64_t) (bool, error) {
		err := r.write("Ring.WriteContext", item, w)
		return retry(err, C.TY_ETIMEDOUT), err
	})
}

func (r *Ring) write(op string, item []byte, timeout C.int64_t) error {
	if err := r.enter(op); err != nil {
		return err
	}
	defer r.g.leave()
	var p unsafe.Pointer
	if len(item) > 0 {
		p = unsafe.Pointer(&item[0])
	}
	if r := C.go_ty_ring_write(r.p, p, C.size_t(len(item)), timeout); r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// Read copies the next item into buf and returns its length, waiting at
// most timeout for one: ErrTimeout when the ring stayed empty. An item
// longer than buf stays in the ring (ErrBufferTooSmall or ErrMessageSize):
// pass a buffer of NodeSize bytes.
func (r *Ring) Read(buf []byte, timeout time.Duration) (int, error) {
	return r.read("Ring.Read", buf, nanos(timeout))
}

// ReadContext is Read until ctx is done (then it returns ctx.Err(),
// having taken nothing).
func (r *Ring) ReadContext(ctx context.Context, buf []byte) (int, error) {
	var n int
	err := sliced(ctx, func(w C.int64_t) (bool, error) {
		var err error
		n, err = r.read("Ring.ReadContext", buf, w)
		return retry(err, C.TY_ETIMEDOUT), err
	})
	return n, err
}

func (r *Ring) read(op string, buf []byte, timeout C.int64_t) (int, error) {
	if err := r.enter(op); err != nil {
		return 0, err
	}
	defer r.g.leave()
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	res := C.go_ty_ring_read(r.p, p, C.size_t(len(buf)), timeout)
	if res.rc < 0 {
		return 0, fail(op, res)
	}
	return int(res.rc), nil
}

// Buffer is a handle on a shared byte buffer: bytes at offsets, read and
// written under a robust reader-writer lock (a reader sees all of a write
// or none). It implements io.ReaderAt and io.WriterAt, and is removed when
// the last process closes it. Safe for concurrent use.
type Buffer struct {
	g    guard
	p    C.uintptr_t // the ty_buffer_t*, C memory
	size int64
}

// CreateBuffer creates the byte buffer name of size bytes, zeroed;
// ErrExists if it exists.
func CreateBuffer(name string, size int) (*Buffer, error) {
	const op = "CreateBuffer"
	if size < 0 {
		return nil, invalid(op, "negative size")
	}
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	r := C.go_ty_buffer_create(cn, C.size_t(size))
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	return newBuffer(handle(r.ptr)), nil
}

// OpenBuffer opens the existing byte buffer name.
func OpenBuffer(name string) (*Buffer, error) {
	const op = "OpenBuffer"
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	r := C.go_ty_buffer_open(cn)
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	return newBuffer(handle(r.ptr)), nil
}

func newBuffer(p C.uintptr_t) *Buffer {
	b := &Buffer{p: p, size: int64(C.go_ty_buffer_size(p))}
	runtime.SetFinalizer(b, (*Buffer).Close)
	return b
}

// Size returns the buffer's size in bytes (0 for nil).
func (b *Buffer) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Close closes the handle; the last close in any process removes the
// buffer. A second Close returns ErrClosed.
func (b *Buffer) Close() error {
	if b == nil {
		return closed("Buffer.Close", true)
	}
	if !b.g.shut(func() { C.go_ty_buffer_close(b.p); b.p = 0 }) {
		return closed("Buffer.Close", false)
	}
	runtime.SetFinalizer(b, nil)
	return nil
}

// WriteAt copies p into the buffer at off, all or nothing (io.WriterAt):
// a range that does not fit is ErrInvalid and nothing is written.
func (b *Buffer) WriteAt(p []byte, off int64) (int, error) {
	return b.access("Buffer.WriteAt", p, off, true)
}

// ReadAt copies len(p) bytes of the buffer at off into p (io.ReaderAt):
// a range that does not fit is ErrInvalid and nothing is read.
func (b *Buffer) ReadAt(p []byte, off int64) (int, error) {
	return b.access("Buffer.ReadAt", p, off, false)
}

func (b *Buffer) access(op string, p []byte, off int64, write bool) (int, error) {
	if b == nil {
		return 0, closed(op, true)
	}
	if off < 0 {
		return 0, invalid(op, "negative offset")
	}
	if !b.g.enter() {
		return 0, closed(op, false)
	}
	defer b.g.leave()
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	var r C.go_ty_res
	if write {
		r = C.go_ty_buffer_write(b.p, C.size_t(off), ptr, C.size_t(len(p)))
	} else {
		r = C.go_ty_buffer_read(b.p, C.size_t(off), ptr, C.size_t(len(p)))
	}
	if r.rc != C.TY_OK {
		return 0, fail(op, r)
	}
	return len(p), nil
}
