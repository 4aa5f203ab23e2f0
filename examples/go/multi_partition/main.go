// Command multi_partition runs one consumer process per partition, the Go
// twin of examples/c/multi_partition.c.
//
// The parent creates a topic of 4 partitions and starts one consumer per
// partition (itself again); each attaches by name and reads only its
// partition. The parent publishes N messages with keys 0..N-1: a key
// always lands in the same partition (PartitionOf). Each consumer checks
// that it got exactly the keys that map to its partition, in order.
//
//	go run ./multi_partition [N]     (default 20000)
package main

import (
	"encoding/binary"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"time"

	tachyon "tachyon/bindings/go"
)

const partitions = 4

// wait bounds every wait: a peer silent for 10 s ends the run.
const wait = 10 * time.Second

func main() {
	log.SetFlags(0)
	if len(os.Args) == 5 && os.Args[1] == "consumer" {
		p, _ := strconv.Atoi(os.Args[3])
		n, _ := strconv.ParseUint(os.Args[4], 10, 64)
		if err := consumer(os.Args[2], p, n); err != nil {
			log.Fatalf("consumer of partition %d: %v", p, err)
		}
		return
	}
	n := uint64(20000)
	if len(os.Args) > 1 {
		v, err := strconv.ParseUint(os.Args[1], 10, 64)
		if err != nil || v == 0 {
			log.Fatal("usage: multi_partition [N]")
		}
		n = v
	}
	name := fmt.Sprintf("go-multi-partition-%d", os.Getpid())
	reg, err := tachyon.CreateRegion(name, &tachyon.RegionConfig{Size: 16 << 20, RingArena: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("events", &tachyon.TopicConfig{Partitions: partitions, Capacity: 256})
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()

	var consumers []*exec.Cmd
	for p := 0; p < partitions; p++ {
		cmd := exec.Command(os.Args[0], "consumer", name, strconv.Itoa(p), strconv.FormatUint(n, 10))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		consumers = append(consumers, cmd)
	}
	for key := uint64(0); key < n; key++ {
		loan, err := topic.LoanTimeout(8, wait)
		if err != nil {
			log.Fatal(err)
		}
		binary.LittleEndian.PutUint64(loan.Bytes(), key)
		if err := loan.PublishTimeout(8, key, wait); err != nil {
			log.Fatal(err)
		}
	}
	failed := 0
	for _, cmd := range consumers {
		if err := cmd.Wait(); err != nil {
			failed++
		}
	}
	if failed > 0 {
		log.Fatalf("%d consumers failed", failed)
	}
	fmt.Printf("published %d messages over %d partitions; every consumer got exactly its keys\n", n, partitions)
}

// consumer reads partition p until it has every key of 0..n-1 that maps to
// it, checking each key's partition and their order.
func consumer(name string, p int, n uint64) error {
	reg, err := tachyon.OpenRegion(name, nil)
	if err != nil {
		return err
	}
	defer reg.Close()
	topic, err := reg.Topic("events")
	if err != nil {
		return err
	}
	defer topic.Close()
	var mine []uint64
	for key := uint64(0); key < n; key++ {
		if topic.PartitionOf(key) == p {
			mine = append(mine, key)
		}
	}
	for _, want := range mine {
		msg, err := topic.Receive(p, wait)
		if err != nil {
			return err
		}
		got := binary.LittleEndian.Uint64(msg.Data())
		msg.Release()
		if got != want {
			return fmt.Errorf("got key %d, want %d", got, want)
		}
	}
	fmt.Printf("consumer of partition %d (pid %d): %d messages, all of its keys\n", p, os.Getpid(), len(mine))
	return nil
}
