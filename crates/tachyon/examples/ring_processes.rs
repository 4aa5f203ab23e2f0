//! A writer process and a reader process share a `CircularBuffer`.
//!
//! The parent creates the ring and starts a copy of itself as the reader;
//! it writes ten items, then an empty item that means "done". The reader
//! prints what it receives.
//!
//! ```text
//! cargo run --example ring_processes
//! ```

use std::process::Command;
use std::time::Duration;
use tachyon::{CircularBuffer, Error, Result};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("reader") {
        return reader(&args[2]);
    }
    let name = format!("ring-demo-{}", std::process::id());
    // 4 nodes of 64 bytes: the writer often waits for the reader.
    let ring = CircularBuffer::create(&name, 4, 64)?;
    let exe = std::env::current_exe().map_err(|e| Error::InvalidArgument { what: e.to_string() })?;
    let mut child = Command::new(exe)
        .args(["reader", &name])
        .spawn()
        .map_err(|e| Error::InvalidArgument { what: format!("cannot start the reader: {e}") })?;
    for i in 1..=10 {
        let text = format!("item {i} from writer pid {}", std::process::id());
        ring.write(text.as_bytes(), WAIT)?;
        println!("writer: wrote {text:?}");
    }
    ring.write(&[], WAIT)?; // an empty item: done
    let status = child.wait().map_err(|e| Error::InvalidArgument { what: e.to_string() })?;
    println!("writer: reader exited with {status}");
    Ok(())
}

fn reader(name: &str) -> Result<()> {
    let ring = CircularBuffer::open(name)?;
    println!("reader: opened {:?}: {} nodes of {} bytes", name, ring.node_count(), ring.node_size());
    let mut buf = vec![0u8; ring.node_size()];
    loop {
        let n = ring.read(&mut buf, WAIT)?;
        if n == 0 {
            println!("reader: done");
            return Ok(());
        }
        println!("reader: got {:?}", String::from_utf8_lossy(&buf[..n]));
    }
}
