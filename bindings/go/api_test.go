package tachyon

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The handles are io.Closers.
var (
	_ io.Closer   = (*Region)(nil)
	_ io.Closer   = (*Topic)(nil)
	_ io.Closer   = (*Loan)(nil)
	_ io.Closer   = (*Message)(nil)
	_ io.Closer   = (*Subscription)(nil)
	_ io.Closer   = (*Ring)(nil)
	_ io.Closer   = (*Buffer)(nil)
	_ io.ReaderAt = (*Buffer)(nil)
	_ io.WriterAt = (*Buffer)(nil)
)

func TestVersion(t *testing.T) {
	if v := Version(); strings.Count(v, ".") != 2 {
		t.Fatalf("version %q", v)
	}
}

func TestErrorsAreComparable(t *testing.T) {
	missing := uniqueName("missing")
	_, err := OpenRegion(missing, nil)
	wantErr(t, err, ErrNotFound)
	wantErr(t, err, fs.ErrNotExist)
	if errors.Is(err, ErrTimeout) || errors.Is(err, ErrExists) {
		t.Fatalf("%v matches another kind", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "OpenRegion" || e.Detail == "" || e.Timeout() {
		t.Fatalf("error %#v", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("the message %q does not name the region", err)
	}
	wantErr(t, Remove(missing), ErrNotFound)

	r, name := newRegion(t)
	_, err = CreateRegion(name, nil)
	wantErr(t, err, ErrExists)
	wantErr(t, err, fs.ErrExist)
	_, err = OpenRegion(name, &RegionConfig{Size: 32 << 20})
	wantErr(t, err, ErrIncompatible)
	same, err := OpenRegion(name, nil)
	check(t, err)
	check(t, same.Close())

	_, err = r.Topic("nope")
	wantErr(t, err, ErrNotFound)
	_, err = r.CreateTopic("t", &TopicConfig{Partitions: 3})
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic("t", &TopicConfig{Notify: 7})
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic("t", &TopicConfig{Delivery: -1})
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic("t", &TopicConfig{Capacity: 3})
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic(strings.Repeat("x", 100), nil)
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic("", nil)
	wantErr(t, err, ErrInvalid)
	_, err = r.CreateTopic("a\x00b", nil)
	wantErr(t, err, ErrInvalid)
	t1 := must(r.CreateTopic("t", &TopicConfig{Partitions: 2}))(t)
	defer t1.Close()
	_, err = r.CreateTopic("t", &TopicConfig{Partitions: 4})
	wantErr(t, err, ErrIncompatible)
	t2 := must(r.CreateTopic("t", &TopicConfig{Partitions: 2}))(t) // the same: opens it
	check(t, t2.Close())

	for _, bad := range []string{"", "a\x00b"} {
		_, err = OpenRegion(bad, &RegionConfig{})
		wantErr(t, err, ErrInvalid)
		wantErr(t, Remove(bad), ErrInvalid)
	}
	_, err = CreateRegion(uniqueName("small"), &RegionConfig{Size: 1 << 10})
	wantErr(t, err, ErrInvalid)
	_, err = CreateRegion(uniqueName("lease"), &RegionConfig{Lease: time.Nanosecond})
	wantErr(t, err, ErrInvalid)
}

func TestNilAndClosedHandles(t *testing.T) {
	var r *Region
	wantErr(t, r.Close(), ErrInvalid)
	_, err := r.CreateTopic("t", nil)
	wantErr(t, err, ErrInvalid)
	_, err = r.Recover()
	wantErr(t, err, ErrInvalid)
	var tp *Topic
	_, err = tp.Receive(0, 0)
	wantErr(t, err, ErrInvalid)
	_, err = tp.Loan(8)
	wantErr(t, err, ErrInvalid)
	wantErr(t, tp.Send([]byte("x"), 1), ErrInvalid)
	wantErr(t, tp.Close(), ErrInvalid)
	if tp.PartitionOf(1) != -1 || tp.Partitions() != 0 || tp.Name() != "" {
		t.Fatal("a nil topic answers")
	}
	var l *Loan
	wantErr(t, l.Publish(0, 1), ErrInvalid)
	wantErr(t, l.Unloan(), ErrInvalid)
	check(t, l.Close())
	var m *Message
	wantErr(t, m.Release(), ErrInvalid)
	if m.Data() != nil || m.Partition() != -1 {
		t.Fatal("a nil message has data")
	}
	wantErr(t, (&Loan{}).Publish(0, 1), ErrInvalid)
	wantErr(t, (&Message{}).Release(), ErrInvalid)
	_, err = (&Topic{}).Receive(0, 0) // a zero Topic: never opened
	wantErr(t, err, ErrInvalid)

	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	loan := must(topic.Loan(8))(t)
	check(t, topic.Send([]byte("held"), 1))
	msg := must(topic.Receive(0, bound))(t)
	check(t, topic.Close())
	wantErr(t, topic.Close(), ErrClosed)
	_, err = topic.Receive(0, 0)
	wantErr(t, err, ErrClosed)
	_, err = topic.Loan(8)
	wantErr(t, err, ErrClosed)
	wantErr(t, topic.Send([]byte("x"), 1), ErrClosed)
	wantErr(t, loan.Publish(8, 1), ErrClosed) // the close returned it
	wantErr(t, msg.Release(), ErrClosed)      // the close released it
	if topic.PartitionOf(1) != -1 {
		t.Fatal("a closed topic answers")
	}
	_, err = topic.Stats()
	wantErr(t, err, ErrClosed)
	// Close returned the loan and the message: the pool is whole again.
	again := must(reg.Topic("t"))(t)
	defer again.Close()
	_, err = again.TryReceive(0)
	wantErr(t, err, ErrWouldBlock)
	check(t, reg.Close())
	wantErr(t, reg.Close(), ErrClosed)
	_, err = reg.Topic("t")
	wantErr(t, err, ErrClosed)
	_, err = reg.PoolStats()
	wantErr(t, err, ErrClosed)
	// The topic keeps the region mapped after the region's handle closed.
	check(t, again.Send([]byte("still"), 1))
	msg = must(again.Receive(0, bound))(t)
	if string(msg.Data()) != "still" {
		t.Fatalf("got %q", msg.Data())
	}
	check(t, msg.Release())
}

func TestLoanPublishReceive(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 16}))(t)
	defer topic.Close()
	if topic.Partitions() != 4 || topic.Name() != "t" {
		t.Fatalf("topic %q of %d partitions", topic.Name(), topic.Partitions())
	}
	loan := must(topic.Loan(5))(t)
	if len(loan.Bytes()) != 5 {
		t.Fatalf("loan of %d bytes", len(loan.Bytes()))
	}
	copy(loan.Bytes(), "hello")
	wantErr(t, loan.Publish(6, 7), ErrInvalid) // more than was loaned: nothing happened
	wantErr(t, loan.Publish(-1, 7), ErrInvalid)
	check(t, loan.Publish(5, 7))
	if loan.Bytes() != nil {
		t.Fatal("a published loan still has bytes")
	}
	wantErr(t, loan.Publish(5, 7), ErrInvalid)
	wantErr(t, loan.Unloan(), ErrInvalid)
	check(t, loan.Close())

	p := topic.PartitionOf(7)
	if p < 0 || p >= 4 {
		t.Fatalf("partition %d", p)
	}
	if n := must(topic.Depth(p))(t); n != 1 {
		t.Fatalf("depth %d", n)
	}
	msg := must(topic.Receive(p, bound))(t)
	if string(msg.Data()) != "hello" || msg.Partition() != p {
		t.Fatalf("got %q from %d", msg.Data(), msg.Partition())
	}
	check(t, msg.Release())
	if msg.Data() != nil {
		t.Fatal("a released message still has data")
	}
	wantErr(t, msg.Release(), ErrInvalid)
	check(t, msg.Close())

	// The copy path, an empty message, and a message of the largest size.
	check(t, topic.Send(nil, 7))
	big := bytes.Repeat([]byte{0xab}, MaxMessage)
	check(t, topic.SendTimeout(big, 7, bound))
	msg = must(topic.Receive(p, bound))(t)
	if len(msg.Data()) != 0 {
		t.Fatalf("empty message of %d bytes", len(msg.Data()))
	}
	check(t, msg.Close())
	msg = must(topic.Receive(p, bound))(t)
	if !bytes.Equal(msg.Data(), big) {
		t.Fatal("the 1 MiB message differs")
	}
	check(t, msg.Release())
	wantErr(t, topic.Send(append(big, 0), 7), ErrMessageSize)
	_, err := topic.Loan(MaxMessage + 1)
	wantErr(t, err, ErrMessageSize)
	_, err = topic.Loan(-1)
	wantErr(t, err, ErrInvalid)

	// Empty partitions, bad partitions.
	_, err = topic.TryReceive(p)
	wantErr(t, err, ErrWouldBlock)
	_, err = topic.Receive(p, time.Millisecond)
	wantErr(t, err, ErrTimeout)
	var e *Error
	if !errors.As(err, &e) || !e.Timeout() {
		t.Fatalf("%v is not a timeout", err)
	}
	for _, bad := range []int{-1, 4, 1 << 40} {
		_, err = topic.Receive(bad, 0)
		wantErr(t, err, ErrInvalid)
		_, err = topic.Depth(bad)
		wantErr(t, err, ErrInvalid)
	}

	// Unloan, and Close of a loan not used up.
	l := must(topic.TryLoan(64))(t)
	check(t, l.Unloan())
	l = must(topic.LoanTimeout(64, bound))(t)
	check(t, l.Close())
	wantErr(t, l.Publish(1, 1), ErrInvalid)

	// A full partition: TryPublish and a timed Send say so.
	for i := 0; i < 16; i++ {
		check(t, topic.SendTimeout([]byte{byte(i)}, 7, 0))
	}
	wantErr(t, topic.SendTimeout([]byte{0}, 7, 0), ErrWouldBlock)
	l = must(topic.Loan(1))(t)
	wantErr(t, l.TryPublish(1, 7), ErrWouldBlock)
	wantErr(t, l.Publish(1, 7), ErrInvalid) // TryPublish used it up
	l = must(topic.Loan(1))(t)
	wantErr(t, l.PublishTimeout(1, 7, time.Millisecond), ErrTimeout)
	for i := 0; i < 16; i++ {
		msg := must(topic.TryReceive(p))(t)
		if msg.Data()[0] != byte(i) {
			t.Fatalf("message %d is %d", i, msg.Data()[0])
		}
		check(t, msg.Release())
	}

	stats := must(topic.Stats())(t)
	if stats.Partitions != 4 || stats.Capacity != 16 || stats.Notify != NotifyHybrid ||
		stats.Delivery != AtMostOnce || stats.Published != 19 || stats.Received != 19 {
		t.Fatalf("stats %+v", stats)
	}
	infos := must(reg.Topics())(t)
	if len(infos) != 1 || infos[0].Name != "t" || infos[0].Stats.Published != 19 {
		t.Fatalf("topics %+v", infos)
	}
	pool := must(reg.PoolStats())(t)
	for _, c := range pool {
		if c.Free != c.Chunks || c.ChunkSize == 0 {
			t.Fatalf("pool %+v: a chunk is missing", pool)
		}
	}
	rec := must(reg.Recover())(t)
	if rec.Total != 0 {
		t.Fatalf("recovered %+v with nobody dead", rec)
	}
	must(reg.RecoveredOnOpen())(t)
	check(t, reg.Heartbeat())
}

