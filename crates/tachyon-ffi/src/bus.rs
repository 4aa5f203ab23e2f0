//! The bus: regions, topics, loans, messages (`ty_region_*`, `ty_topic_*`,
//! `ty_loan`, `ty_publish`, `ty_subscribe`, `ty_release`, ...).
//!
//! Loans and messages go through the core's raw interface
//! (`Topic::loan_raw`, `publish_raw`, `receive_raw`, `release_raw`): C gets
//! the chunk's address (and for a message a `ty_msg_t.handle`), and the
//! topic handle's ledger (`ledger.rs`: a word per chunk of the region)
//! records what it handed out, so that a wrong, repeated or stale
//! `ty_publish` or `ty_release` is `TY_EINVAL`, not a double free. Giving a
//! loan or a message back costs one compare-and-swap on a word of this
//! process; taking one costs a plain store.

use crate::error::*;
use crate::ledger::{Ledger, Miss};
use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;
use tachyon_core::bus::{
    ClassStats, Delivery, Group, GroupReport, JoinFrom, Key, Partitions, RawChunk, ReceiveStop, Recovered,
    Region, RegionConfig, Subscription, Topic, TopicConfig, TopicInfo,
};
use tachyon_core::sync::WaitPolicy;

/// Size classes of the payload pool (64 B, 256 B, 1 KiB, 4 KiB, 16 KiB,
/// 64 KiB, 256 KiB, 1 MiB).
pub const TY_CLASSES: usize = 8;
/// The largest message: 1 MiB.
pub const TY_MAX_MESSAGE: usize = 1 << 20;

/// `ty_topic_conf_t.notify`: spin for a few microseconds, then sleep in the
/// kernel (the default).
pub const TY_NOTIFY_HYBRID: c_int = 0;
/// `ty_topic_conf_t.notify`: busy-wait; never enters the kernel, burns a
/// CPU per waiter, lowest latency.
pub const TY_NOTIFY_SPIN: c_int = 1;
/// `ty_topic_conf_t.notify`: sleep in the kernel (futex) at once.
pub const TY_NOTIFY_FUTEX: c_int = 2;

/// `ty_topic_conf_t.delivery`: a message whose consumer dies before
/// releasing it is lost (and counted in `ty_topic_stats_t.lost`): at most
/// once (the default).
pub const TY_DELIVERY_AT_MOST_ONCE: c_int = 0;
/// `ty_topic_conf_t.delivery`: a message whose consumer dies before
/// releasing it is delivered again to another consumer of its partition:
/// at least once (consumers must tolerate duplicates).
pub const TY_DELIVERY_AT_LEAST_ONCE: c_int = 1;

/// `ty_loan_opts_t.flags`: zero the loaned bytes.
pub const TY_LOAN_ZERO: u32 = 1;

/// `ty_topic_create_flags` flag: the topic has no default group (as
/// `ty_topic_create_groups` with `default_group` 0).
pub const TY_TOPIC_NO_DEFAULT_GROUP: u32 = 1;
/// `ty_topic_create_flags` flag: a publisher that finds a group's ring of
/// its partition full drops that group's oldest message there instead of
/// waiting (the group is told: `ty_group_missed`, `ty_topic_missed`).
pub const TY_TOPIC_OVERRUN: u32 = 2;
/// `ty_topic_create_flags` flag: the topic's ring cells are handed over
/// light (a look and a plain store, the wake-up check's fence moved to
/// sleepers; see `TopicConfig::light_handovers` and docs/bus.md, "Light
/// hand-overs"): a stream of small inline messages about half again as
/// fast, at the cost of an interrupt per sleep of a waiter.
pub const TY_TOPIC_LIGHT_HANDOVERS: u32 = 4;

/// How a region is built: a plain value. Start from a copy of
/// `ty_region_conf_default` and change fields:
///
/// ```c
/// ty_region_conf_t rc = ty_region_conf_default;
/// rc.size = 64 << 20;
/// ```
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_region_conf_t {
    /// Bytes of the whole region (at least 4 MiB). Default 64 MiB.
    pub size: usize,
    /// Topics the region can hold (1 to 1024). Default 64.
    pub max_topics: u32,
    /// Bytes reserved for the descriptor rings of all topics: each
    /// partition takes 192 bytes plus 16 per ring slot. Default 4 MiB.
    pub ring_arena: usize,
    /// The share of the pool's bytes each size class gets (64 B ... 1 MiB).
    /// A weight of 0 leaves that class empty: its loans take a chunk of the
    /// next larger class. Default all 1.
    pub class_weights: [u32; TY_CLASSES],
    /// How long a process may go without a heartbeat before it may be
    /// declared dead, where the kernel cannot tell (10 ms to 1 day).
    /// Default 10 s.
    pub lease_ns: u64,
}

/// How a topic is built: a plain value. Start from a copy of
/// `ty_topic_conf_default` and change fields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_topic_conf_t {
    /// Partitions: a power of two, 1 to 256. A key always maps to the same
    /// partition (`ty_partition_of`), so messages of one key stay in order.
    /// Default 1.
    pub partitions: u32,
    /// Message slots per partition: a power of two, 2 to 2^20. Default 1024.
    pub capacity: u32,
    /// How producers and consumers wait: `TY_NOTIFY_HYBRID` (default),
    /// `TY_NOTIFY_SPIN` or `TY_NOTIFY_FUTEX`.
    pub notify: c_int,
    /// `TY_DELIVERY_AT_MOST_ONCE` (default) or `TY_DELIVERY_AT_LEAST_ONCE`.
    pub delivery: c_int,
}

/// The defaults of a region: 64 MiB, 64 topics, 4 MiB of rings, the pool
/// split evenly across the size classes, a 10 s lease. Copy it (`rc =
/// ty_region_conf_default;`), never write it.
#[no_mangle]
pub static ty_region_conf_default: ty_region_conf_t = ty_region_conf_t {
    size: 64 << 20,
    max_topics: 64,
    ring_arena: 4 << 20,
    class_weights: [1; TY_CLASSES],
    lease_ns: 10_000_000_000,
};

/// The defaults of a topic: 1 partition of 1024 slots, hybrid waiting,
/// at-most-once delivery. Copy it, never write it.
#[no_mangle]
pub static ty_topic_conf_default: ty_topic_conf_t = ty_topic_conf_t {
    partitions: 1,
    capacity: 1024,
    notify: TY_NOTIFY_HYBRID,
    delivery: TY_DELIVERY_AT_MOST_ONCE,
};

/// Options of `ty_loan`; NULL means `ty_loan_opts_default`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_loan_opts_t {
    /// How long to wait for a free chunk: -1 for ever (the default; waiting
    /// as the topic's `notify` policy says), 0 not at all, else nanoseconds.
    pub timeout_ns: i64,
    /// `TY_LOAN_ZERO` or 0 (the default: the bytes are whatever the chunk
    /// held before).
    pub flags: u32,
}

/// The defaults of `ty_loan_opts_t`: wait for ever, no flags.
#[no_mangle]
pub static ty_loan_opts_default: ty_loan_opts_t = ty_loan_opts_t { timeout_ns: -1, flags: 0 };

/// A received message: a value filled by `ty_subscribe`, valid until
/// `ty_release` (which must be given the same topic handle).
///
/// The message's key is not part of it: tachyon's descriptors carry the
/// chunk and the length only. A consumer that needs the key puts it in the
/// payload.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_msg_t {
    /// The message's bytes, in shared memory (64-byte aligned). Read-only;
    /// valid until `ty_release` (or `ty_topic_close`).
    pub data: *const c_void,
    /// Its length in bytes.
    pub len: usize,
    /// The partition it was received from.
    pub partition: u32,
    /// Reserved (0).
    pub reserved: u32,
    /// Opaque: the library's reference to the message. 0 once released.
    pub handle: u64,
}

/// The free chunks of one size class of the pool.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_class_stats_t {
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Chunks in the class.
    pub chunks: usize,
    /// Chunks free now.
    pub free: usize,
}

/// The region's payload pool, per size class.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_pool_stats_t {
    /// Class 0 (64 B) to 7 (1 MiB).
    pub classes: [ty_class_stats_t; TY_CLASSES],
}

/// A topic's configuration and counters (since it was created, all
/// processes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_topic_stats_t {
    /// Partitions.
    pub partitions: u32,
    /// Slots per partition.
    pub capacity: u32,
    /// `TY_NOTIFY_*`.
    pub notify: c_int,
    /// `TY_DELIVERY_*`.
    pub delivery: c_int,
    /// Messages published.
    pub published: u64,
    /// Messages received.
    pub received: u64,
    /// Corrupt descriptors dropped.
    pub corrupt: u64,
    /// Messages lost with a consumer that died holding them (at most once).
    pub lost: u64,
}

/// Bytes of `ty_topic_info_t.name`: a topic name (1 to 64 bytes) and its
/// NUL.
pub const TY_TOPIC_NAME_LEN: usize = 65;

/// One topic of a region, as `ty_region_topics` lists it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_topic_info_t {
    /// Its name, NUL-terminated.
    pub name: [c_char; TY_TOPIC_NAME_LEN],
    /// Its configuration and counters.
    pub stats: ty_topic_stats_t,
}

/// What one `ty_region_recover` reclaimed from processes that died.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ty_recovered_t {
    /// Chunks a dead producer had loaned and not published.
    pub loans: usize,
    /// Free chunks a dead process kept for its next loans.
    pub cached: usize,
    /// Messages a dead consumer had received and not released (lost).
    pub held: usize,
    /// Chunks a dead producer was publishing when it died (lost).
    pub unpublished: usize,
    /// Messages a dead consumer had received on an at-least-once topic,
    /// published again.
    pub redelivered: usize,
    /// Such messages whose partition was full: left for a later recovery
    /// (not in `total`).
    pub deferred: usize,
    /// Attach slots of dead processes freed (not in `total`).
    pub slots: usize,
    /// Chunks returned to the pool in all.
    pub total: usize,
}

impl From<Recovered> for ty_recovered_t {
    fn from(r: Recovered) -> Self {
        ty_recovered_t {
            loans: r.loans,
            cached: r.cached,
            held: r.held,
            unpublished: r.unpublished,
            redelivered: r.redelivered,
            deferred: r.deferred,
            slots: r.slots,
            total: r.total(),
        }
    }
}

const REGION_MAGIC: u64 = 0x7479_5f72_6567_696f; // "ty_regio"
const TOPIC_MAGIC: u64 = 0x7479_5f74_6f70_6963; // "ty_topic"
const DEAD: u64 = 0xdead_dead_dead_dead;
const CANCEL_MAGIC: u64 = 0x7479_5f63_616e_6365; // "ty_cance"
const SUBSCRIPTION_MAGIC: u64 = 0x7479_5f73_7562_7363; // "ty_subsc"
const GROUP_MAGIC: u64 = 0x7479_5f67_726f_7570; // "ty_group"

/// An attached region (opaque). From `ty_region_open` / `ty_region_create`,
/// to `ty_region_close`. Its topics keep the region mapped: a topic stays
/// usable after its region handle is closed.
// `repr(C)` so that `magic` is the first word, which the C allocator
// overwrites when the handle is freed: a use after close is then caught
// (best effort, see the header's notes). The header declares the type
// opaque (cbindgen.toml).
#[repr(C)]
pub struct ty_region_t {
    magic: u64,
    region: Region,
}

