//! Segments across real processes: sharing, lifetime, crashes, naming,
//! permissions and damaged files.
#![cfg(not(tachyon_loom))]

mod common;

use common::{kill, spawn, unique, wait_child, wait_for, LIMIT};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tachyon::segment::name::SegmentName;
use tachyon::segment::{list, SegmentStatus};
use tachyon::{Corruption, Error, Kind, Segment};

const ENTRY: &str = "child_entry";

fn flag(seg: &Segment, at: usize) -> &AtomicU64 {
    seg.get::<AtomicU64>(at).expect("flag in bounds")
}

fn path_of(name: &str) -> std::path::PathBuf {
    SegmentName::parse(name).unwrap().path()
}

/// Dispatches the roles children run; does nothing in the parent.
#[test]
fn child_entry() {
    let Some((role, args)) = common::role() else { return };
    let name = args.str("name");
    let code = match role.as_str() {
        "echo" => {
            let seg = Segment::open(name).unwrap();
            let v = flag(&seg, 0).load(Ordering::SeqCst);
            flag(&seg, 8).store(v + 1, Ordering::SeqCst);
            flag(&seg, 16).store(1, Ordering::SeqCst);
            assert!(wait_for(LIMIT, || flag(&seg, 16).load(Ordering::SeqCst) == 2));
            0
        }
        "exit-holding" => {
            let seg = Segment::open(name).unwrap();
            flag(&seg, 0).store(1, Ordering::SeqCst);
            assert!(wait_for(LIMIT, || flag(&seg, 0).load(Ordering::SeqCst) == 2));
            // Exit without dropping `seg`: the exit handler must clean up.
            std::process::exit(0);
        }
        "create-and-hang" => {
            let seg = Segment::create(name, 4096).unwrap();
            flag(&seg, 0).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT);
            1
        }
        "open-and-hang" => {
            let seg = Segment::open(name).unwrap();
            flag(&seg, 0).store(1, Ordering::SeqCst);
            std::thread::sleep(LIMIT);
            1
        }
        "refused" => {
            // Runs as another user: the name must be refused, both ways.
            let open = Segment::open(name);
            let create = Segment::create(name, 4096);
            match (&open, &create) {
                (Err(Error::PermissionDenied { .. }), Err(Error::PermissionDenied { .. })) => 0,
                _ => {
                    eprintln!("expected PermissionDenied twice, got {open:?} / {create:?}");
                    1
                }
            }
        }
        "create-global-and-hang" => {
            let _seg = Segment::create(name, 4096).unwrap();
            std::thread::sleep(LIMIT);
            1
        }
        other => panic!("unknown role {other}"),
    };
    std::process::exit(code);
}

#[test]
fn two_processes_share_memory_and_the_last_close_removes_the_file() {
    let name = unique("share");
    let seg = Segment::create(&name, 4096).unwrap();
    assert!(path_of(&name).exists());
    flag(&seg, 0).store(41, Ordering::SeqCst);
    let mut child = spawn(ENTRY, "echo", &name);
    assert!(wait_for(LIMIT, || flag(&seg, 16).load(Ordering::SeqCst) == 1));
    assert_eq!(flag(&seg, 8).load(Ordering::SeqCst), 42);
    assert_eq!(seg.attachers().len(), 2);
    flag(&seg, 16).store(2, Ordering::SeqCst);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    // The child closed; we are still attached, so the file stays.
    assert!(path_of(&name).exists());
    assert_eq!(seg.attachers().len(), 1);
    drop(seg);
    assert!(!path_of(&name).exists(), "last close must remove the file");
}

#[test]
fn process_exit_cleans_up_what_is_still_open() {
    let name = unique("exit");
    let seg = Segment::create(&name, 4096).unwrap();
    let mut child = spawn(ENTRY, "exit-holding", &name);
    assert!(wait_for(LIMIT, || flag(&seg, 0).load(Ordering::SeqCst) == 1));
    // Let go of ours, then let the child exit() still holding its handle.
    let path = path_of(&name);
    flag(&seg, 0).store(2, Ordering::SeqCst);
    drop(seg);
    assert_eq!(wait_child(&mut child, LIMIT), Some(0));
    assert!(!path.exists(), "the exiting child was the last attacher and must remove the file");
}

