// Command pingpong measures the round-trip latency between two processes
// over the bus, the Go twin of examples/c/pingpong.c (same arguments, same
// protocol, same output).
//
// The parent creates a region with the topics "ping" and "pong" and starts
// itself again as the child. Each round the parent loans a SIZE-byte
// chunk, writes a sequence number, publishes it on "ping" and waits for
// the answer on "pong"; the child echoes every ping in a chunk of its own.
// Every sequence number is checked. After 1000 warm-up rounds it prints
// the round trip's p50, p99, p99.9, mean, min and max in nanoseconds.
// Both processes lock their goroutine to its OS thread
// (runtime.LockOSThread), as a latency-sensitive Go program would.
//
//	pingpong [SIZE [COUNT [spin|hybrid|futex]]]     (defaults 256 100000 hybrid)
package main

import (
	"encoding/binary"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"time"

	tachyon "tachyon/bindings/go"
)

// wait bounds every wait: a peer silent for 10 s ends the run.
const wait = 10 * time.Second

const warmUp = 1000

func usage() {
	log.Fatal("usage: pingpong [SIZE (8..1048576) [COUNT (1..10000000) [spin|hybrid|futex]]]")
}

func main() {
	log.SetFlags(0)
	runtime.LockOSThread()
	if len(os.Args) == 4 && os.Args[1] == "child" {
		rounds, _ := strconv.ParseUint(os.Args[3], 10, 64)
		if err := child(os.Args[2], rounds); err != nil {
			log.Fatal("child: ", err)
		}
		return
	}
	size, count, policy := 256, uint64(100000), "hybrid"
	var err error
	if len(os.Args) > 1 {
		if size, err = strconv.Atoi(os.Args[1]); err != nil {
			usage()
		}
	}
	if len(os.Args) > 2 {
		if count, err = strconv.ParseUint(os.Args[2], 10, 64); err != nil {
			usage()
		}
	}
	if len(os.Args) > 3 {
		policy = os.Args[3]
	}
	notify := map[string]tachyon.Notify{"spin": tachyon.NotifySpin, "hybrid": tachyon.NotifyHybrid,
		"futex": tachyon.NotifyFutex}[policy]
	if size < 8 || size > tachyon.MaxMessage || count < 1 || count > 10000000 {
		usage()
	}

	name := fmt.Sprintf("go-pingpong-%d", os.Getpid())
	reg, err := tachyon.CreateRegion(name, &tachyon.RegionConfig{Size: 16 << 20, RingArena: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	conf := &tachyon.TopicConfig{Capacity: 64, Notify: notify}
	ping, err := reg.CreateTopic("ping", conf)
	if err != nil {
		log.Fatal(err)
	}
	defer ping.Close()
	pong, err := reg.CreateTopic("pong", conf)
	if err != nil {
		log.Fatal(err)
	}
	defer pong.Close()

	rounds := warmUp + count
	cmd := exec.Command(os.Args[0], "child", name, strconv.FormatUint(rounds, 10))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("pingpong (Go): %d-byte messages, %d round trips (+%d warm-up), %s waiting\n", size, count,
		warmUp, policy)

	samples := make([]time.Duration, count)
	started := time.Now()
	for seq := uint64(0); seq < rounds; seq++ {
		t0 := time.Now()
		loan, err := ping.LoanTimeout(size, wait)
		if err != nil {
			log.Fatal(err)
		}
		buf := loan.Bytes()
		binary.LittleEndian.PutUint64(buf, seq)
		fill(buf[8:size], byte(seq))
		if err := loan.PublishTimeout(size, 0, wait); err != nil {
			log.Fatal(err)
		}
		msg, err := pong.Receive(0, wait)
		if err != nil {
			log.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(msg.Data()); got != seq || len(msg.Data()) != size {
			log.Fatalf("round %d: pong %d of %d bytes", seq, got, len(msg.Data()))
		}
		if err := msg.Release(); err != nil {
			log.Fatal(err)
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
	// Nearest rank, as pingpong.c.
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
	fmt.Printf("%d round trips in %.3f s: %.0f round trips/s; every sequence number checked both ways\n", rounds,
		elapsed.Seconds(), float64(rounds)/elapsed.Seconds())
}

// child echoes rounds pings, each in a chunk of its own.
func child(name string, rounds uint64) error {
	reg, err := tachyon.OpenRegion(name, nil)
	if err != nil {
		return err
	}
	defer reg.Close()
	ping, err := reg.Topic("ping")
	if err != nil {
		return err
	}
	defer ping.Close()
	pong, err := reg.Topic("pong")
	if err != nil {
		return err
	}
	defer pong.Close()
	for seq := uint64(0); seq < rounds; seq++ {
		msg, err := ping.Receive(0, wait)
		if err != nil {
			return err
		}
		data := msg.Data()
		if got := binary.LittleEndian.Uint64(data); got != seq {
			return fmt.Errorf("expected ping %d, got %d", seq, got)
		}
		loan, err := pong.LoanTimeout(len(data), wait)
		if err != nil {
			return err
		}
		copy(loan.Bytes(), data)
		if err := loan.PublishTimeout(len(data), 0, wait); err != nil {
			return err
		}
		if err := msg.Release(); err != nil {
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