/// An open topic (opaque). From `ty_topic_create` / `ty_topic_open`, to
/// `ty_topic_close`. It owns the loans taken and the messages received
/// through it.
#[repr(C)]
pub struct ty_topic_t {
    magic: u64,
    topic: Topic,
    /// The loans and messages handed to C through this handle.
    ledger: Ledger,
}

impl ty_topic_t {
    /// Gives back what C did not: loans unpublished, messages unreleased
    /// (the ledger is empty afterwards).
    fn give_back(&mut self) {
        let topic = self.topic.clone();
        for (index, is_loan) in self.ledger.drain() {
            // SAFETY: the ledger recorded `index` as a loan or a message of
            // this handle's topic (raw interface, this region handle) and
            // took it out just now, so it goes back once.
            let _ = unsafe {
                if is_loan {
                    topic.unloan_raw(index)
                } else {
                    topic.release_raw(index)
                }
            };
        }
    }
}

/// Gives back what C did not: loans unpublished, messages unreleased.
impl Drop for ty_topic_t {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// The region behind a C handle.
///
/// # Safety
/// `p` is NULL or a pointer `ty_region_open` returned (a closed handle is
/// caught only while its memory was not reused).
unsafe fn region<'a>(p: *const ty_region_t) -> Res<&'a ty_region_t> {
    if p.is_null() || !p.is_aligned() {
        return Err(invalid("region handle is NULL or misaligned"));
    }
    // SAFETY: the caller passes a live handle from `ty_region_open`, which
    // is a `Box<ty_region_t>` not yet freed.
    let r = unsafe { &*p };
    if r.magic != REGION_MAGIC {
        return Err(invalid("not a region handle (closed already?)"));
    }
    Ok(r)
}

/// The topic behind a C handle.
///
/// # Safety
/// `p` is NULL or a pointer `ty_topic_create` / `ty_topic_open` returned.
#[inline(always)]
unsafe fn topic<'a>(p: *const ty_topic_t) -> Res<&'a ty_topic_t> {
    if p.is_null() || !p.is_aligned() {
        return Err(invalid("topic handle is NULL or misaligned"));
    }
    // SAFETY: as in `region`: a live `Box<ty_topic_t>` by the contract.
    let t = unsafe { &*p };
    if t.magic != TOPIC_MAGIC {
        return Err(invalid("not a topic handle (closed already?)"));
    }
    Ok(t)
}

fn region_config(c: &ty_region_conf_t) -> RegionConfig {
    RegionConfig::default()
        .size(c.size)
        .max_topics(c.max_topics as usize)
        .ring_arena(c.ring_arena)
        .class_weights(c.class_weights)
        .lease(Duration::from_nanos(c.lease_ns))
}

pub(crate) fn notify_policy(n: c_int) -> Res<WaitPolicy> {
    match n {
        TY_NOTIFY_HYBRID => Ok(WaitPolicy::Hybrid),
        TY_NOTIFY_SPIN => Ok(WaitPolicy::Spin),
        TY_NOTIFY_FUTEX => Ok(WaitPolicy::Futex),
        _ => Err(invalid(format!("notify must be TY_NOTIFY_HYBRID, _SPIN or _FUTEX, not {n}"))),
    }
}

pub(crate) fn notify_code(p: WaitPolicy) -> c_int {
    match p {
        WaitPolicy::Spin => TY_NOTIFY_SPIN,
        WaitPolicy::Futex => TY_NOTIFY_FUTEX,
        _ => TY_NOTIFY_HYBRID,
    }
}

fn topic_config(c: &ty_topic_conf_t) -> Res<TopicConfig> {
    let delivery = match c.delivery {
        TY_DELIVERY_AT_MOST_ONCE => Delivery::AtMostOnce,
        TY_DELIVERY_AT_LEAST_ONCE => Delivery::AtLeastOnce,
        d => {
            return Err(invalid(format!(
                "delivery must be TY_DELIVERY_AT_MOST_ONCE or _AT_LEAST_ONCE, not {d}"
            )))
        }
    };
    Ok(TopicConfig::default()
        .partitions(c.partitions)
        .capacity(c.capacity)
        .wait(notify_policy(c.notify)?)
        .delivery(delivery))
}

fn new_region(region: Region) -> *mut ty_region_t {
    Box::into_raw(Box::new(ty_region_t { magic: REGION_MAGIC, region }))
}

fn new_topic(topic: Topic) -> *mut ty_topic_t {
    let ledger = Ledger::new(topic.chunk_count());
    Box::into_raw(Box::new(ty_topic_t { magic: TOPIC_MAGIC, topic, ledger }))
}

/// Runs `make` and writes the handle it returns to the out-pointer `out`
/// (NULL on failure).
///
/// # Safety
/// `out` is NULL or valid for a write of one `*mut T`.
unsafe fn put_handle<T>(out: *mut *mut T, what: &str, make: impl FnOnce() -> Res<*mut T>) -> c_int {
    guard(|| {
        let out = arg_out(out, what)?;
        // SAFETY: `out` is not NULL and, by the contract, writable.
        unsafe { out.write(std::ptr::null_mut()) };
        let handle = make()?;
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(TY_OK)
    })
}

/// Attaches the region `name`, creating it if needed.
///
/// * `conf` not NULL: opens the region if it exists, else creates it with
///   `*conf` (several processes may race; one creates, the others open).
///   An existing region must have that same configuration, else
///   `TY_EINCOMPAT` (`ty_last_error` names the field).
/// * `conf` NULL: opens an existing region with the configuration it was
///   created with; `TY_ENOENT` if there is none.
///
/// Opening reclaims what processes that died had held (see
/// `ty_region_recover`). Regions persist: closing does not delete one,
/// `ty_region_remove` does. Names: any non-empty UTF-8 string; one user's
/// (`"demo"`, `"Local\\demo"`) or machine-wide (`"Global\\demo"`). The file
/// is `/dev/shm/tachyon.u<uid>.<name>` (`/`, `%`, `\` escaped as `%XX`), or
/// under `$TACHYON_SHM_DIR`.
///
/// On success `*out` is a new handle, to be given to `ty_region_close`; on
/// failure it is NULL. Errors: `TY_EINVAL` (NULL `name` or `out`, bad name,
/// bad configuration), `TY_ENOENT`, `TY_EINCOMPAT`, `TY_EPERM`,
/// `TY_ENOSPC`, `TY_EKIND` (the name holds another kind of object),
/// `TY_EVERSION`, `TY_ECORRUPT`, `TY_EIO`. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `conf` is NULL or points to a
/// `ty_region_conf_t`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_region_open(
    name: *const c_char,
    conf: *const ty_region_conf_t,
    out: *mut *mut ty_region_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: `conf` is NULL or points to a conf, per the contract.
        let region = match unsafe { conf.as_ref() } {
            Some(c) => Region::create_or_open(name, region_config(c))?,
            None => Region::open(name)?,
        };
        Ok(new_region(region))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the region handle's address)", make) }
}

/// Creates the region `name` with `*conf` (NULL: `ty_region_conf_default`);
/// `TY_EEXIST` if it exists. Otherwise as `ty_region_open`.
///
/// # Safety
/// As `ty_region_open`.
#[no_mangle]
pub unsafe extern "C" fn ty_region_create(
    name: *const c_char,
    conf: *const ty_region_conf_t,
    out: *mut *mut ty_region_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: `conf` is NULL or points to a conf, per the contract.
        let conf = unsafe { conf.as_ref() }.unwrap_or(&ty_region_conf_default);
        Ok(new_region(Region::create(name, region_config(conf))?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the region handle's address)", make) }
}

/// `ty_region_create` of a region whose topics have `max_groups` group
/// slots each: the default group (slot 0, what `ty_subscribe` reads) and
/// `max_groups - 1` named consumer groups (`ty_topic_join_group`); at most
/// 63 (`TY_EINVAL` above). `ty_region_create` makes regions of 0 (no named
/// groups). Each slot costs every topic a copy of its rings (`ring_arena`
/// must hold them) and every chunk of the pool 8 bytes.
///
/// # Safety
/// As `ty_region_open`.
#[no_mangle]
pub unsafe extern "C" fn ty_region_create_groups(
    name: *const c_char,
    conf: *const ty_region_conf_t,
    max_groups: u32,
    out: *mut *mut ty_region_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: `conf` is NULL or points to a conf, per the contract.
        let conf = unsafe { conf.as_ref() }.unwrap_or(&ty_region_conf_default);
        let config = region_config(conf).max_groups(max_groups as usize);
        Ok(new_region(Region::create(name, config)?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the region handle's address)", make) }
}

/// `ty_region_open` with a configuration (`conf` NULL:
/// `ty_region_conf_default`) and `max_groups` group slots per topic (see
/// `ty_region_create_groups`): opens the region if it exists with that
/// same configuration and `max_groups` (else `TY_EINCOMPAT`), else creates
/// it.
///
/// # Safety
/// As `ty_region_open`.
#[no_mangle]
pub unsafe extern "C" fn ty_region_open_groups(
    name: *const c_char,
    conf: *const ty_region_conf_t,
    max_groups: u32,
    out: *mut *mut ty_region_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: `conf` is NULL or points to a conf, per the contract.
        let conf = unsafe { conf.as_ref() }.unwrap_or(&ty_region_conf_default);
        let config = region_config(conf).max_groups(max_groups as usize);
        Ok(new_region(Region::create_or_open(name, config)?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the region handle's address)", make) }
}

/// Closes a region handle. Topics opened through it stay usable (they keep
/// the region attached until they are closed too). The region itself
/// persists (see `ty_region_remove`). NULL is ignored.
///
/// Not thread-safe for one handle: no other call may use `reg` during or
/// after this one. A second close of the same handle is caught while its
/// memory was not reused, and then ignored.
///
/// # Safety
/// `reg` is NULL or a handle from `ty_region_open` / `ty_region_create`,
/// not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_region_close(reg: *mut ty_region_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { region(reg) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in `new_region`;
            // nobody uses it any more, per the contract.
            let mut b = unsafe { Box::from_raw(reg) };
            b.magic = DEAD;
            drop(b);
        }
    })
}

/// Deletes the region `name` from /dev/shm. Processes attached keep their
/// memory until they close; nobody can open the name any more, and a new
/// region of that name may be created.
///
/// Errors: `TY_EINVAL` (NULL or bad name), `TY_ENOENT`, `TY_EPERM`,
/// `TY_EIO`. Thread-safe.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ty_region_remove(name: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Region::remove(name)?;
        Ok(TY_OK)
    })
}

/// Returns to the pool every chunk held by a process that died (its loans,
/// the messages it had received and not released); on at-least-once topics
/// publishes those messages again. Safe to run from several processes at
/// once; the library also runs it when a region is opened and while a loan
/// or a subscribe waits. `out` (may be NULL) gets what was reclaimed.
///
/// Errors: `TY_EINVAL`, `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_region_recover(reg: *const ty_region_t, out: *mut ty_recovered_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        let got = r.region.recover()?;
        if !out.is_null() {
            // SAFETY: not NULL, writable per the contract.
            unsafe { out.write(got.into()) };
        }
        Ok(TY_OK)
    })
}

/// Fills `*out` with what recovery reclaimed when this handle opened (or
/// created) the region: what processes that had died held then.
///
/// Errors: `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_region_recovered_on_open(
    reg: *const ty_region_t,
    out: *mut ty_recovered_t,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        let out = arg_out(out, "out")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(r.region.recovered_on_open().into()) };
        Ok(TY_OK)
    })
}

