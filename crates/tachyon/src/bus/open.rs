//! Creating and opening a region: attach (`region.rs`), then reclaim what
//! dead processes held (`recovery.rs`); and looking at one without
//! attaching (`inspect.rs`).

use super::config::RegionConfig;
use super::inspect::RegionReport;
use super::region::Region;
use crate::error::{Error, Result};

impl Region {
    /// Opens the region `name` if it exists, else creates it with
    /// `config` (the C library's `ty_region_open` with a configuration).
    /// An existing region must have been created with the same
    /// configuration: [`Error::Incompatible`] names the field that differs.
    /// Safe to call from several processes at once.
    ///
    /// ```
    /// use tachyon::bus::{Region, RegionConfig};
    /// # let name = format!("doc-region-coo-{}", std::process::id());
    /// let config = RegionConfig::default().size(8 << 20).ring_arena(1 << 20);
    /// let first = Region::create_or_open(&name, config.clone())?;  // creates
    /// let second = Region::create_or_open(&name, config.clone())?; // opens
    /// let err = Region::create_or_open(&name, config.size(16 << 20)).unwrap_err();
    /// assert!(matches!(err, tachyon::Error::Incompatible { field: "size", .. }), "{err}");
    /// # drop((first, second)); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn create_or_open(name: &str, config: RegionConfig) -> Result<Region> {
        config.validate()?;
        for _ in 0..16 {
            match Region::open(name) {
                Ok(region) => {
                    region.config().check_same(&config, &format!("region {name:?}"))?;
                    return Ok(region);
                }
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            match Region::create(name, config.clone()) {
                Err(Error::AlreadyExists { .. }) => {}
                other => return other,
            }
        }
        Err(Error::timeout("a stable region to create or open (others kept creating and removing it)", None))
    }

    /// Creates a region; [`Error::AlreadyExists`] if one of that name
    /// exists (open it, or remove it first, or use
    /// [`create_or_open`](Self::create_or_open)).
    pub fn create(name: &str, config: RegionConfig) -> Result<Region> {
        let region = Region::create_attached(name, config)?;
        // Attaching is a good moment to reclaim what dead processes held.
        region.set_recovered_on_open(region.recover().unwrap_or_default());
        Ok(region)
    }

    /// Opens an existing region, checking its layout, and reclaims what
    /// dead processes held ([`recovered_on_open`](Self::recovered_on_open)
    /// says what).
    pub fn open(name: &str) -> Result<Region> {
        let (region, header) = Region::open_attached(name)?;
        let mut found = region.recover().unwrap_or_default();
        found.directory += header;
        region.set_recovered_on_open(found);
        Ok(region)
    }

    /// A snapshot of the region named `name` ([`inspect`](Self::inspect)),
    /// taken without attaching: it takes no attach slot, runs no recovery
    /// and writes nothing, so an operator looking changes nothing (and an
    /// inspector counts among no region's processes).
    ///
    /// ```
    /// # use tachyon::bus::{Region, RegionConfig, TopicConfig};
    /// # let name = format!("doc-inspect-name-{}", std::process::id());
    /// let region = Region::create(&name, RegionConfig::default().size(8 << 20).ring_arena(1 << 20))?;
    /// region.create_topic("t", TopicConfig::default())?;
    /// let report = Region::inspect_name(&name)?;
    /// assert_eq!(report.topics[0].info.name, "t");
    /// assert_eq!(report.processes.len(), 1); // only `region`'s process
    /// # drop(region); Region::remove(&name)?;
    /// # Ok::<(), tachyon::Error>(())
    /// ```
    pub fn inspect_name(name: &str) -> Result<RegionReport> {
        Region::observe(name)?.inspect()
    }
}
