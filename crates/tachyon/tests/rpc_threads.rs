//! `RpcBuilder::thread_spawner`: an end whose threads the caller starts.
//! Every thread the end starts goes through the spawner, and every handler
//! runs on one of them, across processes (a server in a child, with a
//! spawner, serving this process's calls while handlers run long and
//! overlap); once the end is dropped its threads end; a spawner that
//! fails or panics fails `create` with `Error::Io` and leaves the name
//! free; one that starts no handler thread at all still gets every request
//! answered; and `serve_async`'s watcher is started by it too.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, wait_for, LIMIT};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;
use tachyon::primitives::rpc::ThreadWork;
use tachyon::{Error, RpcBuffer};

const ENTRY: &str = "threads_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(30));

/// What a recording spawner saw: the threads it started (by id, once
/// they run), the names it was asked for, and those whose work returned.
#[derive(Default)]
struct Seen {
    ids: Mutex<BTreeSet<String>>,
    names: Mutex<Vec<String>>,
    ended: Mutex<Vec<String>>,
}

fn id_text(id: ThreadId) -> String {
    format!("{id:?}")
}

impl Seen {
    /// A spawner that starts each thread with `std` and records it; it
    /// refuses the names for which `refuse` says so.
    fn spawner(
        self: &Arc<Self>,
        refuse: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> impl Fn(&str, ThreadWork) -> std::io::Result<()> + Send + Sync + 'static {
        let seen = Arc::clone(self);
        move |name: &str, work: ThreadWork| {
            seen.names.lock().unwrap().push(name.to_owned());
            if refuse(name) {
                return Err(std::io::Error::other(format!("no thread for {name}")));
            }
            let seen = Arc::clone(&seen);
            let name = name.to_owned();
            std::thread::Builder::new().name(format!("custom-{name}")).spawn(move || {
                seen.ids.lock().unwrap().insert(id_text(std::thread::current().id()));
                work();
                seen.ended.lock().unwrap().push(name);
            })?;
            Ok(())
        }
    }

    fn mine(&self) -> bool {
        self.ids.lock().unwrap().contains(&id_text(std::thread::current().id()))
    }

    fn ended(&self, name: &str) -> bool {
        self.ended.lock().unwrap().iter().any(|n| n == name)
    }
}

