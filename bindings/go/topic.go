package tachyon

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// slice is the longest a Context form waits in C before it looks at its
// context again.
const slice = 5 * time.Millisecond

// Topic is a handle on a topic of a region: power-of-two partitions, each
// a bounded ring of message descriptors. Safe for concurrent use; loans
// and messages taken through it are published and released through it.
type Topic struct {
	g     guard
	p     C.uintptr_t // the ty_topic_t* (a group's: its ty_group_t*), C memory
	name  string
	parts int
	light bool
	// grp is set on the handle of a Group (group.go), which runs on this
	// machinery (guard, waits, subscriptions, messages) with the group
	// calls of the C library; never on a Topic handed to the caller.
	grp *Group

	// wmu guards w (the ReceiveContext calls waiting on the topic), subs
	// (the subscriptions open on it) and theirs.
	wmu  sync.Mutex
	w    waits
	subs map[*subState]struct{}
}

// waits is the cancellations (ty_cancel_t*) of the ReceiveContext calls
// waiting now on a handle, so that Close can end them; closing once Close
// began. Guarded by its topic's wmu.
type waits struct {
	m       map[C.uintptr_t]struct{}
	closing bool
}

// close marks the handle closing and wakes the calls waiting on it.
func (w *waits) close() {
	w.closing = true
	for c := range w.m {
		C.go_ty_cancel(c)
	}
}

// Name returns the topic's name.
func (t *Topic) Name() string {
	if t == nil {
		return ""
	}
	return t.name
}

// Partitions returns the topic's number of partitions (0 for a nil
// topic).
func (t *Topic) Partitions() int {
	if t == nil {
		return 0
	}
	return t.parts
}

// LightHandovers reports whether the topic was created with
// TopicConfig.LightHandovers (in any process: the setting is the
// topic's).
func (t *Topic) LightHandovers() bool {
	if t == nil {
		return false
	}
	return t.light
}

// SetBatchReads turns this handle's batch reads on or off (off by
// default). A receive that catches up with a publisher in mid-stream then
// waits until the publisher is a batch ahead (at most 32 messages, and 2
// KiB of them; none over 256 bytes) before it takes the first. Made for
// topics with inline slots (TopicConfig.InlinePayload), whose stream of
// 64-byte messages ran 1.2 to 2 times as fast with it on the Intel Xeons
// measured; each message comes
// later (it waits for the batch behind it, or about a microsecond of looks
// where its publisher stops short). Not for a consumer that wants each
// message the moment it is sent; docs/rings.md, "Batch reads". The
// handle's option: nothing in the region changes, and other handles
// receive as they choose; Subscriptions and Groups opened through the
// handle afterwards take it. It waits for the handle's calls in flight,
// as Close does: set it before receiving. With a Subscription of the
// handle open it fails with ErrInvalid (a subscription's calls use the
// handle): set it before subscribing.
func (t *Topic) SetBatchReads(on bool) error {
	const op = "Topic.SetBatchReads"
	if t == nil {
		return closed(op, true)
	}
	if t.grp != nil {
		return invalid(op, "a group's handle")
	}
	var err error
	if !t.g.exclusive(func() {
		// No Subscribe runs now (it enters the guard), so none opens
		// while this looks.
		t.wmu.Lock()
		open := len(t.subs)
		t.wmu.Unlock()
		if open > 0 {
			err = invalid(op, "a subscription of the handle is open: set it before subscribing")
			return
		}
		if res := C.go_ty_topic_set_batch_reads(t.p, cbool(on)); res.rc != C.TY_OK {
			err = fail(op, res)
		}
	}) {
		return closed(op, false)
	}
	return err
}

// BatchReads reports whether this handle receives in batches
// (SetBatchReads); false for nil or a closed handle.
func (t *Topic) BatchReads() bool {
	if t.enter("Topic.BatchReads") != nil {
		return false
	}
	defer t.g.leave()
	return C.go_ty_topic_batch_reads(t.p) != 0
}