/// Fills `*out` with the free chunks of each size class of the pool.
///
/// Errors: `TY_EINVAL`, `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_region_pool_stats(reg: *const ty_region_t, out: *mut ty_pool_stats_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        let out = arg_out(out, "out")?;
        let stats: [ClassStats; TY_CLASSES] = r.region.pool_stats()?;
        let classes =
            stats.map(|c| ty_class_stats_t { chunk_size: c.chunk_size, chunks: c.chunks, free: c.free });
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(ty_pool_stats_t { classes }) };
        Ok(TY_OK)
    })
}

/// Tells other processes this one is alive. The library beats by itself
/// when it attaches, every 256 loans or receives and while it waits; a
/// process that holds chunks and stays away from the region for longer than
/// the lease should call this.
///
/// Errors: `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle.
#[no_mangle]
pub unsafe extern "C" fn ty_region_heartbeat(reg: *const ty_region_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { region(reg)? }.region.heartbeat();
        Ok(TY_OK)
    })
}

/// Creates the topic `name` in the region with `*conf` (NULL:
/// `ty_topic_conf_default`), or opens it if it exists with that same
/// configuration (`TY_EINCOMPAT` if not; `ty_last_error` names the field).
/// Like `ty_region_open` with a configuration, so that a producer can be
/// started again on a persistent region.
///
/// On success `*out` is a new handle, for `ty_topic_close`; NULL on
/// failure. Errors: `TY_EINVAL` (NULL, bad name: 1 to 63 bytes; bad
/// configuration), `TY_EINCOMPAT`, `TY_ENOSPC` (too many topics, or the
/// ring arena is used up), `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle; `name` NULL or a NUL-terminated
/// string; `conf` NULL or pointing to a `ty_topic_conf_t`; `out` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_create(
    reg: *const ty_region_t,
    name: *const c_char,
    conf: *const ty_topic_conf_t,
    out: *mut *mut ty_topic_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: NULL or a conf, per the contract.
        let conf = unsafe { conf.as_ref() }.unwrap_or(&ty_topic_conf_default);
        Ok(new_topic(r.region.create_or_open_topic(name, topic_config(conf)?)?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the topic handle's address)", make) }
}

/// `ty_topic_create` choosing whether the topic has its default group
/// (slot 0: what `ty_subscribe`, `ty_subscription_open` and
/// `ty_topic_depth` read). `default_group` 0: it has none, so messages go
/// to the named groups joined (`ty_topic_join_group`) only, and one
/// published while no group is joined is delivered to nobody; the default
/// group's calls fail with `TY_EINVAL`. Such a topic needs a region of
/// `max_groups` of at least 1 (`ty_region_create_groups`). Non-zero: as
/// `ty_topic_create`. An existing topic must have the same setting
/// (`TY_EINCOMPAT`).
///
/// # Safety
/// As `ty_topic_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_create_groups(
    reg: *const ty_region_t,
    name: *const c_char,
    conf: *const ty_topic_conf_t,
    default_group: c_int,
    out: *mut *mut ty_topic_t,
) -> c_int {
    let flags = if default_group == 0 { TY_TOPIC_NO_DEFAULT_GROUP } else { 0 };
    // SAFETY: this function's contract is `ty_topic_create_flags`'s.
    unsafe { ty_topic_create_flags(reg, name, conf, flags, out) }
}

/// `ty_topic_create` with `flags`, an OR of:
///
/// * `TY_TOPIC_NO_DEFAULT_GROUP`: the topic has no default group, as
///   `ty_topic_create_groups` with `default_group` 0 makes it;
/// * `TY_TOPIC_OVERRUN`: a publisher that finds a group's ring of its
///   partition full does not wait: it drops that group's oldest message of
///   the partition (received and released on the group's behalf, as a
///   member would) and publishes. A slow group then no longer holds
///   producers back; it misses messages instead, counted per group
///   (`ty_group_missed`; `ty_topic_missed` for the default group;
///   `ty_group_info_t.missed`). The other groups, and the order of what is
///   delivered, are unaffected. For data where the latest matters more
///   than every message (market data, sensor readings, telemetry). Not
///   with `TY_DELIVERY_AT_LEAST_ONCE`, which promises the opposite
///   (`TY_EINVAL`);
/// * `TY_TOPIC_LIGHT_HANDOVERS`: the topic's hand-overs are light: a
///   publisher's commit and a consumer's hand-back are a look and a plain
///   store instead of a compare-and-swap, and their wake-up checks have no
///   fence; every sleeper on the topic runs `membarrier` instead, which
///   interrupts every CPU running a process with a light ring or topic
///   open. With inline slots (`ty_topic_create_inline`) a stream of 64 B
///   messages runs about 0.6 of the raw ring's speed instead of 0.4. A
///   repair of a live claim's damaged word can be overwritten, and the
///   counters count a message before its hand-over (a process killed
///   between the two is counted). See docs/bus.md, "Light hand-overs".
///
/// `flags` 0 is `ty_topic_create`. An existing topic must have been
/// created with the same flags (`TY_EINCOMPAT`; `ty_last_error` names the
/// field). Unknown flags are `TY_EINVAL`. Otherwise as `ty_topic_create`.
///
/// ```c
/// ty_topic_conf_t tc = ty_topic_conf_default;
/// tc.capacity = 4;
/// ty_topic_t* quotes;
/// ty_topic_create_flags(reg, "quotes", &tc, TY_TOPIC_OVERRUN, &quotes);
/// for (uint8_t i = 0; i < 10; i++)
///     ty_send(quotes, &i, 1, 0, 0);   /* never waits, never TY_EAGAIN for room */
/// int64_t missed = ty_topic_missed(quotes); /* 6: the newest 4 are kept */
/// ```
///
/// # Safety
/// As `ty_topic_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_create_flags(
    reg: *const ty_region_t,
    name: *const c_char,
    conf: *const ty_topic_conf_t,
    flags: u32,
    out: *mut *mut ty_topic_t,
) -> c_int {
    // SAFETY: this function's contract is `ty_topic_create_inline`'s.
    unsafe { ty_topic_create_inline(reg, name, conf, flags, 0, out) }
}

/// `ty_topic_create_flags` giving every ring cell an inline slot of
/// `inline_payload` bytes (rounded up to 64, at most 65,536; 0: none, as
/// `ty_topic_create_flags`). A message of up to that size sent with
/// `ty_send` travels in the slot of its ring cell: no chunk is taken from
/// the pool, no chunk state changes hands (a stream of small or 1 KiB
/// messages two to three times faster). Loans and larger messages still
/// use chunks; `ty_subscribe` copies an inline message into a chunk of the
/// receiver's own (so it needs a free chunk of the slot's size). The cost
/// is `capacity * inline_payload` bytes per partition of the region's ring
/// arena, and 64 more per cell when `inline_payload` is a multiple of 256
/// above 256 (`TY_ENOSPC` if they do not fit). Not with
/// `TY_DELIVERY_AT_LEAST_ONCE` (`TY_EINVAL`): a consumer killed while it
/// copies a message out of its slot loses it. An existing topic must have
/// the same slots (`TY_EINCOMPAT`). See docs/bus.md, "Inline payloads".
///
/// ```c
/// ty_topic_conf_t tc = ty_topic_conf_default;
/// tc.capacity = 256;
/// ty_topic_t* ticks;
/// ty_topic_create_inline(reg, "ticks", &tc, 0, 1024, &ticks); /* 272 KiB of slots */
/// ty_send(ticks, "tick", 4, 0, -1);                          /* no chunk taken */
/// ```
///
/// # Safety
/// As `ty_topic_create`.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_create_inline(
    reg: *const ty_region_t,
    name: *const c_char,
    conf: *const ty_topic_conf_t,
    flags: u32,
    inline_payload: u32,
    out: *mut *mut ty_topic_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        // SAFETY: NULL or a conf, per the contract.
        let conf = unsafe { conf.as_ref() }.unwrap_or(&ty_topic_conf_default);
        let known = TY_TOPIC_NO_DEFAULT_GROUP | TY_TOPIC_OVERRUN | TY_TOPIC_LIGHT_HANDOVERS;
        if flags & !known != 0 {
            return Err(invalid(format!(
                "unknown topic flags {:#x} (TY_TOPIC_NO_DEFAULT_GROUP, TY_TOPIC_OVERRUN, TY_TOPIC_LIGHT_HANDOVERS)",
                flags & !known
            )));
        }
        let config = topic_config(conf)?
            .default_group(flags & TY_TOPIC_NO_DEFAULT_GROUP == 0)
            .overrun(flags & TY_TOPIC_OVERRUN != 0)
            .light_handovers(flags & TY_TOPIC_LIGHT_HANDOVERS != 0)
            .inline_payload(inline_payload);
        Ok(new_topic(r.region.create_or_open_topic(name, config)?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the topic handle's address)", make) }
}

/// Opens the existing topic `name` of the region, with the configuration it
/// was created with.
///
/// On success `*out` is a new handle, for `ty_topic_close`; NULL on
/// failure. Errors: `TY_EINVAL`, `TY_ENOENT`, `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `reg` is NULL or a live region handle; `name` NULL or a NUL-terminated
/// string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_open(
    reg: *const ty_region_t,
    name: *const c_char,
    out: *mut *mut ty_topic_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        Ok(new_topic(r.region.topic(name)?))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the topic handle's address)", make) }
}

/// Closes a topic handle. Loans taken through it and not published go back
/// to the pool; messages received through it and not released are released
/// (their `data` pointers become invalid). NULL is ignored.
///
/// Not thread-safe for one handle: no other call may use `topic` during or
/// after this one (a blocked `ty_subscribe` on it must have returned).
///
/// # Safety
/// `topic` is NULL or a handle from `ty_topic_create` / `ty_topic_open`,
/// not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_close(topic: *mut ty_topic_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { self::topic(topic) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in `new_topic`;
            // nobody uses it any more, per the contract.
            let mut b = unsafe { Box::from_raw(topic) };
            b.magic = DEAD;
            drop(b);
        }
    })
}

/// The partition messages of `key` go to (0 to partitions - 1), or
/// `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_partition_of(topic: *const ty_topic_t, key: u64) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        Ok(t.topic.partition_of(Key(key)) as c_int)
    })
}

/// The topic's number of partitions, or `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_partitions(topic: *const ty_topic_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        Ok(unsafe { self::topic(topic)? }.topic.partitions() as c_int)
    })
}

/// 1 if the topic's hand-overs are light (`TY_TOPIC_LIGHT_HANDOVERS`), 0
/// if not or for an invalid handle. Thread-safe.
///
/// ```c
/// ty_topic_t* ticks;
/// ty_topic_create_inline(reg, "ticks", NULL, TY_TOPIC_LIGHT_HANDOVERS, 64, &ticks);
/// int light = ty_topic_light_handovers(ticks); /* 1, in every process that opens it */
/// ```
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_light_handovers(topic: *const ty_topic_t) -> c_int {
    let mut light = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        light = c_int::from(unsafe { self::topic(topic)? }.topic.config().uses_light_handovers());
        Ok(TY_OK)
    });
    light
}

