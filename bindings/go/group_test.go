package tachyon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// newGroupRegion creates a 16 MiB region of maxGroups group slots per
// topic, closed and removed when the test ends.
func newGroupRegion(t *testing.T, maxGroups uint32) (*Region, string) {
	t.Helper()
	name := uniqueName(t.Name()[:min(len(t.Name()), 20)])
	r := must(CreateRegion(name, &RegionConfig{Size: 16 << 20, RingArena: 1 << 20, MaxGroups: maxGroups}))(t)
	t.Cleanup(func() {
		r.Close()
		if err := Remove(name); err != nil {
			t.Errorf("removing %s: %v", name, err)
		}
	})
	return r, name
}

// Two consumer groups of one topic, a Go producer process: each group
// receives every message exactly once (in order per key), one through a
// Subscription over every partition, one partition by partition.
func TestGroupsFromAProducerProcess(t *testing.T) {
	const n, keys = 5000, 7
	reg, name := newGroupRegion(t, 4)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64, NoDefaultGroup: true}))(t)
	defer topic.Close()
	audit := must(topic.JoinGroup("audit"))(t)
	defer audit.Close()
	billing := must(topic.JoinGroup("billing"))(t)
	defer billing.Close()
	if audit.Name() != "audit" || billing.Topic() != topic {
		t.Fatalf("names: %q %v", audit.Name(), billing.Topic())
	}
	sub := must(audit.Subscribe())(t)
	defer sub.Close()
	if sub.Group() != audit || sub.Topic() != topic {
		t.Fatal("the subscription does not name its group and topic")
	}

	cmd, _ := child(t, "produce", name, "t", fmt.Sprint(n), fmt.Sprint(keys))
	var gotA, gotB []string
	end := time.Now().Add(bound)
	for len(gotA) < n || len(gotB) < n {
		if time.Now().After(end) {
			t.Fatalf("after %v: audit has %d, billing %d of %d", bound, len(gotA), len(gotB), n)
		}
		msg, err := sub.Receive(time.Millisecond)
		if err == nil {
			gotA = append(gotA, fmt.Sprintf("%d %s", msg.Partition(), msg.Data()))
			check(t, msg.Release())
		} else if !errors.Is(err, ErrTimeout) {
			t.Fatal(err)
		}
		for p := 0; p < topic.Partitions(); p++ {
			for {
				msg, err := billing.TryReceive(p)
				if errors.Is(err, ErrWouldBlock) {
					break
				}
				check(t, err)
				gotB = append(gotB, fmt.Sprintf("%d %s", msg.Partition(), msg.Data()))
				check(t, msg.Release())
			}
		}
	}
	check(t, cmd.Wait())
	keyed(t, topic, "go", gotA, n, keys)
	keyed(t, topic, "go", gotB, n, keys)
	_, err := sub.TryReceive()
	wantErr(t, err, ErrWouldBlock)
	for p := 0; p < topic.Partitions(); p++ {
		if d := must(billing.Depth(p))(t); d != 0 {
			t.Fatalf("billing partition %d: depth %d after all were received", p, d)
		}
	}
	// No default group on this topic.
	_, err = topic.TryReceive(0)
	wantErr(t, err, ErrInvalid)
	// Every chunk back in the pool (this process loaned none).
	for c, s := range must(reg.PoolStats())(t) {
		if s.Free != s.Chunks {
			t.Fatalf("class %d: %d of %d chunks free", c, s.Free, s.Chunks)
		}
	}
}

