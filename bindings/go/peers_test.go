package tachyon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// root is the repository's root (the package is bindings/go).
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	rustPeerOnce sync.Once
	rustPeer     string
	rustPeerErr  error
	cPeerOnce    sync.Once
	cPeer        string
	cPeerErr     error
)

// busPeer is the Rust peer, crates/tachyon/examples/bus_peer.rs:
// $TACHYON_BUS_PEER, or built here with cargo (debug).
func busPeer(t *testing.T) string {
	t.Helper()
	rustPeerOnce.Do(func() {
		if p := os.Getenv("TACHYON_BUS_PEER"); p != "" {
			rustPeer = p
			return
		}
		cmd := exec.Command("cargo", "build", "-q", "-p", "tachyon-shm", "--example", "bus_peer")
		cmd.Dir = root(t)
		cmd.Stderr = os.Stderr
		if rustPeerErr = cmd.Run(); rustPeerErr != nil {
			rustPeerErr = fmt.Errorf("building the Rust peer (cargo build -p tachyon-shm --example bus_peer): %w", rustPeerErr)
			return
		}
		target := os.Getenv("CARGO_TARGET_DIR")
		if target == "" {
			target = filepath.Join(root(t), "target")
		}
		rustPeer = filepath.Join(target, "debug", "examples", "bus_peer")
	})
	if rustPeerErr != nil {
		t.Fatal(rustPeerErr)
	}
	return rustPeer
}

// cPeerPath is testdata/c_peer.c, compiled with cc against the header and
// the libtachyon this package links (target/release).
func cPeerPath(t *testing.T) string {
	t.Helper()
	cPeerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tachyon-go-c-peer-")
		if err != nil {
			cPeerErr = err
			return
		}
		tempDirs = append(tempDirs, dir)
		cPeer = filepath.Join(dir, "c_peer")
		lib := filepath.Join(root(t), "target", "release")
		cmd := exec.Command("cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "testdata/c_peer.c",
			"-I", filepath.Join(root(t), "include"), "-L", lib, "-ltachyon", "-Wl,-rpath,"+lib, "-o", cPeer)
		if out, err := cmd.CombinedOutput(); err != nil {
			cPeerErr = fmt.Errorf("compiling the C peer (a C compiler, cc, is needed): %v\n%s", err, out)
		}
	})
	if cPeerErr != nil {
		t.Fatal(cPeerErr)
	}
	return cPeer
}

// startPeer starts a peer (killed after bound) and returns a function
// that waits for its end and returns its output lines.
func startPeer(t *testing.T, path string, args ...string) func() []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if cmd.ProcessState == nil {
			cmd.Wait()
		}
	})
	return func() []string {
		t.Helper()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s %v: %v\n%s", filepath.Base(path), args, err, errOut.String())
		}
		return strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	}
}

// The Rust peer publishes "rust-I" with key I; a Go consumer gets each
// once, from its key's partition, and each partition in publish order.
func TestRustProducerGoConsumer(t *testing.T) {
	const n = 500
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()
	wait := startPeer(t, busPeer(t), "send", name, "t", strconv.Itoa(n))
	last := map[int]int{}
	seen := map[int]bool{}
	check(t, consume(topic, n, func(p int, text string) {
		i, err := strconv.Atoi(strings.TrimPrefix(text, "rust-"))
		if err != nil || seen[i] {
			t.Errorf("partition %d: %q (a duplicate or not a Rust message)", p, text)
			return
		}
		seen[i] = true
		if topic.PartitionOf(uint64(i)) != p {
			t.Errorf("key %d from partition %d", i, p)
		}
		if prev, ok := last[p]; ok && i < prev {
			t.Errorf("partition %d: %d after %d (publish order)", p, i, prev)
		}
		last[p] = i
	}))
	wait()
	if len(seen) != n {
		t.Fatalf("%d of %d messages", len(seen), n)
	}
}

