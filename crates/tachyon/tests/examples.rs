//! The examples that check something run as tests, without building
//! anything new: `examples/crash_recovery.rs` is included here and its
//! parent runs with a copy of this test binary as the child. If the example
//! binary is already built (`cargo test` builds the examples), it is run
//! as well, as a user would run it.
#![cfg(not(tachyon_loom))]

mod common;

#[path = "../examples/crash_recovery.rs"]
mod crash_recovery;

use common::{child_command, wait_child, LIMIT};

const ENTRY: &str = "child_entry";

/// Runs the example's child when this process is one; nothing otherwise.
#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    assert_eq!(role, "crash-recovery-child");
    // The child returns only if it was not killed in time.
    if let Err(e) = crash_recovery::child(name) {
        eprintln!("crash_recovery child: {e}");
    }
    std::process::exit(1);
}

#[test]
fn crash_recovery_gets_every_chunk_back_after_a_sigkill() {
    let report = crash_recovery::run(|name| Ok(child_command(ENTRY, "crash-recovery-child", name)))
        .expect("the crash_recovery example ran");
    assert!(report.nothing_lost(), "{report:?}");
    assert_eq!(report.lost_chunks, 0);
    assert_eq!(report.recovered.held, 2);
    assert_eq!(report.recovered.redelivered, 1);
}

#[test]
fn the_built_crash_recovery_example_exits_zero() {
    // target/<profile>/deps/examples-<hash> → target/<profile>/examples/crash_recovery
    let exe = std::env::current_exe().expect("current exe");
    let Some(example) =
        exe.parent().and_then(|deps| deps.parent()).map(|p| p.join("examples/crash_recovery"))
    else {
        return;
    };
    if !example.exists() {
        // `cargo test --test examples` alone does not build examples; the
        // suite (`cargo test --workspace`, as CI runs it) does, so there a
        // missing binary is a failure, never a silent skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is not built: run the whole suite (`cargo test`)",
            example.display()
        );
        eprintln!("skipped: {} is not built (a plain `cargo test` builds it)", example.display());
        return;
    }
    let mut child = std::process::Command::new(&example)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the crash_recovery example");
    assert_eq!(wait_child(&mut child, LIMIT), Some(0), "{} failed", example.display());
}