// One message held by the default group and two named groups of this
// process at once, each released through its own handle; a member taking
// its group's message from another member; Close releasing what a group
// still holds.
func TestGroupsShareOneMessage(t *testing.T) {
	reg, _ := newGroupRegion(t, 3)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	a := must(topic.JoinGroup("a"))(t)
	b := must(topic.JoinGroup("b"))(t)
	b2 := must(topic.JoinGroup("b"))(t) // a second member of "b"
	defer b2.Close()
	check(t, topic.Send([]byte("hello"), 1))
	if d := must(a.Depth(0))(t); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	ma := must(a.Receive(0, bound))(t)
	mb := must(b2.TryReceive(0))(t)
	_, err := b.TryReceive(0)
	wantErr(t, err, ErrWouldBlock) // b2 took b's copy
	md := must(topic.Receive(0, bound))(t)
	if string(ma.Data()) != "hello" || string(mb.Data()) != "hello" || string(md.Data()) != "hello" {
		t.Fatalf("got %q %q %q", ma.Data(), mb.Data(), md.Data())
	}
	check(t, md.Release())
	check(t, ma.Release())
	wantErr(t, ma.Release(), ErrInvalid)
	check(t, mb.Release())

	// The copy path: ReceiveInto (too small a buffer leaves the message
	// queued), and a group subscription's ReceiveInto.
	check(t, topic.Send([]byte("copied"), 1))
	small := make([]byte, 4)
	n, err := a.TryReceiveInto(0, small)
	wantErr(t, err, ErrBufferTooSmall)
	if n != 6 {
		t.Fatalf("ErrBufferTooSmall with length %d, want 6", n)
	}
	buf := make([]byte, 16)
	if n := must(a.ReceiveInto(0, buf, bound))(t); string(buf[:n]) != "copied" {
		t.Fatalf("got %q", buf[:n])
	}
	_, err = a.TryReceiveInto(0, buf)
	wantErr(t, err, ErrWouldBlock)
	bsub := must(b.Subscribe())(t)
	n, p, err := bsub.ReceiveInto(buf, bound)
	check(t, err)
	if string(buf[:n]) != "copied" || p != 0 {
		t.Fatalf("got %q from partition %d", buf[:n], p)
	}
	check(t, bsub.Close())
	if n := must(topic.ReceiveInto(0, buf, bound))(t); n != 6 {
		t.Fatalf("the default group's copy: %d bytes", n)
	}

	check(t, topic.Send([]byte("kept"), 1))
	held := must(a.Receive(0, bound))(t)
	must(topic.Receive(0, bound))(t).Release()
	must(b.Receive(0, bound))(t).Release()
	sub := must(a.Subscribe(0))(t)
	check(t, a.Close()) // closes sub, releases held
	wantErr(t, a.Close(), ErrClosed)
	_, err = sub.TryReceive()
	wantErr(t, err, ErrClosed)
	_, err = a.Receive(0, 0)
	wantErr(t, err, ErrClosed)
	wantErr(t, held.Release(), ErrClosed)
	check(t, b.Close())
	check(t, b2.Close())
	check(t, topic.Close())
	for c, s := range must(reg.PoolStats())(t) {
		if s.Free+64 < s.Chunks { // this process's chunk cache keeps a few
			t.Fatalf("class %d: %d of %d chunks free", c, s.Free, s.Chunks)
		}
	}
}

// ReceiveContext on a group: ended by its context, and by Close.
func TestGroupReceiveContext(t *testing.T) {
	reg, _ := newGroupRegion(t, 2)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	g := must(topic.JoinGroup("g"))(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := g.ReceiveContext(ctx, 0)
	wantErr(t, err, context.DeadlineExceeded)
	check(t, topic.Send([]byte("x"), 0))
	msg := must(g.ReceiveContext(context.Background(), 0))(t)
	check(t, msg.Release())
	// A context that can be done (a Background one waits in one plain
	// call, which Close cannot end), done only when the test ends.
	live, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := g.ReceiveContext(live, 0)
		done <- err
	}()
	waitFor(t, "waiting", func() bool {
		topic := g.handle()
		topic.wmu.Lock()
		defer topic.wmu.Unlock()
		return len(topic.w.m) > 0
	})
	check(t, g.Close())
	select {
	case err := <-done:
		wantErr(t, err, ErrClosed)
	case <-time.After(bound):
		t.Fatal("Close did not end ReceiveContext")
	}
}

// The errors: bad names, a region without group slots, every named slot
// used, another MaxGroups, nil and closed groups.
func TestGroupErrors(t *testing.T) {
	reg, name := newRegion(t) // MaxGroups 0
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	_, err := topic.JoinGroup("audit")
	wantErr(t, err, ErrInvalid)
	if !strings.Contains(err.Error(), "max_groups") {
		t.Fatalf("the error does not say why: %v", err)
	}
	_, err = reg.CreateTopic("nodefault", &TopicConfig{NoDefaultGroup: true})
	wantErr(t, err, ErrInvalid)
	_, err = OpenRegion(name, &RegionConfig{Size: 16 << 20, RingArena: 1 << 20, MaxGroups: 4})
	wantErr(t, err, ErrIncompatible)

	reg2, _ := newGroupRegion(t, 3)
	topic2 := must(reg2.CreateTopic("t", nil))(t)
	defer topic2.Close()
	for _, bad := range []string{"", strings.Repeat("x", 65), "nul\x00inside"} {
		_, err := topic2.JoinGroup(bad)
		wantErr(t, err, ErrInvalid)
	}
	long := must(topic2.JoinGroup(strings.Repeat("x", 64)))(t)
	defer long.Close()
	other := must(topic2.JoinGroup("other"))(t)
	defer other.Close()
	_, err = topic2.JoinGroup("third") // max 3: two named slots
	wantErr(t, err, ErrNoSpace)
	_, err = other.Receive(4, 0)
	wantErr(t, err, ErrInvalid)
	_, err = other.Subscribe(9)
	wantErr(t, err, ErrInvalid)

	var nilGroup *Group // a nil handle is ErrInvalid, as everywhere
	_, err = nilGroup.Receive(0, 0)
	wantErr(t, err, ErrInvalid)
	_, err = nilGroup.Subscribe()
	wantErr(t, err, ErrInvalid)
	wantErr(t, nilGroup.Close(), ErrInvalid)
	if nilGroup.Name() != "" || nilGroup.Topic() != nil {
		t.Fatal("a nil group has a name or topic")
	}
	var nilTopic *Topic
	_, err = nilTopic.JoinGroup("x")
	wantErr(t, err, ErrInvalid)
}