/// Turns batch reads on (`on` non-zero) or off for this handle's receives
/// (the Rust `Topic::with_batch_reads`; off by default). A consumer that
/// has caught up with a publisher in mid-stream waits until the publisher
/// is a batch ahead (at most 32 messages, and 2 KiB of them; none for
/// messages over 256 bytes) before it takes the first. Made for topics
/// with inline slots (`ty_topic_create_inline`), whose stream of 64-byte
/// messages ran 1.2 to 2 times as fast with it on the Intel Xeons
/// measured. Not for a consumer that
/// wants each message at once: a message waits for the batch behind it,
/// or, where its publisher stops short, about 1 µs of looks (docs/rings.md,
/// "Batch reads"). A handle's option: nothing in the region changes, and
/// other handles, in this process or another, receive as they choose.
/// Subscriptions and group handles opened through this handle afterwards
/// take the setting it has then.
///
/// Errors: `TY_EINVAL` (NULL or not a topic handle).
///
/// Not thread-safe for one handle: no other call may use `topic`, or a
/// subscription opened through it, during this one (set it before the
/// handle is shared between threads).
///
/// ```c
/// ty_topic_t* ticks;
/// ty_topic_open(reg, "ticks", &ticks);
/// ty_topic_set_batch_reads(ticks, 1); /* this consumer takes ticks in batches */
/// ```
///
/// # Safety
/// `topic` is NULL or a live topic handle that no other call (on it, or
/// on a subscription opened through it) uses during this one.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_set_batch_reads(topic: *mut ty_topic_t, on: c_int) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract; checked to be a live topic
        // handle before it is written.
        unsafe { self::topic(topic)? };
        // SAFETY: a live `Box<ty_topic_t>` (checked above) that no other
        // call, on it or on a subscription holding its address, uses
        // during this one (the contract): this is the only reference to it.
        let t = unsafe { &mut *topic };
        // Loans and messages out through the handle keep the core they
        // were taken with: `with_batch_reads` gives this handle a core of
        // its own.
        t.topic = t.topic.clone().with_batch_reads(on != 0);
        Ok(TY_OK)
    })
}

/// 1 if this handle receives in batches (`ty_topic_set_batch_reads`), 0 if
/// not or for an invalid handle. Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_batch_reads(topic: *const ty_topic_t) -> c_int {
    let mut batch = 0;
    guard(|| {
        // SAFETY: per this function's contract.
        batch = c_int::from(unsafe { self::topic(topic)? }.topic.batch_reads());
        Ok(TY_OK)
    });
    batch
}

/// Fills `*out` with the topic's configuration and counters.
///
/// Errors: `TY_EINVAL`. Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_stats(topic: *const ty_topic_t, out: *mut ty_topic_stats_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        let out = arg_out(out, "out")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(topic_stats(&t.topic.info())) };
        Ok(TY_OK)
    })
}

fn topic_stats(i: &TopicInfo) -> ty_topic_stats_t {
    ty_topic_stats_t {
        partitions: i.partitions,
        capacity: i.capacity,
        notify: i.wait.map_or(-1, notify_code),
        delivery: match i.delivery {
            Some(Delivery::AtLeastOnce) => TY_DELIVERY_AT_LEAST_ONCE,
            Some(_) => TY_DELIVERY_AT_MOST_ONCE,
            None => -1,
        },
        published: i.published,
        received: i.received,
        corrupt: i.corrupt,
        lost: i.lost,
    }
}

/// Lists the region's topics: fills `out[0]` to `out[cap - 1]` (as many as
/// there are) and returns how many topics the region has, which may be more
/// than `cap` (call again with a larger array; `out` may be NULL when `cap`
/// is 0, to count). The order is the region's directory order. Negative on
/// error: `TY_EINVAL`, `TY_ECORRUPT`. Thread-safe (a snapshot).
///
/// # Safety
/// `reg` is NULL or a live region handle; `out` NULL (with `cap` 0) or
/// writable for `cap` entries.
#[no_mangle]
pub unsafe extern "C" fn ty_region_topics(
    reg: *const ty_region_t,
    out: *mut ty_topic_info_t,
    cap: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let r = unsafe { region(reg)? };
        if cap > 0 && out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let topics = r.region.topics()?;
        for (i, info) in topics.iter().take(cap).enumerate() {
            let mut name = [0 as c_char; TY_TOPIC_NAME_LEN];
            for (d, &b) in name.iter_mut().zip(info.name.as_bytes().iter().take(TY_TOPIC_NAME_LEN - 1)) {
                *d = b as c_char;
            }
            // SAFETY: `i < cap`; `out` is writable for `cap` entries per the
            // contract.
            unsafe { out.add(i).write(ty_topic_info_t { name, stats: topic_stats(info) }) };
        }
        Ok(c_int::try_from(topics.len()).unwrap_or(c_int::MAX))
    })
}

/// The number of messages waiting in `partition` now (a snapshot), or a
/// negative error: `TY_EINVAL` (bad handle or partition), `TY_ECORRUPT`.
/// Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_depth(topic: *const ty_topic_t, partition: u32) -> i64 {
    let mut depth = 0i64;
    let rc = guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        depth = t.topic.depth(partition)? as i64;
        Ok(TY_OK)
    });
    if rc == TY_OK {
        depth
    } else {
        i64::from(rc)
    }
}

/// The messages of the topic's default group (what `ty_subscribe` reads)
/// dropped unread from its full partitions by publishers of a
/// `TY_TOPIC_OVERRUN` topic (`ty_topic_create_flags`), since the topic was
/// created: 0 on other topics. A negative error: `TY_EINVAL` (bad handle).
/// Each named group has its own count (`ty_group_missed`). Thread-safe.
///
/// ```c
/// int64_t before = ty_topic_missed(quotes);
/// /* ... consume ... */
/// if (ty_topic_missed(quotes) > before) { /* some quotes were skipped */ }
/// ```
///
/// # Safety
/// `topic` is NULL or a live topic handle.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_missed(topic: *const ty_topic_t) -> i64 {
    let mut missed = 0i64;
    let rc = guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        missed = i64::try_from(t.topic.missed()).unwrap_or(i64::MAX);
        Ok(TY_OK)
    });
    if rc == TY_OK {
        missed
    } else {
        i64::from(rc)
    }
}

/// Loans a chunk of `size` bytes from the pool for one message, to be
/// written in place and given to `ty_publish` (or `ty_unloan`). `*buf` gets
/// its first byte (64-byte aligned), writable by the caller alone until
/// then. `opts` NULL: `ty_loan_opts_default` (wait for a free chunk for
/// ever, as the topic's notify policy says).
///
/// Errors (`*buf` is then NULL): `TY_EINVAL` (NULL, bad options),
/// `TY_EMSGSIZE` (more than 1 MiB), `TY_EPOOL` (no chunk of that size came
/// free in time), `TY_ETIMEDOUT`, `TY_EINTR` (`ty_interrupt`). Thread-safe:
/// several threads may loan through one handle.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `buf` NULL or writable; `opts`
/// NULL or pointing to a `ty_loan_opts_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_loan(
    topic: *const ty_topic_t,
    size: usize,
    buf: *mut *mut c_void,
    opts: *const ty_loan_opts_t,
) -> c_int {
    // SAFETY: NULL or a `ty_loan_opts_t`, per the contract.
    let opts = unsafe { opts.as_ref() }.copied().unwrap_or(ty_loan_opts_default);
    // SAFETY: per this function's contract.
    unsafe { loan(topic, size, buf, opts) }
}

/// `ty_loan` waiting at most `timeout_ns` (-1 for ever, 0 not at all).
///
/// # Safety
/// As `ty_loan`.
#[no_mangle]
pub unsafe extern "C" fn ty_loan_timed(
    topic: *const ty_topic_t,
    size: usize,
    buf: *mut *mut c_void,
    timeout_ns: i64,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { loan(topic, size, buf, ty_loan_opts_t { timeout_ns, flags: 0 }) }
}

/// `ty_loan` without waiting: `TY_EPOOL` if no chunk of that size is free
/// now.
///
/// # Safety
/// As `ty_loan`.
#[no_mangle]
pub unsafe extern "C" fn ty_try_loan(topic: *const ty_topic_t, size: usize, buf: *mut *mut c_void) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { loan(topic, size, buf, ty_loan_opts_t { timeout_ns: 0, flags: 0 }) }
}

/// # Safety
/// As `ty_loan`.
unsafe fn loan(topic: *const ty_topic_t, size: usize, buf: *mut *mut c_void, opts: ty_loan_opts_t) -> c_int {
    guard(|| {
        let buf = arg_out(buf, "buf (where the loan's address goes)")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { buf.write(std::ptr::null_mut()) };
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        if opts.flags & !TY_LOAN_ZERO != 0 {
            return Err(invalid(format!("unknown loan flags {:#x}", opts.flags)));
        }
        let loan = interruptible(arg_timeout(opts.timeout_ns)?, |w| t.topic.loan_raw(size, w))?;
        if opts.flags & TY_LOAN_ZERO != 0 {
            // SAFETY: the loan's `size` bytes are this call's alone until
            // it hands them to C below.
            unsafe { loan.ptr.as_ptr().write_bytes(0, size) };
        }
        t.ledger.loaned(loan.index, size);
        // SAFETY: as above.
        unsafe { buf.write(loan.ptr.as_ptr().cast()) };
        Ok(TY_OK)
    })
}

/// The chunk index of the loan `buf` of this topic handle, taken out of
/// its ledger.
fn take_loan(t: &ty_topic_t, buf: *const c_void, len: usize) -> Res<u32> {
    let absent = || {
        invalid("buf is not a loan of this topic handle (loaned through another handle, already published or returned?)")
    };
    let index = t.topic.chunk_index(buf.cast()).ok_or_else(absent)?;
    t.ledger.take_loan(index, len).map_err(|miss| match miss {
        Miss::Absent => absent(),
        Miss::Refused { size } => invalid(format!("len {len} is more than the {size} bytes loaned")),
    })?;
    Ok(index)
}

/// Publishes the first `len` bytes of the loan `buf` (from `ty_loan` on
/// this same topic handle) with `key`: its descriptor goes into the key's
/// partition, waiting for room for ever, as the topic's notify policy says.
/// Messages of one key are received in the order they were published.
///
/// A `buf` that was published (or returned) and then loaned again at the
/// same address through this handle is the new loan: the address is all
/// that names a loan, as for `free`.
///
/// Unless the call fails with `TY_EINVAL` (`buf` not a loan of this handle,
/// or `len` more than was loaned: nothing happened), the loan is used up
/// whatever the result: on an error the chunk goes back to the pool and the
/// message is dropped. Errors: `TY_EINVAL`, `TY_EINTR` (`ty_interrupt` was
/// called while it waited for room), `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `buf` any pointer (only compared).
#[no_mangle]
pub unsafe extern "C" fn ty_publish(
    topic: *const ty_topic_t,
    buf: *const c_void,
    len: usize,
    key: u64,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { publish(topic, buf, len, key, Some(-1)) }
}

/// `ty_publish` waiting at most `timeout_ns` for room (-1 for ever, 0 not
/// at all): `TY_ETIMEDOUT` when it passed (the message is dropped).
///
/// # Safety
/// As `ty_publish`.
#[no_mangle]
pub unsafe extern "C" fn ty_publish_timed(
    topic: *const ty_topic_t,
    buf: *const c_void,
    len: usize,
    key: u64,
    timeout_ns: i64,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { publish(topic, buf, len, key, Some(timeout_ns)) }
}

