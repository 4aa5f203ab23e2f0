//! RpcBuffer between real processes: both directions, sizes around the
//! packet room and 4 MiB, nested calls, concurrency, handler errors and
//! panics, timeouts, notifications, a SIGKILLed peer, async requests; a
//! server serving client processes one after another (one leaves, one
//! exits, one is SIGKILLed mid-call), one at a time.
#![cfg(not(tachyon_loom))]

mod common;

use common::{block_on, channel_files, kill, spawn, unique, wait_child, wait_for, LIMIT};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tachyon::primitives::RpcBuffer;
use tachyon::sync::WaitPolicy;
use tachyon::Error;

const ENTRY: &str = "child_entry";
const LONG: Option<Duration> = Some(Duration::from_secs(30));
/// Small nodes, so that multi-packet messages are cheap to make.
const NODE: usize = 256;
const ROOM: usize = NODE - tachyon::primitives::rpc::PACKET_HEADER;

/// The child's handler: a little command language.
fn serve(
    client: tachyon::primitives::RpcClient,
    notes: Arc<AtomicU64>,
) -> impl Fn(u64, &[u8]) -> Result<Vec<u8>, String> {
    move |_id, msg: &[u8]| {
        let (cmd, rest) = msg.split_at(msg.iter().position(|&b| b == b':').map_or(msg.len(), |i| i + 1));
        match cmd {
            b"add:" => Ok(vec![rest[0].wrapping_add(rest[1])]),
            b"echo:" => Ok(rest.to_vec()),
            // As many bytes as `rest` says (a u32), from a short request.
            b"bytes:" => Ok((0..u32::from_le_bytes(rest.try_into().unwrap())).map(|i| i as u8).collect()),
            b"fail:" => Err("boom".to_owned()),
            b"panic:" => panic!("kaboom"),
            b"slow:" => {
                std::thread::sleep(Duration::from_secs(1));
                Ok(b"late".to_vec())
            }
            b"hang:" => {
                std::thread::sleep(LIMIT);
                Ok(vec![])
            }
            b"nest:" => {
                // Call the other side from inside a handler.
                let mut inner = client.call(&[b"echo:", rest].concat()).map_err(|e| e.to_string())?;
                inner.splice(0..0, *b"nested:");
                Ok(inner)
            }
            b"note:" => {
                notes.fetch_add(1, Ordering::SeqCst);
                Ok(vec![])
            }
            b"notes:" => Ok(notes.load(Ordering::SeqCst).to_le_bytes().to_vec()),
            _ => Err(format!("unknown command {:?}", String::from_utf8_lossy(cmd))),
        }
    }
}

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    assert!(role == "server" || role == "inline-server", "{role}");
    let rpc = RpcBuffer::builder(name)
        .inline_handlers(role == "inline-server")
        .handler_with_client(|client| serve(client, Arc::new(AtomicU64::new(0))))
        .open()
        .unwrap();
    // The other direction: this process calls the owner too.
    let hello = rpc.request(b"hello", LONG).unwrap();
    assert_eq!(hello, b"owner:hello");
    // Serve until the owner goes away.
    assert!(wait_for(Duration::from_secs(120), || rpc.closed().is_some()));
    std::process::exit(0);
}

/// An owner whose handler answers `owner:` + the message, and a child
/// process serving as the opener.
fn channel(tag: &str) -> (RpcBuffer, Child) {
    channel_as(tag, "server")
}

/// [`channel`] with the child in `role` (`server`, or `inline-server`: its
/// handler runs on its reader thread).
fn channel_as(tag: &str, role: &str) -> (RpcBuffer, Child) {
    channel_with(tag, role, WaitPolicy::default())
}

