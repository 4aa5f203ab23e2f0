package tachyon

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A Go producer process and a Go consumer (this process), then the
// reverse: N keyed messages, each once, in order per key.
func TestGoProcesses(t *testing.T) {
	const n, keys = 2000, 7
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()

	t.Run("child produces", func(t *testing.T) {
		cmd, _ := child(t, "produce", name, "t", fmt.Sprint(n), fmt.Sprint(keys))
		var got []string
		check(t, consume(topic, n, func(p int, text string) { got = append(got, fmt.Sprintf("%d %s", p, text)) }))
		check(t, cmd.Wait())
		keyed(t, topic, "go", got, n, keys)
	})
	t.Run("child consumes", func(t *testing.T) {
		cmd, out := child(t, "consume", name, "t", fmt.Sprint(n))
		check(t, produce(topic, "go", n, keys))
		got := lines(out)
		check(t, cmd.Wait())
		keyed(t, topic, "go", got, n, keys)
	})
}

// A Go producer process writes keyed messages into several partitions;
// this process receives all of them through one Subscription.
func TestGoProcessSubscription(t *testing.T) {
	const n, keys = 2000, 7
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()
	sub := must(topic.Subscribe())(t)
	defer sub.Close()
	cmd, _ := child(t, "produce", name, "t", fmt.Sprint(n), fmt.Sprint(keys))
	var got []string
	used := map[int]bool{}
	for len(got) < n {
		msg := must(sub.Receive(bound))(t)
		got = append(got, fmt.Sprintf("%d %s", msg.Partition(), msg.Data()))
		used[msg.Partition()] = true
		check(t, msg.Release())
	}
	check(t, cmd.Wait())
	keyed(t, topic, "go", got, n, keys)
	if len(used) < 2 {
		t.Fatalf("the messages came from %d partition(s): the test needs several", len(used))
	}
	_, err := sub.TryReceive()
	wantErr(t, err, ErrWouldBlock)
}

// A Go producer process streams 64-byte items into a topic with inline
// slots; this process receives them with batch reads on: every item,
// whole and in order.
func TestGoProcessBatchReads(t *testing.T) {
	const n = 50000
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Capacity: 256, InlinePayload: 64}))(t)
	defer topic.Close()
	check(t, topic.SetBatchReads(true))
	if !topic.BatchReads() {
		t.Fatal("SetBatchReads(true) did not take")
	}
	cmd, _ := child(t, "stream", name, "t", fmt.Sprint(n))
	part := topic.PartitionOf(0)
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		got := must(topic.ReceiveInto(part, buf, bound))(t)
		if got != 64 || binary.LittleEndian.Uint64(buf) != uint64(i) || binary.LittleEndian.Uint64(buf[56:]) != ^uint64(i) {
			t.Fatalf("item %d: %d bytes %x", i, got, buf[:got])
		}
	}
	check(t, cmd.Wait())
	_, err := topic.TryReceiveInto(part, buf)
	wantErr(t, err, ErrWouldBlock)
}

// waitFor runs f until it says done, at most bound.
func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !f(); {
		if time.Now().After(end) {
			t.Fatalf("still not %s after %v", what, bound)
		}
		time.Sleep(time.Millisecond)
	}
}

// kill SIGKILLs a helper and waits for its end.
func kill(t *testing.T, cmd interface {
	Wait() error
}, pid int) {
	t.Helper()
	check(t, syscall.Kill(pid, syscall.SIGKILL))
	err := cmd.Wait()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the helper ended with %v, not killed", err)
	}
}

// A Go consumer SIGKILLed while it holds a message: recovery gives its
// chunk back to the pool; at most once, the message is lost (counted); at
// least once, it is delivered again.
func TestKilledConsumerRecovered(t *testing.T) {
	for _, delivery := range []Delivery{AtMostOnce, AtLeastOnce} {
		t.Run(fmt.Sprint("delivery=", delivery), func(t *testing.T) {
			reg, name := newRegion(t)
			topic := must(reg.CreateTopic("t", &TopicConfig{Delivery: delivery}))(t)
			defer topic.Close()
			before := must(reg.PoolStats())(t)
			check(t, topic.Send([]byte("victim"), 1))
			cmd, out := child(t, "hold", name, "t")
			if !out.Scan() || out.Text() != "holding victim" {
				t.Fatalf("the consumer said %q", out.Text())
			}
			kill(t, cmd, cmd.Process.Pid)

			var total Recovered
			waitFor(t, "recovered", func() bool {
				r := must(reg.Recover())(t)
				total.Held += r.Held
				total.Redelivered += r.Redelivered
				total.Total += r.Total
				return total.Held+total.Redelivered > 0
			})
			stats := must(topic.Stats())(t)
			if delivery == AtMostOnce {
				if total.Held != 1 || stats.Lost != 1 {
					t.Fatalf("recovered %+v, lost %d: want one message held and lost", total, stats.Lost)
				}
				_, err := topic.TryReceive(0)
				wantErr(t, err, ErrWouldBlock)
			} else {
				if total.Redelivered != 1 || stats.Lost != 0 {
					t.Fatalf("recovered %+v, lost %d: want one message delivered again", total, stats.Lost)
				}
				msg := must(topic.Receive(0, bound))(t)
				if string(msg.Data()) != "victim" {
					t.Fatalf("delivered again: %q", msg.Data())
				}
				check(t, msg.Release())
			}
			after := must(reg.PoolStats())(t)
			if after != before {
				t.Fatalf("pool before %+v, after %+v: a chunk is missing", before, after)
			}
		})
	}
}