/// `ty_publish` without waiting: `TY_EAGAIN` if the key's partition is full
/// (the message is dropped and its chunk returned; loan again to retry).
///
/// # Safety
/// As `ty_publish`.
#[no_mangle]
pub unsafe extern "C" fn ty_try_publish(
    topic: *const ty_topic_t,
    buf: *const c_void,
    len: usize,
    key: u64,
) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { publish(topic, buf, len, key, None) }
}

/// `timeout_ns`: `Some(ns)` waits per `ns`, `None` is the non-blocking form.
///
/// # Safety
/// As `ty_publish`.
unsafe fn publish(
    topic: *const ty_topic_t,
    buf: *const c_void,
    len: usize,
    key: u64,
    timeout_ns: Option<i64>,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        let timeout = timeout_ns.map(arg_timeout).transpose()?;
        let index = take_loan(t, buf, len)?;
        // SAFETY: the ledger had `index` as a loan of this handle (raw
        // interface, this region handle) and took it out: it goes back once.
        let Some(timeout) = timeout else {
            // SAFETY: as above.
            unsafe { t.topic.try_publish_raw(index, len, Key(key))? };
            return Ok(TY_OK);
        };
        // Waits in slices (for `ty_interrupt`); a slice that times out
        // leaves the loan this call's, to publish again.
        // SAFETY: as above; until the loan is published or given back below,
        // each slice's `publish_raw_or_keep` that timed out kept it.
        let sent =
            interruptible(timeout, |w| unsafe { t.topic.publish_raw_or_keep(index, len, Key(key), w) });
        if let Err(f) = &sent {
            if f.code == TY_ETIMEDOUT || f.code == TY_EINTR {
                // The last slice timed out, or no slice ran after the
                // interruption: the loan is still this call's; dropped.
                // SAFETY: as above: given back once.
                let _ = unsafe { t.topic.unloan_raw(index) };
            }
        }
        sent?;
        Ok(TY_OK)
    })
}

/// Returns the loan `buf` (from `ty_loan` on this topic handle) to the pool
/// unpublished.
///
/// Errors: `TY_EINVAL` (not a loan of this handle). Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `buf` any pointer (only compared).
#[no_mangle]
pub unsafe extern "C" fn ty_unloan(topic: *const ty_topic_t, buf: *const c_void) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        let index = take_loan(t, buf, 0)?;
        // SAFETY: as in `publish`: taken out of the ledger, given back once.
        unsafe { t.topic.unloan_raw(index)? };
        Ok(TY_OK)
    })
}

/// Copies `len` bytes from `data` into a chunk and publishes them with
/// `key` (the copy path: loan, copy, publish in one call), waiting at most
/// `timeout_ns` in all (-1 for ever, 0 not at all).
///
/// Errors: `TY_EINVAL`, `TY_EMSGSIZE`, `TY_EPOOL`, `TY_ETIMEDOUT`,
/// `TY_EINTR` (`ty_interrupt`), `TY_ECORRUPT`; with a timeout of 0, a full
/// partition is `TY_EAGAIN`.
/// Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `data` is NULL (only with `len`
/// 0) or readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_send(
    topic: *const ty_topic_t,
    data: *const c_void,
    len: usize,
    key: u64,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if data.is_null() {
            return Err(invalid("data is NULL"));
        } else {
            // SAFETY: not NULL, readable for `len` bytes per the contract.
            unsafe { std::slice::from_raw_parts(data.cast(), len) }
        };
        match arg_timeout(timeout_ns)? {
            Some(d) if d.is_zero() => t.topic.try_send(bytes, Key(key))?,
            timeout => interruptible(timeout, |w| t.topic.send(bytes, Key(key), w))?,
        }
        Ok(TY_OK)
    })
}

/// Receives the next message of `partition`, waiting at most `timeout_ns`
/// (-1 for ever, as the topic's notify policy says; 0 looks once). Each
/// message goes to exactly one of the consumers of its partition.
///
/// On success `*m` describes the message: `m->data` points into shared
/// memory, read-only, valid until `ty_release(topic, m)`, which must
/// follow (on this same topic handle) for its chunk to go back to the pool.
/// On failure `*m` is zeroed. Errors: `TY_EINVAL` (NULL, bad partition),
/// `TY_ETIMEDOUT`, `TY_EINTR` (`ty_interrupt` was called, e.g. from a
/// SIGINT handler), `TY_ECORRUPT` (a corrupt descriptor was dropped; call
/// again). Thread-safe: several threads may subscribe through one handle.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `m` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_subscribe(
    topic: *const ty_topic_t,
    partition: u32,
    m: *mut ty_msg_t,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        unsafe {
            receive(topic, partition, m, |t| {
                Ok(Some(interruptible(timeout, |w| t.receive_raw(partition, w))?))
            })
        }
    })
}

/// Copies the next message of `partition` into `buf` (of `cap` bytes) and
/// releases it at once (the copy path), waiting at most `timeout_ns` (-1
/// for ever, as the topic's notify policy says; 0 looks once); `*len` gets
/// its length. On a topic with inline slots (`ty_topic_create_inline`) an
/// inline message goes from its slot straight into `buf`, with no chunk.
///
/// A message longer than `cap` is not taken: it stays queued, first in its
/// partition, the call fails with `TY_ENOBUFS` and `*len` gets its length
/// (call again with a buffer that large; nothing is lost).
///
/// Errors: `TY_EINVAL` (NULL, bad partition, a topic without its default
/// group), `TY_ENOBUFS`, `TY_ETIMEDOUT`, `TY_EINTR` (`ty_interrupt`),
/// `TY_ECORRUPT` (a corrupt descriptor was dropped; call again).
/// Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `buf` NULL (with `cap` 0) or
/// writable for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_recv(
    topic: *const ty_topic_t,
    partition: u32,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        let len = arg_out(len, "len")?;
        // SAFETY: per this function's contract.
        let buf = unsafe { crate::prim::bytes_mut(buf, cap, "buf")? };
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: `len` per this function's contract; no partition to tell.
        unsafe {
            recv_copy(len, std::ptr::null_mut(), timeout, |w| {
                Ok((partition, t.topic.recv_into_slice(partition, buf, w)?))
            })
        }
    })
}

/// The rest of the copy receives into a buffer of fixed size (`ty_recv`,
/// `ty_group_recv`, `ty_subscription_recv`): `recv` waits as
/// `interruptible` says; `*len` gets the length of what was received, or
/// of the message too long for the buffer that stays queued
/// (`TY_ENOBUFS`), and `*partition` (unless NULL) where it came from.
///
/// # Safety
/// `len` is writable (checked not NULL here); `partition` NULL or writable.
unsafe fn recv_copy(
    len: *mut usize,
    partition: *mut u32,
    timeout: Option<Duration>,
    mut recv: impl FnMut(Option<Duration>) -> tachyon_core::Result<(u32, usize)>,
) -> Res {
    let mut too_long = None;
    let got = interruptible(timeout, |w| {
        recv(w).inspect_err(|e| {
            if let tachyon_core::Error::BufferTooSmall { item, .. } = e {
                too_long = Some(*item);
            }
        })
    });
    // The length of what was received, or of what stays queued.
    if let Some(n) = got.as_ref().ok().map(|&(_, n)| n).or(too_long) {
        // SAFETY: not NULL (checked by the caller), writable per the contract.
        unsafe { len.write(n) };
    }
    if let (Ok((p, _)), false) = (&got, partition.is_null()) {
        // SAFETY: not NULL, writable per the contract.
        unsafe { partition.write(*p) };
    }
    got.map(|_| TY_OK)
}

/// A cancellation for waiting calls (opaque): `ty_cancel` ends, from any
/// thread, the `ty_subscribe_cancel` and `ty_rpc_request_cancel` calls
/// waiting with it, with a wake-up (no polling). From `ty_cancel_new`,
/// freed with `ty_cancel_free`.
pub struct ty_cancel_t {
    magic: u64,
    stop: ReceiveStop,
    /// The same cancellation for RPC requests (`ty_rpc_request_cancel`).
    pub(crate) rpc: tachyon_core::primitives::rpc::CancelToken,
}

/// A new cancellation, not cancelled. Never NULL (the process aborts if
/// memory runs out, as for every allocation of the library). Free it with
/// `ty_cancel_free` once no call uses it. Thread-safe.
#[no_mangle]
pub extern "C" fn ty_cancel_new() -> *mut ty_cancel_t {
    Box::into_raw(Box::new(ty_cancel_t {
        magic: CANCEL_MAGIC,
        stop: ReceiveStop::new(),
        rpc: tachyon_core::primitives::rpc::CancelToken::new(),
    }))
}

/// # Safety
/// `c` is NULL or a live `ty_cancel_t`.
pub(crate) unsafe fn cancel_of<'a>(c: *const ty_cancel_t) -> Res<&'a ty_cancel_t> {
    if c.is_null() || !c.is_aligned() {
        return Err(invalid("cancel is NULL or misaligned"));
    }
    // SAFETY: a live `Box<ty_cancel_t>` from `ty_cancel_new`, per the
    // contract.
    let c = unsafe { &*c };
    if c.magic != CANCEL_MAGIC {
        return Err(invalid("not a ty_cancel_t (freed already?)"));
    }
    Ok(c)
}

/// Cancels: every `ty_subscribe_cancel` and `ty_rpc_request_cancel`
/// waiting with `c` returns `TY_EINTR` now (woken, not polled), and every
/// later one at once (a subscribe still takes a message that is there). A
/// cancellation stays cancelled (use a new one for the
/// next wait). Errors: `TY_EINVAL` (NULL, freed). Thread-safe; not
/// async-signal-safe (use `ty_interrupt` in a signal handler).
///
/// # Safety
/// `c` is NULL or a live `ty_cancel_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_cancel(c: *const ty_cancel_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let c = unsafe { cancel_of(c)? };
        c.stop.stop();
        c.rpc.cancel();
        Ok(TY_OK)
    })
}

/// Frees a cancellation. NULL is ignored. No call may use `c` during or
/// after this one.
///
/// # Safety
/// `c` is NULL or a live `ty_cancel_t` that no call uses any more.
#[no_mangle]
pub unsafe extern "C" fn ty_cancel_free(c: *mut ty_cancel_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { cancel_of(c) }.is_ok() {
            // SAFETY: made by `Box::into_raw` in `ty_cancel_new`, unused now.
            let mut b = unsafe { Box::from_raw(c) };
            b.magic = DEAD;
            drop(b);
        }
    })
}

/// `ty_subscribe` that `ty_cancel(cancel)` ends early, from another thread:
/// `TY_EINTR` (a message already in the partition is still received). For
/// callers whose waits are cancelled (a Go `context.Context`, a request
/// that was abandoned), without polling. `ty_interrupt` works here too.
///
/// Errors: those of `ty_subscribe`, and `TY_EINVAL` for a NULL or freed
/// `cancel`. Thread-safe; several calls may wait with one `cancel`.
///
/// # Safety
/// As `ty_subscribe`; `cancel` is NULL or a live `ty_cancel_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_subscribe_cancel(
    topic: *const ty_topic_t,
    partition: u32,
    m: *mut ty_msg_t,
    timeout_ns: i64,
    cancel: *const ty_cancel_t,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        let c = unsafe { cancel_of(cancel) };
        // SAFETY: per this function's contract.
        unsafe {
            receive(topic, partition, m, |t| {
                let stop = &c?.stop;
                Ok(Some(interruptible(timeout, |w| t.receive_raw_until(partition, w, stop))?))
            })
        }
    })
}

