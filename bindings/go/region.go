package tachyon

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Forever, as a timeout, waits without limit (any negative duration does).
const Forever time.Duration = -1

// Classes is the number of size classes of the payload pool (64 B, 256 B,
// 1 KiB, 4 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB).
const Classes = C.TY_CLASSES

// MaxMessage is the largest message of the bus: 1 MiB.
const MaxMessage = C.TY_MAX_MESSAGE

// Version returns the C library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.ty_version()) }

// Interrupt is the C library's ty_interrupt: from now until
// ClearInterrupt, every call of this process (in any language) that has to
// wait returns ErrInterrupted within about 10 ms. It is process-wide, meant
// for a shutdown; to stop one call, use its Context form.
func Interrupt() { C.ty_interrupt() }

// ClearInterrupt ends what Interrupt started.
func ClearInterrupt() { C.ty_interrupt_clear() }

// guard makes Close the last call on a C handle, as C requires: calls hold
// the read side for the duration of their C call, Close takes the write
// side, waiting for calls in flight.
type guard struct {
	mu     sync.RWMutex
	closed bool
}

// enter returns false (and holds nothing) if the handle is closed.
func (g *guard) enter() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *guard) leave() { g.mu.RUnlock() }

// shut marks the handle closed and runs free once, under the write side.
func (g *guard) shut(free func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	free()
	return true
}

// exclusive runs f under the write side, with no call in flight (it
// waits for them, as shut does); false, f not run, if the handle is
// closed.
func (g *guard) exclusive(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	f()
	return true
}

// cname converts a name for C; a name with a NUL byte cannot be one.
// The caller frees the result.
func cname(op, name string) (*C.char, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return nil, invalid(op, "the name contains a NUL byte")
	}
	return C.CString(name), nil
}

// nanos converts a timeout for C: negative is -1 (for ever).
func nanos(d time.Duration) C.int64_t {
	if d < 0 {
		return -1
	}
	return C.int64_t(d)
}

// RegionConfig is how a region is built. A zero field means the C
// library's default (ty_region_conf_default): 64 MiB, 64 topics, 4 MiB of
// descriptor rings, the pool split evenly across the size classes, a 10 s
// lease.
type RegionConfig struct {
	// Size is the bytes of the whole region (at least 4 MiB).
	Size uint64
	// MaxTopics is the number of topics the region can hold (1 to 1024).
	MaxTopics uint32
	// RingArena is the bytes reserved for the descriptor rings of all
	// topics: each partition takes 192 bytes plus 16 per slot.
	RingArena uint64
	// ClassWeights is the share of the pool's bytes each size class
	// gets; all zero means all 1. A weight of 0 (when another is not)
	// leaves that class empty: its loans take a chunk of the next class.
	ClassWeights [Classes]uint32
	// Lease is how long a process may go without a heartbeat before it
	// may be declared dead where the kernel cannot tell (10 ms to 1 day).
	Lease time.Duration
	// MaxGroups is the group slots of each topic (see
	// Topic.JoinGroup): the default group and MaxGroups-1 named consumer
	// groups, at most 63. 0 (the default): no named groups. It is part of
	// the configuration an existing region must match.
	MaxGroups uint32
}

func (c *RegionConfig) toC() C.ty_region_conf_t {
	rc := C.ty_region_conf_default
	if c.Size != 0 {
		rc.size = C.size_t(c.Size)
	}
	if c.MaxTopics != 0 {
		rc.max_topics = C.uint32_t(c.MaxTopics)
	}
	if c.RingArena != 0 {
		rc.ring_arena = C.size_t(c.RingArena)
	}
	if c.ClassWeights != [Classes]uint32{} {
		for i, w := range c.ClassWeights {
			rc.class_weights[i] = C.uint32_t(w)
		}
	}
	if c.Lease > 0 {
		rc.lease_ns = C.uint64_t(c.Lease)
	}
	return rc
}

// Region is an attached bus region: a payload pool and topics in one
// shared-memory segment (/dev/shm/tachyon.u<uid>.<name>). It persists
// until Remove; Close only detaches this process.
type Region struct {
	g    guard
	p    C.uintptr_t // the ty_region_t*, C memory
	name string
}

// OpenRegion attaches the region name. With a configuration it creates the
// region if needed, or opens an existing one, which must have that same
// configuration (ErrIncompatible otherwise; several processes may race).
// With conf nil it opens an existing region (ErrNotFound if there is none).
// Opening reclaims what processes that died had held.
func OpenRegion(name string, conf *RegionConfig) (*Region, error) {
	return openRegion("OpenRegion", name, conf, false)
}

