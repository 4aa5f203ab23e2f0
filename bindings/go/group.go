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

// Group is a member of a consumer group of a topic (ty_group_t), from
// Topic.JoinGroup: every group joined to a topic receives every message
// published after it joined; the members of one group (Groups of one
// name, in any process) compete, each message going to one of them. The
// payload is not copied however many groups read it. Safe for concurrent
// use.
//
// Messages received through a group (Receive, or a Subscription of
// Subscribe) belong to it: Message.Release releases them through the
// group. Close closes the subscriptions still open on it first, and
// releases the messages not released. A Group keeps the region attached:
// it stays usable after the Topic it was joined through is closed.
//
// Crash safety: a process killed while it holds a group's message loses
// it for that group only (at most once) or has it delivered again within
// the group (at least once); no chunk leaks. Close ends this member; a
// group without members keeps its position for the region's group lease
// and is then dropped by recovery.
type Group struct {
	// h is the group's handle, run by the Topic machinery (guard, waits,
	// subscriptions, messages) with the C library's group calls.
	h     *Topic
	topic *Topic
	name  string
}

// JoinGroup joins the consumer group name of the topic, creating the group
// if none of that name is joined, and returns this member: from now on
// every message published to the topic goes to the group too, to one of
// its members. Names are 1 to 64 bytes without NUL (ErrInvalid); a region
// without named group slots (RegionConfig.MaxGroups below 2) is
// ErrInvalid; every named slot of the topic used is ErrNoSpace. Close the
// group when done. Crash safety and leases: see Group.
func (t *Topic) JoinGroup(name string) (*Group, error) {
	return t.join("Topic.JoinGroup", name, JoinNow)
}

// JoinFrom says where a group created by a join starts
// (Topic.JoinGroupFrom).
type JoinFrom int

const (
	// JoinNow: with the next message published (as JoinGroup).
	JoinNow JoinFrom = C.TY_JOIN_NOW
	// JoinOldest: first every message still queued in the topic (per
	// partition, what the group furthest behind has not read), oldest
	// first, then the live stream, with no gap and no duplicate between
	// the two (Kafka's "earliest"). The backlog is copied into the group
	// once, at the join; what could not be copied is counted in
	// Group.Missed.
	JoinOldest JoinFrom = C.TY_JOIN_OLDEST
)

// JoinGroupFrom is JoinGroup, saying where a group this join creates
// starts (JoinNow or JoinOldest). Joining a group that exists already
// continues from its position either way.
func (t *Topic) JoinGroupFrom(name string, from JoinFrom) (*Group, error) {
	return t.join("Topic.JoinGroupFrom", name, from)
}

func (t *Topic) join(op, name string, from JoinFrom) (*Group, error) {
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	if err := t.enter(op); err != nil {
		return nil, err
	}
	r := C.go_ty_topic_join_group(t.p, cn, C.int(from))
	t.g.leave()
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	g := &Group{topic: t, name: name}
	g.h = &Topic{p: handle(r.ptr), name: t.name, parts: t.parts, grp: g}
	// On the handle, not the Group: subscriptions and messages keep the
	// handle reachable after the Group itself is dropped.
	runtime.SetFinalizer(g.h, (*Topic).Close)
	return g, nil
}

// Name returns the group's name ("" for a nil group).
func (g *Group) Name() string {
	if g == nil {
		return ""
	}
	return g.name
}

// Topic returns the topic the group was joined through (nil for a nil
// group).
func (g *Group) Topic() *Topic {
	if g == nil {
		return nil
	}
	return g.topic
}

func (g *Group) handle() *Topic {
	if g == nil {
		return nil
	}
	return g.h
}

// Receive receives the group's next message of partition, waiting at most
// timeout (Forever: for ever; 0 looks once): ErrTimeout when none came.
// The caller must Release it.
func (g *Group) Receive(partition int, timeout time.Duration) (*Message, error) {
	return g.handle().receive("Group.Receive", partition, nanos(timeout), false)
}