/// [`channel_as`] with this end waiting as `policy` says.
fn channel_with(tag: &str, role: &str, policy: WaitPolicy) -> (RpcBuffer, Child) {
    let name = unique(tag);
    let greeted = Arc::new(AtomicU64::new(0));
    let hello = Arc::clone(&greeted);
    let rpc = RpcBuffer::builder(&name)
        .node_size(NODE)
        .node_count(8)
        .wait_policy(policy)
        .handler(move |_id, msg: &[u8]| {
            if msg == b"hello" {
                hello.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, String>([b"owner:", msg].concat())
        })
        .create()
        .unwrap();
    let child = spawn(ENTRY, role, &name);
    (rpc, Child(child, name, greeted))
}

/// The opener process, the channel's name, and whether the owner answered
/// the opener's greeting.
struct Child(std::process::Child, String, Arc<AtomicU64>);

fn finish(rpc: RpcBuffer, mut child: Child) {
    // The child's greeting (its first call, made as it starts) is answered
    // before the channel closes, however late the child made it.
    assert!(wait_for(LIMIT, || child.2.load(Ordering::SeqCst) == 1), "the child's greeting came");
    drop(rpc);
    assert_eq!(wait_child(&mut child.0, LIMIT), Some(0), "the child saw the channel close");
    // Whichever end went last (this one closing, or the child exiting)
    // removed the files.
    assert_no_files(&child.1);
}

/// No segment of channel `name` (control or rings) is left, once the
/// handlers still running (they hold the channel) have returned.
fn assert_no_files(name: &str) {
    let left = || channel_files(name);
    assert!(wait_for(LIMIT, || left().is_empty()), "left behind: {:?}", left());
}

#[test]
fn requests_both_ways_with_every_size() {
    let (rpc, child) = channel("rpc-sizes");
    let began = std::time::Instant::now();
    assert_eq!(rpc.request(b"add:\x7b\x0a", LONG).unwrap(), [133]);
    for len in [0, 1, ROOM - 5, ROOM, 2 * ROOM, 3 * ROOM - 5, 3 * ROOM + 1, 4 << 20] {
        let payload: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let msg = [b"echo:".as_slice(), &payload].concat();
        let back = rpc.request(&msg, LONG).unwrap();
        assert_eq!(back.len(), len, "length of a {len}-byte echo");
        assert!(back == payload, "contents of a {len}-byte echo");
    }
    let s = rpc.stats();
    assert!(s.requests_sent >= 9 && s.responses_received >= 9, "{s:?}");
    assert!(s.requests_handled >= 1, "the child's request to us: {s:?}");
    assert!(s.packets_sent > 4 << 20 >> 8, "4 MiB went as many packets: {s:?}");
    assert_eq!(s.latency.count, s.responses_received);
    assert!(s.latency.p50 <= s.latency.p99 && s.latency.min <= s.latency.max);
    // The round trips are real durations (the calls' clock is the TSC,
    // scaled by its calibration): none is zero, and together they took no
    // longer than the calls did by the OS's clock (a histogram rounds up
    // by well under 1 %).
    let took = began.elapsed();
    assert!(s.latency.min > Duration::ZERO, "{s:?}");
    assert!(
        s.latency.max <= took * 101 / 100 && s.latency.mean * s.latency.count as u32 <= took * 101 / 100,
        "{s:?}, {took:?}"
    );
    rpc.reset_stats();
    assert_eq!(rpc.stats().requests_sent, 0);
    finish(rpc, child);
}

#[test]
fn inline_handlers_answer_and_refuse_calls_back_through_their_own_channel() {
    let (rpc, child) = channel_as("rpc-inline", "inline-server");
    assert_eq!(rpc.request(b"add:\x7b\x0a", LONG).unwrap(), [133]);
    let big: Vec<u8> = (0..3 * ROOM + 1).map(|i| i as u8).collect();
    assert_eq!(rpc.request(&[b"echo:".as_slice(), &big].concat(), LONG).unwrap(), big);
    match rpc.request(b"panic:", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("kaboom"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    // A nested call from an inline handler would need the handler's own
    // thread to read its answer: it fails at once (no deadlock, no
    // timeout), and the caller is told why.
    match rpc.request(b"nest:x", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("inline handler"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    // Many calls from several threads, one handler at a time.
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let rpc = &rpc;
            s.spawn(move || {
                for i in 0..50u8 {
                    assert_eq!(
                        rpc.request(&[b'a', b'd', b'd', b':', t, i], LONG).unwrap(),
                        [t.wrapping_add(i)]
                    );
                }
            });
        }
    });
    assert_eq!(rpc.request(b"echo:ok", LONG).unwrap(), b"ok");
    finish(rpc, child);
}

#[test]
fn handler_errors_and_panics_reach_the_caller() {
    let (rpc, child) = channel("rpc-errors");
    match rpc.request(b"fail:", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("boom"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    match rpc.request(b"panic:", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("kaboom"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    // The channel is fine afterwards.
    assert_eq!(rpc.request(b"echo:ok", LONG).unwrap(), b"ok");
    assert!(rpc.stats().errors >= 2);
    finish(rpc, child);
}

#[test]
fn nested_calls_and_notifications() {
    let (rpc, child) = channel("rpc-nested");
    assert_eq!(rpc.request(b"nest:x", LONG).unwrap(), b"nested:owner:echo:x");
    for _ in 0..3 {
        rpc.notify(b"note:").unwrap();
    }
    assert!(wait_for(LIMIT, || rpc.request(b"notes:", LONG).unwrap() == 3u64.to_le_bytes()));
    assert_eq!(rpc.stats().notifications_sent, 3);
    finish(rpc, child);
}

#[test]
fn eight_threads_with_requests_in_flight() {
    // Spinning callers too: one at a time holds the reader role in the
    // lane and reads the others' responses for them.
    for policy in [WaitPolicy::Hybrid, WaitPolicy::Spin] {
        let (rpc, child) = channel_with("rpc-threads", "server", policy);
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let rpc = &rpc;
                s.spawn(move || {
                    for i in 0..100u32 {
                        // Some single-packet, some multi-packet, interleaving.
                        let body: Vec<u8> =
                            format!("{t}-{i}-").into_bytes().repeat(1 + (i as usize % 3) * 40);
                        let msg = [b"echo:".as_slice(), &body].concat();
                        assert_eq!(rpc.request(&msg, LONG).unwrap(), body, "{policy:?}");
                    }
                });
            }
        });
        assert_eq!(rpc.stats().responses_received, 800, "{policy:?}");
        finish(rpc, child);
    }
}

#[test]
fn a_timed_out_request_frees_its_slot_and_its_late_response_is_discarded() {
    let (rpc, child) = channel("rpc-timeout");
    let late = rpc.request(b"slow:", Some(Duration::from_millis(100))).unwrap_err();
    assert!(matches!(late, Error::Timeout { .. }), "{late:?}");
    let text = late.to_string();
    assert!(
        text.contains("after 100ms waiting for the RPC response") && text.contains("wait longer"),
        "{text}"
    );
    assert_eq!(rpc.stats().timeouts, 1);
    assert!(wait_for(LIMIT, || rpc.stats().discarded_responses == 1), "the late response was counted");
    assert_eq!(rpc.request(b"echo:after", LONG).unwrap(), b"after");
    // A timeout too long to add to the call's start is no deadline.
    assert_eq!(rpc.request(b"echo:ever", Some(Duration::MAX)).unwrap(), b"ever");
    finish(rpc, child);
}

/// Waits until a request sent by another thread has gone out (this end's
/// `requests_sent` past `before`), then 50 ms more for its caller to settle
/// into its wait. A fixed sleep alone would let a loaded machine kill the
/// child before the request left: the call would then go to the next
/// client (this end stays open when one leaves) and end in a timeout
/// instead of `PeerDied`.
fn sent_then_settled(rpc: &RpcBuffer, before: u64) {
    assert!(wait_for(LIMIT, || rpc.stats().requests_sent > before), "the request went out");
    std::thread::sleep(Duration::from_millis(50));
}

/// Spinning and hybrid callers read their own responses in the lane
/// (`rpc/lane.rs`: the reader role held from before the request goes out,
/// no slot, no pending map): responses of one packet and of several, into
/// a buffer and in place, error responses, a timeout and its late
/// response, and a peer SIGKILLed while a spinning caller waits end as on
/// the usual path, and the statistics count them alike.
#[test]
fn callers_reading_in_the_lane_get_every_kind_of_answer_and_see_their_peer_die() {
    for policy in [WaitPolicy::Spin, WaitPolicy::Hybrid] {
        let (rpc, mut child) = channel_with("rpc-lane", "server", policy);
        for i in 0..200u32 {
            let msg = i.to_le_bytes();
            assert_eq!(rpc.request(&[b"echo:", &msg[..]].concat(), LONG).unwrap(), msg, "{policy:?}");
        }
        // Several packets each way.
        let big: Vec<u8> = (0..ROOM * 3 + 5).map(|i| i as u8).collect();
        assert_eq!(rpc.request(&[b"echo:", &big[..]].concat(), LONG).unwrap(), big, "{policy:?}");
        // A response of several packets to a request of one (the lane
        // takes requests of one packet only).
        let bytes = [&b"bytes:"[..], &(big.len() as u32).to_le_bytes()].concat();
        assert_eq!(rpc.request(&bytes, LONG).unwrap(), big, "{policy:?}");
        // Into the caller's buffer: one packet, then several.
        let mut into = Vec::with_capacity(8);
        rpc.request_into(b"echo:abc", &mut into, LONG).unwrap();
        assert_eq!(into, b"abc", "{policy:?}");
        rpc.request_into(&bytes, &mut into, LONG).unwrap();
        assert_eq!(into, big, "{policy:?}");
        // In place: one packet, then several (read from the reassembled bytes).
        assert_eq!(rpc.request_with(b"add:\x02\x03", LONG, <[u8]>::to_vec).unwrap(), [5], "{policy:?}");
        let sum = rpc.request_with(&bytes, LONG, |r| r.iter().map(|&b| u64::from(b)).sum::<u64>()).unwrap();
        assert_eq!(sum, big.iter().map(|&b| u64::from(b)).sum::<u64>(), "{policy:?}");
        // An error response, from the handler.
        assert!(matches!(rpc.request(b"fail:", LONG), Err(Error::Remote(t)) if t == "boom"), "{policy:?}");
        let before = rpc.stats();
        // A timeout: the late response is discarded when it comes.
        let late = rpc.request(b"slow:", Some(Duration::from_millis(100))).unwrap_err();
        assert!(matches!(late, Error::Timeout { .. }), "{policy:?}: {late:?}");
        assert!(
            wait_for(LIMIT, || rpc.stats().discarded_responses == before.discarded_responses + 1),
            "{policy:?}: the late response was counted"
        );
        let after = rpc.stats();
        assert_eq!(after.timeouts, before.timeouts + 1, "{policy:?}");
        assert_eq!(after.requests_sent, before.requests_sent + 1, "{policy:?}");
        assert_eq!(after.responses_received, before.responses_received, "{policy:?}");
        // This end's 207 calls that were answered (one with an error).
        assert_eq!(after.responses_received, 207, "{policy:?}");
        assert_eq!(after.latency.count, 207, "{policy:?}");
        assert_eq!(after.errors, 1, "{policy:?}");
        // The peer dies while this end waits (a spinning caller in the
        // lane the whole time, a hybrid one asleep on its slot).
        std::thread::scope(|s| {
            let pending = s.spawn(|| rpc.request(b"hang:", LONG));
            sent_then_settled(&rpc, after.requests_sent);
            kill(&mut child.0);
            let r = pending.join().unwrap();
            assert!(matches!(r, Err(Error::PeerDied)), "{policy:?}: {r:?}");
        });
        drop(rpc);
        assert_no_files(&child.1);
    }
}

/// Closing an end while one of its callers waits in the lane (spin: for
/// its whole wait; hybrid: during its spin budget, then on its slot)
/// fails that call with `Closed` at once, not at its deadline, and the
/// handle drops (its reader thread, blocked on the role the caller held,
/// is joined).
#[test]
fn closing_an_end_fails_a_call_waiting_in_the_lane() {
    for policy in [WaitPolicy::Spin, WaitPolicy::Hybrid] {
        let (rpc, mut child) = channel_with("rpc-lane-close", "server", policy);
        assert_eq!(rpc.request(b"echo:up", LONG).unwrap(), b"up", "{policy:?}");
        std::thread::scope(|s| {
            let pending = s.spawn(|| rpc.request(b"hang:", LONG));
            std::thread::sleep(Duration::from_millis(100));
            rpc.close();
            // A call that missed the close would end 20 s later with the
            // hung handler's (empty) answer, not with `Closed`.
            let r = pending.join().unwrap();
            assert!(matches!(r, Err(Error::Closed)), "{policy:?}: {r:?}");
        });
        // The child's handler hangs: it goes, then the last live end
        // removes the channel's files.
        kill(&mut child.0);
        drop(rpc);
        assert_no_files(&child.1);
    }
}

/// A caller that reads for itself outside the lane (spin waits with a
/// `CancelToken`, futex waits) keeps the reader thread standing aside for
/// as long as it waits; it ticks in its place, so a peer SIGKILLed
/// meanwhile fails its call with `PeerDied` at the next tick, not at its
/// deadline.
#[test]
fn a_caller_reading_for_itself_sees_its_peer_die_within_a_tick() {
    for policy in [WaitPolicy::Spin, WaitPolicy::Futex] {
        let (rpc, mut child) = channel_with("rpc-self-reader-kill", "server", policy);
        assert_eq!(rpc.request(b"echo:up", LONG).unwrap(), b"up", "{policy:?}");
        let cancel = tachyon::primitives::CancelToken::new();
        let sent = rpc.stats().requests_sent;
        std::thread::scope(|s| {
            let pending = s.spawn(|| match policy {
                WaitPolicy::Spin => rpc.request_with_cancel(b"hang:", LONG, &cancel),
                _ => rpc.request(b"hang:", LONG),
            });
            sent_then_settled(&rpc, sent);
            kill(&mut child.0);
            let started = std::time::Instant::now();
            let r = pending.join().unwrap();
            assert!(matches!(r, Err(Error::PeerDied)), "{policy:?}: {r:?} after {:?}", started.elapsed());
        });
        drop(rpc);
        assert_no_files(&child.1);
    }
}

#[test]
fn a_sigkilled_client_fails_pending_requests_with_peer_died_and_the_server_stays_open() {
    let (rpc, mut child) = channel("rpc-kill");
    assert_eq!(rpc.request(b"echo:up", LONG).unwrap(), b"up");
    let sent = rpc.stats().requests_sent;
    std::thread::scope(|s| {
        let pending = s.spawn(|| rpc.request(b"hang:", LONG));
        // Let the request go out (to the child's handler), then kill the child.
        sent_then_settled(&rpc, sent);
        kill(&mut child.0);
        // A 30 s request ends with PeerDied, not Timeout.
        assert!(matches!(pending.join().unwrap(), Err(Error::PeerDied)));
    });
    // The server is still open, waiting for its next client: a request
    // now waits for one (here, in vain).
    // (A request sent before the server noticed the death goes to the
    // dead client's session and fails with PeerDied too.)
    assert!(wait_for(LIMIT, || !rpc.is_connected()));
    assert!(rpc.closed().is_none());
    assert!(wait_for(LIMIT, || {
        match rpc.request(b"echo:again", Some(Duration::from_millis(50))) {
            Err(Error::Timeout { .. }) => true,
            Err(Error::PeerDied) => false,
            other => panic!("expected Timeout (or PeerDied), got {other:?}"),
        }
    }));
    drop(rpc);
    assert_no_files(&child.1);
}

#[test]
fn async_requests_under_tokio_and_a_simple_executor() {
    let (rpc, child) = channel("rpc-async");
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let a = rpc.request_async(b"echo:a");
        let b = rpc.request_async(b"add:\x01\x02");
        let (a, b) = tokio::join!(a, b);
        assert_eq!(a.unwrap(), b"a");
        assert_eq!(b.unwrap(), [3]);
        // A cancelled request: its future is dropped before the answer.
        let slow = rpc.request_async(b"slow:");
        assert!(tokio::time::timeout(Duration::from_millis(50), slow).await.is_err());
    });
    assert!(wait_for(LIMIT, || rpc.stats().discarded_responses == 1), "the cancelled slot was freed");
    assert_eq!(block_on(rpc.request_async(b"echo:plain")).unwrap(), b"plain");
    finish(rpc, child);
}

#[test]
fn channel_errors_and_a_closed_peer() {
    let name = unique("rpc-errors-local");
    assert!(matches!(RpcBuffer::open(&name), Err(Error::NotFound { .. })));
    assert!(matches!(RpcBuffer::builder(&name).node_size(32).create(), Err(Error::InvalidArgument { .. })));
    let owner = RpcBuffer::create(&name).unwrap();
    assert!(matches!(RpcBuffer::create(&name), Err(Error::AlreadyExists { .. })));
    let opener = RpcBuffer::builder(&name).handler(|_, _: &[u8]| Ok::<_, String>(vec![1])).open().unwrap();
    // One client at a time, and the error says so.
    let busy = RpcBuffer::open(&name).unwrap_err();
    assert!(matches!(&busy, Error::ChannelBusy { name: n } if *n == name), "{busy:?}");
    assert!(busy.to_string().contains("one client at a time"), "{busy}");
    assert!(busy.to_string().contains("wait until it closes, or create another channel"), "{busy}");
    // A client asking for another geometry is told which field differs.
    let other = RpcBuffer::builder(&name).node_size(512).open().unwrap_err();
    assert!(matches!(other, Error::Incompatible { field: "node_size", .. }), "{other:?}");
    assert!(other.to_string().contains("node_size = 4096, not 512"), "{other}");
    // No handler on the owner: the opener's request is refused, not lost.
    match opener.request(b"x", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("no handler"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
    assert!(matches!(owner.request(&[0; 100], Some(Duration::ZERO)), Err(Error::Timeout { .. }) | Ok(_)));
    drop(opener);
    // Right after a client left, an open that will not wait is told what
    // it would have waited for (unless the server noticed already).
    match RpcBuffer::builder(&name).connect_timeout(Some(Duration::ZERO)).open() {
        Err(e @ Error::Timeout { .. }) => {
            let text = e.to_string();
            assert!(text.contains("the RPC server to let its previous client go"), "{text}");
            assert!(text.contains("wait longer"), "{text}");
        }
        Ok(quick) => drop(quick),
        Err(other) => panic!("expected Timeout or a connection, got {other:?}"),
    }
    // The server lets the client go and takes the next one.
    assert!(owner.closed().is_none(), "a client leaving does not close the server");
    let next = RpcBuffer::builder(&name).handler(|_, _: &[u8]| Ok::<_, String>(vec![2])).open().unwrap();
    assert_eq!(owner.request(b"x", LONG).unwrap(), [2], "the new client answers, on fresh rings");
    // Once the server closes, clients are told so.
    owner.close();
    assert!(matches!(owner.request(b"x", LONG), Err(Error::Closed)));
    next.wait_closed(Some(LIMIT)).unwrap();
    assert!(matches!(next.closed(), Some(Error::Closed)));
    assert!(matches!(next.request(b"x", LONG), Err(Error::Closed)));
    drop(next);
    assert!(matches!(RpcBuffer::open(&name), Err(Error::Closed)), "a closed server takes no client");
    drop(owner);
    assert_no_files(&name);
}

/// A client process: connects to the server `name`, checks one call both
/// ways, then leaves as its role says.
#[test]
fn client_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let client = RpcBuffer::builder(name)
        .handler(|_id, msg: &[u8]| Ok::<_, String>([b"client:", msg].concat()))
        .open()
        .unwrap();
    let me = std::process::id().to_string();
    let answer = client.request(&[b"echo:", me.as_bytes()].concat(), LONG).unwrap();
    assert_eq!(answer, [b"server:", me.as_bytes()].concat(), "this client's own answer, nothing stale");
    match role.as_str() {
        // Leaves by dropping its end.
        "client-drop" => drop(client),
        // Leaves by exiting without dropping it (no destructor runs).
        "client-exit" => {}
        // Waits in a slow call until it is SIGKILLed.
        "client-killed" => {
            let _ = client.request(b"slow:", LONG);
            std::process::exit(3);
        }
        // Stays until the server closes.
        "client-stay" => {
            client.wait_closed(Some(LIMIT)).unwrap();
            assert!(matches!(client.closed(), Some(Error::Closed)));
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

#[test]
fn a_server_serves_clients_one_after_another() {
    let name = unique("rpc-service");
    let slow_calls = Arc::new(AtomicU64::new(0));
    let slow = Arc::clone(&slow_calls);
    let echo_calls = Arc::new(AtomicU64::new(0));
    let echoes = Arc::clone(&echo_calls);
    let server = RpcBuffer::builder(&name)
        .node_size(NODE)
        .node_count(8)
        .handler(move |_id, msg: &[u8]| match msg.split_at(5) {
            (b"echo:", rest) => {
                echoes.fetch_add(1, Ordering::SeqCst);
                Ok([b"server:", rest].concat())
            }
            (b"slow:", _) => {
                slow.fetch_add(1, Ordering::SeqCst);
                // Answers after its client was killed: the answer must go
                // nowhere (least of all to the next client).
                std::thread::sleep(Duration::from_millis(500));
                Ok(b"stale".to_vec())
            }
            _ => Err("unknown".to_owned()),
        })
        .create()
        .unwrap();
    let client = |role: &str| spawn("client_entry", role, &name);
    std::thread::scope(|s| {
        let serving = s.spawn(|| server.serve());
        // 1: calls and drops its end; 2: calls and exits without dropping.
        for role in ["client-drop", "client-exit"] {
            let mut c = client(role);
            assert_eq!(wait_child(&mut c, LIMIT), Some(0), "{role}");
        }
        // 3: SIGKILLed while its call is in the server's handler.
        let mut c = client("client-killed");
        assert!(wait_for(LIMIT, || slow_calls.load(Ordering::SeqCst) == 1), "the slow call arrived");
        kill(&mut c);
        // 4: connects (the slow handler may still be running) and calls.
        let mut c = client("client-stay");
        assert!(wait_for(LIMIT, || server.is_connected()), "client 4 connected");
        // The server calls it too, on the fresh rings.
        assert_eq!(server.request(b"ping", LONG).unwrap(), b"client:ping");
        // A second client meanwhile: refused, saying why.
        let busy = RpcBuffer::open(&name).unwrap_err();
        assert!(matches!(busy, Error::ChannelBusy { .. }), "{busy:?}");
        assert!(busy.to_string().contains("one client at a time"), "{busy}");
        // Closing the server (once it answered client 4's own first call,
        // which the client makes as it starts, however late) ends `serve`
        // and the client's wait.
        assert!(wait_for(LIMIT, || echo_calls.load(Ordering::SeqCst) == 4), "client 4 called");
        server.close();
        assert!(serving.join().unwrap().is_ok());
        assert_eq!(wait_child(&mut c, LIMIT), Some(0), "client 4 saw the server close");
    });
    assert!(server.stats().requests_handled >= 4, "{:?}", server.stats());
    drop(server);
    assert_no_files(&name);
}

#[test]
fn async_handlers_run_without_a_runtime() {
    let name = unique("rpc-async-handler");
    let owner = RpcBuffer::create(&name).unwrap();
    let opener = RpcBuffer::open(&name).unwrap();
    opener.set_async_handler(|id, msg: Vec<u8>| async move {
        if msg.is_empty() {
            Err(format!("empty request {id}"))
        } else {
            Ok(msg.into_iter().rev().collect())
        }
    });
    assert_eq!(owner.request(b"abc", LONG).unwrap(), b"cba");
    assert!(matches!(owner.request(b"", LONG), Err(Error::Remote(t)) if t.starts_with("empty request")));
}

#[test]
fn message_limits_are_agreed_between_the_ends() {
    let name = unique("rpc-limits");
    let owner =
        RpcBuffer::builder(&name).handler(|_, _: &[u8]| Ok::<_, String>(vec![7; 8192])).create().unwrap();
    let opener = RpcBuffer::builder(&name)
        .max_message(1024)
        .handler(|_, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
        .open()
        .unwrap();
    // The owner knows the opener's limit: refused at once, not timed out.
    match owner.request(&[0; 4096], LONG) {
        Err(Error::MessageTooLarge { size: 4096, max: 1024, .. }) => {}
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    assert_eq!(owner.request(&[1; 1000], LONG).unwrap(), vec![1; 1000]);
    // A response too large for the requester comes back as an error.
    match opener.request(b"big answer please", LONG) {
        Err(Error::Remote(text)) => assert!(text.contains("8192"), "{text}"),
        other => panic!("expected Remote, got {other:?}"),
    }
}

/// A server process that creates the channel, says so, and waits to be
/// killed.
#[test]
fn server_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    if role == "server-bye" {
        // Closes from its main thread as soon as the handler has seen
        // "bye", while that handler is still running.
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        let server = RpcBuffer::builder(name)
            .handler(move |_id, msg: &[u8]| {
                if msg == b"bye" {
                    let _ = tx.lock().unwrap().send(());
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok::<_, String>(msg.to_ascii_uppercase())
            })
            .create()
            .unwrap();
        println!("ready");
        rx.recv_timeout(LIMIT).expect("no bye");
        server.close();
        std::process::exit(0);
    }
    assert_eq!(role, "server-killed");
    let server = RpcBuffer::create(name).unwrap();
    println!("ready");
    std::thread::sleep(LIMIT);
    drop(server);
    std::process::exit(4);
}

/// A server process closes while its handler is still answering: the
/// answer reaches the client before the close does.
#[test]
fn a_closing_server_sends_the_answers_its_handlers_are_writing() {
    let name = unique("rpc-bye");
    let mut child = spawn("server_entry", "server-bye", &name);
    assert!(wait_for(LIMIT, || RpcBuffer::open(&name).is_ok_and(|c| c.is_connected())), "server up");
    let client = RpcBuffer::open(&name).unwrap();
    assert_eq!(client.request(b"hello", LONG).unwrap(), b"HELLO");
    assert_eq!(client.request(b"bye", LONG).unwrap(), b"BYE", "the answer written while closing");
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    client.wait_closed(Some(LIMIT)).unwrap();
    assert!(matches!(client.request(b"anyone?", LONG), Err(Error::Closed)));
    drop(client);
    assert_no_files(&name);
}

/// A handler that does not return holds `close` for the default timeout, no
/// longer: `close` returns while the handler still runs (it is let go only
/// afterwards), and the call it was handling fails with `Closed`.
#[test]
fn close_waits_for_a_hung_handler_only_the_default_timeout() {
    use std::sync::atomic::AtomicBool;
    let name = unique("rpc-hung");
    let (started, returned) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (go_on, hold) = std::sync::mpsc::channel::<()>();
    let hold = std::sync::Mutex::new(hold);
    let server = RpcBuffer::builder(&name)
        .default_timeout(Duration::from_millis(200))
        .handler({
            let (started, returned) = (Arc::clone(&started), Arc::clone(&returned));
            move |_id, _msg: &[u8]| {
                started.store(true, Ordering::SeqCst);
                // Held until the test lets it go (or LIMIT, so that a
                // failing test ends).
                let _ = hold.lock().unwrap().recv_timeout(LIMIT);
                returned.store(true, Ordering::SeqCst);
                Ok::<_, String>(Vec::new())
            }
        })
        .create()
        .unwrap();
    let client = RpcBuffer::open(&name).unwrap();
    std::thread::scope(|s| {
        let call = s.spawn(|| client.request(b"hang", LONG));
        assert!(wait_for(LIMIT, || started.load(Ordering::SeqCst)), "the handler runs");
        server.close();
        assert!(!returned.load(Ordering::SeqCst), "close waited for the handler to return");
        assert!(matches!(server.closed(), Some(Error::Closed)));
        assert!(matches!(call.join().unwrap(), Err(Error::Closed)));
        go_on.send(()).unwrap();
    });
}

#[test]
fn a_new_server_removes_what_a_sigkilled_one_left() {
    let name = unique("rpc-server-killed");
    let mut child = spawn("server_entry", "server-killed", &name);
    assert!(wait_for(LIMIT, || RpcBuffer::open(&name).is_ok_and(|c| c.is_connected())), "server up");
    kill(&mut child);
    // Its control segment and the rings it made for the next client are
    // left with a dead attacher; a new server of the name clears them.
    let server = RpcBuffer::create(&name).unwrap();
    let client = RpcBuffer::builder(&name).handler(|_, m: &[u8]| Ok::<_, String>(m.to_vec())).open().unwrap();
    assert_eq!(server.request(b"fresh", LONG).unwrap(), b"fresh");
    drop((client, server));
    assert_no_files(&name);
}

/// Every wait policy, for the tests of the reader role below.
const POLICIES: [tachyon::sync::WaitPolicy; 3] =
    [tachyon::sync::WaitPolicy::Spin, tachyon::sync::WaitPolicy::Hybrid, tachyon::sync::WaitPolicy::Futex];

/// With handler threads, the reader thread runs the handler of a request
/// it read itself; while that handler takes long, the standby thread reads
/// in its place: another request is answered while the first handler is
/// still blocked (it waits for this test to let it go).
#[test]
fn a_slow_handler_on_the_reader_thread_does_not_hold_up_the_next_request() {
    use std::sync::atomic::AtomicBool;
    for policy in POLICIES {
        let name = unique("rpc-standby");
        let started = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let (s, r, f) = (Arc::clone(&started), Arc::clone(&release), Arc::clone(&finished));
        let server = RpcBuffer::builder(&name)
            .wait_policy(policy)
            .handler(move |_id, msg: &[u8]| {
                if msg == b"slow" {
                    s.store(true, Ordering::SeqCst);
                    // Bounded: a broken standby fails the test below, it
                    // does not hang it.
                    wait_for(LIMIT, || r.load(Ordering::SeqCst));
                    f.store(true, Ordering::SeqCst);
                }
                Ok::<_, String>(msg.to_vec())
            })
            .create()
            .unwrap();
        let client = RpcBuffer::builder(&name).wait_policy(policy).open().unwrap();
        std::thread::scope(|scope| {
            let slow = scope.spawn(|| client.request(b"slow", LONG));
            assert!(wait_for(LIMIT, || started.load(Ordering::SeqCst)), "{policy:?}: the slow handler ran");
            assert_eq!(client.request(b"quick", LONG).unwrap(), b"quick", "{policy:?}");
            assert!(
                !finished.load(Ordering::SeqCst),
                "{policy:?}: answered while the slow handler still ran"
            );
            release.store(true, Ordering::SeqCst);
            assert_eq!(slow.join().unwrap().unwrap(), b"slow", "{policy:?}");
        });
        drop(client);
        drop(server);
        assert_no_files(&name);
    }
}

/// Both ends call each other from several threads through rings of two
/// small nodes, with messages of several packets: the reader threads run
/// handlers whose responses wait for ring room, and the standby threads
/// read meanwhile, so every call is answered (no end stops reading while
/// its reader thread writes).
#[test]
fn both_ends_flooding_each_other_through_full_rings_get_every_answer() {
    for policy in POLICIES {
        let name = unique("rpc-flood");
        let echo = |_id, msg: &[u8]| Ok::<_, String>(msg.to_vec());
        let server = RpcBuffer::builder(&name)
            .wait_policy(policy)
            .node_count(2)
            .node_size(NODE)
            .handler(echo)
            .create()
            .unwrap();
        let client = RpcBuffer::builder(&name).wait_policy(policy).handler(echo).open().unwrap();
        std::thread::scope(|scope| {
            for (end, rpc) in [(0u8, &server), (1u8, &client)] {
                for t in 0..3u8 {
                    scope.spawn(move || {
                        for i in 0..40u8 {
                            let msg = vec![end ^ t ^ i; ROOM * 2 + usize::from(i)];
                            assert_eq!(rpc.request(&msg, LONG).unwrap(), msg, "{policy:?} end {end}");
                        }
                    });
                }
            }
        });
        assert_eq!(server.stats().responses_received, 120, "{policy:?}");
        assert_eq!(client.stats().responses_received, 120, "{policy:?}");
        drop(client);
        drop(server);
        assert_no_files(&name);
    }
}

/// A futex requester reads its response itself, asleep on the ring; when
/// the reader role stays taken (here by an inline handler that blocks)
/// while its response waits in the ring, it leaves the reading and sleeps
/// on its slot instead: its deadline still ends the call, while the
/// handler is still running, and the channel works once it returns.
#[test]
fn a_futex_caller_whose_reader_role_is_busy_still_times_out_and_the_channel_goes_on() {
    use std::sync::atomic::AtomicBool;
    use tachyon::sync::WaitPolicy;
    let name = unique("rpc-futex-busy-role");
    let running = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (run, rel) = (Arc::clone(&running), Arc::clone(&release));
    let server = RpcBuffer::builder(&name)
        .wait_policy(WaitPolicy::Futex)
        .inline_handlers(true)
        .handler(move |_id, msg: &[u8]| {
            if msg == b"block" {
                run.store(true, Ordering::SeqCst);
                // Bounded: the test releases it, or it gives up.
                wait_for(LIMIT, || rel.load(Ordering::SeqCst));
                run.store(false, Ordering::SeqCst);
            }
            Ok::<_, String>(msg.to_vec())
        })
        .create()
        .unwrap();
    let client = RpcBuffer::builder(&name)
        .wait_policy(WaitPolicy::Futex)
        .handler(|_id, msg: &[u8]| Ok::<_, String>(msg.to_vec()))
        .open()
        .unwrap();
    assert_eq!(server.request(b"before", LONG).unwrap(), b"before");
    std::thread::scope(|s| {
        let blocked = s.spawn(|| client.request(b"block", LONG));
        assert!(wait_for(LIMIT, || running.load(Ordering::SeqCst)), "the inline handler runs");
        // The client answers at once; the answer waits in the server's ring
        // behind the reader role that the blocked handler holds.
        match server.request(b"meanwhile", Some(Duration::from_millis(200))) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("expected a timeout while the role is busy, got {other:?}"),
        }
        assert!(running.load(Ordering::SeqCst), "it returned while the handler still ran");
        release.store(true, Ordering::SeqCst);
        assert_eq!(blocked.join().unwrap().unwrap(), b"block");
    });
    assert_eq!(server.request(b"after", LONG).unwrap(), b"after");
    assert_eq!(server.stats().discarded_responses, 1, "the late answer was discarded");
    drop((client, server));
}