// A Go producer publishes N messages over a few keys; the Rust peer
// receives them all, in order per key, each from its key's partition.
func TestGoProducerRustConsumer(t *testing.T) {
	const n, keys = 600, 5
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 4, Capacity: 64}))(t)
	defer topic.Close()
	wait := startPeer(t, busPeer(t), "receive", name, "t", strconv.Itoa(n))
	check(t, produce(topic, "go", n, keys))
	keyed(t, topic, "go", wait(), n, keys)
}

// The C peer publishes N messages over a few keys (loans and ty_send); a
// Go consumer gets them all, in order per key.
func TestCProducerGoConsumer(t *testing.T) {
	const n, keys = 600, 7
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 8, Capacity: 32}))(t)
	defer topic.Close()
	wait := startPeer(t, cPeerPath(t), "send", name, "t", strconv.Itoa(n), strconv.Itoa(keys))
	var got []string
	check(t, consume(topic, n, func(p int, text string) { got = append(got, fmt.Sprintf("%d %s", p, text)) }))
	wait()
	keyed(t, topic, "c", got, n, keys)
}

// A Go producer, the C peer consuming: all, in order per key.
func TestGoProducerCConsumer(t *testing.T) {
	const n, keys = 600, 7
	reg, name := newRegion(t)
	topic := must(reg.CreateTopic("t", &TopicConfig{Partitions: 2, Capacity: 32}))(t)
	defer topic.Close()
	wait := startPeer(t, cPeerPath(t), "receive", name, "t", strconv.Itoa(n))
	check(t, produce(topic, "go", n, keys))
	keyed(t, topic, "go", wait(), n, keys)
}

// RPC between Go and C: a Go owner answers the C client's calls
// (upper-cased); during the C client's last call, the Go handler calls
// the C client back, whose C handler answers reversed.
func TestRPCGoAndC(t *testing.T) {
	name := uniqueName("rpc")
	// The handler runs on a library thread; the race detector does not
	// see the synchronisation through shared memory, so the handle is
	// handed over atomically.
	var self atomic.Pointer[RPC]
	callback := make(chan error, 1)
	owner := must(CreateRPC(name, func(req []byte) ([]byte, error) {
		if string(req) == "done" {
			resp, err := self.Load().Call([]byte("abc"), bound)
			if err == nil && string(resp) != "cba" {
				err = fmt.Errorf("the C handler answered %q", resp)
			}
			callback <- err
		}
		return bytes.ToUpper(req), nil
	}))(t)
	self.Store(owner)
	defer owner.Close()
	lines := startPeer(t, cPeerPath(t), "rpc", name, "200")()
	if len(lines) != 1 || lines[0] != "called 200" {
		t.Fatalf("the C peer said %q", lines)
	}
	select {
	case err := <-callback:
		check(t, err)
	default:
		t.Fatal("the owner never called the C client back")
	}
}

// A region and topic a Rust process created (bus_peer create): Go opens
// them by name with the configuration they have, and finds "ready" in
// each partition.
func TestGoOpensRustRegion(t *testing.T) {
	name := uniqueName("rust-made")
	t.Cleanup(func() { Remove(name) })
	startPeer(t, busPeer(t), "create", name, "orders", "8")()
	reg := must(OpenRegion(name, nil))(t)
	defer reg.Close()
	topic := must(reg.Topic("orders"))(t)
	defer topic.Close()
	if topic.Partitions() != 8 {
		t.Fatalf("%d partitions", topic.Partitions())
	}
	for p := 0; p < 8; p++ {
		msg := must(topic.Receive(p, bound))(t)
		if string(msg.Data()) != "ready" || msg.Partition() != p {
			t.Fatalf("partition %d: %q", p, msg.Data())
		}
		check(t, msg.Release())
	}
	_, err := topic.TryReceive(0)
	wantErr(t, err, ErrWouldBlock)
}