func TestPoolExhausted(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	var loans []*Loan
	for {
		l, err := topic.TryLoan(MaxMessage)
		if errors.Is(err, ErrPoolExhausted) {
			break
		}
		check(t, err)
		loans = append(loans, l)
		if len(loans) > 64 {
			t.Fatal("a 16 MiB region lends more than 64 chunks of 1 MiB")
		}
	}
	if len(loans) == 0 {
		t.Fatal("no chunk of 1 MiB at all")
	}
	_, err := topic.LoanTimeout(MaxMessage, time.Millisecond)
	wantErr(t, err, ErrPoolExhausted)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = topic.LoanContext(ctx, MaxMessage)
	wantErr(t, err, context.DeadlineExceeded)
	// A chunk coming back wakes a waiting LoanContext.
	done := make(chan error, 1)
	go func() {
		l, err := topic.LoanContext(context.Background(), MaxMessage)
		if err == nil {
			err = l.Unloan()
		}
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	check(t, loans[0].Unloan())
	select {
	case err := <-done:
		check(t, err)
	case <-time.After(bound):
		t.Fatal("LoanContext did not get the chunk given back")
	}
	for _, l := range loans[1:] {
		check(t, l.Close())
	}
}

func TestContextCancelsWaits(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 2}))(t)
	defer topic.Close()

	// Cancellation wakes a waiting receive.
	ctx := cancelWakes(t, "ReceiveContext", func(ctx context.Context) error {
		_, err := topic.ReceiveContext(ctx, 0)
		return err
	})
	_, err := topic.ReceiveContext(ctx, 0) // done already: returns at once
	wantErr(t, err, context.Canceled)
	done := make(chan error, 1)
	var none context.Context // a nil context is an error, not a crash
	_, err = topic.ReceiveContext(none, 0)
	wantErr(t, err, ErrInvalid)

	// A deadline ends it too.
	dl, cancel2 := context.WithTimeout(context.Background(), 15*time.Millisecond)
	defer cancel2()
	_, err = topic.ReceiveContext(dl, 0)
	wantErr(t, err, context.DeadlineExceeded)

	// A message that comes after several slices is received.
	go func() {
		time.Sleep(30 * time.Millisecond)
		done <- topic.Send([]byte("late"), 0)
	}()
	ctx3, cancel3 := context.WithTimeout(context.Background(), bound)
	defer cancel3()
	msg, err := topic.ReceiveContext(ctx3, 0)
	check(t, err)
	check(t, <-done)
	if string(msg.Data()) != "late" {
		t.Fatalf("got %q", msg.Data())
	}
	check(t, msg.Release())
	// Background (never done) waits in one call.
	check(t, topic.Send([]byte("now"), 0))
	msg = must(topic.ReceiveContext(context.Background(), 0))(t)
	check(t, msg.Release())

	// A send to a full partition, cancelled, published nothing.
	check(t, topic.Send([]byte("1"), 0))
	check(t, topic.Send([]byte("2"), 0))
	sctx, scancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
	defer scancel()
	wantErr(t, topic.SendContext(sctx, []byte("3"), 0), context.DeadlineExceeded)
	for _, want := range []string{"1", "2"} {
		msg := must(topic.TryReceive(0))(t)
		if string(msg.Data()) != want {
			t.Fatalf("got %q, want %q", msg.Data(), want)
		}
		check(t, msg.Release())
	}
	_, err = topic.TryReceive(0)
	wantErr(t, err, ErrWouldBlock)
	check(t, topic.SendContext(context.Background(), []byte("4"), 0))
	msg = must(topic.TryReceive(0))(t)
	check(t, msg.Release())
}