// poolFull fails the test unless every chunk of reg's pool is free (the
// tests that call it never loan in this process: no chunk cache).
func poolFull(t *testing.T, reg *Region) {
	t.Helper()
	for c, s := range must(reg.PoolStats())(t) {
		if s.Free != s.Chunks {
			t.Fatalf("class %d: %d of %d chunks free", c, s.Free, s.Chunks)
		}
	}
}

// groupInfo returns the GroupInfo of the group name of topic.
func groupInfo(t *testing.T, topic *Topic, name string) GroupInfo {
	t.Helper()
	for _, gi := range must(topic.Groups())(t) {
		if gi.Name == name {
			return gi
		}
	}
	t.Fatalf("no group %q in Topic.Groups", name)
	return GroupInfo{}
}

// Leave, with a producer process: a second Group of the group keeps the
// membership (false) and gets the rest; the left Group is closed
// (ErrClosed) and the message it held released; the last Leave ends the
// membership (true), the pool is full again, and the group keeps its
// position for its lease.
func TestGroupLeave(t *testing.T) {
	reg, name := newGroupRegion(t, 3)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 64, NoDefaultGroup: true}))(t)
	defer topic.Close()
	g1 := must(topic.JoinGroup("g"))(t)
	g2 := must(topic.JoinGroup("g"))(t)
	if gi := groupInfo(t, topic, "g"); gi.Slot != 1 || gi.Members != 1 || gi.LiveMembers != 1 || !gi.EmptySince.IsZero() {
		t.Fatalf("before: %+v", gi)
	}
	cmd, _ := child(t, "produce", name, "t", "10", "1")
	check(t, cmd.Wait())
	if gi := groupInfo(t, topic, "g"); gi.Lag != 10 || gi.Position != 0 || gi.Missed != 0 {
		t.Fatalf("after 10: %+v", gi)
	}
	held := must(g1.Receive(0, bound))(t)
	left, err := g1.Leave()
	check(t, err)
	if left {
		t.Fatal("Leave of one of two Groups of the group ended the membership")
	}
	wantErr(t, held.Release(), ErrClosed) // released by Leave
	_, err = g1.Receive(0, 0)
	wantErr(t, err, ErrClosed)
	_, err = g1.Missed()
	wantErr(t, err, ErrClosed)
	_, err = g1.Depth(0)
	wantErr(t, err, ErrClosed)
	_, err = g1.Leave()
	wantErr(t, err, ErrClosed)
	wantErr(t, g1.Close(), ErrClosed)
	if gi := groupInfo(t, topic, "g"); gi.Members != 1 {
		t.Fatalf("after the first Leave: %+v", gi)
	}
	for s := 1; s < 10; s++ { // the one g1 held was released: consumed
		msg := must(g2.TryReceive(0))(t)
		if want := fmt.Sprintf("go-0-%d", s); string(msg.Data()) != want {
			t.Fatalf("got %q, want %q", msg.Data(), want)
		}
		check(t, msg.Release())
	}
	_, err = g2.TryReceive(0)
	wantErr(t, err, ErrWouldBlock)

	cmd, _ = child(t, "produce", name, "t", "1", "1")
	check(t, cmd.Wait())
	held = must(g2.Receive(0, bound))(t)
	left, err = g2.Leave()
	check(t, err)
	if !left {
		t.Fatal("the last Leave did not end the membership")
	}
	gi := groupInfo(t, topic, "g")
	if gi.Members != 0 || gi.LiveMembers != 0 || gi.EmptySince.IsZero() || gi.Lag != 0 || gi.Position != 11 {
		t.Fatalf("after the last Leave: %+v", gi)
	}
	poolFull(t, reg)

	// The position is kept for the lease: what comes now waits for the
	// group, and a member joining again gets it.
	cmd, _ = child(t, "produce", name, "t", "3", "1")
	check(t, cmd.Wait())
	if gi := groupInfo(t, topic, "g"); gi.Lag != 3 {
		t.Fatalf("lag %d, want 3", gi.Lag)
	}
	g3 := must(topic.JoinGroup("g"))(t)
	msg := must(g3.TryReceive(0))(t)
	if string(msg.Data()) != "go-0-0" {
		t.Fatalf("got %q after joining again", msg.Data())
	}
	check(t, msg.Release())
	if left, err := g3.Leave(); err != nil || !left {
		t.Fatalf("Leave: %v %v", left, err)
	}
}

