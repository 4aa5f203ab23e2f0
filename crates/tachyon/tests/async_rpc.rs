//! `RpcBuffer::serve_async`: async handlers polled by the server's own
//! runtime, so that they can use tokio timers; clients in another process.
#![cfg(not(tachyon_loom))]

mod common;

use common::{spawn, unique, wait_child, Args, LIMIT};
use std::time::Duration;
use tachyon::{Error, RpcBuffer};

const ENTRY: &str = "child_entry";

#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    match role.as_str() {
        "client" => {
            let n: u32 = args.get("per_thread");
            let client = RpcBuffer::open(args.str("name")).unwrap();
            // Concurrent requests from 4 threads: their handlers overlap.
            std::thread::scope(|s| {
                for t in 0..4u32 {
                    let client = &client;
                    s.spawn(move || {
                        for i in 0..n {
                            let msg = format!("{t}-{i}");
                            let reply =
                                client.request(msg.as_bytes(), Some(Duration::from_secs(30))).unwrap();
                            let want: Vec<u8> = msg.bytes().rev().collect();
                            assert_eq!(reply, want);
                        }
                    });
                }
            });
            let err = client.request(b"panic", Some(Duration::from_secs(30))).unwrap_err();
            assert!(matches!(&err, Error::Remote(text) if text.contains("handler panicked")), "{err:?}");
        }
        other => panic!("unknown role {other}"),
    }
}

/// The handler: sleeps on a tokio timer, answers the reversed message.
async fn handler(_id: u64, msg: Vec<u8>) -> Result<Vec<u8>, String> {
    tokio::time::sleep(Duration::from_micros(200)).await;
    if msg == b"panic" {
        panic!("asked to");
    }
    Ok(msg.into_iter().rev().collect())
}

fn serve_with(rt: tokio::runtime::Runtime) {
    let name = unique("rpc-async");
    let server = RpcBuffer::create(&name).unwrap();
    let serving = rt.spawn(server.serve_async(handler));
    let mut child = spawn(ENTRY, "client", Args::name(&name).with("per_thread", 100));
    let code = rt.block_on(async {
        let waited = tokio::task::spawn_blocking(move || wait_child(&mut child, Duration::from_secs(120)));
        tokio::time::timeout(Duration::from_secs(150), waited).await.expect("timed out").unwrap()
    });
    assert_eq!(code, Some(0));
    // Closing the server ends the serving future with Ok.
    drop(server);
    let ended = rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), serving).await });
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}

#[test]
fn tokio_timers_work_in_handlers_multi_thread() {
    serve_with(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
}

#[test]
fn tokio_timers_work_in_handlers_current_thread() {
    serve_with(tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap());
}

/// Dropping the serving future answers later requests with an error,
/// rather than leaving callers waiting.
#[test]
fn dropping_the_serving_future_stops_serving() {
    let name = unique("rpc-async-drop");
    let server = RpcBuffer::create(&name).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let serve = server.serve_async(handler);
    drop(serve);
    let client = RpcBuffer::open(&name).unwrap();
    let err = client.request(b"x", Some(Duration::from_secs(LIMIT.as_secs()))).unwrap_err();
    assert!(matches!(&err, Error::Remote(text) if text.contains("stopped serving")), "{err:?}");
    drop(rt);
}
