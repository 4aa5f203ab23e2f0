package tachyon

import (
	"bufio"
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// The cost of the Go face, against crates/tachyon-ffi/tests/c/cost.c (C)
// and examples/c/pingpong.c; bench.sh runs them side by side and
// docs/go.md reports the numbers.

// A bare cgo call to a C function that does nothing.
func BenchmarkCgoNop(b *testing.B) {
	for i := 0; i < b.N; i++ {
		cgoNop()
	}
}

// A trivial ty_ function through the binding: the handle's guard and one
// cgo call.
func BenchmarkPartitionOf(b *testing.B) {
	topic := benchTopic(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		topic.PartitionOf(uint64(i))
	}
}

// One 256-byte message in one process, no peer, no waiting: loan,
// publish, receive, release with the timeouts of pingpong (the Go twin
// of cost.c).
func BenchmarkMessage(b *testing.B) {
	topic := benchTopic(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := topic.LoanTimeout(256, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		fill(l.Bytes(), byte(i)) // as cost.c's memset
		if err := l.PublishTimeout(256, 0, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		m, err := topic.Receive(0, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// The copy path: Send and a receive of 256 bytes.
func BenchmarkSendReceive(b *testing.B) {
	topic := benchTopic(b)
	data := make([]byte, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := topic.SendTimeout(data, 0, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		m, err := topic.Receive(0, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchTopic(b *testing.B) *Topic {
	b.Helper()
	name := uniqueName("bench")
	reg, err := CreateRegion(name, &RegionConfig{Size: 16 << 20, RingArena: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	topic, err := reg.CreateTopic("t", &TopicConfig{Capacity: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		topic.Close()
		reg.Close()
		Remove(name)
	})
	return topic
}

// fill sets every byte of b to v, as C's memset: log2(len) copies (Go's
// copy is a vectorised memmove) rather than a byte loop.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// RPC calls of 64 KiB and 512,000 bytes in one process, a Go handler
// echoing them, through the default nodes of 4096 bytes (many packets)
// and through nodes that hold a call (one packet, written and read in
// place): Call, which returns a new slice each time, and CallInto, which
// reuses one buffer.
func BenchmarkRPC(b *testing.B) {
	for _, size := range []int{64 << 10, 512000} {
		for _, nodes := range []string{"default", "one-packet"} {
			var conf *RPCConfig
			if nodes == "one-packet" {
				conf = &RPCConfig{NodeCount: 8, NodeSize: uint64(size) + 4096}
			}
			name := uniqueName("bench-rpc")
			owner, err := CreateRPCWith(name, conf, func(req []byte) ([]byte, error) { return req, nil })
			if err != nil {
				b.Fatal(err)
			}
			client, err := OpenRPC(name, nil)
			if err != nil {
				b.Fatal(err)
			}
			req := make([]byte, size)
			b.Run(fmt.Sprintf("%d/%s/Call", size, nodes), func(b *testing.B) {
				b.SetBytes(int64(size))
				for i := 0; i < b.N; i++ {
					if _, err := client.Call(req, 10*time.Second); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%d/%s/CallInto", size, nodes), func(b *testing.B) {
				b.SetBytes(int64(size))
				buf := make([]byte, 0, size)
				for i := 0; i < b.N; i++ {
					if buf, err = client.CallInto(req, buf[:0], 10*time.Second); err != nil {
						b.Fatal(err)
					}
				}
			})
			client.Close()
			owner.Close()
		}
	}
}

// Small RPC calls (64 bytes each way), a Go handler answering them, with
// hybrid waits (the default) and spinning ones on both ends: what a call
// costs beyond its bytes, the handler's entry into Go included. Both ends
// in this process ("local"), and the channel's owner a child process of
// this test binary ("process", the `rpc-serve` helper, whose handler
// answers in upper case) as a Go service would be deployed.
func BenchmarkRPCSmall(b *testing.B) {
	for _, notify := range []Notify{NotifyHybrid, NotifySpin} {
		policy := map[Notify]string{NotifyHybrid: "hybrid", NotifySpin: "spin"}[notify]
		conf := &RPCConfig{Notify: notify}
		for _, where := range []string{"local", "process"} {
			name := uniqueName("bench-rpc-small")
			var owner *RPC
			var server *exec.Cmd
			if where == "local" {
				var err error
				owner, err = CreateRPCWith(name, conf, func(req []byte) ([]byte, error) { return req, nil })
				if err != nil {
					b.Fatal(err)
				}
			} else {
				var out *bufio.Scanner
				server, out = child(b, "rpc-serve", name, policy)
				if !out.Scan() || out.Text() != "ready" {
					b.Fatalf("the server said %q", out.Text())
				}
			}
			client, err := OpenRPCWith(name, conf, nil)
			if err != nil {
				b.Fatal(err)
			}
			req, buf := make([]byte, 64), make([]byte, 0, 64)
			b.Run(fmt.Sprintf("64/%s/%s/CallInto", policy, where), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if buf, err = client.CallInto(req, buf[:0], 10*time.Second); err != nil {
						b.Fatal(err)
					}
				}
			})
			if server != nil {
				if _, err := client.Call([]byte("bye"), bound); err != nil {
					b.Fatal(err)
				}
				if err := server.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			client.Close()
			if owner != nil {
				owner.Close()
			}
		}
	}
}
