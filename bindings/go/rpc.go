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
	"syscall"
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

// RPCConfig is how an RPC end is built. A zero field means the default
// (ty_rpc_conf_default): the owner's geometry (64 nodes of 4096 bytes when
// creating), hybrid waits, 2 handler threads, a 30 s timeout, 64 MiB
// messages.
type RPCConfig struct {
	// NodeCount is the nodes per direction, 2 or more. The owner chooses;
	// an opener leaves it 0 (the owner's), or gives the owner's value
	// (ErrIncompatible otherwise).
	NodeCount uint32
	// NodeSize is the bytes per node, the packet's 32-byte header
	// included: a message longer than NodeSize-32 goes in several packets,
	// one that fits in one is written and read in place. Chosen as
	// NodeCount is.
	NodeSize uint64
	// Notify is how this end's callers and reader thread wait; each end
	// chooses its own.
	Notify Notify
	// HandlerThreads is the handler threads kept ready.
	HandlerThreads uint32
	// InlineHandlers runs every handler of this end on its reader thread,
	// one at a time; a handler must not call through this channel (such a
	// call fails with ErrInvalid).
	InlineHandlers bool
	// Timeout is the deadline of this end's responses: one that cannot be
	// sent by then (the ring stays full) is dropped.
	Timeout time.Duration
	// MaxMessage is the largest message this end sends or accepts, in
	// bytes (at most 2^32-1).
	MaxMessage uint64
}

func (c *RPCConfig) toC() C.ty_rpc_conf_t {
	rc := C.ty_rpc_conf_default
	rc.node_count = C.uint32_t(c.NodeCount)
	rc.node_size = C.size_t(c.NodeSize)
	rc.notify = C.int(c.Notify)
	if c.HandlerThreads != 0 {
		rc.handler_threads = C.uint32_t(c.HandlerThreads)
	}
	if c.InlineHandlers {
		rc.inline_handlers = 1
	}
	if c.Timeout != 0 {
		rc.timeout_ns = C.int64_t(c.Timeout)
	}
	if c.MaxMessage != 0 {
		rc.max_message = C.size_t(c.MaxMessage)
	}
	return rc
}

// CreateRPC creates the RPC channel name; this end is its owner, and h
// (may be nil: requests to this end then fail with ErrRemote) answers the
// other end's requests. ErrExists if it exists.
func CreateRPC(name string, h Handler) (*RPC, error) {
	return openRPC("CreateRPC", name, nil, h, true)
}

// CreateRPCWith is CreateRPC with the options in conf (nil: the
// defaults). ErrInvalid for a field out of range.
func CreateRPCWith(name string, conf *RPCConfig, h Handler) (*RPC, error) {
	return openRPC("CreateRPCWith", name, conf, h, true)
}

// OpenRPC joins the RPC channel name as its client (one at a time:
// ErrBusy if another is connected); h answers the owner's requests.
// ErrNotFound if there is no such channel.
func OpenRPC(name string, h Handler) (*RPC, error) {
	return openRPC("OpenRPC", name, nil, h, false)
}

// OpenRPCWith is OpenRPC with the options in conf (nil: the defaults).
// ErrInvalid for a field out of range, ErrIncompatible for a geometry
// that is not the owner's.
func OpenRPCWith(name string, conf *RPCConfig, h Handler) (*RPC, error) {
	return openRPC("OpenRPCWith", name, conf, h, false)
}

func openRPC(op, name string, conf *RPCConfig, h Handler, create bool) (*RPC, error) {
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	var rc *C.ty_rpc_conf_t
	if conf != nil {
		v := conf.toC()
		rc = &v
	}
	var id uintptr
	if h != nil {
		id = handlerIDs.Add(1)
		handlers.Store(id, h)
	}
	r := C.go_ty_rpc_open(cn, rc, C.uintptr_t(id), cbool(create))
	if r.rc != C.TY_OK {
		handlers.Delete(id)
		return nil, fail(op, r)
	}
	rpc := &RPC{p: handle(r.ptr), id: id}
	runtime.SetFinalizer(rpc, (*RPC).Close)
	return rpc, nil
}