// Overrun: a producer process sends 5000 messages without ever waiting
// to a topic of rings of 8 whose default group and group "slow" do not
// read; each missed what its ring could not hold, keeps the newest 8 in
// order, and received + missed = published.
func TestGroupOverrun(t *testing.T) {
	const n, ring = 5000, 8
	reg, name := newGroupRegion(t, 3)
	_, err := reg.CreateTopic("x", &TopicConfig{Capacity: ring, Overrun: true, Delivery: AtLeastOnce})
	wantErr(t, err, ErrInvalid)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: ring, Overrun: true}))(t)
	defer topic.Close()
	_, err = reg.CreateTopic("t", &TopicConfig{Capacity: ring})
	wantErr(t, err, ErrIncompatible)
	slow := must(topic.JoinGroup("slow"))(t)
	defer slow.Close()
	if m := must(slow.Missed())(t); m != 0 {
		t.Fatalf("missed %d before", m)
	}

	cmd, _ := child(t, "send-now", name, "t", fmt.Sprint(n))
	check(t, cmd.Wait())
	if st := must(topic.Stats())(t); st.Published != n {
		t.Fatalf("published %d", st.Published)
	}
	missedSlow, missedDefault := must(slow.Missed())(t), must(topic.Missed())(t)
	if missedSlow == 0 || missedDefault == 0 {
		t.Fatalf("missed %d and %d", missedSlow, missedDefault)
	}
	groups := must(topic.Groups())(t)
	if len(groups) != 2 || groups[0].Slot != 0 || groups[0].Name != "" || groups[0].Missed != missedDefault ||
		groups[0].Lag != ring || groups[1].Name != "slow" || groups[1].Missed != missedSlow || groups[1].Lag != ring {
		t.Fatalf("groups: %+v", groups)
	}
	drain := func(receive func() (*Message, error)) uint64 {
		got := uint64(0)
		for {
			msg, err := receive()
			if errors.Is(err, ErrWouldBlock) {
				return got
			}
			check(t, err)
			if want := fmt.Sprint(n - ring + int(got)); string(msg.Data()) != want {
				t.Fatalf("got %q, want %q", msg.Data(), want)
			}
			got++
			check(t, msg.Release())
		}
	}
	if got := drain(func() (*Message, error) { return slow.TryReceive(0) }); got != ring || got+missedSlow != n {
		t.Fatalf("slow: received %d + missed %d, published %d", got, missedSlow, n)
	}
	if got := drain(func() (*Message, error) { return topic.TryReceive(0) }); got+missedDefault != n {
		t.Fatalf("default: received %d + missed %d, published %d", got, missedDefault, n)
	}
	poolFull(t, reg)
}

// A group joined with JoinOldest gets what a producer process left queued
// for the default group, in order, then the live stream; one joined with
// JoinNow only the latter; a second join does not copy again; another
// JoinFrom is ErrInvalid.
func TestGroupJoinFromTheOldest(t *testing.T) {
	reg, name := newGroupRegion(t, 4)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 64}))(t)
	defer topic.Close()
	cmd, _ := child(t, "produce", name, "t", "10", "1")
	check(t, cmd.Wait())
	_, err := topic.JoinGroupFrom("x", JoinFrom(7))
	wantErr(t, err, ErrInvalid)
	old := must(topic.JoinGroupFrom("old", JoinOldest))(t)
	defer old.Close()
	now := must(topic.JoinGroupFrom("now", JoinNow))(t)
	defer now.Close()
	again := must(topic.JoinGroupFrom("old", JoinOldest))(t)
	check(t, again.Close())
	if d := must(old.Depth(0))(t); d != 10 {
		t.Fatalf("old's depth %d, want the 10 queued", d)
	}
	if d := must(now.Depth(0))(t); d != 0 {
		t.Fatalf("now's depth %d, want 0", d)
	}
	for s := 0; s < 10; s++ {
		msg := must(old.TryReceive(0))(t)
		if want := fmt.Sprintf("go-0-%d", s); string(msg.Data()) != want {
			t.Fatalf("got %q, want %q", msg.Data(), want)
		}
		check(t, msg.Release())
	}
	if m := must(old.Missed())(t); m != 0 {
		t.Fatalf("missed %d", m)
	}
	_, err = now.TryReceive(0)
	wantErr(t, err, ErrWouldBlock)
}