func TestCloseWaitsForCallsInFlight(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := topic.ReceiveContext(ctx, 0)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	// Close wakes the receive waiting in C (its cancellation) and waits
	// for it to return; the receive then says the handle was closed.
	check(t, topic.Close())
	select {
	case err := <-done:
		wantErr(t, err, ErrClosed)
	case <-time.After(bound):
		t.Fatal("ReceiveContext did not end when its topic closed")
	}
}

func TestInterrupt(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	check(t, topic.Send([]byte("queued"), 0))
	done := make(chan error, 1)
	Interrupt()
	defer ClearInterrupt()
	msg := must(topic.Receive(0, Forever))(t) // need not wait: still received
	check(t, msg.Release())
	go func() {
		_, err := topic.Receive(0, Forever)
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, ErrInterrupted)
	case <-time.After(bound):
		topic.Send([]byte("unblock"), 0) // end the receive, so that Close does not wait for ever
		t.Fatal("Interrupt did not end a receive waiting for ever")
	}
	ClearInterrupt()
	_, err := topic.Receive(0, time.Millisecond)
	wantErr(t, err, ErrTimeout)
}

// Several goroutines producing and consuming through one topic handle:
// every message once, in order per key.
func TestConcurrentGoroutines(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()
	const producers, perProducer = 4, 500
	var wg sync.WaitGroup
	errs := make(chan error, 2*producers)
	for g := 0; g < producers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			// Producer g owns key g: its messages are g-0, g-1, ...
			errs <- produce(topic, fmt.Sprintf("p%d", g), perProducer, 1)
		}(g)
	}
	var mu sync.Mutex
	seen := map[string][]int{}
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			for {
				mu.Lock()
				n := 0
				for _, s := range seen {
					n += len(s)
				}
				mu.Unlock()
				if n == producers*perProducer {
					errs <- nil
					return
				}
				msg, err := topic.Receive(p, time.Millisecond)
				if errors.Is(err, ErrTimeout) {
					if ctx.Err() != nil {
						errs <- fmt.Errorf("partition %d: only %d messages", p, n)
						return
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				var prod string
				var k, s int
				fields := strings.SplitN(string(msg.Data()), "-", 3)
				prod = fields[0]
				fmt.Sscan(fields[1], &k)
				fmt.Sscan(fields[2], &s)
				mu.Lock()
				seen[prod] = append(seen[prod], s)
				mu.Unlock()
				if err := msg.Release(); err != nil {
					errs <- err
					return
				}
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		check(t, err)
	}
	for g := 0; g < producers; g++ {
		s := seen[fmt.Sprintf("p%d", g)]
		if len(s) != perProducer {
			t.Fatalf("producer %d: %d messages", g, len(s))
		}
		for i, v := range s {
			if v != i {
				t.Fatalf("producer %d: message %d at place %d", g, v, i)
			}
		}
	}
}

// One Subscription receives from several partitions: each message says
// the partition of its key; a subscription to some partitions leaves the
// others' messages where they are.
func TestSubscription(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()
	const keys, perKey = 16, 3
	for i := 0; i < keys*perKey; i++ {
		check(t, topic.Send([]byte(fmt.Sprintf("%d-%d", i%keys, i/keys)), uint64(i%keys)))
	}

	all := must(topic.Subscribe())(t)
	if got := fmt.Sprint(all.Partitions()); got != "[0 1 2 3]" {
		t.Fatalf("Partitions() = %s, want every partition", got)
	}
	if all.Topic() != topic {
		t.Fatal("Topic() is not the topic it came from")
	}
	next := make([]int, keys)
	used := map[int]bool{}
	for i := 0; i < keys*perKey; i++ {
		msg := must(all.Receive(bound))(t)
		var k, seq int
		if _, err := fmt.Sscanf(string(msg.Data()), "%d-%d", &k, &seq); err != nil {
			t.Fatalf("message %q: %v", msg.Data(), err)
		}
		if want := topic.PartitionOf(uint64(k)); msg.Partition() != want {
			t.Fatalf("key %d came from partition %d, its partition is %d", k, msg.Partition(), want)
		}
		if seq != next[k] {
			t.Fatalf("key %d: got message %d, want %d (order per key)", k, seq, next[k])
		}
		next[k]++
		used[msg.Partition()] = true
		check(t, msg.Release()) // through the topic, as any message
	}
	if len(used) < 2 {
		t.Fatalf("the %d keys went to %d partition(s): the test needs several", keys, len(used))
	}
	_, err := all.TryReceive()
	wantErr(t, err, ErrWouldBlock)
	_, err = all.Receive(time.Millisecond)
	wantErr(t, err, ErrTimeout)

	// Some partitions: key a's and key b's partitions differ; a
	// subscription to a's (given twice: counted once) leaves b's alone.
	a, b := uint64(0), uint64(1)
	for topic.PartitionOf(b) == topic.PartitionOf(a) {
		b++
	}
	pa, pb := topic.PartitionOf(a), topic.PartitionOf(b)
	some := must(topic.Subscribe(uint32(pa), uint32(pa)))(t)
	if got, want := fmt.Sprint(some.Partitions()), fmt.Sprintf("[%d]", pa); got != want {
		t.Fatalf("Partitions() = %s, want %s", got, want)
	}
	check(t, topic.Send([]byte("for b"), b))
	check(t, topic.Send([]byte("for a"), a))
	msg := must(some.Receive(bound))(t)
	if string(msg.Data()) != "for a" || msg.Partition() != pa {
		t.Fatalf("got %q from partition %d, want \"for a\" from %d", msg.Data(), msg.Partition(), pa)
	}
	_, err = some.TryReceive()
	wantErr(t, err, ErrWouldBlock)
	_, err = some.Receive(5 * time.Millisecond)
	wantErr(t, err, ErrTimeout)
	if d := must(topic.Depth(pb))(t); d != 1 {
		t.Fatalf("partition %d holds %d messages, want b's 1", pb, d)
	}
	// A message stays valid after its subscription's Close.
	check(t, some.Close())
	if string(msg.Data()) != "for a" {
		t.Fatalf("after Close: %q", msg.Data())
	}
	check(t, msg.Release())
	wantErr(t, some.Close(), ErrClosed)
	_, err = some.Receive(0)
	wantErr(t, err, ErrClosed)
	_, err = some.TryReceive()
	wantErr(t, err, ErrClosed)
	_, err = some.ReceiveContext(context.Background())
	wantErr(t, err, ErrClosed)
	msg = must(all.TryReceive())(t)
	if string(msg.Data()) != "for b" || msg.Partition() != pb {
		t.Fatalf("got %q from partition %d, want \"for b\" from %d", msg.Data(), msg.Partition(), pb)
	}
	check(t, msg.Release())

	// Partitions out of range are ErrInvalid, and nothing is opened.
	for _, bad := range [][]uint32{{4}, {0, 99}, {1 << 31}} {
		_, err := topic.Subscribe(bad...)
		wantErr(t, err, ErrInvalid)
		var e *Error
		if !errors.As(err, &e) || e.Op != "Topic.Subscribe" || e.Detail == "" {
			t.Fatalf("Subscribe(%v): %#v", bad, err)
		}
	}
	topic.wmu.Lock()
	open := len(topic.subs)
	topic.wmu.Unlock()
	if open != 1 {
		t.Fatalf("%d subscriptions open, want 1", open)
	}

	// Nil and zero subscriptions are errors, not crashes.
	var nilSub *Subscription
	for _, s := range []*Subscription{nilSub, {}} {
		_, err = s.Receive(0)
		wantErr(t, err, ErrInvalid)
		_, err = s.TryReceive()
		wantErr(t, err, ErrInvalid)
		_, err = s.ReceiveContext(context.Background())
		wantErr(t, err, ErrInvalid)
		wantErr(t, s.Close(), ErrInvalid)
	}
	if nilSub.Partitions() != nil || nilSub.Topic() != nil {
		t.Fatal("a nil subscription answers")
	}
	var nilTopic *Topic
	_, err = nilTopic.Subscribe()
	wantErr(t, err, ErrInvalid)

	// Topic.Close closes the subscriptions still open on it first; a
	// message received through one is released by it, as any other.
	check(t, topic.Send([]byte("held"), a))
	held := must(all.Receive(bound))(t)
	check(t, topic.Close())
	_, err = all.Receive(0)
	wantErr(t, err, ErrClosed)
	wantErr(t, all.Close(), ErrClosed)
	wantErr(t, held.Release(), ErrClosed) // the topic's Close released it
	_, err = topic.Subscribe()
	wantErr(t, err, ErrClosed)
}

// Subscription.ReceiveContext: woken by its context, by Close (the
// subscription's or the topic's), and receives what comes later.
func TestSubscriptionContext(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4}))(t)
	defer topic.Close()
	sub := must(topic.Subscribe())(t)
	defer sub.Close()

	ctx := cancelWakes(t, "Subscription.ReceiveContext", func(ctx context.Context) error {
		_, err := sub.ReceiveContext(ctx)
		return err
	})
	done := make(chan error, 1)
	_, err := sub.ReceiveContext(ctx) // done already
	wantErr(t, err, context.Canceled)
	var none context.Context
	_, err = sub.ReceiveContext(none)
	wantErr(t, err, ErrInvalid)

	dl, cancel2 := context.WithTimeout(context.Background(), 15*time.Millisecond)
	defer cancel2()
	_, err = sub.ReceiveContext(dl)
	wantErr(t, err, context.DeadlineExceeded)

	// A message that comes later, to any partition, is received.
	const key = 3
	go func() {
		time.Sleep(30 * time.Millisecond)
		done <- topic.Send([]byte("late"), key)
	}()
	ctx3, cancel3 := context.WithTimeout(context.Background(), bound)
	defer cancel3()
	msg := must(sub.ReceiveContext(ctx3))(t)
	check(t, <-done)
	if string(msg.Data()) != "late" || msg.Partition() != topic.PartitionOf(key) {
		t.Fatalf("got %q from partition %d", msg.Data(), msg.Partition())
	}
	check(t, msg.Release())
	check(t, topic.Send([]byte("now"), key))
	msg = must(sub.ReceiveContext(context.Background()))(t) // one call, never cancelled
	check(t, msg.Release())

	// The subscription's Close, then the topic's, end a waiting call.
	for _, closer := range []string{"subscription", "topic"} {
		s := must(topic.Subscribe(0, 1))(t)
		go func() {
			_, err := s.ReceiveContext(ctx3)
			done <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if closer == "subscription" {
			check(t, s.Close())
		} else {
			check(t, topic.Close())
		}
		select {
		case err := <-done:
			wantErr(t, err, ErrClosed)
		case <-time.After(bound):
			t.Fatalf("ReceiveContext did not end when its %s closed", closer)
		}
	}
}

