//! How a hybrid `RpcBuffer`'s reader thread waits for packets, between
//! real processes: it learns how far apart they come, and stays awake
//! for a peer that sends every 100 µs. In a test binary of its own: the
//! test runs its two threads at real-time priority where it may (so that
//! the CI's other work does not stretch the gaps it measures), which
//! would hold up tests running beside it.
#![cfg(not(tachyon_loom))]

mod common;

use common::{channel_files, spawn, unique, wait_child, wait_for, LIMIT};
use std::time::Duration;
use tachyon::primitives::RpcBuffer;
use tachyon::sync::WaitPolicy;

const ENTRY: &str = "hybrid_wait_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(30));

#[test]
fn hybrid_wait_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    match role.as_str() {
        // An echo server for the parent, until the parent goes away.
        "echo" => {
            let rpc = RpcBuffer::builder(name)
                .wait_policy(WaitPolicy::Hybrid)
                .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
                .open()
                .unwrap();
            assert!(wait_for(Duration::from_secs(120), || rpc.closed().is_some()));
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// The thread named `comm` in process `pid`: its id, and its voluntary
/// context switches (sleeps) so far.
fn thread_named(pid: u32, comm: &str) -> Option<(i32, u64)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    for task in tasks.flatten() {
        let path = task.path();
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim_end() == comm) {
            let status = std::fs::read_to_string(path.join("status")).unwrap();
            let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
            let tid = task.file_name().to_str().unwrap().parse().unwrap();
            return Some((tid, line.split_whitespace().nth(1).unwrap().parse().unwrap()));
        }
    }
    None
}

/// How a thread is scheduled: the CPUs it may run on, its policy and its
/// priority.
struct Scheduling(libc::cpu_set_t, libc::c_int, libc::sched_param);

/// The scheduling of thread `tid` (0: the calling one).
fn scheduling_of(tid: i32) -> Option<Scheduling> {
    // SAFETY: `cpu_set_t` and `sched_param` are plain data (all zeros
    // valid); the calls write only into the structures passed, which live
    // until they return.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut param: libc::sched_param = std::mem::zeroed();
        let policy = libc::sched_getscheduler(tid);
        let ok = libc::sched_getaffinity(tid, std::mem::size_of_val(&set), &mut set) == 0
            && policy >= 0
            && libc::sched_getparam(tid, &mut param) == 0;
        ok.then_some(Scheduling(set, policy, param))
    }
}

/// Schedules thread `tid` (0: the calling one) as `how` says; whether the
/// kernel allowed it (real-time priority needs root).
fn schedule(tid: i32, how: &Scheduling) -> bool {
    // SAFETY: the calls read the structures passed, which live until they
    // return, and change only the scheduling of thread `tid`.
    unsafe {
        libc::sched_setaffinity(tid, std::mem::size_of_val(&how.0), &how.0) == 0
            && libc::sched_setscheduler(tid, how.1, &how.2) == 0
    }
}

/// On CPU `cpu` alone, at real-time priority 1 (`SCHED_FIFO`): ahead of
/// every ordinary process on that CPU.
fn quiet_on(cpu: usize) -> Scheduling {
    // SAFETY: all zeros is an empty CPU set; `CPU_SET` writes inside it
    // (it ignores a CPU beyond the set's size).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    Scheduling(set, libc::SCHED_FIFO, libc::sched_param { sched_priority: 1 })
}

/// A hybrid reader thread spins for about twice its recent wait for a
/// packet (at most 500 µs), not only the policy's 10 µs: a peer whose
/// requests come about 100 µs apart finds it awake, and most calls cost it
/// no sleep and no wake-up (with the policy's spin alone, every call did:
/// about one sleep per call).
#[test]
fn a_hybrid_reader_thread_stays_awake_for_requests_that_come_100_us_apart() {
    let name = unique("rpc-hybrid-awake");
    let rpc = RpcBuffer::builder(&name).wait_policy(WaitPolicy::Hybrid).create().unwrap();
    let mut child = spawn(ENTRY, "echo", &name);
    assert!(wait_for(LIMIT, || rpc.is_connected()), "the child connected");
    let pid = child.id();
    // The child's reader thread ("tachyon-rpc-opener", cut to 15 bytes),
    // once it has its name.
    let reader = "tachyon-rpc-ope";
    assert!(wait_for(LIMIT, || thread_named(pid, reader).is_some()), "the child's reader thread");
    let sleeps = || thread_named(pid, reader).unwrap().1;
    // The caller here and the child's reader thread each on a CPU of their
    // own (with two or more), ahead of everything else where allowed (as
    // root): a CPU shared with other work makes the gaps milliseconds long,
    // and the thread then rightly sleeps through them. This thread is
    // scheduled as it was when the test ends, passed or not.
    struct Restore(Option<Scheduling>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(was) = &self.0 {
                schedule(0, was);
            }
        }
    }
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let restore = Restore(scheduling_of(0).filter(|_| two_cpus));
    let quiet = restore.0.is_some()
        && schedule(0, &quiet_on(0))
        && schedule(thread_named(pid, reader).unwrap().0, &quiet_on(1));
    let pause = || {
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_micros(100) {
            std::hint::spin_loop();
        }
    };
    let call = || {
        assert_eq!(rpc.request(b"awake", LONG).unwrap(), b"awake");
        pause();
    };
    // Tries until one shows it, 30 at most (without real-time priority
    // other tests and processes come and go).
    let calls = 300;
    let mut slept = Vec::new();
    for _ in 0..30 {
        (0..50).for_each(|_| call()); // what the thread learns from
        let before = sleeps();
        (0..calls).for_each(|_| call());
        slept.push(sleeps() - before);
        if slept.last() < Some(&(calls / 2)) {
            break;
        }
    }
    drop(restore);
    assert!(
        slept.last() < Some(&(calls / 2)),
        "the reader thread slept {slept:?} times in {calls} calls (real-time priority: {quiet})"
    );
    drop(rpc);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0), "the child saw the channel close");
    assert!(wait_for(LIMIT, || channel_files(&name).is_empty()), "left behind: {:?}", channel_files(&name));
}
