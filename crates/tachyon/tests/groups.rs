//! Consumer groups (issue #15; `testing` feature: not crash-safe yet)
//! wired into the bus: group slots in the layout, each topic's rings per
//! group slot, publishing to every joined group and receiving through one.
#![cfg(not(tachyon_loom))]

mod common;

use common::{unique, RemoveRegion};
use std::time::Duration;
use tachyon::bus::{Key, Region, RegionConfig, TopicConfig};
use tachyon::Error;

const SHORT: Option<Duration> = Some(Duration::from_millis(20));

fn region(name: &str, max_groups: usize) -> Region {
    let cfg = RegionConfig::default().size(16 << 20).ring_arena(2 << 20).max_groups(max_groups);
    Region::create(name, cfg).unwrap()
}

/// A topic's rings take one ring per partition per group slot, plus the
/// slots' control words and names; the default group is slot 0 and is the
/// only group an inspector sees on a new topic.
#[test]
fn a_topic_has_rings_per_group_slot() {
    let name = unique("groups-layout");
    let _rm = RemoveRegion(name.clone());
    let plain = region(&name, 0);
    let t = plain.create_topic("t", TopicConfig::default().partitions(2).capacity(64)).unwrap();
    let one_slot = plain.inspect().unwrap();
    assert_eq!(one_slot.topics[0].groups.len(), 1);
    assert_eq!(one_slot.topics[0].groups[0].slot, 0);
    t.send(b"x", Key(0), SHORT).unwrap();
    assert_eq!(&*t.receive(t.partition_of(Key(0)), SHORT).unwrap(), b"x");
    drop((t, plain));
    Region::remove(&name).unwrap();

    let four = region(&name, 4);
    assert_eq!(Region::open(&name).unwrap().config().max_groups, 4);
    let t = four.create_topic("t", TopicConfig::default().partitions(2).capacity(64)).unwrap();
    let report = four.inspect().unwrap();
    let groups = &report.topics[0].groups;
    assert_eq!(groups.len(), 1, "only the default group is in use: {groups:?}");
    assert_eq!((groups[0].slot, groups[0].name.as_str(), groups[0].partitions.len()), (0, "", 2));
    // The default group behaves as a topic always did.
    for i in 0..100u64 {
        t.send(&i.to_le_bytes(), Key(i), SHORT).unwrap();
    }
    let mut got = 0;
    for p in 0..2 {
        while let Some(m) = t.try_receive(p).unwrap() {
            assert_eq!(m.len(), 8);
            got += 1;
        }
    }
    assert_eq!(got, 100);
    assert_eq!(four.pool_stats().unwrap(), Region::open(&name).unwrap().pool_stats().unwrap());
}

/// `default_group(false)`: recorded in the topic's sealed record (an open
/// with the other setting is refused by name), `receive` says why it
/// cannot, and a region without group slots refuses such a topic.
#[test]
fn a_topic_without_its_default_group() {
    let name = unique("groups-nodefault");
    let _rm = RemoveRegion(name.clone());
    let r = region(&name, 0);
    let err = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap_err();
    assert!(err.to_string().contains("max_groups"), "{err}");
    drop(r);
    Region::remove(&name).unwrap();

    let r = region(&name, 3);
    let t = r.create_topic("t", TopicConfig::default().default_group(false)).unwrap();
    assert!(!t.config().default_group_enabled());
    let again = Region::open(&name).unwrap().topic("t").unwrap();
    assert!(!again.config().default_group_enabled());
    let err = r.create_or_open_topic("t", TopicConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }) && err.to_string().contains("default_group"), "{err}");
    let err = t.receive(0, SHORT).unwrap_err();
    assert!(err.to_string().contains("without its default group"), "{err}");
    assert!(t.try_receive(0).is_err());
    assert!(r.inspect().unwrap().topics[0].groups.is_empty());
}
