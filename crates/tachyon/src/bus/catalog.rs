//! A region's topics: the [`Region`] methods that create, open and list
//! them (the directory entries are in `directory.rs`, a topic's rings in
//! `partition.rs`).

use super::region::Region;
use super::topic::{self, Topic, TopicConfig, TopicInfo};
use crate::error::{Corruption, Error, Result};
use std::time::Duration;

impl Region {
    /// Creates a topic: [`Error::TopicExists`] if the region has one of
    /// that name, [`Error::NoSpace`] if the directory or the ring arena is
    /// full.
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<Topic> {
        self.topic_with(name, Some(config), false)
    }

    /// Opens a topic: [`Error::TopicNotFound`] if the region has none of
    /// that name.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        topic::check_name(name)?;
        match self.find(name)? {
            Some(index) => Topic::attach(self, index),
            None => {
                // An entry damaged beyond repair may have been this topic:
                // say so rather than "not found".
                if let Some(lost) = self.entries()?.iter().position(|e| !e.is_free() && e.record().is_none())
                {
                    return Err(Error::corrupt(Corruption::BadField {
                        field: "topic directory entry (both copies damaged; it may have been this topic)",
                        value: lost as u64,
                    }));
                }
                Err(Error::TopicNotFound { topic: name.to_owned(), region: self.name().to_owned() })
            }
        }
    }

    /// Opens the topic `name` if it exists, else creates it with `config`.
    /// An existing topic must have been created with the same
    /// configuration: [`Error::Incompatible`] names the field that differs.
    /// Safe to call from several processes at once (one creates, the others
    /// open).
    ///
    /// ```
    /// use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-topic-coo-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// let config = TopicConfig::default().partitions(4);
    /// let a = region.create_or_open_topic("orders", config)?; // creates
    /// let b = region.create_or_open_topic("orders", config)?; // opens
    /// assert_eq!(a.partitions(), b.partitions());
    /// let err = region.create_or_open_topic("orders", config.partitions(8)).unwrap_err();
    /// assert!(err.to_string().contains("partitions = 4, not 8"), "{err}");
    /// # drop((a, b)); drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_or_open_topic(&self, name: &str, config: TopicConfig) -> Result<Topic> {
        self.topic_with(name, Some(config), true)
    }

    /// Creates the topic `name` with `config`, or with `may_open` opens the
    /// one there (checking that it has `config`).
    fn topic_with(&self, name: &str, config: Option<TopicConfig>, may_open: bool) -> Result<Topic> {
        let config = config.unwrap_or_default();
        config.validate()?;
        let max_groups = self.config().max_groups;
        if !config.default_group && max_groups == 0 {
            return Err(Error::invalid(format!(
                "topic {name:?} without its default group needs group slots: create the region with RegionConfig::max_groups of at least 1"
            )));
        }
        topic::check_name(name)?;
        let guard = self.control().lock(self, Some(Duration::from_secs(5)))?;
        // A previous holder that died mid-creation left at most an entry in
        // state CREATING, which is reused below (its arena bytes are lost).
        let _ = guard.owner_died();
        if let Some(index) = self.find(name)? {
            drop(guard);
            if !may_open {
                return Err(Error::TopicExists { topic: name.to_owned(), region: self.name().to_owned() });
            }
            let topic = Topic::attach(self, index)?;
            topic.config().check_same(&config, &format!("topic {name:?}"))?;
            return Ok(topic);
        }
        let entries = self.entries()?;
        let Some(index) = entries.iter().position(|e| e.is_free()) else {
            return Err(Error::NoSpace {
                what: format!(
                    "the region's {} topic entries are all used; create the region with a larger max_topics",
                    self.max_topics()
                ),
            });
        };
        let ring_off = self.reserve_ring_arena(config.ring_bytes(max_groups))?;
        topic::init_rings(self.segment(), ring_off, &config, max_groups)?;
        entries[index].publish(&topic::record_of(name, &config, ring_off as u64));
        drop(guard);
        Topic::attach(self, index)
    }

    /// The topics of the region.
    pub fn topics(&self) -> Result<Vec<TopicInfo>> {
        Ok(self
            .entries()?
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Topic::attach(self, i).ok().map(|t| t.info()).or_else(|| topic::info_of(e)))
            .collect())
    }

    fn find(&self, name: &str) -> Result<Option<usize>> {
        Ok(self.entries()?.iter().position(|e| e.record().and_then(|r| r.name()).is_some_and(|n| n == name)))
    }
}