// Close closes the handle: loans taken through it and not published go
// back to the pool, messages received through it and not released are
// released (their Data becomes invalid), and Subscriptions still open on
// it are closed first (C requires a subscription to be closed before its
// topic handle; their later calls return ErrClosed). It waits for calls in
// flight on the handle and on its subscriptions, so a goroutine blocked
// in Receive(p, Forever) delays it: stop such calls with a context first
// (Close ends the ReceiveContext calls waiting, which return ErrClosed). A
// second Close returns ErrClosed.
func (t *Topic) Close() error {
	return t.close("Topic.Close")
}

func (t *Topic) close(op string) error {
	if t == nil {
		return closed(op, true)
	}
	free := func() { C.go_ty_topic_close(t.p); t.p = 0 }
	if t.grp != nil {
		free = func() { C.go_ty_group_close(t.p); t.p = 0 }
	}
	return t.closeWith(op, free)
}

// closeWith is close with free freeing the C handle (run once, with no
// call in flight).
func (t *Topic) closeWith(op string, free func()) error {
	// Wake the ReceiveContext calls waiting in C, on the topic and on its
	// subscriptions: shut waits for them.
	t.wmu.Lock()
	t.w.close()
	subs := make([]*subState, 0, len(t.subs))
	for s := range t.subs {
		s.w.close()
		subs = append(subs, s)
	}
	t.subs = nil
	t.wmu.Unlock()
	for _, s := range subs {
		s.shut()
	}
	if !t.g.shut(free) {
		return closed(op, false)
	}
	runtime.SetFinalizer(t, nil)
	return nil
}

func (t *Topic) enter(op string) error {
	if t == nil {
		return closed(op, true)
	}
	if !t.g.enter() {
		return closed(op, false)
	}
	return nil
}

// part checks a partition number for C.
func (t *Topic) part(op string, partition int) (C.uint32_t, error) {
	if partition < 0 || partition >= t.parts {
		return 0, invalid(op, "no such partition")
	}
	return C.uint32_t(partition), nil
}

// PartitionOf returns the partition messages of key go to, or -1 for a
// nil or closed topic.
func (t *Topic) PartitionOf(key uint64) int {
	if t.enter("Topic.PartitionOf") != nil {
		return -1
	}
	n := int(C.go_ty_partition_of(t.p, C.uint64_t(key)))
	t.g.leave()
	return n
}

// TopicStats is a topic's configuration and counters (since it was
// created, all processes).
type TopicStats struct {
	// Partitions is the number of partitions.
	Partitions int
	// Capacity is the slots per partition.
	Capacity int
	// Notify is how the topic waits.
	Notify Notify
	// Delivery is the topic's delivery guarantee.
	Delivery Delivery
	// Published is the messages published.
	Published uint64
	// Received is the messages received.
	Received uint64
	// Corrupt is the corrupt descriptors dropped.
	Corrupt uint64
	// Lost is the messages lost with a consumer that died holding them.
	Lost uint64
}

func statsFromC(s *C.ty_topic_stats_t) TopicStats {
	return TopicStats{
		Partitions: int(s.partitions), Capacity: int(s.capacity), Notify: Notify(s.notify),
		Delivery: Delivery(s.delivery), Published: uint64(s.published), Received: uint64(s.received),
		Corrupt: uint64(s.corrupt), Lost: uint64(s.lost),
	}
}

// Stats returns the topic's configuration and counters.
func (t *Topic) Stats() (TopicStats, error) {
	const op = "Topic.Stats"
	if err := t.enter(op); err != nil {
		return TopicStats{}, err
	}
	defer t.g.leave()
	var out C.ty_topic_stats_t
	if r := C.go_ty_topic_stats(t.p, &out); r.rc != C.TY_OK {
		return TopicStats{}, fail(op, r)
	}
	return statsFromC(&out), nil
}

// Depth returns the number of messages waiting in partition now (a
// snapshot).
func (t *Topic) Depth(partition int) (int, error) {
	return t.depth("Topic.Depth", partition)
}