// A Go producer SIGKILLed holding loans: they come back to the pool.
func TestKilledProducerLoansRecovered(t *testing.T) {
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	before := must(reg.PoolStats())(t)
	cmd, out := child(t, "loans", name, "t", "32")
	if !out.Scan() || out.Text() != "loaned" {
		t.Fatalf("the producer said %q", out.Text())
	}
	during := must(reg.PoolStats())(t)
	if during == before {
		t.Fatal("the producer's loans are not visible in the pool")
	}
	kill(t, cmd, cmd.Process.Pid)
	loans := 0
	waitFor(t, "recovered", func() bool {
		r := must(reg.Recover())(t)
		loans += r.Loans
		return loans >= 32
	})
	if loans != 32 {
		t.Fatalf("%d loans recovered, want 32", loans)
	}
	if after := must(reg.PoolStats())(t); after != before {
		t.Fatalf("pool before %+v, after %+v", before, after)
	}
}

// RPC between two Go processes: the child owns the channel and answers,
// this process calls.
func TestRPCProcesses(t *testing.T) {
	name := uniqueName("rpc")
	cmd, out := child(t, "rpc-serve", name)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("the server said %q", out.Text())
	}
	client := must(OpenRPC(name, nil))(t)
	defer client.Close()
	for i := 0; i < 100; i++ {
		req := fmt.Sprintf("request %d", i)
		resp := must(client.Call([]byte(req), bound))(t)
		if string(resp) != strings.ToUpper(req) {
			t.Fatalf("%q answered %q", req, resp)
		}
	}
	must(client.Call([]byte("bye"), bound))(t)
	check(t, cmd.Wait())
	_, err := client.Call([]byte("anyone?"), bound)
	wantErr(t, err, ErrClosed)
}

// RPC with options between two Go processes: the child owns a channel of
// 64 KiB nodes (calls up to 65,504 bytes in one packet, written and read
// in place); this process opens it with the owner's geometry (a geometry
// of its own is ErrIncompatible) and futex waits, and calls with sizes
// around a packet's room and beyond.
func TestRPCWithConfigProcesses(t *testing.T) {
	name := uniqueName("rpc-conf")
	cmd, out := child(t, "rpc-serve", name, "big")
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("the server said %q", out.Text())
	}
	_, err := OpenRPCWith(name, &RPCConfig{NodeSize: 4096}, nil)
	wantErr(t, err, ErrIncompatible)
	client := must(OpenRPCWith(name, &RPCConfig{Notify: NotifyFutex}, nil))(t)
	defer client.Close()
	for _, n := range []int{0, 1, 65504, 65505, 300000} {
		req := make([]byte, n)
		for i := range req {
			req[i] = byte('a' + (i+n)%26)
		}
		resp := must(client.Call(req, bound))(t)
		if !bytes.Equal(resp, bytes.ToUpper(req)) || resp == nil {
			t.Fatalf("a %d-byte call answered %d bytes (nil: %v), not its upper case", n, len(resp), resp == nil)
		}
		// CallInto: into a buffer that fits (its memory, no new slice),
		// and into one too small (a new slice).
		buf := make([]byte, 0, 70000)
		into := must(client.CallInto(req, buf, bound))(t)
		if !bytes.Equal(into, bytes.ToUpper(req)) {
			t.Fatalf("a %d-byte CallInto answered %d bytes, not its upper case", n, len(into))
		}
		if fits := n > 0 && n <= cap(buf); fits != (n > 0 && &into[:1][0] == &buf[:1][0]) {
			t.Fatalf("a %d-byte CallInto: in buf's memory %v", n, !fits)
		}
	}
	must(client.Call([]byte("bye"), bound))(t)
	check(t, cmd.Wait())
}

// Ctrl+C stops a Go consumer waiting in ReceiveContext, the way Go
// programs stop: SIGINT cancels the signal.NotifyContext context.
func TestSignalStopsWaitingConsumer(t *testing.T) {
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", nil))(t)
	defer topic.Close()
	cmd, out := child(t, "until-signal", name, "t")
	if !out.Scan() || out.Text() != "waiting" {
		t.Fatalf("the consumer said %q", out.Text())
	}
	time.Sleep(20 * time.Millisecond) // let it enter the wait (not needed for correctness)
	check(t, cmd.Process.Signal(syscall.SIGINT))
	if !out.Scan() || out.Text() != "stopped" {
		t.Fatalf("the consumer said %q", out.Text())
	}
	check(t, cmd.Wait())
}