// A subscription dropped without Close is closed by its finalizer (and
// leaves its topic's set of open subscriptions).
func TestFinalizerClosesDroppedSubscription(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 2}))(t)
	defer topic.Close()
	func() {
		must(topic.Subscribe())(t)
	}()
	waitFor(t, "closed by the finalizer", func() bool {
		runtime.GC()
		topic.wmu.Lock()
		defer topic.wmu.Unlock()
		return len(topic.subs) == 0
	})
}

func TestRingWithLightHandovers(t *testing.T) {
	name := uniqueName("ring-light")
	ring := must(CreateRingWith(name, 8, 16, RingOptions{LightHandovers: true}))(t)
	defer ring.Close()
	other := must(OpenRing(name))(t)
	defer other.Close()
	if !ring.LightHandovers() || !other.LightHandovers() {
		t.Fatalf("light: %v, opened %v", ring.LightHandovers(), other.LightHandovers())
	}
	buf := make([]byte, other.NodeSize())
	for i := 0; i < 100; i++ {
		check(t, ring.Write([]byte{byte(i)}, bound))
		n := must(other.Read(buf, bound))(t)
		if n != 1 || buf[0] != byte(i) {
			t.Fatalf("item %d: %v", i, buf[:n])
		}
	}
	plain := must(CreateRing(uniqueName("ring-plain"), 2, 8))(t)
	defer plain.Close()
	if plain.LightHandovers() {
		t.Fatal("a ring created without options is light")
	}
	var none *Ring
	if none.LightHandovers() {
		t.Fatal("nil is light")
	}
}