// CreateRegion creates the region name (conf nil: the defaults);
// ErrExists if it exists.
func CreateRegion(name string, conf *RegionConfig) (*Region, error) {
	if conf == nil {
		conf = &RegionConfig{}
	}
	return openRegion("CreateRegion", name, conf, true)
}

func openRegion(op, name string, conf *RegionConfig, create bool) (*Region, error) {
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	var rc *C.ty_region_conf_t
	var groups C.uint32_t
	if conf != nil {
		v := conf.toC()
		rc = &v
		groups = C.uint32_t(conf.MaxGroups)
	}
	mode := C.int(0)
	if create {
		mode = 1
	}
	r := C.go_ty_region_open(cn, rc, mode, groups)
	if r.rc != C.TY_OK {
		return nil, fail(op, r)
	}
	reg := &Region{p: handle(r.ptr), name: name}
	runtime.SetFinalizer(reg, (*Region).Close)
	return reg, nil
}

// Remove deletes the region name. Processes attached keep their memory
// until they close; the name can be created again at once.
func Remove(name string) error {
	cn, err := cname("Remove", name)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cn))
	if r := C.go_ty_region_remove(cn); r.rc != C.TY_OK {
		return fail("Remove", r)
	}
	return nil
}

// Name returns the name the region was opened with.
func (r *Region) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// Close detaches the region from this process; topics opened through it
// stay usable until they are closed. The region persists (see Remove).
// A second Close returns ErrClosed.
func (r *Region) Close() error {
	if r == nil {
		return closed("Region.Close", true)
	}
	if !r.g.shut(func() { C.go_ty_region_close(r.p); r.p = 0 }) {
		return closed("Region.Close", false)
	}
	runtime.SetFinalizer(r, nil)
	return nil
}

func (r *Region) enter(op string) error {
	if r == nil {
		return closed(op, true)
	}
	if !r.g.enter() {
		return closed(op, false)
	}
	return nil
}

// TopicConfig is how a topic is built. A zero field means the default:
// 1 partition of 1024 slots, hybrid waiting, at-most-once delivery.
type TopicConfig struct {
	// Partitions is a power of two, 1 to 256. A key always maps to the
	// same partition, so messages of one key stay in order.
	Partitions uint32
	// Capacity is the message slots per partition: a power of two, 2 to
	// 2^20.
	Capacity uint32
	// Notify is how producers and consumers wait.
	Notify Notify
	// Delivery says what happens to a message whose consumer dies
	// holding it.
	Delivery Delivery
	// NoDefaultGroup makes a topic without its default group (see
	// Topic.JoinGroup): its messages go to the named groups joined
	// only, and Topic.Receive and Topic.Subscribe are ErrInvalid. It
	// needs a region of MaxGroups at least 1.
	NoDefaultGroup bool
	// Overrun makes a publisher that finds a group's ring of its
	// partition full drop that group's oldest message there (received
	// and released on the group's behalf) and publish, instead of
	// waiting: a slow group no longer holds producers back, it misses
	// messages instead, counted per group (Group.Missed, Topic.Missed for
	// the default group, GroupInfo.Missed). The other groups, and the
	// order of what is delivered, are unaffected. For data where the
	// latest matters more than every message (market data, sensor
	// readings). Not with AtLeastOnce (ErrInvalid).
	Overrun bool
	// InlinePayload gives every ring cell a slot of that many bytes
	// (rounded up to 64, at most 65536; 0, the default: none). A message
	// of up to that size sent with Send travels in its cell's slot: no
	// chunk is taken from the pool, the copy path two to three times
	// faster on a stream. Loans and larger messages still use chunks.
	// Costs Capacity * InlinePayload bytes per partition of the region's
	// ring arena, and 64 more per cell when InlinePayload is a multiple of
	// 256 above 256. Not with AtLeastOnce (ErrInvalid).
	InlinePayload uint32
	// LightHandovers makes the topic's ring cells handed over by a look
	// and a plain store, the wake-up check's fence moved to sleepers: a
	// waiter that goes to sleep runs membarrier(2) first, which
	// interrupts the CPUs running processes that have a light ring or
	// topic open. With InlinePayload, a stream of 64-byte messages about
	// half again as fast. The topic's own setting (ErrIncompatible for an
	// open asking the other); what it gives up is in docs/bus.md, "Light
	// hand-overs".
	LightHandovers bool
}

// Notify is how a topic's producers and consumers wait.
type Notify int

const (
	// NotifyHybrid spins for a few microseconds, then sleeps in the
	// kernel (the default).
	NotifyHybrid Notify = C.TY_NOTIFY_HYBRID
	// NotifySpin busy-waits: lowest latency, a CPU per waiter.
	NotifySpin Notify = C.TY_NOTIFY_SPIN
	// NotifyFutex sleeps in the kernel at once.
	NotifyFutex Notify = C.TY_NOTIFY_FUTEX
)

