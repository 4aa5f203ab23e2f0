package tachyon

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Handler answers the other end's requests. request is valid during the
// call only (copy what must outlive it); the returned bytes are copied.
// A non-nil error fails the request: the caller gets ErrRemote. It runs on
// the library's threads (the channel's reader thread, or a handler thread
// while that one is busy), possibly on several at once, so it must be safe
// for concurrent use. A panic in it is recovered and fails the
// request.
type Handler func(request []byte) (response []byte, err error)

// RPC is one end of a request/response channel between two processes
// (the RpcBuffer): either end may call the other, whose Handler answers.
// The channel is removed when both ends have closed. Safe for concurrent
// use: several goroutines may have calls in flight.
type RPC struct {
	g  guard
	p  C.uintptr_t // the ty_rpc_t*, C memory
	id uintptr     // this end's handler in handlers, 0 for none
}

// handlers maps the ids C holds (the user pointer of the C handler is an
// integer, never a Go pointer) to the Go handlers.
var (
	handlers   sync.Map // uintptr -> Handler
	handlerIDs atomic.Uintptr
)

// CreateRPC creates the RPC channel name; this end is its owner, and h
// (may be nil: requests to this end then fail with ErrRemote) answers the
// other end's requests. ErrExists if it exists.
func CreateRPC(name string, h Handler) (*RPC, error) {
	return openRPC("CreateRPC", name, h, true)
}

// OpenRPC joins the RPC channel name as its client (one at a time:
// ErrBusy if another is connected); h answers the owner's requests.
// ErrNotFound if there is no such channel.
func OpenRPC(name string, h Handler) (*RPC, error) {
	return openRPC("OpenRPC", name, h, false)
}

func openRPC(op, name string, h Handler, create bool) (*RPC, error) {
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	var id uintptr
	if h != nil {
		id = handlerIDs.Add(1)
		handlers.Store(id, h)
	}
	r := C.go_ty_rpc_open(cn, C.uintptr_t(id), cbool(create))
	if r.rc != C.TY_OK {
		handlers.Delete(id)
		return nil, fail(op, r)
	}
	rpc := &RPC{p: handle(r.ptr), id: id}
	runtime.SetFinalizer(rpc, (*RPC).Close)
	return rpc, nil
}

// Call sends request to the other end and waits at most timeout (Forever:
// for ever) for its handler's response. Errors: ErrTimeout, ErrRemote (the
// handler failed, or there is none), ErrClosed (the other end closed),
// ErrPeerDied, ErrMessageSize. A call cannot be cancelled half-way (the
// request is on its way): give it a timeout.
func (r *RPC) Call(request []byte, timeout time.Duration) ([]byte, error) {
	const op = "RPC.Call"
	if r == nil {
		return nil, closed(op, true)
	}
	if !r.g.enter() {
		return nil, closed(op, false)
	}
	var p unsafe.Pointer
	if len(request) > 0 {
		p = unsafe.Pointer(&request[0])
	}
	res := C.go_ty_rpc_request(r.p, p, C.size_t(len(request)), nanos(timeout))
	r.g.leave()
	if res.rc != C.TY_OK {
		return nil, fail(op, C.go_ty_res{rc: res.rc, err: res.err})
	}
	out := []byte{}
	if res.len > 0 {
		out = C.GoBytes(res.data, C.int(res.len))
		C.go_ty_rpc_free(handle(res.data), res.len)
	}
	return out, nil
}

// Close closes this end: it waits for its handler calls and for Calls in
// flight on it to finish; the other end's calls then fail with ErrClosed.
// It must not be called from a Handler. A second Close returns ErrClosed.
func (r *RPC) Close() error {
	if r == nil {
		return closed("RPC.Close", true)
	}
	if !r.g.shut(func() { C.go_ty_rpc_close(r.p); r.p = 0 }) {
		return closed("RPC.Close", false)
	}
	if r.id != 0 {
		handlers.Delete(r.id)
	}
	runtime.SetFinalizer(r, nil)
	return nil
}

// goTachyonRPCHandle is the C handler's way into Go: it finds the Handler
// by id, gives it the request and copies its response into the reply.
//
//export goTachyonRPCHandle
func goTachyonRPCHandle(id C.uintptr_t, req unsafe.Pointer, n C.size_t, reply C.uintptr_t) (status C.int) {
	v, ok := handlers.Load(uintptr(id))
	if !ok {
		return 1
	}
	defer func() {
		if p := recover(); p != nil {
			status = 1
			fmt.Fprintf(stderr, "tachyon: RPC handler panicked: %v\n", p)
		}
	}()
	var request []byte
	if n > 0 {
		request = unsafe.Slice((*byte)(req), int(n))
	}
	resp, err := v.(Handler)(request)
	if err != nil {
		return 1
	}
	if len(resp) > 0 {
		if C.go_ty_rpc_reply(reply, unsafe.Pointer(&resp[0]), C.size_t(len(resp))) != C.TY_OK {
			return 1
		}
	}
	return 0
}

// stderr is where a panicking handler is reported.
var stderr = os.Stderr