// Batch reads: a handle's option, off by default, not seen by the ring's
// other handles; a writer goroutine's stream is read whole and in order;
// nil and closed handles are refused.
// streamThrough writes n numbered 64-byte items into writer from a
// goroutine and reads them from reader here, every one in order.
func streamThrough(t *testing.T, writer, reader *Ring, n int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		item := make([]byte, 64)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(item, uint64(i))
			if err := writer.Write(item, bound); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		got := must(reader.Read(buf, bound))(t)
		if got != 64 || binary.LittleEndian.Uint64(buf) != uint64(i) {
			t.Fatalf("item %d: %d bytes %x", i, got, buf[:got])
		}
	}
	check(t, <-done)
}

func TestRingBatchReads(t *testing.T) {
	name := uniqueName("ring-batch")
	ring := must(CreateRing(name, 256, 64))(t)
	defer ring.Close()
	reader := must(OpenRing(name))(t)
	if reader.BatchReads() {
		t.Fatal("batch reads on by default")
	}
	check(t, reader.SetBatchReads(true))
	if !reader.BatchReads() || ring.BatchReads() {
		t.Fatalf("batch reads: reader %v, writer %v", reader.BatchReads(), ring.BatchReads())
	}
	streamThrough(t, ring, reader, 20000)
	check(t, reader.SetBatchReads(false))
	if reader.BatchReads() {
		t.Fatal("SetBatchReads(false) did not take")
	}
	check(t, reader.Close())
	wantErr(t, reader.SetBatchReads(true), ErrClosed)
	if reader.BatchReads() {
		t.Fatal("a closed handle reads in batches")
	}
	var none *Ring
	wantErr(t, none.SetBatchReads(true), ErrInvalid)
	if none.BatchReads() {
		t.Fatal("nil reads in batches")
	}
}