// Delivery is what happens to a message whose consumer dies holding it.
type Delivery int

const (
	// AtMostOnce: the message is lost and counted in TopicStats.Lost
	// (the default).
	AtMostOnce Delivery = C.TY_DELIVERY_AT_MOST_ONCE
	// AtLeastOnce: the message is delivered again to another consumer of
	// its partition; consumers must tolerate duplicates.
	AtLeastOnce Delivery = C.TY_DELIVERY_AT_LEAST_ONCE
)

// CreateTopic creates the topic name (1 to 63 bytes) with conf (nil: the
// defaults), or opens it if it exists with that same configuration
// (ErrIncompatible otherwise), so a producer can be restarted on a
// persistent region.
func (r *Region) CreateTopic(name string, conf *TopicConfig) (*Topic, error) {
	const op = "Region.CreateTopic"
	if conf == nil {
		conf = &TopicConfig{}
	}
	tc := C.ty_topic_conf_default
	if conf.Partitions != 0 {
		tc.partitions = C.uint32_t(conf.Partitions)
	}
	if conf.Capacity != 0 {
		tc.capacity = C.uint32_t(conf.Capacity)
	}
	tc.notify = C.int(conf.Notify)
	tc.delivery = C.int(conf.Delivery)
	var flags C.uint32_t
	if conf.NoDefaultGroup {
		flags |= C.TY_TOPIC_NO_DEFAULT_GROUP
	}
	if conf.Overrun {
		flags |= C.TY_TOPIC_OVERRUN
	}
	if conf.LightHandovers {
		flags |= C.TY_TOPIC_LIGHT_HANDOVERS
	}
	return r.topic(op, name, &tc, flags, C.uint32_t(conf.InlinePayload))
}

// Topic opens the existing topic name with the configuration it was
// created with (ErrNotFound if there is none).
func (r *Region) Topic(name string) (*Topic, error) {
	return r.topic("Region.Topic", name, nil, 0, 0)
}

func (r *Region) topic(op, name string, tc *C.ty_topic_conf_t, flags, inline C.uint32_t) (*Topic, error) {
	cn, err := cname(op, name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cn))
	if err := r.enter(op); err != nil {
		return nil, err
	}
	var res C.go_ty_res
	if tc != nil {
		res = C.go_ty_topic_create(r.p, cn, tc, flags, inline)
	} else {
		res = C.go_ty_topic_open(r.p, cn)
	}
	r.g.leave()
	if res.rc != C.TY_OK {
		return nil, fail(op, res)
	}
	p := handle(res.ptr)
	t := &Topic{p: p, name: name, parts: int(C.go_ty_topic_partitions(p)), light: C.go_ty_topic_light_handovers(p) != 0}
	runtime.SetFinalizer(t, (*Topic).Close)
	return t, nil
}

// Recovered is what a recovery reclaimed from processes that died.
type Recovered struct {
	// Loans is the chunks a dead producer had loaned and not published.
	Loans int
	// Cached is the free chunks a dead process kept for its next loans.
	Cached int
	// Held is the messages a dead consumer had received and not
	// released (lost, on an at-most-once topic).
	Held int
	// Unpublished is the chunks a dead producer was publishing (lost).
	Unpublished int
	// Redelivered is the messages of a dead consumer published again
	// (at-least-once topics).
	Redelivered int
	// Deferred is such messages whose partition was full: left for a
	// later recovery (not in Total).
	Deferred int
	// Slots is the attach slots of dead processes freed (not in Total).
	Slots int
	// Total is the chunks returned to the pool in all.
	Total int
}

func recoveredFromC(c *C.ty_recovered_t) Recovered {
	return Recovered{
		Loans: int(c.loans), Cached: int(c.cached), Held: int(c.held), Unpublished: int(c.unpublished),
		Redelivered: int(c.redelivered), Deferred: int(c.deferred), Slots: int(c.slots), Total: int(c.total),
	}
}

// Recover returns to the pool every chunk held by processes that died
// (their loans, the messages they had received and not released), and
// on at-least-once topics publishes those messages again. The library
// also runs it when a region is opened and while a loan or a receive
// waits; any number of processes may run it at once.
func (r *Region) Recover() (Recovered, error) {
	const op = "Region.Recover"
	if err := r.enter(op); err != nil {
		return Recovered{}, err
	}
	defer r.g.leave()
	var out C.ty_recovered_t
	if r := C.go_ty_region_recover(r.p, &out, 0); r.rc != C.TY_OK {
		return Recovered{}, fail(op, r)
	}
	return recoveredFromC(&out), nil
}