func (t *Topic) depth(op string, partition int) (int, error) {
	if err := t.enter(op); err != nil {
		return 0, err
	}
	defer t.g.leave()
	p, err := t.part(op, partition)
	if err != nil {
		return 0, err
	}
	var r C.go_ty_res
	if t.grp != nil {
		r = C.go_ty_group_depth(t.p, p)
	} else {
		r = C.go_ty_topic_depth(t.p, p)
	}
	if r.rc < 0 {
		return 0, fail(op, r)
	}
	return int(r.rc), nil
}

// Missed returns the messages of the topic's default group dropped
// unread from its full partitions by publishers of a topic with
// TopicConfig.Overrun, since the topic was created (0 on other topics).
// Each named group has its own count (Group.Missed).
func (t *Topic) Missed() (uint64, error) {
	return t.missed("Topic.Missed")
}

func (t *Topic) missed(op string) (uint64, error) {
	if err := t.enter(op); err != nil {
		return 0, err
	}
	defer t.g.leave()
	var r C.go_ty_res
	if t.grp != nil {
		r = C.go_ty_group_missed(t.p)
	} else {
		r = C.go_ty_topic_missed(t.p)
	}
	if r.rc < 0 {
		return 0, fail(op, r)
	}
	return uint64(r.rc), nil
}

// GroupInfo is one consumer group of a topic, as Topic.Groups lists it: a
// snapshot.
type GroupInfo struct {
	// Name is the group's name ("" for the default group).
	Name string
	// Slot is its group slot (0: the default group).
	Slot int
	// Generation is the slot's generation (a group dropped and created
	// again in the same slot has the next one).
	Generation uint32
	// Draining is true while the group is being dropped.
	Draining bool
	// Members is its member processes, as its record holds them (dead
	// ones until recovery forgets them); 0 for the default group, which
	// has no membership record (its consumers are whoever calls
	// Topic.Receive).
	Members int
	// LiveMembers is how many of Members are alive now.
	LiveMembers int
	// EmptySince is when the group was first seen without a live member
	// (the zero Time: it has one, or it is the default group). Recovery
	// drops the group once this is older than the region's group lease.
	EmptySince time.Time
	// Position is the messages consumed through the group so far, all
	// partitions.
	Position uint64
	// Lag is the messages waiting for the group now, all partitions.
	Lag uint64
	// Missed is the group's messages dropped unread by overrunning
	// publishers (TopicConfig.Overrun).
	Missed uint64
}

// Groups lists the topic's consumer groups in slot order, the default
// group (slot 0, named "") included while the topic has it. It takes a
// snapshot of the whole region (as tyctl does): a monitoring call, not
// one for every message.
func (t *Topic) Groups() ([]GroupInfo, error) {
	const op = "Topic.Groups"
	if err := t.enter(op); err != nil {
		return nil, err
	}
	defer t.g.leave()
	if t.grp != nil {
		return nil, invalid(op, "a group's handle has no topic calls")
	}
	for {
		res := C.go_ty_topic_groups(t.p, nil, 0)
		if res.rc < 0 {
			return nil, fail(op, res)
		}
		n := res.rc
		if n == 0 {
			return []GroupInfo{}, nil
		}
		size := C.size_t(n) * C.size_t(unsafe.Sizeof(C.ty_group_info_t{}))
		buf := (*C.ty_group_info_t)(C.malloc(size))
		res = C.go_ty_topic_groups(t.p, buf, C.size_t(n))
		if res.rc < 0 {
			C.free(unsafe.Pointer(buf))
			return nil, fail(op, res)
		}
		if res.rc > n { // a group was joined in between: ask again
			C.free(unsafe.Pointer(buf))
			continue
		}
		infos := unsafe.Slice(buf, int(res.rc))
		out := make([]GroupInfo, len(infos))
		for i := range infos {
			gi := &infos[i]
			out[i] = GroupInfo{
				Name: C.GoString(&gi.name[0]), Slot: int(gi.slot), Generation: uint32(gi.generation),
				Draining: gi.draining != 0, Members: int(gi.members), LiveMembers: int(gi.live_members),
				Position: uint64(gi.position), Lag: uint64(gi.lag), Missed: uint64(gi.missed),
			}
			if gi.empty_since_unix_ns != 0 {
				out[i].EmptySince = time.Unix(0, int64(gi.empty_since_unix_ns))
			}
		}
		C.free(unsafe.Pointer(buf))
		return out, nil
	}
}

