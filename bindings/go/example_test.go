package tachyon_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	tachyon "tachyon/bindings/go"
)

// One message from a producer to a consumer: in a real program the
// consumer is another process, which opens the region by name.
func Example() {
	name := fmt.Sprintf("example-%d", os.Getpid()) // unique: parallel runs never meet
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name) // regions persist until removed
	defer reg.Close()
	topic, err := reg.CreateTopic("greetings", &tachyon.TopicConfig{Partitions: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()

	// Produce: build the message in place, in shared memory.
	loan, err := topic.Loan(64)
	if err != nil {
		log.Fatal(err)
	}
	n := copy(loan.Bytes(), "hello from Go")
	if err := loan.Publish(n, 42); err != nil { // key 42 picks the partition
		log.Fatal(err)
	}

	// Consume: the data is a view of shared memory until Release.
	msg, err := topic.Receive(topic.PartitionOf(42), time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (partition %d of %d)\n", msg.Data(), msg.Partition(), topic.Partitions())
	msg.Release()
	// Output: hello from Go (partition 2 of 4)
}

// A consumer that stops when its context is cancelled (here: a deadline).
func ExampleTopic_ReceiveContext() {
	name := fmt.Sprintf("example-ctx-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("jobs", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()
	for _, job := range []string{"a", "b"} {
		if err := topic.Send([]byte(job), 0); err != nil {
			log.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for {
		msg, err := topic.ReceiveContext(ctx, 0)
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Println("no more jobs")
			return
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("job", string(msg.Data()))
		msg.Release()
	}
	// Output:
	// job a
	// job b
	// no more jobs
}

// One consumer over several partitions: a Subscription receives from
// whichever has a message, and each message says where it came from.
func ExampleTopic_Subscribe() {
	name := fmt.Sprintf("example-sub-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("orders", &tachyon.TopicConfig{Partitions: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close() // would close the subscription too
	for user := uint64(1); user <= 3; user++ {
		if err := topic.Send([]byte(fmt.Sprint("order of user ", user)), user); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := topic.Subscribe() // no partitions given: every partition
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	fmt.Println("partitions:", sub.Partitions())
	var got []string
	for {
		msg, err := sub.TryReceive()
		if errors.Is(err, tachyon.ErrWouldBlock) {
			break // every partition is empty
		}
		if err != nil {
			log.Fatal(err)
		}
		var user uint64
		fmt.Sscanf(string(msg.Data()), "order of user %d", &user)
		got = append(got, fmt.Sprintf("%s, from its key's partition: %t", msg.Data(), msg.Partition() == topic.PartitionOf(user)))
		msg.Release()
	}
	sort.Strings(got) // partitions are taken in turn: sort for a stable output
	fmt.Println(strings.Join(got, "\n"))
	// Output:
	// partitions: [0 1 2 3]
	// order of user 1, from its key's partition: true
	// order of user 2, from its key's partition: true
	// order of user 3, from its key's partition: true
}

// Errors say what went wrong and compare with errors.Is.
func ExampleOpenRegion_errors() {
	_, err := tachyon.OpenRegion(fmt.Sprintf("example-missing-%d", os.Getpid()), nil) // nil: open, do not create
	fmt.Println(errors.Is(err, tachyon.ErrNotFound))
	var e *tachyon.Error
	if errors.As(err, &e) {
		fmt.Println(e.Op, e.Timeout())
	}
	// Output:
	// true
	// OpenRegion false
}

// A loan that may not be published: Close returns it to the pool unless
// Publish used it up.
func ExampleLoan_Close() {
	name := fmt.Sprintf("example-loan-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("t", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()

	build := func(text string) error {
		loan, err := topic.Loan(len(text))
		if err != nil {
			return err
		}
		defer loan.Close()
		if text == "" {
			return errors.New("nothing to say")
		}
		copy(loan.Bytes(), text)
		return loan.Publish(len(text), 0)
	}
	fmt.Println(build("kept"), build(""))
	depth, _ := topic.Depth(0)
	fmt.Println("waiting:", depth)
	// Output:
	// <nil> nothing to say
	// waiting: 1
}

// Small messages in the topic's inline slots, received into a buffer of
// the caller's: no chunk on either side. A message longer than the buffer
// stays queued; the error says how long it is.
func ExampleTopic_ReceiveInto() {
	name := fmt.Sprintf("example-recv-into-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("ticks", &tachyon.TopicConfig{InlinePayload: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()
	_ = topic.Send([]byte("tick 1"), 0)
	_ = topic.Send(make([]byte, 100), 0)
	buf := make([]byte, 64)
	n, err := topic.ReceiveInto(0, buf, time.Second)
	fmt.Printf("%q %v\n", buf[:n], err)
	n, err = topic.ReceiveInto(0, buf, time.Second)
	fmt.Println(n, errors.Is(err, tachyon.ErrBufferTooSmall))
	n, err = topic.ReceiveInto(0, make([]byte, n), time.Second)
	fmt.Println(n, err)
	// Output:
	// "tick 1" <nil>
	// 100 true
	// 100 <nil>
}

// A subscription copies messages of all its partitions into one buffer
// and says where each came from.
func ExampleSubscription_ReceiveInto() {
	name := fmt.Sprintf("example-sub-recv-into-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("ticks", &tachyon.TopicConfig{Partitions: 4, InlinePayload: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()
	sub, err := topic.Subscribe() // every partition
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	_ = topic.Send([]byte("tick"), 7)
	buf := make([]byte, 64)
	n, partition, err := sub.ReceiveInto(buf, time.Second)
	fmt.Printf("%q %v %v\n", buf[:n], partition == topic.PartitionOf(7), err)
	// Output:
	// "tick" true <nil>
}

// A shared byte buffer is an io.ReaderAt and io.WriterAt.
func ExampleBuffer() {
	name := fmt.Sprintf("example-buffer-%d", os.Getpid())
	buf, err := tachyon.CreateBuffer(name, 64) // removed when the last process closes it
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close()
	if _, err := buf.WriteAt([]byte("state"), 8); err != nil {
		log.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := buf.ReadAt(got, 8); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(got), buf.Size())
	// Output: state 64
}

// A ring of fixed-size nodes: each item goes to one reader.
func ExampleRing() {
	name := fmt.Sprintf("example-ring-%d", os.Getpid())
	ring, err := tachyon.CreateRing(name, 8, 256)
	if err != nil {
		log.Fatal(err)
	}
	defer ring.Close()
	if err := ring.Write([]byte("buy 100"), time.Second); err != nil {
		log.Fatal(err)
	}
	item := make([]byte, ring.NodeSize())
	n, err := ring.Read(item, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(item[:n]))
	// Output: buy 100
}

// Request and response between two ends (in real programs, two
// processes): the owner's handler answers the client's calls.
func ExampleRPC() {
	name := fmt.Sprintf("example-rpc-%d", os.Getpid())
	owner, err := tachyon.CreateRPC(name, func(req []byte) ([]byte, error) {
		return append([]byte("echo: "), req...), nil // runs on the library's threads
	})
	if err != nil {
		log.Fatal(err)
	}
	defer owner.Close()
	client, err := tachyon.OpenRPC(name, nil) // no handler: the owner cannot call back
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	resp, err := client.Call([]byte("ping"), time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(resp))
	// Output: echo: ping
}

// Two consumer groups of one topic: each group gets every message, shared
// among its members.
func ExampleTopic_JoinGroup() {
	name := fmt.Sprintf("example-groups-%d", os.Getpid())
	// MaxGroups 3: the default group and two named ones per topic.
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20, RingArena: 1 << 20, MaxGroups: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("orders", &tachyon.TopicConfig{Partitions: 2, NoDefaultGroup: true})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()
	var subs []*tachyon.Subscription
	for _, g := range []string{"audit", "billing"} {
		group, err := topic.JoinGroup(g)
		if err != nil {
			log.Fatal(err)
		}
		defer group.Close()
		sub, err := group.Subscribe() // every partition
		if err != nil {
			log.Fatal(err)
		}
		subs = append(subs, sub)
	}
	for i := 0; i < 3; i++ {
		if err := topic.Send([]byte(fmt.Sprint("order ", i)), uint64(i)); err != nil {
			log.Fatal(err)
		}
	}
	for i, sub := range subs {
		var got []string
		for len(got) < 3 {
			msg, err := sub.Receive(time.Second)
			if err != nil {
				log.Fatal(err)
			}
			got = append(got, string(msg.Data()))
			msg.Release()
		}
		sort.Strings(got)
		fmt.Println(sub.Group().Name(), i, strings.Join(got, ", "))
	}
	// Output:
	// audit 0 order 0, order 1, order 2
	// billing 1 order 0, order 1, order 2
}