/// The child's handler: `slow:MS` sleeps MS ms first; every answer is `1`
/// if it ran on a thread the spawner started, else `0`; `names:` answers
/// the names the spawner was asked for.
fn handler(seen: Arc<Seen>) -> impl Fn(u64, &[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static {
    move |_id, msg: &[u8]| {
        if msg == b"names:" {
            return Ok(seen.names.lock().unwrap().join(",").into_bytes());
        }
        if let Some(ms) = msg.strip_prefix(b"slow:") {
            let ms: u64 = std::str::from_utf8(ms).unwrap().parse().unwrap();
            std::thread::sleep(Duration::from_millis(ms));
        }
        Ok(vec![u8::from(seen.mine()) + b'0'])
    }
}

#[test]
fn threads_entry() {
    let Some((role, args)) = common::role() else { return };
    match role.as_str() {
        // A client whose threads a spawner starts; it serves the parent's
        // calls until the parent closes, then checks that once its end is
        // dropped the reader thread and its standby end, and every other
        // thread. (That the drop waits for the reader's work to return is
        // `threads.rs`'s unit test: the spawner's own code after the work,
        // which records the end here, may run after the drop returned.)
        "opener" => {
            let seen = Arc::new(Seen::default());
            let rpc = RpcBuffer::builder(args.str("name"))
                .handler(handler(Arc::clone(&seen)))
                .thread_spawner(seen.spawner(|_| false))
                .open()
                .unwrap();
            assert!(wait_for(Duration::from_secs(120), || rpc.closed().is_some()));
            drop(rpc);
            assert!(wait_for(LIMIT, || seen.ended("tachyon-rpc-opener")), "the reader thread ended");
            assert!(wait_for(LIMIT, || seen.ended("tachyon-rpc-standby")), "and its standby");
            let started = seen.ids.lock().unwrap().len();
            assert!(wait_for(LIMIT, || seen.ended.lock().unwrap().len() == started), "every thread ended");
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// A server in this process; a child opens the channel with a spawner
/// and answers calls from four threads at once, short ones and ones that
/// run longer than the reader's turn (so the standby reads in its place
/// and hands requests to the handler threads, and to extra ones while
/// those are busy): every handler ran on a thread the spawner started.
#[test]
fn every_handler_runs_on_a_thread_the_spawner_started() {
    let name = unique("rpc-threads");
    let rpc = RpcBuffer::create(&name).unwrap();
    let mut child = spawn(ENTRY, "opener", &name);
    assert!(wait_for(LIMIT, || rpc.is_connected()), "the child connected");
    std::thread::scope(|s| {
        for t in 0..4 {
            let rpc = &rpc;
            s.spawn(move || {
                for i in 0..40 {
                    let msg = if (i + t) % 5 == 0 { b"slow:20".as_slice() } else { b"quick" };
                    assert_eq!(rpc.request(msg, LONG).unwrap(), b"1", "thread {t}, call {i}");
                }
            });
        }
    });
    let names = String::from_utf8(rpc.request(b"names:", LONG).unwrap()).unwrap();
    for want in
        ["tachyon-rpc-opener", "tachyon-rpc-standby", "tachyon-rpc-handler-0", "tachyon-rpc-handler-1"]
    {
        assert!(names.split(',').any(|n| n == want), "{want} not in {names}");
    }
    drop(rpc);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0), "the child's checks after the close");
}

/// A spawner that cannot start the reader thread fails `create` (and
/// `open`) with `Error::Io`, as does one that panics; the name is left
/// free for the next `create`.
#[test]
fn a_spawner_that_fails_or_panics_fails_the_start() {
    let name = unique("rpc-threads-fail");
    let seen = Arc::new(Seen::default());
    let refused =
        RpcBuffer::builder(&name).thread_spawner(seen.spawner(|n| n == "tachyon-rpc-owner")).create();
    assert!(matches!(&refused, Err(Error::Io { .. })), "{refused:?}");
    let panics = RpcBuffer::builder(&name)
        .thread_spawner(|name: &str, _work: ThreadWork| -> std::io::Result<()> { panic!("no {name}") })
        .create();
    assert!(matches!(&panics, Err(Error::Io { .. })), "{panics:?}");
    // The name is free, and an opener's spawner failing is the same.
    let _server =
        RpcBuffer::builder(&name).handler(|_id, m: &[u8]| Ok::<_, String>(m.to_vec())).create().unwrap();
    let refused =
        RpcBuffer::builder(&name).thread_spawner(seen.spawner(|n| n == "tachyon-rpc-opener")).open();
    assert!(matches!(&refused, Err(Error::Io { .. })), "{refused:?}");
    let client = RpcBuffer::builder(&name).connect_timeout(Some(LIMIT)).open().unwrap();
    assert_eq!(client.request(b"still here", LONG).unwrap(), b"still here");
}

/// A spawner that starts the reader but no handler thread, kept ready or
/// extra: requests that the standby hands on (while a slow handler runs
/// on the reader thread) still get answered, on the thread that read them.
#[test]
fn with_no_handler_threads_every_request_is_still_answered() {
    let name = unique("rpc-threads-none");
    let seen = Arc::new(Seen::default());
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let server = RpcBuffer::builder(&name)
        .handler(move |_id, msg: &[u8]| {
            counted.fetch_add(1, Ordering::Relaxed);
            if msg == b"slow" {
                std::thread::sleep(Duration::from_millis(30));
            }
            Ok::<_, String>(msg.to_vec())
        })
        .thread_spawner(seen.spawner(|n| n.starts_with("tachyon-rpc-handler")))
        .create()
        .unwrap();
    let client = RpcBuffer::open(&name).unwrap();
    std::thread::scope(|s| {
        for t in 0..3 {
            let client = &client;
            s.spawn(move || {
                for i in 0..20 {
                    let msg = if i % 4 == t { b"slow".as_slice() } else { b"quick" };
                    assert_eq!(client.request(msg, LONG).unwrap(), msg, "thread {t}, call {i}");
                }
            });
        }
    });
    assert_eq!(ran.load(Ordering::Relaxed), 60);
    let names = seen.names.lock().unwrap().clone();
    assert!(names.iter().any(|n| n == "tachyon-rpc-handler-0"), "asked for: {names:?}");
    drop((client, server));
}

/// `serve_async`'s watcher (which wakes the serving future when the
/// channel closes) is started by the spawner too, and the future still
/// ends when the channel closes.
#[test]
fn serve_async_starts_its_watcher_with_the_spawner() {
    let name = unique("rpc-threads-async");
    let seen = Arc::new(Seen::default());
    let server = RpcBuffer::builder(&name).thread_spawner(seen.spawner(|_| false)).create().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let serving = rt.spawn(server.serve_async(|_id, msg: Vec<u8>| async move { Ok::<_, String>(msg) }));
    let client = RpcBuffer::open(&name).unwrap();
    let answered = rt.block_on(async {
        tokio::task::spawn_blocking(move || client.request(b"async", LONG)).await.unwrap()
    });
    assert_eq!(answered.unwrap(), b"async");
    assert!(seen.names.lock().unwrap().iter().any(|n| n == "tachyon-rpc-serve-async"));
    server.close();
    let ended = rt.block_on(async { tokio::time::timeout(LIMIT, serving).await });
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}