// A ring handle's wait policy: hybrid by default, its own; a reader that
// sleeps at once (futex) and a writer that never sleeps (spin) stream
// 20000 items through a ring of 8, each waking the other; bad values,
// nil and closed handles refused.
func TestRingNotify(t *testing.T) {
	name := uniqueName("ring-notify")
	ring := must(CreateRing(name, 8, 64))(t)
	defer ring.Close()
	reader := must(OpenRing(name))(t)
	if reader.Notify() != NotifyHybrid {
		t.Fatalf("default %v", reader.Notify())
	}
	wantErr(t, reader.SetNotify(Notify(7)), ErrInvalid)
	check(t, reader.SetNotify(NotifyFutex))
	check(t, ring.SetNotify(NotifySpin))
	if reader.Notify() != NotifyFutex || ring.Notify() != NotifySpin {
		t.Fatalf("reader %v, writer %v", reader.Notify(), ring.Notify())
	}
	streamThrough(t, ring, reader, 20000)
	check(t, reader.Close())
	wantErr(t, reader.SetNotify(NotifySpin), ErrClosed)
	if reader.Notify() != NotifyHybrid {
		t.Fatal("a closed handle has a policy")
	}
	var none *Ring
	wantErr(t, none.SetNotify(NotifySpin), ErrInvalid)
}

// Batch reads on a topic handle: its own, refused while a subscription
// of the handle is open, taken by a subscription opened afterwards.
func TestTopicBatchReads(t *testing.T) {
	reg, _ := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 64, InlinePayload: 64}))(t)
	defer topic.Close()
	consumer := must(reg.Topic("t"))(t)
	defer consumer.Close()
	sub := must(consumer.Subscribe())(t)
	wantErr(t, consumer.SetBatchReads(true), ErrInvalid)
	check(t, sub.Close())
	check(t, consumer.SetBatchReads(true))
	if !consumer.BatchReads() || topic.BatchReads() {
		t.Fatalf("batch reads: consumer %v, producer %v", consumer.BatchReads(), topic.BatchReads())
	}
	buf := make([]byte, 256)
	for i := 0; i < 100; i++ { // laps of the ring, inline and in chunks
		small, big := bytes.Repeat([]byte{byte(i)}, 40), bytes.Repeat([]byte{byte(i)}, 100)
		check(t, topic.Send(small, 0))
		check(t, topic.Send(big, 0))
		for _, want := range [][]byte{small, big} {
			n := must(consumer.ReceiveInto(0, buf, bound))(t)
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("lap %d: got %d bytes", i, n)
			}
		}
	}
	sub = must(consumer.Subscribe())(t)
	defer sub.Close()
	check(t, topic.Send([]byte("sub"), 0))
	msg := must(sub.Receive(bound))(t)
	if string(msg.Data()) != "sub" {
		t.Fatalf("subscription got %q", msg.Data())
	}
	check(t, msg.Release())
	var none *Topic
	wantErr(t, none.SetBatchReads(true), ErrInvalid)
	if none.BatchReads() {
		t.Fatal("nil reads in batches")
	}
}

