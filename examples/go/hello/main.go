// Command hello is the smallest round of the bus across two processes,
// the Go twin of examples/c/hello_ipc.c.
//
// The parent creates a region and a topic and starts itself again as a
// child; the child attaches to the region by name (a nil configuration),
// receives and prints what it gets; the parent loans a chunk, writes a
// greeting in place and publishes it. The region persists until Remove.
//
//	go run ./hello
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"time"

	tachyon "tachyon/bindings/go"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) == 3 && os.Args[1] == "child" {
		child(os.Args[2])
		return
	}
	name := fmt.Sprintf("go-hello-%d", os.Getpid())
	reg, err := tachyon.OpenRegion(name, &tachyon.RegionConfig{Size: 16 << 20, RingArena: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer tachyon.Remove(name)
	defer reg.Close()
	topic, err := reg.CreateTopic("greetings", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()

	cmd := exec.Command(os.Args[0], "child", name)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}

	loan, err := topic.LoanTimeout(64, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	n := copy(loan.Bytes(), fmt.Sprintf("hello from process %d", os.Getpid()))
	if err := loan.Publish(n, 0); err != nil {
		log.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		log.Fatal("child: ", err)
	}
}

func child(name string) {
	reg, err := tachyon.OpenRegion(name, nil) // nil: attach to what exists
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	topic, err := reg.Topic("greetings")
	if err != nil {
		log.Fatal(err)
	}
	defer topic.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := topic.ReceiveContext(ctx, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("child %d got %d bytes: %s\n", os.Getpid(), len(msg.Data()), msg.Data())
	msg.Release()
}