/// `ty_subscribe` without waiting: `TY_EAGAIN` if the partition is empty.
///
/// # Safety
/// As `ty_subscribe`.
#[no_mangle]
pub unsafe extern "C" fn ty_try_subscribe(
    topic: *const ty_topic_t,
    partition: u32,
    m: *mut ty_msg_t,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { receive(topic, partition, m, |t| Ok(t.try_receive_raw(partition)?)) }
    })
}

/// One receive over several partitions of a topic (opaque): from
/// `ty_subscription_open`, freed with `ty_subscription_close` (before the
/// topic handle it came from is closed).
pub struct ty_subscription_t {
    magic: u64,
    sub: Subscription,
    /// The handle whose ledger records the messages (released with
    /// `ty_release` on it).
    topic: *const ty_topic_t,
}

/// # Safety
/// `p` is NULL or a live `ty_subscription_t` whose topic handle is live.
unsafe fn subscription<'a>(p: *const ty_subscription_t) -> Res<(&'a ty_subscription_t, &'a ty_topic_t)> {
    if p.is_null() || !p.is_aligned() {
        return Err(invalid("subscription is NULL or misaligned"));
    }
    // SAFETY: a live `Box<ty_subscription_t>` by the contract.
    let s = unsafe { &*p };
    if s.magic != SUBSCRIPTION_MAGIC {
        return Err(invalid("not a subscription (closed already?)"));
    }
    // SAFETY: the subscription's topic handle outlives it, by the contract.
    let t = unsafe { topic(s.topic)? };
    Ok((s, t))
}

/// Opens a subscription: one receive over `n` partitions of `topic` (at
/// `partitions`; NULL with `n` 0: every partition), each looked at in turn
/// so that none starves. Messages it receives are released with
/// `ty_release(topic, m)` on this same topic handle, which must stay open
/// until `ty_subscription_close`.
///
/// On success `*out` is the new subscription; NULL on failure. Errors:
/// `TY_EINVAL` (NULL, a partition out of range, `partitions` NULL with
/// `n` > 0). Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `partitions` NULL or readable
/// for `n` values; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_open(
    topic: *const ty_topic_t,
    partitions: *const u32,
    n: usize,
    out: *mut *mut ty_subscription_t,
) -> c_int {
    guard(|| {
        let out = arg_out(out, "out")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        // SAFETY: per this function's contract.
        let sub = t.topic.subscribe(unsafe { partition_set(partitions, n)? })?;
        let boxed = Box::new(ty_subscription_t { magic: SUBSCRIPTION_MAGIC, sub, topic });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(boxed)) };
        Ok(TY_OK)
    })
}

/// The partitions of `ty_subscription_open`'s `partitions` and `n`.
///
/// # Safety
/// `partitions` is NULL or readable for `n` values.
unsafe fn partition_set(partitions: *const u32, n: usize) -> Res<Partitions> {
    if partitions.is_null() {
        if n > 0 {
            return Err(invalid("partitions is NULL but n is not 0"));
        }
        return Ok(Partitions::All);
    }
    // SAFETY: not NULL, readable for `n` values per the contract.
    Ok(Partitions::Set(unsafe { std::slice::from_raw_parts(partitions, n) }.to_vec()))
}

/// Receives the next message of any of the subscription's partitions,
/// waiting at most `timeout_ns` (-1 for ever; 0 looks once). As
/// `ty_subscribe` otherwise: `m->partition` says where it came from, and
/// `ty_release(topic, m)` on the subscription's topic handle must follow.
/// Errors: `TY_EINVAL`, `TY_ETIMEDOUT`, `TY_EINTR` (`ty_interrupt`),
/// `TY_ECORRUPT` (a corrupt descriptor was dropped; call again).
/// Thread-safe.
///
/// # Safety
/// `sub` is NULL or a live subscription (its topic handle open); `m` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_receive(
    sub: *const ty_subscription_t,
    m: *mut ty_msg_t,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        unsafe { receive_any(sub, m, |s| Ok(Some(interruptible(timeout, |w| s.receive(w))?))) }
    })
}

/// Copies the next message of any of the subscription's partitions into
/// `buf` (of `cap` bytes) and releases it at once, waiting at most
/// `timeout_ns` (-1 for ever; 0 looks once): `*len` gets its length and
/// `*partition` (unless NULL) the partition it came from. The copy path:
/// nothing to release; on a topic with inline slots an inline message
/// needs no chunk. A message longer than `cap` stays queued, first in its
/// partition, which the next call looks at first: `TY_ENOBUFS`, with
/// `*len` its length.
///
/// Errors: `TY_EINVAL` (NULL), `TY_ENOBUFS`, `TY_ETIMEDOUT`, `TY_EINTR`
/// (`ty_interrupt`), `TY_ECORRUPT` (a corrupt descriptor was dropped; call
/// again). Thread-safe.
///
/// # Safety
/// `sub` is NULL or a live subscription (its topic handle open); `buf`
/// NULL (with `cap` 0) or writable for `cap` bytes; `len` NULL or writable;
/// `partition` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_recv(
    sub: *const ty_subscription_t,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    partition: *mut u32,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (s, _) = unsafe { subscription(sub)? };
        let len = arg_out(len, "len")?;
        // SAFETY: per this function's contract.
        let buf = unsafe { crate::prim::bytes_mut(buf, cap, "buf")? };
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: `len` and `partition` per this function's contract.
        unsafe { recv_copy(len, partition, timeout, |w| s.sub.recv_into_slice(buf, w)) }
    })
}

/// `ty_subscription_receive` that `ty_cancel(cancel)` ends early, from
/// another thread: `TY_EINTR` (a message already there is still received),
/// as `ty_subscribe_cancel` does for one partition.
///
/// # Safety
/// As `ty_subscription_receive`; `cancel` is NULL or a live `ty_cancel_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_receive_cancel(
    sub: *const ty_subscription_t,
    m: *mut ty_msg_t,
    timeout_ns: i64,
    cancel: *const ty_cancel_t,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        let c = unsafe { cancel_of(cancel) };
        // SAFETY: per this function's contract.
        unsafe {
            receive_any(sub, m, |s| {
                let stop = &c?.stop;
                Ok(Some(interruptible(timeout, |w| s.receive_until(w, stop))?))
            })
        }
    })
}

/// `ty_subscription_receive` without waiting: `TY_EAGAIN` if every
/// partition is empty.
///
/// # Safety
/// As `ty_subscription_receive`.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_try_receive(
    sub: *const ty_subscription_t,
    m: *mut ty_msg_t,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { receive_any(sub, m, |s| Ok(s.try_receive()?)) }
    })
}

/// Closes a subscription. Messages received through it stay held until
/// `ty_release` (or `ty_topic_close`). NULL is ignored. No other call may
/// use `sub` during or after this one.
///
/// # Safety
/// `sub` is NULL or a live subscription, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_subscription_close(sub: *mut ty_subscription_t) {
    guard_void(|| {
        if sub.is_null() || !sub.is_aligned() {
            return;
        }
        // SAFETY: a live `Box<ty_subscription_t>` per the contract.
        if unsafe { (*sub).magic } != SUBSCRIPTION_MAGIC {
            return;
        }
        // SAFETY: made by `Box::into_raw` in `ty_subscription_open`, unused
        // from now on.
        let mut b = unsafe { Box::from_raw(sub) };
        b.magic = DEAD;
        drop(b);
    })
}

/// # Safety
/// As `ty_subscription_receive`.
unsafe fn receive_any(
    sub: *const ty_subscription_t,
    m: *mut ty_msg_t,
    take: impl FnOnce(&Subscription) -> Res<Option<tachyon_core::bus::Message>>,
) -> Res {
    let m = arg_out(m, "m")?;
    // SAFETY: not NULL, writable per the contract.
    unsafe { m.write(NO_MSG) };
    // SAFETY: per this function's contract.
    let (s, t) = unsafe { subscription(sub)? };
    let Some(msg) = take(&s.sub)? else {
        return Err(Fail { code: TY_EAGAIN, message: "every partition is empty".into() });
    };
    let partition = msg.partition();
    let raw = msg.into_raw();
    let (data, len) = (raw.ptr.as_ptr().cast_const().cast(), raw.len);
    let handle = t.ledger.held(raw.index);
    // SAFETY: as above.
    unsafe { m.write(ty_msg_t { data, len, partition, reserved: 0, handle }) };
    Ok(TY_OK)
}

const NO_MSG: ty_msg_t = ty_msg_t { data: std::ptr::null(), len: 0, partition: 0, reserved: 0, handle: 0 };

/// # Safety
/// As `ty_subscribe`.
unsafe fn receive(
    topic: *const ty_topic_t,
    partition: u32,
    m: *mut ty_msg_t,
    take: impl FnOnce(&Topic) -> Res<Option<RawChunk>>,
) -> Res {
    let m = arg_out(m, "m")?;
    // SAFETY: not NULL, writable per the contract.
    unsafe { m.write(NO_MSG) };
    // SAFETY: per this function's contract.
    let t = unsafe { self::topic(topic)? };
    let Some(msg) = take(&t.topic)? else {
        return Err(Fail { code: TY_EAGAIN, message: "the partition is empty".into() });
    };
    let (data, len) = (msg.ptr.as_ptr().cast_const().cast(), msg.len);
    let handle = t.ledger.held(msg.index);
    // SAFETY: as above.
    unsafe { m.write(ty_msg_t { data, len, partition, reserved: 0, handle }) };
    Ok(TY_OK)
}

/// Releases a message from `ty_subscribe` on this same topic handle: its
/// chunk goes back to the pool and `m->data` becomes invalid. `*m` is
/// zeroed, so a second release is `TY_EINVAL`, not a double free.
///
/// Errors: `TY_EINVAL` (NULL, released already, or received through
/// another handle). Thread-safe (each message is released once).
///
/// # Safety
/// `topic` is NULL or a live topic handle; `m` NULL or pointing to a
/// `ty_msg_t` (writable).
#[no_mangle]
pub unsafe extern "C" fn ty_release(topic: *const ty_topic_t, m: *mut ty_msg_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        // SAFETY: per this function's contract.
        unsafe { release(t, m, "topic") }
    })
}

/// Releases the message `m` recorded in `t`'s ledger (`what`: the kind of
/// handle, for the error).
///
/// # Safety
/// `m` is NULL or pointing to a `ty_msg_t` (writable).
unsafe fn release(t: &ty_topic_t, m: *mut ty_msg_t, what: &str) -> Res {
    let m = arg_out(m, "m")?;
    // SAFETY: not NULL, a `ty_msg_t` per the contract.
    let handle = unsafe { (*m).handle };
    let index = t.ledger.take_held(handle).ok_or_else(|| {
        invalid(format!("m is not a message held through this {what} handle (released already, or received through another handle?)"))
    })?;
    // SAFETY: the ledger had `index` as a message of this handle (raw
    // interface, this region handle) and took it out: released once.
    unsafe { t.topic.release_raw(index)? };
    // SAFETY: as above.
    unsafe { m.write(NO_MSG) };
    Ok(TY_OK)
}