// Loan is a chunk of the pool loaned for one message: write it through
// Bytes, then Publish it (or Unloan it). Not safe for concurrent use.
type Loan struct {
	t    *Topic
	buf  unsafe.Pointer // the chunk, in C memory; nil once used up
	data []byte
}

// Bytes returns the loaned chunk: len and cap are the size asked for. It
// is shared memory, writable by this loan alone until Publish or Unloan,
// and must not be used after them. nil once the loan is used up.
func (l *Loan) Bytes() []byte {
	if l == nil {
		return nil
	}
	return l.data
}

func (t *Topic) loan(op string, size int, timeout C.int64_t, try bool) (*Loan, error) {
	if size < 0 || uint64(size) > math.MaxUint32 {
		return nil, invalid(op, "size out of range")
	}
	if err := t.enter(op); err != nil {
		return nil, err
	}
	r := C.go_ty_loan(t.p, C.size_t(size), timeout, cbool(try))
	t.g.leave()
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	return &Loan{t: t, buf: r.ptr, data: unsafe.Slice((*byte)(r.ptr), size)}, nil
}

// Loan loans a chunk of size bytes (at most MaxMessage), waiting for a
// free one for ever, as the topic's notify policy says. Its bytes are
// whatever the chunk held before.
func (t *Topic) Loan(size int) (*Loan, error) {
	return t.loan("Topic.Loan", size, -1, false)
}

// LoanTimeout is Loan waiting at most timeout (Forever: for ever, 0: not
// at all) for a free chunk: ErrPoolExhausted when none came free.
func (t *Topic) LoanTimeout(size int, timeout time.Duration) (*Loan, error) {
	return t.loan("Topic.LoanTimeout", size, nanos(timeout), false)
}

// TryLoan is Loan without waiting: ErrPoolExhausted if no chunk of that
// size is free now.
func (t *Topic) TryLoan(size int) (*Loan, error) {
	return t.loan("Topic.TryLoan", size, 0, true)
}

// LoanContext is Loan until ctx is done (then it returns ctx.Err()).
func (t *Topic) LoanContext(ctx context.Context, size int) (*Loan, error) {
	const op = "Topic.LoanContext"
	var l *Loan
	err := sliced(ctx, func(w C.int64_t) (bool, error) {
		var err error
		l, err = t.loan(op, size, w, false)
		return retry(err, C.TY_EPOOL), err
	})
	return l, err
}

// retry reports whether a slice's error means "not within this slice".
func retry(err error, also C.int) bool {
	e, ok := err.(*Error)
	return ok && (e.Code == int(C.TY_ETIMEDOUT) || e.Code == int(also))
}

// sliced runs call(timeout) in slices of at most slice until it is done
// (retry false) or ctx is. A context that can never be done costs one
// call waiting for ever.
func sliced(ctx context.Context, call func(C.int64_t) (bool, error)) error {
	if ctx == nil {
		return invalid("context", "nil context")
	}
	if ctx.Done() == nil {
		_, err := call(-1)
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := slice
		if d, ok := ctx.Deadline(); ok {
			if left := time.Until(d); left < w {
				if left <= 0 {
					return context.DeadlineExceeded
				}
				w = left
			}
		}
		again, err := call(C.int64_t(w))
		if !again {
			return err
		}
	}
}