// TryReceive is Receive without waiting: ErrWouldBlock if the group's
// partition is empty.
func (g *Group) TryReceive(partition int) (*Message, error) {
	return g.handle().receive("Group.TryReceive", partition, 0, true)
}

// ReceiveInto copies the group's next message of partition into buf and
// releases it at once (the copy path), waiting at most timeout (Forever:
// for ever; 0 looks once: ErrTimeout when none came); it returns the
// message's length. A message longer than buf stays queued, first in the
// group's partition: ReceiveInto returns its length with
// ErrBufferTooSmall (as Topic.ReceiveInto).
func (g *Group) ReceiveInto(partition int, buf []byte, timeout time.Duration) (int, error) {
	return g.handle().receiveInto("Group.ReceiveInto", partition, buf, nanos(timeout), false)
}

// TryReceiveInto is ReceiveInto without waiting: ErrWouldBlock if the
// group's partition is empty.
func (g *Group) TryReceiveInto(partition int, buf []byte) (int, error) {
	return g.handle().receiveInto("Group.TryReceiveInto", partition, buf, 0, true)
}

// ReceiveContext is Receive until ctx is done (then it returns ctx.Err(),
// having taken nothing), woken when ctx is done as Topic.ReceiveContext
// is. Close ends it with ErrClosed.
func (g *Group) ReceiveContext(ctx context.Context, partition int) (*Message, error) {
	const op = "Group.ReceiveContext"
	h := g.handle()
	if h == nil {
		return nil, closed(op, true)
	}
	return h.receiveContext(ctx, op, &h.w, func(timeout C.int64_t, cancel C.uintptr_t) (*Message, error) {
		return h.receiveWith(op, partition, timeout, false, cancel)
	})
}

// Subscribe opens a Subscription of the group: one receive over the given
// partitions of its topic (duplicates count once; none: every partition),
// of the group's messages, as Topic.Subscribe does for the default
// group. Close it when done (the group's Close closes those still open).
func (g *Group) Subscribe(partitions ...uint32) (*Subscription, error) {
	return g.handle().subscribe("Group.Subscribe", partitions)
}

// Depth returns the number of messages waiting for the group in
// partition now (a snapshot).
func (g *Group) Depth(partition int) (int, error) {
	return g.handle().depth("Group.Depth", partition)
}

// Close ends this member of the group (the group stays joined, see
// Group): its subscriptions still open are closed first, messages received
// through it and not released are released, and calls in flight are
// waited for (a ReceiveContext waiting is ended with ErrClosed). A second
// Close returns ErrClosed. Leaving here cannot report a failure; Leave
// does.
func (g *Group) Close() error {
	return g.handle().close("Group.Close")
}

// Leave is Close reporting what leaving did: true if it ended this
// process's membership of the group (a member is a process: its Groups of
// one group share one membership, which the last of them to leave or
// close ends; false while others keep it). Ending it takes the process
// out of the group's record, so the group's messages go to its other
// members. A group left without a live member keeps its position (what
// is published meanwhile waits for it) for the region's group lease: a
// member joining within it goes on from there; then recovery drops it.
// The Group is closed afterwards whatever the result: every later call
// returns ErrClosed (a second Leave or Close too). ErrTimeout: the
// region's control lock stayed taken 5 s (the process then stays
// recorded as a member until it exits).
func (g *Group) Leave() (bool, error) {
	const op = "Group.Leave"
	h := g.handle()
	if h == nil {
		return false, closed(op, true)
	}
	var r C.go_ty_res
	if err := h.closeWith(op, func() { r = C.go_ty_group_leave(h.p); h.p = 0 }); err != nil {
		return false, err
	}
	if r.rc < 0 {
		return false, fail(op, r)
	}
	return r.rc == 1, nil
}

// Missed returns the group's messages dropped unread from its full
// partitions by publishers of a topic with TopicConfig.Overrun, since
// the group was created (0 on other topics). Each group has its own
// count: a slow group misses messages, a fast one does not.
func (g *Group) Missed() (uint64, error) {
	return g.handle().missed("Group.Missed")
}
