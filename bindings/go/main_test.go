package tachyon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// bound is the longest any wait of a test may take: the tests never
// assert a time, but they never hang either.
const bound = 60 * time.Second

// helperEnv names the helper mode when the test binary runs as a child
// process (see TestMain and helper).
const helperEnv = "TACHYON_GO_HELPER"

// TestMain runs the tests, or, in a child process started by a test, one
// helper; then checks that the run left nothing in /dev/shm.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		if err := helper(mode, strings.Fields(os.Getenv(helperEnv+"_ARGS"))); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, dir := range tempDirs {
		os.RemoveAll(dir)
	}
	if left := leftovers(); len(left) > 0 {
		fmt.Fprintln(os.Stderr, "left behind in /dev/shm:", left)
		for _, f := range left {
			os.Remove(f)
		}
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

var counter atomic.Int64

// namePrefix starts every segment name of this test process.
var namePrefix = fmt.Sprintf("gotest-%d-", os.Getpid())

// uniqueName is a segment name no other test (or test run) uses.
func uniqueName(stem string) string {
	return fmt.Sprintf("%s%d-%s", namePrefix, counter.Add(1), stem)
}

// leftovers lists the files of this test process's names in /dev/shm
// (the tests' and the examples', which end in -PID).
func leftovers() []string {
	dir := os.Getenv("TACHYON_SHM_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), namePrefix) || strings.HasSuffix(e.Name(), fmt.Sprintf("-%d", os.Getpid())) {
			left = append(left, filepath.Join(dir, e.Name()))
		}
	}
	return left
}

// newRegion creates a 16 MiB region of a unique name, closed and removed
// when the test ends.
func newRegion(t *testing.T) (*Region, string) {
	t.Helper()
	name := uniqueName(t.Name()[:min(len(t.Name()), 20)])
	r, err := CreateRegion(name, &RegionConfig{Size: 16 << 20, RingArena: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		if err := Remove(name); err != nil {
			t.Errorf("removing %s: %v", name, err)
		}
	})
	return r, name
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// must(f())(t) is f's value, or the test's end with f's error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr fails unless err is want (errors.Is).
func wantErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

// child starts this test binary as a helper process (mode and its
// arguments), its stdout piped, killed if still running when the test
// ends.
func child(t testing.TB, mode string, args ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperEnv+"_ARGS="+strings.Join(args, " "))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, bufio.NewScanner(out)
}