#[test]
fn a_sigkilled_creator_leaves_a_stale_file_that_open_removes() {
    let name = unique("stale-open");
    let path = path_of(&name);
    let mut child = spawn(ENTRY, "create-and-hang", &name);
    assert!(wait_for(LIMIT, || Segment::exists(&name).unwrap_or(false)));
    // While the creator lives, opening works and nothing is removed.
    {
        let seg = Segment::open(&name).unwrap();
        assert!(wait_for(LIMIT, || flag(&seg, 0).load(Ordering::SeqCst) == 1));
    }
    assert!(path.exists(), "a segment with a live attacher is never removed");
    kill(&mut child);
    assert!(path.exists(), "SIGKILL runs no cleanup");
    assert!(!Segment::exists(&name).unwrap(), "a stale segment does not count as existing");
    let stale = list().unwrap().into_iter().find(|i| i.path == path).expect("listed");
    assert!(stale.is_stale());
    match Segment::open(&name) {
        Err(Error::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!path.exists(), "open must remove the stale file");
}

#[test]
fn a_sigkilled_creator_leaves_a_stale_file_that_create_replaces() {
    let name = unique("stale-create");
    let mut child = spawn(ENTRY, "create-and-hang", &name);
    assert!(wait_for(LIMIT, || Segment::exists(&name).unwrap_or(false)));
    match Segment::create(&name, 4096) {
        Err(Error::AlreadyExists { .. }) => {}
        other => panic!("expected AlreadyExists while the creator lives, got {other:?}"),
    }
    kill(&mut child);
    let seg = Segment::create(&name, 8192).unwrap();
    assert_eq!(seg.size(), 8192);
    assert_eq!(flag(&seg, 0).load(Ordering::SeqCst), 0, "a fresh, zeroed segment");
}

#[test]
fn a_live_attacher_keeps_the_segment_when_the_creator_dies() {
    let name = unique("live");
    let path = path_of(&name);
    let mut creator = spawn(ENTRY, "create-and-hang", &name);
    assert!(wait_for(LIMIT, || Segment::exists(&name).unwrap_or(false)));
    let mut holder = spawn(ENTRY, "open-and-hang", &name);
    // Wait for the second attacher to show up.
    assert!(wait_for(LIMIT, || {
        list().unwrap().iter().any(|i| {
            i.path == path
                && matches!(&i.status, SegmentStatus::Valid { attachers, .. }
                    if attachers.iter().filter(|a| a.alive).count() == 2)
        })
    }));
    kill(&mut creator);
    // The holder lives: open works, create refuses, nothing is removed.
    let seg = Segment::open(&name).unwrap();
    assert!(matches!(Segment::create(&name, 4096), Err(Error::AlreadyExists { .. })));
    drop(seg);
    assert!(path.exists(), "the holder is alive: the file must stay");
    let info = list().unwrap().into_iter().find(|i| i.path == path).unwrap();
    let SegmentStatus::Valid { attachers, .. } = info.status else { panic!("valid") };
    assert_eq!(attachers.iter().filter(|a| a.alive).count(), 1);
    assert_eq!(attachers.iter().filter(|a| !a.alive).count(), 1, "the dead creator is listed as dead");
    kill(&mut holder);
    assert!(matches!(Segment::open(&name), Err(Error::NotFound { .. })));
}

#[test]
fn create_or_open_and_remove() {
    let name = unique("coo");
    let a = Segment::create_or_open(&name, 4096).unwrap();
    let b = Segment::create_or_open(&name, 99999).unwrap();
    assert_eq!(b.size(), 4096, "an existing segment keeps its size");
    assert!(matches!(Segment::create(&name, 4096), Err(Error::AlreadyExists { .. })));
    Segment::remove(&name).unwrap();
    assert!(!Segment::exists(&name).unwrap());
    // Handles keep working after removal, and the name is free again.
    a.write_bytes(0, b"still here").unwrap();
    let c = Segment::create(&name, 4096).unwrap();
    let mut buf = [0u8; 10];
    c.read_bytes(0, &mut buf).unwrap();
    assert_eq!(buf, [0; 10], "a new segment, not the removed one");
    drop((a, b));
    assert!(Segment::exists(&name).unwrap(), "dropping old handles must not remove the new file");
    drop(c);
    assert!(matches!(Segment::remove(&name), Err(Error::NotFound { .. })));
}

#[test]
fn bad_arguments_are_typed_errors() {
    assert!(matches!(Segment::create(&unique("zero"), 0), Err(Error::InvalidArgument { .. })));
    assert!(matches!(Segment::create(&unique("huge"), usize::MAX), Err(Error::InvalidArgument { .. })));
    assert!(matches!(
        Segment::builder(&unique("slots")).size(1).max_attachers(0).create(),
        Err(Error::InvalidArgument { .. })
    ));
    for bad in ["", "a\0b", r"Session\x", r"Global\"] {
        assert!(matches!(Segment::create(bad, 64), Err(Error::InvalidName { .. })), "{bad:?}");
        assert!(matches!(Segment::open(bad), Err(Error::InvalidName { .. })), "{bad:?}");
    }
    let seg = Segment::create(&unique("bounds"), 100).unwrap();
    assert!(seg.write_bytes(90, &[0; 11]).is_err());
    assert!(seg.read_bytes(usize::MAX, &mut [0; 2]).is_err());
    assert!(seg.get::<AtomicU64>(96).is_err());
}

#[test]
fn too_many_attachers_is_no_space() {
    let name = unique("slots");
    let a = Segment::builder(&name).size(64).max_attachers(2).create().unwrap();
    let b = Segment::open(&name).unwrap();
    assert!(matches!(Segment::open(&name), Err(Error::NoSpace { .. })));
    drop(b);
    let _c = Segment::open(&name).unwrap();
    drop(a);
}

#[test]
fn a_full_file_system_is_no_space_at_create() {
    // 24 GiB of /dev/shm cannot hold this; fallocate says so at once.
    let r = Segment::create(&unique("full"), 1 << 46);
    match r {
        Err(Error::NoSpace { what }) => assert!(what.contains("free"), "{what}"),
        other => panic!("expected NoSpace, got {other:?}"),
    }
}

#[test]
fn names_map_to_escaped_files_in_their_scope() {
    let base = unique("esc");
    let name = format!(r"Local\{base}/a%b");
    let seg = Segment::create(&name, 64).unwrap();
    let file = seg.path().file_name().unwrap().to_str().unwrap().to_owned();
    let uid = rustix::process::geteuid().as_raw();
    assert_eq!(file, format!("tachyon.u{uid}.{base}%2Fa%25b"));
    // Local\ and no prefix are the same name.
    let same = Segment::open(&format!("{base}/a%b")).unwrap();
    assert_eq!(same.path(), seg.path());
    // Global\ is another name space.
    assert!(matches!(Segment::open(&format!(r"Global\{base}/a%b")), Err(Error::NotFound { .. })));
    let meta = std::fs::metadata(seg.path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // Two long names differing only at the end are distinct segments.
    let long_a = format!("{base}{}A", "x".repeat(220));
    let long_b = format!("{base}{}B", "x".repeat(220));
    let a = Segment::create(&long_a, 64).unwrap();
    let b = Segment::create(&long_b, 64).unwrap();
    assert_ne!(a.path(), b.path());
    assert_eq!(Segment::open(&long_a).unwrap().path(), a.path());
    let listed = list().unwrap();
    assert!(listed.iter().any(|i| i.name == long_a), "the header keeps the long name for listing");
    let very_long = format!("{base}{}", "y".repeat(5000));
    let v = Segment::create(&very_long, 64).unwrap();
    assert!(v.path().file_name().unwrap().len() <= 255);
    assert_eq!(Segment::open(&very_long).unwrap().path(), v.path());
}

#[test]
fn a_global_name_is_refused_to_another_user() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: switching to another user needs root");
        return;
    }
    let name = format!(r"Global\{}", unique("global"));
    let seg = Segment::create(&name, 4096).unwrap();
    assert!(seg.path().file_name().unwrap().to_str().unwrap().starts_with("tachyon.global."));
    // A child running as `nobody` may neither open nor create it.
    let mut child =
        common::spawn_retrying(&mut common::child_command_as(ENTRY, "refused", &name, 65534, 65534));
    assert_eq!(wait_child(&mut child, LIMIT), Some(0), "the other user must get PermissionDenied");
    drop(seg);

    // And the other way round: nobody's Global name is refused to us.
    let name = format!(r"Global\{}", unique("global-nobody"));
    let path = path_of(&name);
    let mut child = common::spawn_retrying(&mut common::child_command_as(
        ENTRY,
        "create-global-and-hang",
        &name,
        65534,
        65534,
    ));
    assert!(wait_for(LIMIT, || path.exists()));
    assert!(matches!(Segment::open(&name), Err(Error::PermissionDenied { .. })));
    assert!(matches!(Segment::create(&name, 64), Err(Error::PermissionDenied { .. })));
    kill(&mut child);
    let _ = std::fs::remove_file(&path);
    common::remove_copied_binary();
}