/// A member of a consumer group of a topic (opaque): from
/// `ty_topic_join_group`, freed with `ty_group_close`. Every group joined
/// to a topic receives every message published after it joined; the
/// members of one group (handles of the same name, in any process)
/// compete, each message going to one of them. The payload is not copied
/// however many groups read it.
///
/// It owns the messages received through it (`ty_group_receive`, and the
/// subscriptions of `ty_group_subscribe`): they are released with
/// `ty_group_release` on it, not `ty_release`. It keeps the region
/// attached: it stays usable after the topic handle it came from is
/// closed.
///
/// Crash safety: a process killed while holding a group's message loses
/// it for that group only (at most once) or has it delivered again within
/// the group (at least once); no chunk leaks. Closing the handle (or
/// `ty_group_leave`) ends this member; a group without members keeps its
/// position for the region's group lease and is then dropped by recovery.
// `repr(C)` so that `magic` is the first word (see `ty_region_t`).
#[repr(C)]
pub struct ty_group_t {
    magic: u64,
    /// `None` once the handle left the group (`ty_group_leave`).
    group: Option<Group>,
    /// A topic handle of the group's own, whose ledger records the
    /// messages received through the group (a chunk may be held by several
    /// groups of one process at once: one ledger each). Boxed: its address
    /// is stable for the subscriptions that point at it.
    messages: Box<ty_topic_t>,
}

/// The group behind a C handle.
///
/// # Safety
/// `p` is NULL or a pointer `ty_topic_join_group` returned.
unsafe fn group<'a>(p: *const ty_group_t) -> Res<&'a ty_group_t> {
    if p.is_null() || !p.is_aligned() {
        return Err(invalid("group handle is NULL or misaligned"));
    }
    // SAFETY: a live `Box<ty_group_t>` from `ty_topic_join_group`, by the
    // contract.
    let g = unsafe { &*p };
    if g.magic != GROUP_MAGIC {
        return Err(invalid("not a group handle (closed already?)"));
    }
    Ok(g)
}

impl ty_group_t {
    /// The group, or `TY_ECLOSED` once the handle left it.
    fn live(&self) -> Res<&Group> {
        self.group.as_ref().ok_or_else(|| Fail {
            code: TY_ECLOSED,
            message: "the group handle left its group (ty_group_leave): only ty_group_close may use it now"
                .into(),
        })
    }
}

/// Joins the consumer group `name` of the topic, creating the group if
/// none of that name is joined: from now on every message published to the
/// topic goes to the group too (to one of its members). Group names are 1
/// to 64 bytes without NUL. A member is a process: several joins of one
/// group in one process share its membership, which ends with the last of
/// their handles closed; the group then keeps its position for the
/// region's group lease. The default group (`ty_subscribe`) is another
/// group, unaffected.
///
/// On success `*out` is a new handle, for `ty_group_close`; NULL on
/// failure. Errors: `TY_EINVAL` (NULL, a bad name, or a region without
/// named group slots: created without `ty_region_create_groups`, or with a
/// `max_groups` below 2), `TY_ENOSPC` (every named group slot of the topic
/// is used), `TY_ETIMEDOUT` (the region's control lock stayed taken 5 s).
/// Thread-safe.
///
/// # Safety
/// `topic` is NULL or a live topic handle; `name` NULL or a
/// NUL-terminated string; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_join_group(
    topic: *const ty_topic_t,
    name: *const c_char,
    out: *mut *mut ty_group_t,
) -> c_int {
    // SAFETY: this function's contract is `ty_topic_join_group_from`'s.
    unsafe { ty_topic_join_group_from(topic, name, TY_JOIN_NOW, out) }
}

/// `ty_topic_join_group_from`: a group this join creates gets the messages
/// published from now on (as `ty_topic_join_group`).
pub const TY_JOIN_NOW: c_int = 0;
/// `ty_topic_join_group_from`: a group this join creates first gets every
/// message still queued in the topic (per partition, what the group
/// furthest behind has not read), oldest first, then the live stream, with
/// no gap and no duplicate between the two (Kafka's `earliest`).
pub const TY_JOIN_OLDEST: c_int = 1;

/// `ty_topic_join_group`, saying where a group this join creates starts:
/// `TY_JOIN_NOW` (the next message published) or `TY_JOIN_OLDEST` (the
/// topic's backlog first). The backlog is copied into the group once, at
/// the join (one new chunk per message; live messages stay zero-copy);
/// what could not be copied (no free chunk at that instant) is counted in
/// `ty_group_missed`. Joining a group that exists already continues from
/// its position whatever `from` says. Errors: as `ty_topic_join_group`,
/// plus `TY_EINVAL` for another `from`, and `TY_EIO` where the kernel
/// refuses `membarrier(MEMBARRIER_CMD_GLOBAL)` (which a join from the
/// oldest needs). Thread-safe.
///
/// ```c
/// ty_send(orders, "placed", 6, key, 0);          /* queued for the default group */
/// ty_group_t* audit;
/// ty_topic_join_group_from(orders, "audit", TY_JOIN_OLDEST, &audit);
/// ty_msg_t m;
/// ty_group_receive(audit, partition, &m, -1);    /* "placed": the backlog first */
/// ty_group_release(audit, &m);
/// ```
///
/// # Safety
/// As `ty_topic_join_group`.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_join_group_from(
    topic: *const ty_topic_t,
    name: *const c_char,
    from: c_int,
    out: *mut *mut ty_group_t,
) -> c_int {
    let make = || {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        // SAFETY: per this function's contract.
        let name = unsafe { arg_str(name, "name")? };
        let from = match from {
            TY_JOIN_NOW => JoinFrom::Now,
            TY_JOIN_OLDEST => JoinFrom::Oldest,
            other => return Err(invalid(format!("from is TY_JOIN_NOW or TY_JOIN_OLDEST, not {other}"))),
        };
        let group = t.topic.join_group_from(name, from)?;
        let ledger = Ledger::new(t.topic.chunk_count());
        let messages = Box::new(ty_topic_t { magic: TOPIC_MAGIC, topic: t.topic.clone(), ledger });
        Ok(Box::into_raw(Box::new(ty_group_t { magic: GROUP_MAGIC, group: Some(group), messages })))
    };
    // SAFETY: `out` per this function's contract.
    unsafe { put_handle(out, "out (the group handle's address)", make) }
}

/// Receives the group's next message of `partition`, waiting at most
/// `timeout_ns` (-1 for ever; 0 looks once): as `ty_subscribe` does for
/// the default group. `ty_group_release(group, m)` must follow.
/// Errors: `TY_EINVAL` (NULL, bad partition), `TY_ETIMEDOUT`, `TY_EINTR`
/// (`ty_interrupt`), `TY_ECORRUPT` (a corrupt descriptor was dropped; call
/// again). Thread-safe.
///
/// # Safety
/// `group` is NULL or a live group handle; `m` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_group_receive(
    group: *const ty_group_t,
    partition: u32,
    m: *mut ty_msg_t,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        unsafe {
            group_receive(group, partition, m, |g| {
                Ok(Some(interruptible(timeout, |w| g.receive(partition, w))?))
            })
        }
    })
}

/// `ty_group_receive` that `ty_cancel(cancel)` ends early, from another
/// thread: `TY_EINTR` (a message already there is still received), as
/// `ty_subscribe_cancel` does for the default group.
///
/// Errors: those of `ty_group_receive`, and `TY_EINVAL` for a NULL or freed
/// `cancel`. Thread-safe.
///
/// # Safety
/// As `ty_group_receive`; `cancel` is NULL or a live `ty_cancel_t`.
#[no_mangle]
pub unsafe extern "C" fn ty_group_receive_cancel(
    group: *const ty_group_t,
    partition: u32,
    m: *mut ty_msg_t,
    timeout_ns: i64,
    cancel: *const ty_cancel_t,
) -> c_int {
    guard(|| {
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: per this function's contract.
        let c = unsafe { cancel_of(cancel) };
        // SAFETY: per this function's contract.
        unsafe {
            group_receive(group, partition, m, |g| {
                let stop = &c?.stop;
                Ok(Some(interruptible(timeout, |w| g.receive_until(partition, w, stop))?))
            })
        }
    })
}

/// `ty_group_receive` without waiting: `TY_EAGAIN` if the group's
/// partition is empty.
///
/// # Safety
/// As `ty_group_receive`.
#[no_mangle]
pub unsafe extern "C" fn ty_group_try_receive(
    group: *const ty_group_t,
    partition: u32,
    m: *mut ty_msg_t,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { group_receive(group, partition, m, |g| Ok(g.try_receive(partition)?)) }
    })
}

/// Copies the group's next message of `partition` into `buf` (of `cap`
/// bytes) and releases it at once, waiting at most `timeout_ns` (-1 for
/// ever; 0 looks once); `*len` gets its length: `ty_recv` for a named
/// group. A message longer than `cap` stays queued, first in its
/// partition: `TY_ENOBUFS`, with `*len` its length.
///
/// Errors: `TY_EINVAL` (NULL, bad partition), `TY_ENOBUFS`,
/// `TY_ETIMEDOUT`, `TY_EINTR` (`ty_interrupt`), `TY_ECORRUPT` (a corrupt
/// descriptor was dropped; call again), `TY_ECLOSED` (the handle left its
/// group). Thread-safe.
///
/// # Safety
/// `group` is NULL or a live group handle; `buf` NULL (with `cap` 0) or
/// writable for `cap` bytes; `len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_group_recv(
    group: *const ty_group_t,
    partition: u32,
    buf: *mut c_void,
    cap: usize,
    len: *mut usize,
    timeout_ns: i64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? }.live()?;
        let len = arg_out(len, "len")?;
        // SAFETY: per this function's contract.
        let buf = unsafe { crate::prim::bytes_mut(buf, cap, "buf")? };
        let timeout = arg_timeout(timeout_ns)?;
        // SAFETY: `len` per this function's contract; no partition to tell.
        unsafe {
            recv_copy(len, std::ptr::null_mut(), timeout, |w| {
                Ok((partition, g.recv_into_slice(partition, buf, w)?))
            })
        }
    })
}

/// # Safety
/// As `ty_group_receive`.
unsafe fn group_receive(
    group: *const ty_group_t,
    partition: u32,
    m: *mut ty_msg_t,
    take: impl FnOnce(&Group) -> Res<Option<tachyon_core::bus::Message>>,
) -> Res {
    let m = arg_out(m, "m")?;
    // SAFETY: not NULL, writable per the contract.
    unsafe { m.write(NO_MSG) };
    // SAFETY: per this function's contract.
    let g = unsafe { self::group(group)? };
    let Some(msg) = take(g.live()?)? else {
        return Err(Fail { code: TY_EAGAIN, message: "the group's partition is empty".into() });
    };
    let raw = msg.into_raw();
    let (data, len) = (raw.ptr.as_ptr().cast_const().cast(), raw.len);
    let handle = g.messages.ledger.held(raw.index);
    // SAFETY: as above.
    unsafe { m.write(ty_msg_t { data, len, partition, reserved: 0, handle }) };
    Ok(TY_OK)
}

/// Releases a message received through the group (`ty_group_receive`,
/// `ty_group_try_receive`, or a subscription of `ty_group_subscribe`): the
/// group lets it go, and its chunk goes back to the pool once every group
/// it was published to has. `*m` is zeroed, so a second release is
/// `TY_EINVAL`, not a double free.
///
/// Errors: `TY_EINVAL` (NULL, released already, or not received through
/// this group handle). Thread-safe (each message is released once).
///
/// # Safety
/// `group` is NULL or a live group handle; `m` NULL or pointing to a
/// `ty_msg_t` (writable).
#[no_mangle]
pub unsafe extern "C" fn ty_group_release(group: *const ty_group_t, m: *mut ty_msg_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? };
        g.live()?;
        // SAFETY: per this function's contract.
        unsafe { release(&g.messages, m, "group") }
    })
}