// Call sends request to the other end and waits at most timeout (Forever:
// for ever) for its handler's response, which comes in a new slice,
// copied once from where the library holds it (the ring node it came in,
// when it fits one packet). Errors: ErrTimeout, ErrRemote (the handler
// failed, or there is none), ErrClosed (the other end closed),
// ErrPeerDied, ErrMessageSize. A call cannot be cancelled half-way (the
// request is on its way): give it a timeout.
func (r *RPC) Call(request []byte, timeout time.Duration) ([]byte, error) {
	out, err := r.call("RPC.Call", request, nil, timeout)
	if err == nil && out == nil {
		out = []byte{}
	}
	return out, err
}

// CallInto is Call that leaves the response in buf's memory when it fits
// buf's capacity, and returns buf[:len]; a longer response comes in a new
// slice, as append would make. A caller that calls again and again with
// the same buffer (buf = resp[:0]) allocates nothing per call. Either way
// the response is copied once, from where the library holds it: the ring
// node it came in when it fits one packet (RPCConfig.NodeSize less 32
// bytes) and this goroutine's thread reads it itself, the usual case. On
// an error it returns buf[:0]. Errors as Call.
func (r *RPC) CallInto(request, buf []byte, timeout time.Duration) ([]byte, error) {
	out, err := r.call("RPC.CallInto", request, buf, timeout)
	if err != nil {
		return buf[:0], err
	}
	return out, nil
}

// call is Call and CallInto: the response into buf when it fits its
// capacity, else into a new slice that goTachyonRPCResponse makes (nil
// for an empty response when buf is nil).
func (r *RPC) call(op string, request, buf []byte, timeout time.Duration) ([]byte, error) {
	if r == nil {
		return nil, closed(op, true)
	}
	if !r.g.enter() {
		return nil, closed(op, false)
	}
	var p, b unsafe.Pointer
	if len(request) > 0 {
		p = unsafe.Pointer(&request[0])
	}
	if cap(buf) > 0 {
		b = unsafe.Pointer(&buf[:cap(buf)][0])
	}
	// The call's id names the slice of a response longer than buf, which
	// goTachyonRPCResponse makes; a response that fits costs no more
	// than the id.
	id := callIDs.Add(1)
	res := C.go_ty_rpc_request_into(r.p, p, C.size_t(len(request)), b, C.size_t(cap(buf)), C.uintptr_t(id), nanos(timeout))
	r.g.leave()
	if res.rc != C.TY_OK {
		return nil, fail(op, C.go_ty_res{rc: res.rc, err: res.err})
	}
	if int(res.len) > cap(buf) {
		long, _ := longResponses.LoadAndDelete(id)
		return long.([]byte), nil
	}
	return buf[:res.len], nil
}

// longResponses holds, for the duration of a call, the slice that
// goTachyonRPCResponse made for its response, by the call's id (callIDs).
var (
	longResponses sync.Map // uintptr -> []byte
	callIDs       atomic.Uintptr
)

// goTachyonRPCResponse is how a response longer than the caller's buffer
// reaches Go: copied once, from where the library holds it during the
// call, into a new slice kept in longResponses under the call's id. The
// library runs it only for a call that then succeeds.
//
//export goTachyonRPCResponse
func goTachyonRPCResponse(id C.uintptr_t, resp unsafe.Pointer, n C.size_t) {
	longResponses.Store(uintptr(id), goBytes(resp, n))
}

// goBytes copies n bytes of C memory at p into a new Go slice (C.GoBytes
// takes a C int: a response may be up to 2^32-1 bytes).
func goBytes(p unsafe.Pointer, n C.size_t) []byte {
	out := make([]byte, int(n))
	copy(out, unsafe.Slice((*byte)(p), int(n)))
	return out
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

// goTachyonSpawn starts one of an RPC end's threads (its reader, its
// handler threads; ty_rpc_conf_t.spawn) as a goroutine locked to its
// thread, so that the handlers run on Go's own threads: Go 1.19 enters Go
// from a thread it did not start in about 7 µs, from one of its own in
// about 0.13 µs. The thread ends with its work (when the end closes).
//
//export goTachyonSpawn
func goTachyonSpawn(run, task C.uintptr_t) {
	go func() {
		runtime.LockOSThread()
		tid := syscall.Gettid()
		rpcThreads.Store(tid, struct{}{})
		defer rpcThreads.Delete(tid)
		C.go_ty_run(run, task)
	}()
}

// rpcThreads holds the OS thread ids running an RPC end's work now (the
// tests look here).
var rpcThreads sync.Map // int -> struct{}

// stderr is where a panicking handler is reported.
var stderr = os.Stderr