// ---- damaged files -------------------------------------------------------

/// The bytes of a valid segment file of `kind` (no live attacher).
fn valid_image(kind: Kind) -> Vec<u8> {
    let name = unique("image");
    let seg = Segment::builder(&name).size(4096).kind(kind).create().unwrap();
    std::fs::read(seg.path()).unwrap()
}

/// Removes a planted file (or link, or directory) when dropped.
struct Planted(std::path::PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[must_use]
fn plant(name: &str, bytes: &[u8]) -> Planted {
    let path = path_of(name);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
    Planted(path)
}

fn corruption(name: &str) -> Corruption {
    match Segment::open(name) {
        Err(Error::Corrupt { what }) => what,
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn damaged_files_give_distinct_typed_errors() {
    let sealed = valid_image(Kind::RAW);
    // One copy of the header's fixed part damaged is read from the other
    // (segment/header.rs: bytes 0..80 sealed at 336, kept again at 344):
    // this stale image is then found stale and removed, as a good one is.
    let n = unique("one-copy-damaged");
    let mut bad = sealed.clone();
    bad[0] ^= 0xff;
    bad[12] ^= 0x01;
    let _p0 = plant(&n, &bad);
    assert!(matches!(Segment::open(&n), Err(Error::NotFound { .. })));
    // Below, the seals and the second copy are erased (as in a header of
    // both copies damaged, or from before the seals): every damage is
    // then its own typed error.
    let mut img = sealed.clone();
    img[336..512].fill(0);

    let n = unique("empty");
    let _p1 = plant(&n, &[]);
    assert_eq!(corruption(&n), Corruption::ZeroLength);

    let n = unique("short-header");
    let _p2 = plant(&n, &img[..100]);
    assert!(matches!(corruption(&n), Corruption::Truncated { expected: 512, actual: 100 }));

    let n = unique("truncated");
    let _p3 = plant(&n, &img[..img.len() - 4096]);
    assert!(matches!(corruption(&n), Corruption::Truncated { .. }));

    let n = unique("longer");
    let mut longer = img.clone();
    longer.extend_from_slice(&[0; 4096]);
    let _p4 = plant(&n, &longer);
    assert!(matches!(corruption(&n), Corruption::SizeMismatch { .. }));

    let n = unique("magic");
    let mut bad = img.clone();
    bad[0] ^= 0xff;
    let _p5 = plant(&n, &bad);
    assert_eq!(corruption(&n), Corruption::BadMagic);

    let n = unique("not-ready");
    let mut bad = img.clone();
    bad[40..44].copy_from_slice(&[0; 4]);
    let _p6 = plant(&n, &bad);
    assert_eq!(corruption(&n), Corruption::NotInitialised);

    let n = unique("version");
    let mut bad = img.clone();
    bad[8..12].copy_from_slice(&77u32.to_le_bytes());
    let _p7 = plant(&n, &bad);
    assert!(matches!(Segment::open(&n), Err(Error::VersionMismatch { found: 77, .. })));

    let n = unique("kind");
    let _p8 = plant(&n, &valid_image(Kind::ARRAY));
    assert!(matches!(
        Segment::open(&n),
        Err(Error::KindMismatch { found: Kind::ARRAY, expected: Kind::RAW })
    ));

    // A damaged file is reported, never silently replaced, by create too.
    let n = unique("create-over-garbage");
    let _p9 = plant(&n, b"not a segment at all, just some bytes");
    assert!(matches!(Segment::create(&n, 64), Err(Error::Corrupt { .. })));
    assert!(path_of(&n).exists());

    // A valid, stale image of the right kind is removed by open.
    let n = unique("stale-image");
    let _p10 = plant(&n, &img);
    assert!(matches!(Segment::open(&n), Err(Error::NotFound { .. })));
    assert!(!path_of(&n).exists());

    // Symlinks and directories are refused.
    let target = unique("target");
    let _target = plant(&target, &img);
    let n = unique("link");
    std::os::unix::fs::symlink(path_of(&target), path_of(&n)).unwrap();
    let _link = Planted(path_of(&n));
    assert!(matches!(Segment::open(&n), Err(Error::PermissionDenied { .. })));
    assert!(matches!(Segment::create(&n, 64), Err(Error::PermissionDenied { .. })));
    let n = unique("dir");
    std::fs::create_dir(path_of(&n)).unwrap();
    let _dir = Planted(path_of(&n));
    assert!(matches!(Segment::open(&n), Err(Error::Corrupt { what: Corruption::NotARegularFile })));
}

mod random_files {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

        /// Random bytes behind a valid-looking prefix: `open` must return
        /// an error every time, and neither crash nor hang.
        #[test]
        fn open_of_random_bytes_is_always_an_error(
            tail in proptest::collection::vec(any::<u8>(), 0..9000),
            deeper in any::<bool>(),
        ) {
            let mut bytes = b"TACHYSEG".to_vec();
            if deeper {
                // Also pass the version and ready checks, to reach the rest.
                bytes.extend_from_slice(&1u32.to_le_bytes());
                let mut t = tail.clone();
                if t.len() >= 32 {
                    t[28..32].copy_from_slice(&0x5244_5921u32.to_le_bytes());
                }
                bytes.extend_from_slice(&t);
            } else {
                bytes.extend_from_slice(&tail);
            }
            let name = unique("random");
            let _planted = plant(&name, &bytes);
            let r = Segment::open(&name);
            prop_assert!(r.is_err(), "random file opened: {:?}", r);
        }
    }
}

#[test]
fn every_attach_is_listed_with_its_process() {
    let name = unique("list");
    let seg = Segment::create(&name, 4096).unwrap();
    let _second = Segment::open(&name).unwrap();
    let info = list().unwrap().into_iter().find(|i| i.name == name).unwrap();
    match info.status {
        SegmentStatus::Valid { kind, data_size, creator, attachers, .. } => {
            assert_eq!(kind, Kind::RAW);
            assert_eq!(data_size, 4096);
            assert_eq!(creator.pid, std::process::id());
            assert_eq!(attachers.len(), 2);
            assert!(attachers.iter().all(|a| a.alive && a.process.pid == std::process::id()));
        }
        SegmentStatus::Invalid(why) => panic!("{why}"),
    }
    assert_eq!(seg.creator().pid, std::process::id());
}

#[test]
fn many_threads_create_and_open_the_same_name() {
    // Races between creators, openers and last-closers must never leave two
    // live files for one name or remove a live one.
    let name = unique("race");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..200 {
                    let seg = Segment::create_or_open(&name, 4096).unwrap();
                    seg.get::<AtomicU64>(0).unwrap().fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_micros(10));
                }
            });
        }
    });
    assert!(!Segment::exists(&name).unwrap());
}

#[test]
fn a_persistent_segment_outlives_its_users_until_removed() {
    let name = unique("persistent");
    let seg = Segment::builder(&name).size(64).persistent(true).create().unwrap();
    seg.write_bytes(0, b"kept").unwrap();
    drop(seg);
    assert!(Segment::exists(&name).unwrap(), "nobody attached, still there");
    assert!(!list().unwrap().into_iter().find(|i| i.name == name).unwrap().is_stale());
    assert!(matches!(Segment::create(&name, 64), Err(Error::AlreadyExists { .. })));
    let again = Segment::open(&name).unwrap();
    let mut buf = [0u8; 4];
    again.read_bytes(0, &mut buf).unwrap();
    assert_eq!(&buf, b"kept");
    drop(again);
    Segment::remove(&name).unwrap();
    assert!(matches!(Segment::open(&name), Err(Error::NotFound { .. })));
}