/// Opens a subscription of the group: one receive over `n` partitions of
/// its topic (at `partitions`; NULL with `n` 0: every partition), as
/// `ty_subscription_open` does for the default group. Receive with
/// `ty_subscription_receive` (and its `_cancel`, `_try` forms), close with
/// `ty_subscription_close` (before the group handle); its messages are
/// released with `ty_group_release(group, m)`.
///
/// On success `*out` is the new subscription; NULL on failure. Errors:
/// `TY_EINVAL` (NULL, a partition out of range, `partitions` NULL with
/// `n` > 0). Thread-safe.
///
/// # Safety
/// `group` is NULL or a live group handle; `partitions` NULL or readable
/// for `n` values; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ty_group_subscribe(
    group: *const ty_group_t,
    partitions: *const u32,
    n: usize,
    out: *mut *mut ty_subscription_t,
) -> c_int {
    guard(|| {
        let out = arg_out(out, "out")?;
        // SAFETY: not NULL, writable per the contract.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? };
        // SAFETY: per this function's contract.
        let sub = g.live()?.subscribe(unsafe { partition_set(partitions, n)? })?;
        let topic: *const ty_topic_t = &*g.messages;
        let boxed = Box::new(ty_subscription_t { magic: SUBSCRIPTION_MAGIC, sub, topic });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(boxed)) };
        Ok(TY_OK)
    })
}

/// The number of messages waiting for the group in `partition` now (a
/// snapshot), or a negative error: `TY_EINVAL` (bad handle or partition),
/// `TY_ECORRUPT`. Thread-safe.
///
/// # Safety
/// `group` is NULL or a live group handle.
#[no_mangle]
pub unsafe extern "C" fn ty_group_depth(group: *const ty_group_t, partition: u32) -> i64 {
    let mut depth = 0i64;
    let rc = guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? };
        depth = g.live()?.depth(partition)? as i64;
        Ok(TY_OK)
    });
    if rc == TY_OK {
        depth
    } else {
        i64::from(rc)
    }
}

/// Copies the group's name, NUL-terminated, into `buf` (`cap` bytes; 65
/// always suffice) and returns its length without the NUL, or a negative
/// error: `TY_EINVAL` (bad handle, `buf` NULL, or `cap` too small).
/// Thread-safe.
///
/// # Safety
/// `group` is NULL or a live group handle; `buf` NULL or writable for `cap`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ty_group_name(group: *const ty_group_t, buf: *mut c_char, cap: usize) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? };
        let name = g.live()?.name().as_bytes();
        if buf.is_null() || cap <= name.len() {
            return Err(invalid(format!("buf is NULL or shorter than {} bytes", name.len() + 1)));
        }
        // SAFETY: `buf` is writable for `cap > name.len()` bytes, per the
        // contract; the name is another allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), name.len());
            buf.add(name.len()).write(0);
        }
        Ok(name.len() as c_int)
    })
}

/// Closes a group handle: this member leaves (the group itself stays
/// joined, see `ty_group_t`), unless `ty_group_leave` did already.
/// Messages received through it and not released are released. NULL is
/// ignored. No other call may use `group` during or after this one; its
/// subscriptions must be closed first. Leaving here cannot report an error
/// (the region's control lock not had within 5 s: the process then stays
/// recorded as a member until it exits); `ty_group_leave` reports it.
///
/// The group itself keeps its position after its last member closed, for
/// the region's group lease; then recovery drops it.
///
/// # Safety
/// `group` is NULL or a handle from `ty_topic_join_group`, not used again
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn ty_group_close(group: *mut ty_group_t) {
    guard_void(|| {
        // SAFETY: per this function's contract.
        if unsafe { self::group(group) }.is_ok() {
            // SAFETY: a live handle made by `Box::into_raw` in
            // `ty_topic_join_group`; nobody uses it any more, per the
            // contract.
            let mut b = unsafe { Box::from_raw(group) };
            b.magic = DEAD;
            // The messages go back before the membership ends: its end
            // releases every hold this process still has in the group, so
            // a message released after it would be released twice (through
            // another group's hold of the chunk, or into the pool again).
            b.messages.give_back();
            b.messages.magic = DEAD;
            drop(b);
        }
    })
}

/// Leaves the group: releases the messages received through this handle
/// and not released (their `data` pointers become invalid), then ends the
/// handle's share of this process's membership. Returns 1 if that ended
/// the membership (this was the process's last handle of the group), 0 if
/// other handles of the group in this process keep it, or a negative
/// error. Ending the membership takes the process out of the group's
/// record: the group's messages go to its other members from now on. A
/// group left without a live member keeps its position (the messages
/// queued for it stay queued) for the region's group lease: a member that
/// joins within it goes on where the group was; then recovery drops it.
/// `ty_group_close` leaves too, but cannot report.
///
/// The handle stays allocated: every later call with it fails with
/// `TY_ECLOSED`, but `ty_group_close`, which must still free it.
///
/// Errors: `TY_EINVAL` (NULL or not a group handle), `TY_ECLOSED` (it left
/// already), `TY_ETIMEDOUT` (the region's control lock stayed taken 5 s:
/// the handle has left, but the process stays recorded as a member until
/// it exits). Not thread-safe for one handle: no other call may use
/// `group` during this one, and its subscriptions must be closed first.
///
/// ```c
/// ty_group_t* audit;
/// ty_topic_join_group(orders, "audit", &audit);
/// /* ... ty_group_receive, ty_group_release ... */
/// int rc = ty_group_leave(audit);   /* 1: this process is no member any more */
/// if (rc < 0) fprintf(stderr, "leave: %s\n", ty_last_error());
/// ty_group_close(audit);            /* frees the handle */
/// ```
///
/// # Safety
/// `group` is NULL or a live group handle that no other call uses during
/// this one.
#[no_mangle]
pub unsafe extern "C" fn ty_group_leave(group: *mut ty_group_t) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { self::group(group)? };
        // SAFETY: a live handle (checked just now) that no other call uses
        // during this one, per the contract.
        let g = unsafe { &mut *group };
        g.live()?;
        // Its messages first (see `ty_group_close`).
        g.messages.give_back();
        let member = g.group.take().ok_or_else(|| invalid("unreachable: checked above"))?;
        Ok(c_int::from(member.leave()?))
    })
}

/// The messages of the group dropped unread from its full partitions by
/// publishers of a `TY_TOPIC_OVERRUN` topic (`ty_topic_create_flags`),
/// since the group was created: 0 on other topics. Each group has its own
/// count: a slow group misses messages, a fast one does not. A negative
/// error: `TY_EINVAL` (bad handle), `TY_ECLOSED` (the handle left).
/// Thread-safe.
///
/// ```c
/// int64_t missed = ty_group_missed(audit);
/// ```
///
/// # Safety
/// `group` is NULL or a live group handle.
#[no_mangle]
pub unsafe extern "C" fn ty_group_missed(group: *const ty_group_t) -> i64 {
    let mut missed = 0i64;
    let rc = guard(|| {
        // SAFETY: per this function's contract.
        let g = unsafe { self::group(group)? };
        missed = i64::try_from(g.live()?.missed()).unwrap_or(i64::MAX);
        Ok(TY_OK)
    });
    if rc == TY_OK {
        missed
    } else {
        i64::from(rc)
    }
}

/// Bytes of `ty_group_info_t.name`: a group name (1 to 64 bytes) and its
/// NUL.
pub const TY_GROUP_NAME_LEN: usize = 65;

/// One consumer group of a topic, as `ty_topic_groups` lists it: a
/// snapshot.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ty_group_info_t {
    /// Its name, NUL-terminated ("" for the default group).
    pub name: [c_char; TY_GROUP_NAME_LEN],
    /// Its group slot (0: the default group).
    pub slot: u32,
    /// The slot's generation (a group dropped and created again in the
    /// same slot has the next one).
    pub generation: u32,
    /// 1 while the group is being dropped, else 0.
    pub draining: u32,
    /// Its member processes, as its record holds them (dead ones until
    /// recovery forgets them). 0 for the default group, which has no
    /// membership record: its consumers are whoever calls `ty_subscribe`.
    pub members: u32,
    /// How many of `members` are alive now.
    pub live_members: u32,
    /// When the group was first seen without a live member, in ns since
    /// the Unix epoch (0: it has one, or it is the default group).
    /// Recovery drops the group once this is older than the region's group
    /// lease.
    pub empty_since_unix_ns: u64,
    /// Messages consumed through the group so far, all partitions.
    pub position: u64,
    /// Messages waiting for the group now, all partitions.
    pub lag: u64,
    /// Messages of the group dropped unread by overrunning publishers
    /// (`TY_TOPIC_OVERRUN`).
    pub missed: u64,
}

fn group_info(g: &GroupReport) -> ty_group_info_t {
    let mut name = [0 as c_char; TY_GROUP_NAME_LEN];
    for (d, &b) in name.iter_mut().zip(g.name.as_bytes().iter().take(TY_GROUP_NAME_LEN - 1)) {
        *d = b as c_char;
    }
    ty_group_info_t {
        name,
        slot: g.slot as u32,
        generation: g.generation,
        draining: u32::from(g.draining),
        members: g.members.len() as u32,
        live_members: g.live_members as u32,
        empty_since_unix_ns: g.empty_since_unix_ns,
        position: g.position,
        lag: g.lag,
        missed: g.missed,
    }
}

/// Lists the topic's consumer groups, the default group (slot 0, named
/// "") included while the topic has it: fills `out[0]` to `out[cap - 1]`
/// (as many as there are) and returns how many groups the topic has, which
/// may be more than `cap` (call again with a larger array; `out` may be
/// NULL when `cap` is 0, to count). In slot order. A snapshot of the whole
/// region is taken for it (as `tyctl` does): a monitoring call, not one
/// for every message. Negative on error: `TY_EINVAL`, `TY_ECORRUPT`.
/// Thread-safe.
///
/// ```c
/// ty_group_info_t gi[8];
/// int n = ty_topic_groups(orders, gi, 8);
/// for (int i = 0; i < n && i < 8; i++)
///     printf("%s: lag %llu, %u members, missed %llu\n", gi[i].name,
///            (unsigned long long)gi[i].lag, gi[i].members, (unsigned long long)gi[i].missed);
/// ```
///
/// # Safety
/// `topic` is NULL or a live topic handle; `out` NULL (with `cap` 0) or
/// writable for `cap` entries.
#[no_mangle]
pub unsafe extern "C" fn ty_topic_groups(
    topic: *const ty_topic_t,
    out: *mut ty_group_info_t,
    cap: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { self::topic(topic)? };
        if cap > 0 && out.is_null() {
            return Err(invalid("out is NULL"));
        }
        let report = t.topic.region().inspect()?;
        let groups = report
            .topics
            .into_iter()
            .find(|r| r.info.name == t.topic.name())
            .map(|r| r.groups)
            .unwrap_or_default();
        for (i, g) in groups.iter().take(cap).enumerate() {
            // SAFETY: `i < cap`; `out` is writable for `cap` entries per the
            // contract.
            unsafe { out.add(i).write(group_info(g)) };
        }
        Ok(c_int::try_from(groups.len()).unwrap_or(c_int::MAX))
    })
}
