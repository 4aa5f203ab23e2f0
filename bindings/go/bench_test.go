package tachyon

import (
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