// RecoveredOnOpen is what recovery reclaimed when this handle opened the
// region.
func (r *Region) RecoveredOnOpen() (Recovered, error) {
	const op = "Region.RecoveredOnOpen"
	if err := r.enter(op); err != nil {
		return Recovered{}, err
	}
	defer r.g.leave()
	var out C.ty_recovered_t
	if r := C.go_ty_region_recover(r.p, &out, 1); r.rc != C.TY_OK {
		return Recovered{}, fail(op, r)
	}
	return recoveredFromC(&out), nil
}

// ClassStats is one size class of the payload pool.
type ClassStats struct {
	// ChunkSize is the bytes per chunk.
	ChunkSize int
	// Chunks is the chunks in the class.
	Chunks int
	// Free is the chunks free now.
	Free int
}

// PoolStats returns the pool's size classes, 64 B to 1 MiB.
func (r *Region) PoolStats() ([Classes]ClassStats, error) {
	const op = "Region.PoolStats"
	var s [Classes]ClassStats
	if err := r.enter(op); err != nil {
		return s, err
	}
	defer r.g.leave()
	var out C.ty_pool_stats_t
	if r := C.go_ty_region_pool_stats(r.p, &out); r.rc != C.TY_OK {
		return s, fail(op, r)
	}
	for i := range s {
		c := out.classes[i]
		s[i] = ClassStats{ChunkSize: int(c.chunk_size), Chunks: int(c.chunks), Free: int(c.free)}
	}
	return s, nil
}

// Heartbeat tells other processes this one is alive. The library beats by
// itself while it is used; a process that holds chunks and stays away from
// the region for longer than the lease should call it.
func (r *Region) Heartbeat() error {
	const op = "Region.Heartbeat"
	if err := r.enter(op); err != nil {
		return err
	}
	defer r.g.leave()
	if r := C.go_ty_region_heartbeat(r.p); r.rc != C.TY_OK {
		return fail(op, r)
	}
	return nil
}

// TopicInfo is one topic of a region, as Topics lists it.
type TopicInfo struct {
	// Name is the topic's name.
	Name string
	// Stats is its configuration and counters.
	Stats TopicStats
}

// Topics lists the region's topics (a snapshot), in the region's
// directory order.
func (r *Region) Topics() ([]TopicInfo, error) {
	const op = "Region.Topics"
	if err := r.enter(op); err != nil {
		return nil, err
	}
	defer r.g.leave()
	for {
		res := C.go_ty_region_topics(r.p, nil, 0)
		if res.rc < 0 {
			return nil, fail(op, res)
		}
		n := res.rc
		if n == 0 {
			return []TopicInfo{}, nil
		}
		if n > math.MaxInt32 {
			return nil, invalid(op, "too many topics")
		}
		size := C.size_t(n) * C.size_t(unsafe.Sizeof(C.ty_topic_info_t{}))
		buf := (*C.ty_topic_info_t)(C.malloc(size))
		res = C.go_ty_region_topics(r.p, buf, C.size_t(n))
		if res.rc < 0 {
			C.free(unsafe.Pointer(buf))
			return nil, fail(op, res)
		}
		got := res.rc
		if got > n { // a topic was created in between: ask again
			C.free(unsafe.Pointer(buf))
			continue
		}
		infos := unsafe.Slice(buf, int(got))
		out := make([]TopicInfo, len(infos))
		for i := range infos {
			out[i] = TopicInfo{Name: C.GoString(&infos[i].name[0]), Stats: statsFromC(&infos[i].stats)}
		}
		C.free(unsafe.Pointer(buf))
		return out, nil
	}
}

// String returns "hybrid", "spin" or "futex".
func (n Notify) String() string {
	switch n {
	case NotifyHybrid:
		return "hybrid"
	case NotifySpin:
		return "spin"
	case NotifyFutex:
		return "futex"
	}
	return "Notify(" + itoa(int(n)) + ")"
}

// String returns "at-most-once" or "at-least-once".
func (d Delivery) String() string {
	switch d {
	case AtMostOnce:
		return "at-most-once"
	case AtLeastOnce:
		return "at-least-once"
	}
	return "Delivery(" + itoa(int(d)) + ")"
}

func itoa(i int) string { return strconv.Itoa(i) }

// handle converts a C handle (C memory) for the shim, which takes
// handles as uintptr_t: cgo has nothing to check in them.
func handle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// cgoNop calls a C function that does nothing: the benchmarks' measure of
// a bare cgo call.
func cgoNop() int { return int(C.go_ty_nop()) }