func TestRingAndBuffer(t *testing.T) {
	name := uniqueName("ring")
	ring := must(CreateRing(name, 4, 16))(t)
	defer ring.Close()
	_, err := CreateRing(name, 4, 16)
	wantErr(t, err, ErrExists)
	_, err = CreateRing(uniqueName("bad"), 1, 16)
	wantErr(t, err, ErrInvalid)
	_, err = OpenRing(uniqueName("none"))
	wantErr(t, err, ErrNotFound)
	other := must(OpenRing(name))(t)
	if other.NodeSize() != 16 {
		t.Fatalf("node size %d", other.NodeSize())
	}
	check(t, ring.Write([]byte("one"), bound))
	wantErr(t, ring.Write(make([]byte, 17), 0), ErrMessageSize)
	small := make([]byte, 2)
	_, err = other.Read(small, 0)
	if !errors.Is(err, ErrBufferTooSmall) && !errors.Is(err, ErrMessageSize) {
		t.Fatalf("a short buffer: %v", err)
	}
	buf := make([]byte, other.NodeSize())
	n := must(other.Read(buf, bound))(t)
	if string(buf[:n]) != "one" {
		t.Fatalf("read %q", buf[:n])
	}
	_, err = other.Read(buf, time.Millisecond)
	wantErr(t, err, ErrTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
	defer cancel()
	_, err = other.ReadContext(ctx, buf)
	wantErr(t, err, context.DeadlineExceeded)
	for i := 0; i < 4; i++ {
		check(t, ring.WriteContext(context.Background(), []byte{byte(i)}))
	}
	wantErr(t, ring.WriteContext(ctx, []byte{9}), context.DeadlineExceeded)
	for i := 0; i < 4; i++ {
		n := must(other.ReadContext(context.Background(), buf))(t)
		if n != 1 || buf[0] != byte(i) {
			t.Fatalf("item %d: %v", i, buf[:n])
		}
	}
	check(t, other.Close())
	wantErr(t, other.Close(), ErrClosed)
	_, err = other.Read(buf, 0)
	wantErr(t, err, ErrClosed)

	bname := uniqueName("buf")
	b := must(CreateBuffer(bname, 64))(t)
	defer b.Close()
	b2 := must(OpenBuffer(bname))(t)
	defer b2.Close()
	if b2.Size() != 64 {
		t.Fatalf("size %d", b2.Size())
	}
	must(b.WriteAt([]byte("shared"), 10))(t)
	got := make([]byte, 6)
	must(b2.ReadAt(got, 10))(t)
	if string(got) != "shared" {
		t.Fatalf("read %q", got)
	}
	_, err = b.WriteAt([]byte("x"), 64)
	wantErr(t, err, ErrInvalid)
	_, err = b.ReadAt(got, -1)
	wantErr(t, err, ErrInvalid)
	_, err = b2.ReadAt(make([]byte, 65), 0)
	wantErr(t, err, ErrInvalid)
	var nb *Buffer
	_, err = nb.ReadAt(got, 0)
	wantErr(t, err, ErrInvalid)
}

// A topic dropped without Close is closed by its finalizer, which returns
// its outstanding loan to the pool (the safety net).
func TestFinalizerClosesDroppedTopic(t *testing.T) {
	reg, _ := newRegion(t)
	before := must(reg.PoolStats())(t)
	func() {
		topic := must(reg.CreateTopic("t", nil))(t)
		must(topic.Loan(100))(t) // neither published nor returned
	}()
	if during := must(reg.PoolStats())(t); during == before {
		t.Fatal("the loan is not visible in the pool")
	}
	waitFor(t, "returned by the finalizer", func() bool {
		runtime.GC()
		return must(reg.PoolStats())(t) == before
	})
}

// RPCConfig fields out of range are ErrInvalid; a configured pair of
// ends in one process calls as any other.
// callFromGoroutines makes calls calls through client from each of
// goroutines goroutines at once, request(g, i) the i-th of goroutine g,
// and fails t with the first error or the first response that verify
// refuses.
func callFromGoroutines(t *testing.T, client *RPC, goroutines, calls int, request func(g, i int) string, verify func(req string, resp []byte) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				req := request(g, i)
				resp, err := client.Call([]byte(req), bound)
				if err == nil {
					err = verify(req, resp)
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, call %d: %w", g, i, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Every RPC handler runs on a thread Go started (goTachyonSpawn), never
// on one it did not (which Go 1.19 enters in about 7 µs, not 0.13):
// calls from four goroutines at once, slow ones among them, so that the
// standby thread reads while a handler runs on the reader thread and
// hands requests to the handler threads (and to extra ones while those
// are busy). Once both ends are closed, those threads are gone.
func TestRPCHandlersRunOnGoThreads(t *testing.T) {
	name := uniqueName("rpc-threads")
	var seen sync.Map // thread id -> struct{}
	owner := must(CreateRPC(name, func(req []byte) ([]byte, error) {
		tid := syscall.Gettid()
		seen.Store(tid, struct{}{})
		if string(req) == "slow" {
			time.Sleep(20 * time.Millisecond)
		}
		if _, ok := rpcThreads.Load(tid); !ok {
			return []byte("0"), nil
		}
		return []byte("1"), nil
	}))(t)
	client := must(OpenRPC(name, nil))(t)
	callFromGoroutines(t, client, 4, 30, func(g, i int) string {
		if (i+g)%5 == 0 {
			return "slow"
		}
		return "quick"
	}, func(req string, resp []byte) error {
		if string(resp) != "1" {
			return fmt.Errorf("a call (%s) ran on a thread Go did not start", req)
		}
		return nil
	})
	check(t, client.Close())
	check(t, owner.Close())
	deadline := time.Now().Add(bound)
	seen.Range(func(tid, _ any) bool {
		for {
			if _, ok := rpcThreads.Load(tid); !ok {
				return true
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %d still runs the closed end's work", tid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func TestRPCConfig(t *testing.T) {
	name := uniqueName("rpc-conf")
	for _, bad := range []RPCConfig{
		{Notify: 9},
		{Timeout: -time.Second},
		{MaxMessage: 1 << 40},
		{NodeSize: 32},
	} {
		_, err := CreateRPCWith(name, &bad, nil)
		wantErr(t, err, ErrInvalid)
	}
	owner := must(CreateRPCWith(name, &RPCConfig{NodeCount: 4, NodeSize: 1024, Notify: NotifySpin, InlineHandlers: true},
		func(req []byte) ([]byte, error) { return append([]byte("re: "), req...), nil }))(t)
	defer owner.Close()
	client := must(OpenRPCWith(name, nil, nil))(t)
	defer client.Close()
	buf := make([]byte, 0, 64)
	for _, n := range []int{0, 988, 989, 5000} {
		req := bytes.Repeat([]byte{'q'}, n)
		want := append([]byte("re: "), req...)
		resp := must(client.Call(req, bound))(t)
		if !bytes.Equal(resp, want) {
			t.Fatalf("a %d-byte call answered %d bytes", n, len(resp))
		}
		// The same buffer again and again: it grows once, then holds
		// every response.
		buf = must(client.CallInto(req, buf[:0], bound))(t)
		if !bytes.Equal(buf, want) {
			t.Fatalf("a %d-byte CallInto answered %d bytes", n, len(buf))
		}
	}
	var nilRPC *RPC
	_, err := nilRPC.CallInto(nil, buf, bound)
	wantErr(t, err, ErrInvalid)
	check(t, client.Close())
	_, err = client.CallInto([]byte("x"), buf, bound)
	wantErr(t, err, ErrClosed)
}

func TestRPC(t *testing.T) {
	name := uniqueName("rpc")
	var calls atomic.Int64
	owner := must(CreateRPC(name, func(req []byte) ([]byte, error) {
		calls.Add(1)
		switch string(req) {
		case "fail":
			return nil, errors.New("asked to fail")
		case "panic":
			panic("asked to panic")
		}
		return bytes.ToUpper(req), nil
	}))(t)
	defer owner.Close()
	_, err := CreateRPC(name, nil)
	wantErr(t, err, ErrExists)
	_, err = OpenRPC(uniqueName("none"), nil)
	wantErr(t, err, ErrNotFound)
	client := must(OpenRPC(name, nil))(t)
	_, err = OpenRPC(name, nil)
	wantErr(t, err, ErrBusy)

	callFromGoroutines(t, client, 4, 50, func(g, i int) string {
		return fmt.Sprintf("call %d.%d", g, i)
	}, func(req string, resp []byte) error {
		if string(resp) != strings.ToUpper(req) {
			return fmt.Errorf("%q answered %q", req, resp)
		}
		return nil
	})
	if calls.Load() != 200 {
		t.Fatalf("%d calls handled", calls.Load())
	}
	resp := must(client.Call(nil, bound))(t)
	if len(resp) != 0 {
		t.Fatalf("empty request answered %q", resp)
	}
	_, err = client.Call([]byte("fail"), bound)
	wantErr(t, err, ErrRemote)
	_, err = client.Call([]byte("panic"), bound) // recovered, never crosses into C
	wantErr(t, err, ErrRemote)
	_, err = owner.Call([]byte("x"), bound) // the client has no handler
	wantErr(t, err, ErrRemote)
	check(t, client.Close())
	wantErr(t, client.Close(), ErrClosed)
	_, err = client.Call([]byte("x"), 0)
	wantErr(t, err, ErrClosed)
	var nilRPC *RPC
	_, err = nilRPC.Call(nil, 0)
	wantErr(t, err, ErrInvalid)
}

// cancelWakes runs wait in a goroutine with a context, cancels it once the
// wait has had time to block (not needed for correctness), and checks
// that the wait returned context.Canceled within the bound. Returns the
// cancelled context.
func cancelWakes(t *testing.T, what string, wait func(context.Context) error) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wait(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		wantErr(t, err, context.Canceled)
	case <-time.After(bound):
		t.Fatalf("%s did not return after cancel", what)
	}
	return ctx
}

// Light hand-overs: the topic's own setting, read back by every handle,
// refused to an open that asks for the other; inline and chunk messages
// flow through it, lap after lap.
func TestTopicWithLightHandovers(t *testing.T) {
	reg, _ := newRegion(t)
	conf := &TopicConfig{Capacity: 8, InlinePayload: 64, LightHandovers: true}
	topic := must(reg.CreateTopic("t", conf))(t)
	defer topic.Close()
	if !topic.LightHandovers() {
		t.Fatal("created light, reads not light")
	}
	again := must(reg.Topic("t"))(t)
	defer again.Close()
	if !again.LightHandovers() {
		t.Fatal("opened: not light")
	}
	_, err := reg.CreateTopic("t", &TopicConfig{Capacity: 8, InlinePayload: 64})
	wantErr(t, err, ErrIncompatible)
	plain := must(reg.CreateTopic("plain", nil))(t)
	defer plain.Close()
	if plain.LightHandovers() {
		t.Fatal("a default topic reads light")
	}
	buf := make([]byte, 256)
	for i := 0; i < 20; i++ {
		small, big := bytes.Repeat([]byte{byte(i)}, 40), bytes.Repeat([]byte{byte(i)}, 100)
		check(t, topic.Send(small, 1))
		check(t, topic.Send(big, 1)) // past the slot: a chunk
		for _, want := range [][]byte{small, big} {
			n := must(again.ReceiveInto(0, buf, bound))(t)
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("lap %d: got %d bytes", i, n)
			}
		}
	}
}

// Inline payloads: messages up to the slot travel in their ring cell
// (no chunk), larger ones in chunks, in order; at-least-once is refused.
func TestInlinePayload(t *testing.T) {
	reg, _ := newRegion(t)
	_, err := reg.CreateTopic("x", &TopicConfig{Capacity: 8, InlinePayload: 128, Delivery: AtLeastOnce})
	wantErr(t, err, ErrInvalid)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 8, InlinePayload: 100}))(t)
	defer topic.Close()
	big := bytes.Repeat([]byte{0xcd}, 300)
	check(t, topic.Send([]byte("in the slot"), 1))
	check(t, topic.Send(big, 1))
	msg := must(topic.Receive(0, bound))(t)
	if string(msg.Data()) != "in the slot" {
		t.Fatalf("got %q", msg.Data())
	}
	check(t, msg.Release())
	msg = must(topic.Receive(0, bound))(t)
	if !bytes.Equal(msg.Data(), big) {
		t.Fatalf("got %d bytes", len(msg.Data()))
	}
	check(t, msg.Release())

	// ReceiveInto: straight into a buffer of the caller's; a message
	// longer than it stays queued and its length comes with the error.
	check(t, topic.Send([]byte("slot"), 1))
	check(t, topic.Send(big, 1))
	small := make([]byte, 16)
	n := must(topic.ReceiveInto(0, small, bound))(t)
	if string(small[:n]) != "slot" {
		t.Fatalf("got %q", small[:n])
	}
	n, err = topic.TryReceiveInto(0, small)
	wantErr(t, err, ErrBufferTooSmall)
	if n != len(big) {
		t.Fatalf("ErrBufferTooSmall with length %d, want %d", n, len(big))
	}
	if d := must(topic.Depth(0))(t); d != 1 {
		t.Fatalf("depth %d after a refused receive, want 1", d)
	}
	large := make([]byte, n)
	n = must(topic.ReceiveInto(0, large, bound))(t)
	if !bytes.Equal(large[:n], big) {
		t.Fatalf("got %d bytes", n)
	}
	_, err = topic.TryReceiveInto(0, large)
	wantErr(t, err, ErrWouldBlock)
	_, err = topic.ReceiveInto(0, large, 0)
	wantErr(t, err, ErrTimeout)
	_, err = topic.ReceiveInto(5, large, 0)
	wantErr(t, err, ErrInvalid)

	// A subscription's ReceiveInto: the partition comes with the length;
	// a message too long for buf stays first, and is taken next.
	two := must(reg.CreateTopic("two", &TopicConfig{Partitions: 2, Capacity: 8, InlinePayload: 64}))(t)
	defer two.Close()
	sub := must(two.Subscribe())(t)
	defer sub.Close()
	var key1 uint64
	for two.PartitionOf(key1) != 1 {
		key1++
	}
	check(t, two.Send(bytes.Repeat([]byte{7}, 40), key1))
	n, p, err := sub.TryReceiveInto(small)
	wantErr(t, err, ErrBufferTooSmall)
	if n != 40 {
		t.Fatalf("ErrBufferTooSmall with length %d, want 40", n)
	}
	n, p, err = sub.ReceiveInto(large, bound)
	check(t, err)
	if n != 40 || p != 1 || large[0] != 7 {
		t.Fatalf("got %d bytes from partition %d", n, p)
	}
	_, _, err = sub.TryReceiveInto(large)
	wantErr(t, err, ErrWouldBlock)
	_, _, err = sub.ReceiveInto(large, time.Millisecond)
	wantErr(t, err, ErrTimeout)

	_, err = reg.CreateTopic("t", &TopicConfig{Capacity: 8})
	wantErr(t, err, ErrIncompatible)
}
