package tachyon

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sort"
	"time"
	"unsafe"
)

// Subscription is one receive over several partitions of a topic
// (ty_subscription_t): Receive takes the next message of whichever of its
// partitions has one, looking at each in turn so that none starves.
// Made by Topic.Subscribe (the topic's default group) or Group.Subscribe
// (a consumer group's messages; then "topic" below means the group: its
// messages are released through the group, and Group.Close closes it);
// safe for concurrent use.
//
// Its messages belong to the topic it came from, as those of
// Topic.Receive do: Message.Partition says which partition each came from,
// and Message.Release releases it through the topic. A Subscription keeps
// its Topic reachable, and C requires it to be closed before the topic:
// Topic.Close closes the subscriptions still open on it first (their
// later calls return ErrClosed). Messages received through a subscription
// stay valid after its Close, until Release or the topic's Close.
type Subscription struct {
	t     *Topic
	s     *subState
	parts []uint32 // ascending, no duplicates
}

// subState is the C side of a Subscription. The topic's set of open
// subscriptions holds it rather than the Subscription, so that a dropped
// Subscription is not kept reachable by its topic (its finalizer can run).
type subState struct {
	g guard
	p C.uintptr_t // the ty_subscription_t*, C memory
	w waits       // guarded by the topic's wmu
}

// shut closes the C subscription once, after the calls in flight on it.
func (s *subState) shut() bool {
	return s.g.shut(func() { C.go_ty_subscription_close(s.p); s.p = 0 })
}

// Subscribe opens a Subscription to the given partitions of the topic
// (duplicates count once), or to every partition when none is given. A
// partition out of range is ErrInvalid. Close the subscription when done
// (Topic.Close closes those still open).
func (t *Topic) Subscribe(partitions ...uint32) (*Subscription, error) {
	return t.subscribe("Topic.Subscribe", partitions)
}

