//! The README's quick start, run the way a user runs it: twice in a row, in
//! fresh processes, after which no segment file may be left behind (a region
//! left behind would make the second run fail with `AlreadyExists`).
//!
//! [`quick_start`] holds the README block's code verbatim (a test checks
//! that the two never drift apart). The children work in a private
//! directory under `/dev/shm` (`$TACHYON_SHM_DIR`), so that parallel test
//! runs never meet on the README's fixed names.
#![cfg(not(tachyon_loom))]

mod common;

use common::{child_command, wait_child, LIMIT};
use std::path::PathBuf;

const ENTRY: &str = "child_entry";

fn quick_start() -> Result<(), tachyon::Error> {
    // BEGIN quick start
    use std::time::Duration;
    use tachyon::bus::{Key, Partitions, Region, RegionConfig, TopicConfig};
    use tachyon::{CircularBuffer, Segment, SharedArray};

    // A named segment: /dev/shm/tachyon.u{uid}.prices, removed when the last handle
    // (in any process) is dropped.
    let seg = Segment::create("prices", 1 << 20)?;
    let same = Segment::open("prices")?; // in another process: size from the header
    seg.write_bytes(0, b"42")?;

    // A queue of fixed-size nodes: any number of writer and reader processes.
    let ring = CircularBuffer::create("orders", 64, 1024)?;
    ring.write(b"buy 100", Some(Duration::from_millis(10)))?;
    let mut buf = [0u8; 1024];
    let n = CircularBuffer::open("orders")?.read(&mut buf, Some(Duration::from_millis(10)))?;
    assert_eq!(&buf[..n], b"buy 100");

    // A typed array under a robust reader-writer lock.
    let levels = SharedArray::<f64>::create("levels", 1000)?;
    levels.set(3, 101.25)?;

    // The zero-copy bus: build the message in the pool, move a 16-byte descriptor.
    let region = Region::create("md", RegionConfig::default())?; // 64 MiB
    let topic = region.create_topic("quotes", TopicConfig::default())?;
    let mut loan = topic.loan(5, None)?;
    loan.copy_from_slice(b"hello");
    loan.publish(Key(7), None)?; // the key picks the partition
    let sub = topic.subscribe(Partitions::All)?; // one receive over every partition
    let msg = sub.receive(Some(Duration::from_secs(1)))?; // &[u8] in shared memory
    assert_eq!(&*msg, b"hello");
    drop(msg); // releases the chunk

    // A region is persistent: it outlives every process until it is removed.
    // The other segments go when their last handle is dropped, here at the end.
    Region::remove("md")?;
    // END quick start
    let _ = (same, levels);
    Ok(())
}

/// Runs the quick start when this process is a child; nothing otherwise.
#[test]
fn child_entry() {
    let Some((role, _)) = common::role() else { return };
    assert_eq!(role, "quick-start");
    match quick_start() {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("quick start failed: {e}");
            std::process::exit(1);
        }
    }
}

/// The segment files in `dir`.
fn files_in(dir: &PathBuf) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list the segment directory")
        .map(|e| e.expect("directory entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn quick_start_runs_twice_and_leaves_nothing_in_dev_shm() {
    let dir = PathBuf::from(format!("/dev/shm/tachyon-test-readme-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("create a private directory in /dev/shm");
    for run in 1..=2 {
        let mut child = child_command(ENTRY, "quick-start", common::Args::new())
            .env(tachyon::segment::name::DIR_ENV, &dir)
            .spawn()
            .expect("spawn the quick start");
        let code = wait_child(&mut child, LIMIT);
        let left = files_in(&dir);
        assert_eq!(code, Some(0), "run {run} of the quick start failed");
        assert!(left.is_empty(), "run {run} left segment files behind: {left:?}");
    }
    std::fs::remove_dir(&dir).expect("remove the private directory");
}

/// The README's quick start block, without its hidden (`# `) lines, is the
/// body of [`quick_start`] between its markers.
#[test]
fn readme_quick_start_is_the_code_tested_here() {
    let readme = include_str!("../../../README.md");
    let section = readme.split("## Quick start").nth(1).expect("README has a Quick start section");
    let block =
        section.split("```rust\n").nth(1).expect("a rust block").split("\n```").next().expect("its end");
    let shown: Vec<&str> = block.lines().filter(|l| *l != "#" && !l.starts_with("# ")).collect();

    let here = include_str!("readme.rs");
    let body = here.split("// BEGIN quick start\n").nth(1).expect("begin marker");
    let body = body.split("    // END quick start").next().expect("end marker");
    let tested: Vec<&str> = body.lines().map(|l| l.strip_prefix("    ").unwrap_or(l)).collect();

    assert_eq!(shown, tested, "README.md's quick start and tests/readme.rs differ: keep them equal");
}

/// Every markdown page of docs/ (and the README) is compiled as doctests
/// through an `include_str!` in lib.rs, so a page added later cannot have
/// Rust blocks nobody compiles.
#[test]
fn every_doc_page_is_a_doctest() {
    let lib = include_str!("../src/lib.rs");
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut pages: Vec<String> = std::fs::read_dir(&docs)
        .expect("list docs/")
        .map(|e| e.expect("docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".md"))
        .map(|f| format!("../../../docs/{f}"))
        .collect();
    pages.push("../../../README.md".into());
    let missing: Vec<&String> = pages.iter().filter(|p| !lib.contains(&format!("\"{p}\""))).collect();
    assert!(missing.is_empty(), "add these pages to doc_pages! in src/lib.rs: {missing:?}");
}
