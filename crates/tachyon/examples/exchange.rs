//! Two processes exchange messages through one shared-memory segment.
//!
//! The parent creates a segment holding a robust mutex, two events and a
//! message area, then starts a copy of itself as the child. They take turns:
//! the parent writes a ping, the child answers with a pong, each printing
//! what it saw. At the end the parent closes the segment, and because it is
//! the last one out, the file in /dev/shm is gone.
//!
//! ```text
//! cargo run --release --example exchange
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::sync::{Event, Mutex};
use tachyon::{Result, Segment};

// Layout of the segment's data area.
const LOCK: usize = 0; // tachyon::sync::Mutex
const REQUEST: usize = 64; // tachyon::sync::Event: "a ping is waiting"
const REPLY: usize = 128; // tachyon::sync::Event: "a pong is waiting"
const LEN: usize = 192; // AtomicU64: length of the message
const TEXT: usize = 256; // the message bytes
const SIZE: usize = 4096;
const ROUNDS: u32 = 5;
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("child") => child(&args[2]),
        _ => parent(),
    }
}

/// Writes `text` as the current message, under the mutex.
fn put(seg: &Segment, text: &str) -> Result<()> {
    let guard = seg.get::<Mutex>(LOCK)?.lock(seg, WAIT)?;
    if guard.owner_died() {
        println!("  (the previous holder of the lock died; taking over)");
    }
    let bytes = &text.as_bytes()[..text.len().min(SIZE - TEXT)];
    seg.write_bytes(TEXT, bytes)?;
    seg.get::<AtomicU64>(LEN)?.store(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Reads the current message, under the mutex.
fn take(seg: &Segment) -> Result<String> {
    let _guard = seg.get::<Mutex>(LOCK)?.lock(seg, WAIT)?;
    let len = (seg.get::<AtomicU64>(LEN)?.load(Ordering::Relaxed) as usize).min(SIZE - TEXT);
    let mut buf = vec![0u8; len];
    seg.read_bytes(TEXT, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn parent() -> Result<()> {
    let me = std::process::id();
    let name = format!("exchange-demo-{me}");
    let seg = Segment::create(&name, SIZE)?;
    println!("parent (pid {me}): created {:?} at {}", seg.name(), seg.path().display());

    let exe = std::env::current_exe().map_err(|e| tachyon::Error::InvalidArgument { what: e.to_string() })?;
    let mut child = Command::new(exe)
        .args(["child", &name])
        .spawn()
        .map_err(|e| tachyon::Error::InvalidArgument { what: format!("cannot start the child: {e}") })?;

    let request = seg.get::<Event>(REQUEST)?;
    let reply = seg.get::<Event>(REPLY)?;
    for round in 1..=ROUNDS {
        put(&seg, &format!("ping #{round} from pid {me}"))?;
        request.set();
        reply.wait(WAIT)?;
        println!("parent (pid {me}) saw: {}", take(&seg)?);
    }
    put(&seg, "bye")?;
    request.set();

    let status = child.wait().map_err(|e| tachyon::Error::InvalidArgument { what: e.to_string() })?;
    println!("parent: child exited with {status}; attached now: {}", seg.attachers().len());
    let path = seg.path().to_path_buf();
    drop(seg);
    println!("parent: closed the segment; file still there: {}", path.exists());
    Ok(())
}

fn child(name: &str) -> Result<()> {
    let me = std::process::id();
    let seg = Segment::open(name)?;
    println!("child  (pid {me}): opened {:?}, {} bytes", seg.name(), seg.size());
    let request = seg.get::<Event>(REQUEST)?;
    let reply = seg.get::<Event>(REPLY)?;
    loop {
        request.wait(WAIT)?;
        let text = take(&seg)?;
        println!("child  (pid {me}) saw: {text}");
        if text == "bye" {
            return Ok(());
        }
        let round = text.split('#').nth(1).and_then(|s| s.split(' ').next()).unwrap_or("?");
        put(&seg, &format!("pong #{round} from pid {me}"))?;
        reply.set();
    }
}
