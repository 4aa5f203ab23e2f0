// Command unixpingpong is the kernel reference of the Go pingpong
// (examples/go/pingpong): the same rounds over a Unix stream socket
// (net.UnixConn) between two processes, with the same arguments and
// output. bench.sh runs it next to the Go and C pingpongs.
//
//	unixpingpong [SIZE [COUNT]]     (defaults 256 100000)
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"time"
)

const warmUp = 1000

func main() {
	log.SetFlags(0)
	runtime.LockOSThread()
	if len(os.Args) == 5 && os.Args[1] == "child" {
		size, _ := strconv.Atoi(os.Args[3])
		rounds, _ := strconv.ParseUint(os.Args[4], 10, 64)
		if err := child(os.Args[2], size, rounds); err != nil {
			log.Fatal("child: ", err)
		}
		return
	}
	size, count := 256, uint64(100000)
	var err error
	if len(os.Args) > 1 {
		if size, err = strconv.Atoi(os.Args[1]); err != nil || size < 8 || size > 1<<20 {
			log.Fatal("usage: unixpingpong [SIZE (8..1048576) [COUNT]]")
		}
	}
	if len(os.Args) > 2 {
		if count, err = strconv.ParseUint(os.Args[2], 10, 64); err != nil || count < 1 {
			log.Fatal("usage: unixpingpong [SIZE (8..1048576) [COUNT]]")
		}
	}
	dir, err := os.MkdirTemp("", "unixpingpong-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	rounds := warmUp + count
	cmd := exec.Command(os.Args[0], "child", path, strconv.Itoa(size), strconv.FormatUint(rounds, 10))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.AcceptUnix()
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Minute))
	fmt.Printf("pingpong (Go, net.UnixConn stream): %d-byte messages, %d round trips (+%d warm-up)\n", size, count,
		warmUp)
	out, in := make([]byte, size), make([]byte, size)
	samples := make([]time.Duration, count)
	started := time.Now()
	for seq := uint64(0); seq < rounds; seq++ {
		t0 := time.Now()
		binary.LittleEndian.PutUint64(out, seq)
		fill(out[8:], byte(seq))
		if _, err := conn.Write(out); err != nil {
			log.Fatal(err)
		}
		if _, err := io.ReadFull(conn, in); err != nil {
			log.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(in); got != seq {
			log.Fatalf("round %d: pong %d", seq, got)
		}
		if seq >= warmUp {
			samples[seq-warmUp] = time.Since(t0)
		}
	}
	elapsed := time.Since(started)
	if err := cmd.Wait(); err != nil {
		log.Fatal("child: ", err)
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	pct := func(perMille uint64) int64 {
		rank := (count*perMille + 999) / 1000
		if rank == 0 {
			rank = 1
		}
		return samples[rank-1].Nanoseconds()
	}
	fmt.Printf("round trip (ns): p50 %d  p99 %d  p99.9 %d  mean %d  min %d  max %d\n", pct(500), pct(990),
		pct(999), (sum / time.Duration(count)).Nanoseconds(), samples[0].Nanoseconds(),
		samples[count-1].Nanoseconds())
	fmt.Printf("%d round trips in %.3f s: %.0f round trips/s\n", rounds, elapsed.Seconds(),
		float64(rounds)/elapsed.Seconds())
}

// child echoes rounds messages of size bytes.
func child(path string, size int, rounds uint64) error {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, size)
	// One deadline for the whole run: every wait is bounded, and the
	// rounds pay no timer.
	conn.SetDeadline(time.Now().Add(10 * time.Minute))
	for seq := uint64(0); seq < rounds; seq++ {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint64(buf); got != seq {
			return fmt.Errorf("expected ping %d, got %d", seq, got)
		}
		if _, err := conn.Write(buf); err != nil {
			return err
		}
	}
	return nil
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