// helper is what a child process does: produce / consume keyed messages,
// or hold a message or loans until it is killed.
func helper(mode string, args []string) error {
	if mode == "rpc-serve" { // NAME [big|hybrid|spin]: answer requests upper-cased until "bye"
		bye := make(chan struct{})
		var conf *RPCConfig
		if len(args) > 1 {
			switch args[1] {
			case "big": // nodes of 64 KiB, one handler thread
				conf = &RPCConfig{NodeCount: 8, NodeSize: 64 << 10, HandlerThreads: 1}
			case "hybrid":
				conf = &RPCConfig{Notify: NotifyHybrid}
			case "spin":
				conf = &RPCConfig{Notify: NotifySpin}
			default:
				return fmt.Errorf("rpc-serve: unknown option %q", args[1])
			}
		}
		rpc, err := CreateRPCWith(args[0], conf, func(req []byte) ([]byte, error) {
			if string(req) == "bye" {
				close(bye)
			}
			return bytes.ToUpper(req), nil
		})
		if err != nil {
			return err
		}
		fmt.Println("ready")
		select {
		case <-bye:
		case <-time.After(bound):
			return errors.New("no bye")
		}
		return rpc.Close()
	}
	if len(args) < 2 {
		return fmt.Errorf("%s: want REGION TOPIC ...", mode)
	}
	reg, err := OpenRegion(args[0], nil)
	if err != nil {
		return err
	}
	defer reg.Close()
	topic, err := reg.Topic(args[1])
	if err != nil {
		return err
	}
	defer topic.Close()
	num := func(i int) int {
		n, _ := strconv.Atoi(args[i])
		return n
	}
	switch mode {
	case "produce": // REGION TOPIC N KEYS
		return produce(topic, "go", num(2), num(3))
	case "consume": // REGION TOPIC N: "PARTITION TEXT" lines
		return consume(topic, num(2), func(p int, text string) { fmt.Printf("%d %s\n", p, text) })
	case "hold": // REGION TOPIC: receive one message, say so, wait to be killed
		msg, err := topic.Receive(0, bound)
		if err != nil {
			return err
		}
		fmt.Printf("holding %s\n", msg.Data())
		time.Sleep(bound)
		return errors.New("not killed")
	case "until-signal": // REGION TOPIC: receive until SIGINT (signal.NotifyContext)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		fmt.Println("waiting")
		_, err := topic.ReceiveContext(ctx, 0)
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("ReceiveContext returned %v, want context.Canceled", err)
		}
		fmt.Println("stopped")
		return nil
	case "stream": // REGION TOPIC N: send N 64-byte items (i, ..., ^i) with key 0
		item := make([]byte, 64)
		for i := 0; i < num(2); i++ {
			binary.LittleEndian.PutUint64(item, uint64(i))
			binary.LittleEndian.PutUint64(item[56:], ^uint64(i))
			if err := topic.SendTimeout(item, 0, bound); err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
		}
		return nil
	case "send-now": // REGION TOPIC N: send "0" .. "N-1" with key 0, never waiting
		for i := 0; i < num(2); i++ {
			if err := topic.SendTimeout([]byte(strconv.Itoa(i)), 0, 0); err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
		}
		return nil
	case "loans": // REGION TOPIC N: loan N chunks, say so, wait to be killed
		for i := 0; i < num(2); i++ {
			l, err := topic.LoanTimeout(100, bound)
			if err != nil {
				return err
			}
			copy(l.Bytes(), "half-built")
		}
		fmt.Println("loaned")
		time.Sleep(bound)
		return errors.New("not killed")
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// produce publishes n messages "PREFIX-K-S" with key K = i % keys and
// S = i / keys: half built in a loan, half sent.
func produce(topic *Topic, prefix string, n, keys int) error {
	for i := 0; i < n; i++ {
		key := uint64(i % keys)
		text := fmt.Sprintf("%s-%d-%d", prefix, i%keys, i/keys)
		if i%2 == 0 {
			l, err := topic.LoanTimeout(len(text), bound)
			if err != nil {
				return err
			}
			copy(l.Bytes(), text)
			if err := l.PublishTimeout(len(text), key, bound); err != nil {
				return err
			}
		} else if err := topic.SendTimeout([]byte(text), key, bound); err != nil {
			return err
		}
	}
	return nil
}

// consume receives n messages from all partitions of topic in turn,
// within bound, and gives each to got.
func consume(topic *Topic, n int, got func(partition int, text string)) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for done := 0; done < n; {
		for p := 0; p < topic.Partitions() && done < n; p++ {
			msg, err := topic.TryReceive(p)
			if errors.Is(err, ErrWouldBlock) {
				continue
			}
			if err != nil {
				return err
			}
			got(p, string(msg.Data()))
			if err := msg.Release(); err != nil {
				return err
			}
			done++
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("only %d of %d messages came: %w", done, n, err)
		}
		if done < n {
			// Wait a little for partition 0, so that an idle consumer
			// does not spin.
			msg, err := topic.Receive(0, time.Millisecond)
			if err == nil {
				got(0, string(msg.Data()))
				if err := msg.Release(); err != nil {
					return err
				}
				done++
			} else if !errors.Is(err, ErrTimeout) {
				return err
			}
		}
	}
	return nil
}

// keyed checks lines "PARTITION PREFIX-K-S" from a consumer of produce's
// n messages over keys keys: each once, in order per key, in the key's
// partition.
func keyed(t *testing.T, topic *Topic, prefix string, lines []string, n, keys int) {
	t.Helper()
	if len(lines) != n {
		t.Fatalf("%d messages received, want %d", len(lines), n)
	}
	next := make([]int, keys)
	for _, line := range lines {
		var p, k, s int
		if _, err := fmt.Sscanf(line, "%d "+prefix+"-%d-%d", &p, &k, &s); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if k < 0 || k >= keys {
			t.Fatalf("line %q: no such key", line)
		}
		if s != next[k] {
			t.Fatalf("key %d: got message %d, want %d (order per key)", k, s, next[k])
		}
		next[k]++
		if want := topic.PartitionOf(uint64(k)); p != want {
			t.Fatalf("key %d came from partition %d, its partition is %d", k, p, want)
		}
	}
	for k, c := range next {
		if want := (n - k + keys - 1) / keys; c != want {
			t.Fatalf("key %d: %d messages, want %d", k, c, want)
		}
	}
}

// lines collects the output lines of a scanner (until EOF).
func lines(sc *bufio.Scanner) []string {
	var out []string
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// tempDirs are removed when the tests end.
var tempDirs []string
