package tachyon

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"io/fs"
	"unsafe"
)

// Error is the error of every failed call: the operation, the C library's
// status code and the library's full message.
type Error struct {
	// Op is the Go method or function that failed, e.g. "Topic.Receive".
	Op string
	// Code is the C library's status (a negative TY_E* value).
	Code int
	// Detail is the library's text for this failure (ty_last_error):
	// what happened and what to do. It may be empty.
	Detail string
}

// Error returns "tachyon: OP: KIND: DETAIL".
func (e *Error) Error() string {
	s := "tachyon: " + e.Op + ": " + C.GoString(C.ty_strerror(C.int(e.Code)))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel of e's code (ErrTimeout, ErrNotFound, ...),
// so that errors.Is(err, tachyon.ErrTimeout) works.
func (e *Error) Unwrap() error {
	if s, ok := byCode[e.Code]; ok {
		return s
	}
	return ErrInternal
}

// Timeout reports whether the call gave up because its timeout passed,
// as net.Error's Timeout does.
func (e *Error) Timeout() bool { return e.Code == C.TY_ETIMEDOUT }

// sentinel is the type of the Err* values.
type sentinel struct {
	code int
	text string
	// also is an error of the standard library this one matches too.
	also error
}

func (s *sentinel) Error() string { return "tachyon: " + s.text }

func (s *sentinel) Is(target error) bool { return s.also != nil && target == s.also }

func newSentinel(code C.int, text string, also error) *sentinel {
	s := &sentinel{code: int(code), text: text, also: also}
	byCode[int(code)] = s
	return s
}

var byCode = map[int]*sentinel{}

// The kinds of failure, one per C status code. Test with errors.Is.
var (
	// ErrInvalid: an argument is invalid (a nil handle, a bad name, a
	// value out of range, a loan or message of another handle); nothing
	// was done.
	ErrInvalid error = newSentinel(C.TY_EINVAL, "invalid argument", nil)
	// ErrNotFound: no region, topic or object of that name. Also matches
	// fs.ErrNotExist.
	ErrNotFound error = newSentinel(C.TY_ENOENT, "not found", fs.ErrNotExist)
	// ErrExists: a region, topic or object of that name exists. Also
	// matches fs.ErrExist.
	ErrExists error = newSentinel(C.TY_EEXIST, "already exists", fs.ErrExist)
	// ErrTimeout: the timeout passed before the call could complete.
	ErrTimeout error = newSentinel(C.TY_ETIMEDOUT, "timed out", nil)
	// ErrWouldBlock: a Try form would have had to wait (the partition is
	// empty, or full).
	ErrWouldBlock error = newSentinel(C.TY_EAGAIN, "would block", nil)
	// ErrNoSpace: /dev/shm is full, or a table of the region is.
	ErrNoSpace error = newSentinel(C.TY_ENOSPC, "no space", nil)
	// ErrPermission: the object belongs to another user. Also matches
	// fs.ErrPermission.
	ErrPermission error = newSentinel(C.TY_EPERM, "permission denied", fs.ErrPermission)
	// ErrCorrupt: shared memory holds something that cannot be right.
	ErrCorrupt error = newSentinel(C.TY_ECORRUPT, "corrupt shared memory", nil)
	// ErrVersion: the segment was written by another layout version.
	ErrVersion error = newSentinel(C.TY_EVERSION, "incompatible layout version", nil)
	// ErrKind: the name holds another kind of object.
	ErrKind error = newSentinel(C.TY_EKIND, "object of another kind", nil)
	// ErrMessageSize: the message is larger than what can hold it (1 MiB
	// on the bus, the node size of a ring).
	ErrMessageSize error = newSentinel(C.TY_EMSGSIZE, "message too large", nil)
	// ErrBufferTooSmall: the caller's buffer is too small for the item;
	// nothing was consumed.
	ErrBufferTooSmall error = newSentinel(C.TY_ENOBUFS, "buffer too small", nil)
	// ErrPoolExhausted: no free chunk of the size needed came free in time.
	ErrPoolExhausted error = newSentinel(C.TY_EPOOL, "payload pool exhausted", nil)
	// ErrClosed: the handle was closed (by Close, in this process), or the
	// other end closed the channel.
	ErrClosed error = newSentinel(C.TY_ECLOSED, "closed", nil)
	// ErrPeerDied: the peer process died.
	ErrPeerDied error = newSentinel(C.TY_EPEERDIED, "peer died", nil)
	// ErrRemote: the RPC peer's handler failed.
	ErrRemote error = newSentinel(C.TY_EREMOTE, "remote handler failed", nil)
	// ErrIO: an operating-system call failed.
	ErrIO error = newSentinel(C.TY_EIO, "I/O error", nil)
	// ErrIncompatible: an object of that name exists with another
	// configuration; the Detail names the field.
	ErrIncompatible error = newSentinel(C.TY_EINCOMPAT, "incompatible configuration", nil)
	// ErrBusy: the channel already has a client.
	ErrBusy error = newSentinel(C.TY_EBUSY, "busy", nil)
	// ErrInternal: a bug in tachyon (caught at the C boundary), or a code
	// this binding does not know.
	ErrInternal error = newSentinel(C.TY_EINTERNAL, "internal error", nil)
	// ErrInterrupted: Interrupt was called while the call waited.
	ErrInterrupted error = newSentinel(C.TY_EINTR, "interrupted", nil)
)

// fail builds the *Error of a failed call of the shim; the library's
// message (may be NULL) is freed here.
func fail(op string, r C.go_ty_res) error {
	e := &Error{Op: op, Code: int(r.rc)}
	if r.err != nil {
		e.Detail = C.GoString(r.err)
		C.free(unsafe.Pointer(r.err))
	}
	return e
}

// invalid is a failure found on the Go side before calling C.
func invalid(op, why string) error {
	return &Error{Op: op, Code: int(C.TY_EINVAL), Detail: why}
}

// closed is a call on a handle that was closed or is nil.
func closed(op string, nilHandle bool) error {
	if nilHandle {
		return invalid(op, "nil handle")
	}
	return &Error{Op: op, Code: int(C.TY_ECLOSED), Detail: "the handle was closed"}
}