func (t *Topic) subscribe(op string, partitions []uint32) (*Subscription, error) {
	if err := t.enter(op); err != nil {
		return nil, err
	}
	defer t.g.leave()
	var ps *C.uint32_t
	if len(partitions) > 0 {
		// Go memory without Go pointers, read during the call only.
		ps = (*C.uint32_t)(unsafe.Pointer(&partitions[0]))
	}
	var r C.go_ty_res
	if t.grp != nil {
		r = C.go_ty_group_subscribe(t.p, ps, C.size_t(len(partitions)))
	} else {
		r = C.go_ty_subscription_open(t.p, ps, C.size_t(len(partitions)))
	}
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	st := &subState{p: handle(r.ptr)}
	t.wmu.Lock()
	if t.w.closing { // Close began: it would not see this one
		t.wmu.Unlock()
		st.shut()
		return nil, closed(op, false)
	}
	if t.subs == nil {
		t.subs = make(map[*subState]struct{})
	}
	t.subs[st] = struct{}{}
	t.wmu.Unlock()

	var parts []uint32
	if len(partitions) == 0 {
		parts = make([]uint32, t.parts)
		for i := range parts {
			parts[i] = uint32(i)
		}
	} else {
		sorted := append([]uint32(nil), partitions...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i, p := range sorted {
			if i == 0 || p != sorted[i-1] {
				parts = append(parts, p)
			}
		}
	}
	sub := &Subscription{t: t, s: st, parts: parts}
	runtime.SetFinalizer(sub, (*Subscription).Close)
	return sub, nil
}

// Topic returns the topic the subscription receives from (nil for a nil
// subscription); for a Group's subscription, the topic the group was
// joined through.
func (s *Subscription) Topic() *Topic {
	if s == nil {
		return nil
	}
	if s.t != nil && s.t.grp != nil {
		return s.t.grp.topic
	}
	return s.t
}

// Group returns the consumer group the subscription receives for (nil for
// a topic's subscription, of its default group).
func (s *Subscription) Group() *Group {
	if s == nil || s.t == nil {
		return nil
	}
	return s.t.grp
}

// Partitions returns the subscription's partitions, ascending (a copy; nil
// for a nil subscription).
func (s *Subscription) Partitions() []uint32 {
	if s == nil {
		return nil
	}
	return append([]uint32(nil), s.parts...)
}

// Close closes the subscription: it ends the ReceiveContext calls waiting
// on it (they return ErrClosed) and waits for its other calls in flight,
// so a goroutine blocked in Receive(Forever) delays it. Messages received
// through it stay valid until Release (or the topic's Close). A second
// Close, or a Close after the topic's, returns ErrClosed.
func (s *Subscription) Close() error {
	const op = "Subscription.Close"
	if s == nil || s.s == nil || s.t == nil {
		return closed(op, true)
	}
	t, st := s.t, s.s
	t.wmu.Lock()
	st.w.close()
	t.wmu.Unlock()
	if !st.shut() {
		return closed(op, false)
	}
	t.wmu.Lock()
	delete(t.subs, st)
	t.wmu.Unlock()
	runtime.SetFinalizer(s, nil)
	return nil
}

// receive receives through the subscription: try without waiting, else
// waiting at most timeout, ended early by cancel (a ty_cancel_t*, 0:
// none).
func (s *Subscription) receive(op string, timeout C.int64_t, try bool, cancel C.uintptr_t) (*Message, error) {
	if s == nil || s.s == nil || s.t == nil {
		return nil, closed(op, true)
	}
	st := s.s
	if !st.g.enter() {
		return nil, closed(op, false)
	}
	// The topic is open: its Close shuts its subscriptions first.
	r := C.go_ty_subscription_receive(st.p, timeout, cbool(try), cancel)
	st.g.leave()
	return s.t.message(op, r)
}

// Receive receives the next message of any of the subscription's
// partitions, waiting at most timeout (Forever: for ever, as the topic's
// notify policy says; 0 looks once): ErrTimeout when none came. Its
// Partition is the partition it came from. The caller must Release it.
func (s *Subscription) Receive(timeout time.Duration) (*Message, error) {
	return s.receive("Subscription.Receive", nanos(timeout), false, 0)
}

// TryReceive is Receive without waiting: ErrWouldBlock if every partition
// of the subscription is empty (as Topic.TryReceive).
func (s *Subscription) TryReceive() (*Message, error) {
	return s.receive("Subscription.TryReceive", 0, true, 0)
}

// ReceiveInto copies the next message of any of the subscription's
// partitions into buf and releases it at once (the copy path), waiting at
// most timeout (Forever: for ever; 0 looks once: ErrTimeout when none
// came); it returns the message's length and the partition it came from.
// A message longer than buf stays queued, first in its partition, which
// the next call looks at first: ReceiveInto returns its length with
// ErrBufferTooSmall. On a topic with inline slots an inline message goes
// from its slot straight into buf, with no chunk.
func (s *Subscription) ReceiveInto(buf []byte, timeout time.Duration) (n int, partition int, err error) {
	return s.receiveInto("Subscription.ReceiveInto", buf, nanos(timeout), false)
}

// TryReceiveInto is ReceiveInto without waiting: ErrWouldBlock if every
// partition of the subscription is empty.
func (s *Subscription) TryReceiveInto(buf []byte) (n int, partition int, err error) {
	return s.receiveInto("Subscription.TryReceiveInto", buf, 0, true)
}

func (s *Subscription) receiveInto(op string, buf []byte, timeout C.int64_t, try bool) (int, int, error) {
	if s == nil || s.s == nil || s.t == nil {
		return 0, 0, closed(op, true)
	}
	st := s.s
	if !st.g.enter() {
		return 0, 0, closed(op, false)
	}
	r := C.go_ty_subscription_recv(st.p, bufPtr(buf), C.size_t(len(buf)), timeout, cbool(try))
	st.g.leave()
	n, err := copied(op, r)
	return n, int(r.partition), err
}

// ReceiveContext is Receive until ctx is done (then it returns ctx.Err(),
// having taken nothing). As Topic.ReceiveContext, it is woken when ctx is
// done (ty_subscription_receive_cancel): an idle consumer costs nothing
// while it waits. Close (the subscription's or the topic's) ends it with
// ErrClosed.
func (s *Subscription) ReceiveContext(ctx context.Context) (*Message, error) {
	const op = "Subscription.ReceiveContext"
	if s == nil || s.s == nil || s.t == nil {
		return nil, closed(op, true)
	}
	return s.t.receiveContext(ctx, op, &s.s.w, func(timeout C.int64_t, cancel C.uintptr_t) (*Message, error) {
		return s.receive(op, timeout, false, cancel)
	})
}