// publish does Publish's work; on any outcome but ErrInvalid the loan is
// used up.
func (l *Loan) publish(op string, n int, key uint64, timeout C.int64_t, try bool) error {
	if l == nil || l.t == nil {
		return invalid(op, "nil loan")
	}
	if l.buf == nil {
		return invalid(op, "the loan was published or returned already")
	}
	if n < 0 || n > len(l.data) {
		return invalid(op, "length out of range: more than was loaned")
	}
	t := l.t
	if err := t.enter(op); err != nil {
		return err
	}
	r := C.go_ty_publish(t.p, handle(l.buf), C.size_t(n), C.uint64_t(key), timeout, cbool(try))
	t.g.leave()
	if r.rc != C.TY_EINVAL {
		l.buf, l.data = nil, nil
	}
	if r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// Publish publishes the first n bytes of the loan with key: its
// descriptor goes into the key's partition, waiting for room for ever.
// Messages of one key are received in the order they were published.
// Whatever the result (except ErrInvalid, where nothing happened) the loan
// is used up: on an error its chunk goes back to the pool.
func (l *Loan) Publish(n int, key uint64) error {
	return l.publish("Loan.Publish", n, key, -1, false)
}

// PublishTimeout is Publish waiting at most timeout for room: ErrTimeout
// when it passed (the message is dropped).
func (l *Loan) PublishTimeout(n int, key uint64, timeout time.Duration) error {
	return l.publish("Loan.PublishTimeout", n, key, nanos(timeout), false)
}

// TryPublish is Publish without waiting: ErrWouldBlock if the key's
// partition is full (the message is dropped; loan again to retry).
func (l *Loan) TryPublish(n int, key uint64) error {
	return l.publish("Loan.TryPublish", n, key, 0, true)
}

// Unloan returns the loan to the pool unpublished.
func (l *Loan) Unloan() error {
	const op = "Loan.Unloan"
	if l == nil || l.t == nil {
		return invalid(op, "nil loan")
	}
	if l.buf == nil {
		return invalid(op, "the loan was published or returned already")
	}
	t := l.t
	if err := t.enter(op); err != nil {
		return err
	}
	r := C.go_ty_unloan(t.p, handle(l.buf))
	t.g.leave()
	l.buf, l.data = nil, nil
	if r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// Close returns the loan unpublished if it was not used up, and does
// nothing otherwise, so that defer loan.Close() is always right.
func (l *Loan) Close() error {
	if l == nil || l.buf == nil {
		return nil
	}
	return l.Unloan()
}

// Send copies data into a chunk and publishes it with key (the copy path:
// loan, copy and publish in one call), waiting for ever.
func (t *Topic) Send(data []byte, key uint64) error {
	return t.send("Topic.Send", data, key, -1)
}

// SendTimeout is Send waiting at most timeout in all; with 0, a full
// partition is ErrWouldBlock.
func (t *Topic) SendTimeout(data []byte, key uint64, timeout time.Duration) error {
	return t.send("Topic.SendTimeout", data, key, nanos(timeout))
}

// SendContext is Send until ctx is done (then it returns ctx.Err(), and
// nothing was published).
func (t *Topic) SendContext(ctx context.Context, data []byte, key uint64) error {
	return sliced(ctx, func(w C.int64_t) (bool, error) {
		err := t.send("Topic.SendContext", data, key, w)
		return retry(err, C.TY_EPOOL), err
	})
}

func (t *Topic) send(op string, data []byte, key uint64, timeout C.int64_t) error {
	if err := t.enter(op); err != nil {
		return err
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	r := C.go_ty_send(t.p, p, C.size_t(len(data)), C.uint64_t(key), timeout)
	t.g.leave()
	if r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// ReceiveInto copies the next message of partition into buf and releases
// it at once (the copy path), waiting at most timeout (Forever: for ever;
// 0 looks once: ErrTimeout when none came); it returns the message's
// length. A message longer than buf is not taken: it stays queued, first
// in its partition, and ReceiveInto returns its length with
// ErrBufferTooSmall (call again with a buffer that large; nothing is
// lost). On a topic with inline slots (TopicConfig.InlinePayload) an
// inline message goes from its slot straight into buf, with no chunk.
func (t *Topic) ReceiveInto(partition int, buf []byte, timeout time.Duration) (int, error) {
	return t.receiveInto("Topic.ReceiveInto", partition, buf, nanos(timeout), false)
}

// TryReceiveInto is ReceiveInto without waiting: ErrWouldBlock if the
// partition is empty.
func (t *Topic) TryReceiveInto(partition int, buf []byte) (int, error) {
	return t.receiveInto("Topic.TryReceiveInto", partition, buf, 0, true)
}

func (t *Topic) receiveInto(op string, partition int, buf []byte, timeout C.int64_t, try bool) (int, error) {
	if err := t.enter(op); err != nil {
		return 0, err
	}
	defer t.g.leave()
	p, err := t.part(op, partition)
	if err != nil {
		return 0, err
	}
	at := bufPtr(buf)
	r := C.go_ty_recv(t.p, p, at, C.size_t(len(buf)), timeout, cbool(try), cbool(t.grp != nil))
	return copied(op, r)
}

// copied is the length of a copy receive's message (received, or left
// queued with ErrBufferTooSmall), or its error.
func copied(op string, r C.go_ty_msg) (int, error) {
	if r.rc != C.TY_OK {
		n := 0
		if r.rc == C.TY_ENOBUFS {
			n = int(r.len)
		}
		return n, fail(op, C.go_ty_res{rc: r.rc, err: r.err})
	}
	return int(r.len), nil
}

// bufPtr is the address of buf's first byte (nil for an empty buf).
func bufPtr(buf []byte) unsafe.Pointer {
	if len(buf) == 0 {
		return nil
	}
	return unsafe.Pointer(&buf[0])
}

// Message is a received message: its bytes stay in shared memory until
// Release. Not safe for concurrent use.
type Message struct {
	t      *Topic
	data   []byte         // over ptr; nil once released
	ptr    unsafe.Pointer // ty_msg_t.data, C memory
	handle uint64         // ty_msg_t.handle; 0 once released
	len    int
	part   uint32
}

// Data returns the message's bytes, a read-only view of shared memory
// (do not write it): valid until Release, or until the topic is closed.
// nil once released.
func (m *Message) Data() []byte {
	if m == nil {
		return nil
	}
	return m.data
}

// Partition returns the partition the message came from.
func (m *Message) Partition() int {
	if m == nil {
		return -1
	}
	return int(m.part)
}

// Release gives the message's chunk back to the pool; Data becomes
// invalid. A second Release is ErrInvalid.
func (m *Message) Release() error {
	const op = "Message.Release"
	if m == nil || m.t == nil {
		return invalid(op, "nil message")
	}
	if m.handle == 0 {
		return invalid(op, "the message was released already")
	}
	t := m.t
	m.data = nil
	if err := t.enter(op); err != nil {
		return err
	}
	var r C.go_ty_res
	if t.grp != nil {
		r = C.go_ty_group_release(t.p, handle(m.ptr), C.size_t(m.len), C.uint32_t(m.part), C.uint64_t(m.handle))
	} else {
		r = C.go_ty_release(t.p, handle(m.ptr), C.size_t(m.len), C.uint32_t(m.part), C.uint64_t(m.handle))
	}
	t.g.leave()
	m.handle, m.ptr = 0, nil
	if r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// Close releases the message if it was not released, and does nothing
// otherwise, so that defer msg.Close() is always right.
func (m *Message) Close() error {
	if m == nil || m.handle == 0 {
		return nil
	}
	return m.Release()
}

func (t *Topic) receive(op string, partition int, timeout C.int64_t, try bool) (*Message, error) {
	return t.receiveWith(op, partition, timeout, try, 0)
}

// receiveWith is receive, ended early by cancel (a ty_cancel_t*, 0: none).
func (t *Topic) receiveWith(op string, partition int, timeout C.int64_t, try bool, cancel C.uintptr_t) (*Message, error) {
	if err := t.enter(op); err != nil {
		return nil, err
	}
	p, err := t.part(op, partition)
	if err != nil {
		t.g.leave()
		return nil, err
	}
	var r C.go_ty_msg
	if t.grp != nil {
		r = C.go_ty_group_receive(t.p, p, timeout, cbool(try), cancel)
	} else if cancel != 0 {
		r = C.go_ty_subscribe_cancel(t.p, p, timeout, cancel)
	} else {
		r = C.go_ty_subscribe(t.p, p, timeout, cbool(try))
	}
	t.g.leave()
	return t.message(op, r)
}

// message is the Message of a receive through t (or a subscription of t),
// or its error.
func (t *Topic) message(op string, r C.go_ty_msg) (*Message, error) {
	if r.rc != C.TY_OK {
		return nil, fail(op, C.go_ty_res{rc: r.rc, err: r.err})
	}
	msg := &Message{t: t, ptr: r.data, handle: uint64(r.handle), len: int(r.len), part: uint32(r.partition)}
	if r.len > 0 {
		msg.data = unsafe.Slice((*byte)(r.data), int(r.len))
	} else {
		msg.data = []byte{}
	}
	return msg, nil
}

// Receive receives the next message of partition, waiting at most timeout
// (Forever: for ever, as the topic's notify policy says; 0 looks once):
// ErrTimeout when none came. Each message goes to exactly one consumer of
// its partition. The caller must Release it.
func (t *Topic) Receive(partition int, timeout time.Duration) (*Message, error) {
	return t.receive("Topic.Receive", partition, nanos(timeout), false)
}

// TryReceive is Receive without waiting: ErrWouldBlock if the partition
// is empty.
func (t *Topic) TryReceive(partition int) (*Message, error) {
	return t.receive("Topic.TryReceive", partition, 0, true)
}

// ReceiveContext is Receive until ctx is done (then it returns ctx.Err(),
// having taken nothing).
//
// Unlike the other Context forms, which look at their context every 5 ms,
// ReceiveContext is woken when ctx is done (ty_subscribe_cancel): an idle
// consumer costs nothing while it waits.
func (t *Topic) ReceiveContext(ctx context.Context, partition int) (*Message, error) {
	const op = "Topic.ReceiveContext"
	if t == nil {
		return nil, closed(op, true)
	}
	return t.receiveContext(ctx, op, &t.w, func(timeout C.int64_t, cancel C.uintptr_t) (*Message, error) {
		return t.receiveWith(op, partition, timeout, false, cancel)
	})
}

// receiveContext is a ReceiveContext: recv(timeout, cancel) waits in one
// C call that cancel (a ty_cancel_t*, 0: none) ends; w is where the
// handle's Close finds cancel (guarded by t.wmu).
func (t *Topic) receiveContext(ctx context.Context, op string, w *waits, recv func(C.int64_t, C.uintptr_t) (*Message, error)) (*Message, error) {
	if ctx == nil {
		return nil, invalid("context", "nil context")
	}
	if ctx.Done() == nil {
		return recv(-1, 0)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := C.int64_t(-1)
	d, hasDeadline := ctx.Deadline()
	if hasDeadline {
		left := time.Until(d)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		timeout = nanos(left)
	}
	cancel := C.go_ty_cancel_new()
	t.wmu.Lock()
	if w.closing {
		t.wmu.Unlock()
		C.go_ty_cancel_free(cancel)
		return nil, closed(op, false)
	}
	if w.m == nil {
		w.m = make(map[C.uintptr_t]struct{})
	}
	w.m[cancel] = struct{}{}
	t.wmu.Unlock()
	finished, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			C.go_ty_cancel(cancel)
		case <-finished:
		}
	}()
	m, err := recv(timeout, cancel)
	close(finished)
	<-watched // the watcher no longer uses cancel
	t.wmu.Lock()
	delete(w.m, cancel) // nor Close, from now on
	closing := w.closing
	t.wmu.Unlock()
	C.go_ty_cancel_free(cancel)
	if err != nil {
		if closing && errors.Is(err, ErrInterrupted) {
			return nil, closed(op, false) // ended by Close
		}
		if e := ctx.Err(); e != nil && (errors.Is(err, ErrInterrupted) || errors.Is(err, ErrTimeout)) {
			return nil, e
		}
		if hasDeadline && errors.Is(err, ErrTimeout) {
			return nil, context.DeadlineExceeded // the C timeout was the context's deadline
		}
	}
	return m, err
}

// cbool converts a flag for C.
func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
