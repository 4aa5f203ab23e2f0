//! The on-disk layout of a segment's header and attach-slot table.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "TACHYSEG"
//!      8     4  layout version
//!     12     4  kind
//!     16     8  total size of the file
//!     24     8  offset of the caller's data (page-aligned)
//!     32     8  size of the caller's data
//!     40     4  ready flag (READY once fully initialised)
//!     44     4  number of attach slots
//!     48     4  creator pid
//!     52     4  creator uid
//!     56     8  creator start time (clock ticks since boot)
//!     64     8  creation time (ns since the Unix epoch)
//!     72     4  length of the name below
//!     76     4  flags (bit 0: persistent)
//!     80   256  the name as given (cut to 256 bytes)
//!    336     8  seal of bytes 0..80 (`segment::seal`)
//!    344    80  a second copy of bytes 0..80
//!    424     8  seal of the second copy
//!    432    32  the object's geometry (4 words its own header also holds)
//!    464     8  seal of the geometry (0: none)
//!    472    40  reserved (0)
//!    512  32*n  attach slots
//! ```
//!
//! Bytes 0..80 never change once the segment is published; a damaged byte
//! among them breaks their seal, and the header is read from the second
//! copy (and, by `open`, repaired from it: [`Header::repair`]). A header
//! with neither seal holding (written before seals existed, or both copies
//! damaged) is read as it is and validated field by field.
//!
//! The geometry words are the second copy of the unchanging words of the
//! object that lives in the segment (a ring's node count and size, an
//! array's length and element layout, ...): an object whose own header is
//! damaged restores it from them when it is opened
//! (`Segment::restore_geometry`).
//!
//! All integers are little-endian (the native order of every Linux target
//! tachyon supports). The header is read with `pread` into a private buffer
//! and validated before anything is mapped; once validated, the values are
//! kept privately and never re-read from shared memory.

use crate::error::{Corruption, Error, Result};
use crate::platform::atomic::{AtomicU32, AtomicU64};
use crate::segment::Kind;
use crate::segment::MAX_SLOTS;

pub(crate) const MAGIC: [u8; 8] = *b"TACHYSEG";
/// The layout version this build reads and writes.
pub const LAYOUT_VERSION: u32 = 1;
pub(crate) const READY: u32 = 0x5244_5921;
pub(crate) const HEADER_SIZE: usize = 512;
pub(crate) const NAME_CAP: usize = 256;
pub(crate) const SLOT_SIZE: usize = 32;
pub(crate) const PAGE: u64 = 4096;
/// The fixed part of the header (sealed, and kept twice).
const FIXED: usize = 80;
const SEAL_AT: usize = 336;
const COPY_AT: usize = 344;
const COPY_SEAL_AT: usize = 424;
const GEOMETRY_AT: usize = 432;
const GEOMETRY_SEAL_AT: usize = 464;
/// The seal's domain: an object's geometry (with its kind).
const GEOMETRY_DOMAIN: u64 = 0x0067_656f_6d65_7472;
/// The seal's domain: a segment header's fixed part.
const DOMAIN: u64 = 0x0073_6567_6d65_6e74;

fn seal_of(fixed: &[u8]) -> u64 {
    crate::segment::seal::seal(DOMAIN, fixed.chunks_exact(8).map(|c| u64_at(c, 0)))
}

/// Whether the fixed part at `at` matches the seal at `seal_at`.
fn sealed(b: &[u8], at: usize, seal_at: usize) -> bool {
    seal_of(&b[at..at + FIXED]) == u64_at(b, seal_at)
}

/// Slot states.
pub(crate) const SLOT_FREE: u32 = 0;
pub(crate) const SLOT_ATTACHED: u32 = 1;
/// Still attached, but its process is exiting (past `exit`): it holds its
/// claims until the kernel ends it, yet will never use the name again, so
/// it does not keep the file from being removed.
pub(crate) const SLOT_EXITING: u32 = 2;

/// Where the OFD locks live in the file's byte-range lock space (far past
/// any data: byte-range locks may lie beyond the end of a file).
pub(crate) const LOCK_BASE: u64 = 1 << 40;
/// Held briefly by whoever attaches, detaches or removes the file.
pub(crate) const LIFECYCLE_LOCK: u64 = LOCK_BASE;
/// Held for its whole life by the handle in attach slot `i`.
pub(crate) const fn slot_lock(i: usize) -> u64 {
    LOCK_BASE + 1 + i as u64
}
/// Held for its whole life by the attachment of slot `i` whose token has
/// generation `gen`: the kernel's own record of which attachment holds the
/// slot, which no write to shared memory can change (a damaged generation
/// or state word in the slot table cannot make a live attachment look
/// dead). Generations have 23 bits.
pub(crate) const fn gen_lock(i: usize, gen: u32) -> u64 {
    LOCK_BASE + (1 << 32) + ((i as u64) << 24) + (gen & 0xFF_FFFF) as u64
}

/// The validated contents of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub total_size: u64,
    pub data_offset: u64,
    pub data_size: u64,
    pub slots: usize,
    pub creator_pid: u32,
    pub creator_uid: u32,
    pub creator_start: u64,
    pub created_unix_ns: u64,
    /// Kept when its last attacher closes or dies; removed only explicitly.
    pub persistent: bool,
    pub name: String,
    /// The object's geometry, if the header holds it sealed.
    pub geometry: Option<[u64; 4]>,
}

fn geometry_seal(kind: Kind, words: &[u64; 4]) -> u64 {
    crate::segment::seal::seal(GEOMETRY_DOMAIN ^ u64::from(kind.raw()), *words)
}

/// One attach slot as it lies in shared memory.
#[repr(C)]
pub(crate) struct SlotRepr {
    pub state: AtomicU32,
    pub gen: AtomicU32,
    pub pid: AtomicU32,
    pub uid: AtomicU32,
    pub start_time: AtomicU64,
    pub attached_unix_ns: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<SlotRepr>() == SLOT_SIZE);

/// A slot as read from a private copy of the table (for listing).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotCopy {
    pub state: u32,
    pub pid: u32,
    pub start_time: u64,
    pub attached_unix_ns: u64,
}

impl SlotCopy {
    pub(crate) fn decode(b: &[u8]) -> SlotCopy {
        SlotCopy {
            state: u32_at(b, 0),
            pid: u32_at(b, 8),
            start_time: u64_at(b, 16),
            attached_unix_ns: u64_at(b, 24),
        }
    }
}

/// The layout that follows from a number of slots and a data size.
pub(crate) fn layout(slots: usize, data_size: u64) -> Option<(u64, u64)> {
    let table_end = HEADER_SIZE as u64 + (SLOT_SIZE * slots) as u64;
    let data_offset = table_end.checked_next_multiple_of(PAGE)?;
    let total = data_offset.checked_add(data_size.checked_next_multiple_of(PAGE)?)?;
    // A mapping must fit the address space and an `isize`.
    (total <= isize::MAX as u64).then_some((data_offset, total))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Header {
    /// The header image, ready flag set, to be written before the file is
    /// published under its name.
    pub(crate) fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.kind.raw().to_le_bytes());
        b[16..24].copy_from_slice(&self.total_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.data_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_size.to_le_bytes());
        b[40..44].copy_from_slice(&READY.to_le_bytes());
        b[44..48].copy_from_slice(&(self.slots as u32).to_le_bytes());
        b[48..52].copy_from_slice(&self.creator_pid.to_le_bytes());
        b[52..56].copy_from_slice(&self.creator_uid.to_le_bytes());
        b[56..64].copy_from_slice(&self.creator_start.to_le_bytes());
        b[64..72].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        let name = cut_name(&self.name);
        b[72..76].copy_from_slice(&(name.len() as u32).to_le_bytes());
        b[76..80].copy_from_slice(&u32::from(self.persistent).to_le_bytes());
        b[80..80 + name.len()].copy_from_slice(name.as_bytes());
        let seal = seal_of(&b[..FIXED]).to_le_bytes();
        b.copy_within(..FIXED, COPY_AT);
        b[SEAL_AT..SEAL_AT + 8].copy_from_slice(&seal);
        b[COPY_SEAL_AT..COPY_SEAL_AT + 8].copy_from_slice(&seal);
        if let Some(g) = &self.geometry {
            for (i, w) in g.iter().enumerate() {
                b[GEOMETRY_AT + 8 * i..GEOMETRY_AT + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
            }
            b[GEOMETRY_SEAL_AT..GEOMETRY_SEAL_AT + 8]
                .copy_from_slice(&geometry_seal(self.kind, g).to_le_bytes());
        }
        b
    }

    /// The header image with a damaged copy of its fixed part restored
    /// from the other, if one copy is damaged and the other holds (`None`:
    /// nothing to repair, or nothing to repair it from).
    pub(crate) fn repair(b: &[u8]) -> Option<[u8; HEADER_SIZE]> {
        let mut img: [u8; HEADER_SIZE] = b.get(..HEADER_SIZE)?.try_into().ok()?;
        let (first, second) = (sealed(&img, 0, SEAL_AT), sealed(&img, COPY_AT, COPY_SEAL_AT));
        if first && (!second || img[..FIXED] != img[COPY_AT..COPY_AT + FIXED]) {
            img.copy_within(..FIXED, COPY_AT);
            img.copy_within(SEAL_AT..SEAL_AT + 8, COPY_SEAL_AT);
        } else if !first && second {
            img.copy_within(COPY_AT..COPY_AT + FIXED, 0);
            img.copy_within(COPY_SEAL_AT..COPY_SEAL_AT + 8, SEAL_AT);
        } else {
            return None;
        }
        Some(img)
    }

    /// Validates a header read from a file of `file_size` bytes. `b` holds
    /// the first `min(file_size, HEADER_SIZE)` bytes. Each kind of damage
    /// gives its own error.
    pub(crate) fn decode(b: &[u8], file_size: u64) -> Result<Header> {
        if file_size == 0 {
            return Err(Error::corrupt(Corruption::ZeroLength));
        }
        if file_size < HEADER_SIZE as u64 || b.len() < HEADER_SIZE {
            return Err(Error::corrupt(Corruption::Truncated {
                expected: HEADER_SIZE as u64,
                actual: file_size,
            }));
        }
        // The first copy of the fixed part is damaged and the second holds:
        // read that one.
        let healed =
            if !sealed(b, 0, SEAL_AT) && sealed(b, COPY_AT, COPY_SEAL_AT) { Header::repair(b) } else { None };
        let b = healed.as_ref().map_or(b, |img| &img[..]);
        if b[0..8] != MAGIC {
            return Err(Error::corrupt(Corruption::BadMagic));
        }
        let version = u32_at(b, 8);
        if version != LAYOUT_VERSION {
            return Err(Error::VersionMismatch { found: version, expected: LAYOUT_VERSION });
        }
        if u32_at(b, 40) != READY {
            return Err(Error::corrupt(Corruption::NotInitialised));
        }
        let bad = |field, value| Error::corrupt(Corruption::BadField { field, value });
        let slots = u32_at(b, 44) as usize;
        if slots == 0 || slots > MAX_SLOTS {
            return Err(bad("slots", slots as u64));
        }
        let data_size = u64_at(b, 32);
        let (data_offset, total_size) =
            layout(slots, data_size).ok_or_else(|| bad("data_size", data_size))?;
        if u64_at(b, 24) != data_offset {
            return Err(bad("data_offset", u64_at(b, 24)));
        }
        let recorded_total = u64_at(b, 16);
        if recorded_total != total_size {
            return Err(bad("total_size", recorded_total));
        }
        if file_size < total_size {
            return Err(Error::corrupt(Corruption::Truncated { expected: total_size, actual: file_size }));
        }
        if file_size > total_size {
            return Err(Error::corrupt(Corruption::SizeMismatch { header: total_size, file: file_size }));
        }
        let flags = u32_at(b, 76);
        if flags > 1 {
            return Err(bad("flags", u64::from(flags)));
        }
        let name_len = u32_at(b, 72) as usize;
        if name_len > NAME_CAP {
            return Err(bad("name_len", name_len as u64));
        }
        let kind = Kind::from_raw(u32_at(b, 12));
        let geometry: [u64; 4] = std::array::from_fn(|i| u64_at(b, GEOMETRY_AT + 8 * i));
        let geometry = (geometry_seal(kind, &geometry) == u64_at(b, GEOMETRY_SEAL_AT)).then_some(geometry);
        Ok(Header {
            kind,
            geometry,
            total_size,
            data_offset,
            data_size,
            slots,
            creator_pid: u32_at(b, 48),
            creator_uid: u32_at(b, 52),
            creator_start: u64_at(b, 56),
            created_unix_ns: u64_at(b, 64),
            persistent: flags & 1 != 0,
            name: String::from_utf8_lossy(&b[80..80 + name_len]).into_owned(),
        })
    }
}

/// The name cut to at most `NAME_CAP` bytes on a character boundary.
fn cut_name(name: &str) -> &str {
    let mut end = name.len().min(NAME_CAP);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        let (data_offset, total_size) = layout(MAX_SLOTS, 10_000).unwrap();
        Header {
            kind: Kind::RAW,
            total_size,
            data_offset,
            data_size: 10_000,
            slots: MAX_SLOTS,
            creator_pid: 42,
            creator_uid: 1000,
            creator_start: 12345,
            created_unix_ns: 99,
            persistent: true,
            name: "héllo".into(),
            geometry: Some([1, 2, 3, 4]),
        }
    }

    #[test]
    fn round_trip() {
        let h = sample();
        let img = h.encode();
        assert_eq!(Header::decode(&img, h.total_size).unwrap(), h);
    }

    #[test]
    fn each_damage_has_its_own_error() {
        let h = sample();
        // Without the seals and the second copy (as before them, or with
        // both copies damaged) every field is validated on its own.
        let mut img = h.encode();
        img[SEAL_AT..].fill(0);
        let corrupt = |r: Result<Header>| match r {
            Err(Error::Corrupt { what }) => what,
            other => panic!("expected Corrupt, got {other:?}"),
        };
        assert_eq!(corrupt(Header::decode(&[], 0)), Corruption::ZeroLength);
        assert!(matches!(corrupt(Header::decode(&img[..100], 100)), Corruption::Truncated { .. }));
        assert!(matches!(corrupt(Header::decode(&img, h.total_size - 1)), Corruption::Truncated { .. }));
        assert!(matches!(corrupt(Header::decode(&img, h.total_size + 1)), Corruption::SizeMismatch { .. }));
        let mut m = img;
        m[0] = b'X';
        assert_eq!(corrupt(Header::decode(&m, h.total_size)), Corruption::BadMagic);
        let mut v = img;
        v[8] = 9;
        assert!(matches!(Header::decode(&v, h.total_size), Err(Error::VersionMismatch { found: 9, .. })));
        let mut r = img;
        r[40] = 0;
        assert_eq!(corrupt(Header::decode(&r, h.total_size)), Corruption::NotInitialised);
        let mut s = img;
        s[44..48].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            corrupt(Header::decode(&s, h.total_size)),
            Corruption::BadField { field: "slots", .. }
        ));
        let mut d = img;
        d[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(corrupt(Header::decode(&d, h.total_size)), Corruption::BadField { .. }));
    }

    #[test]
    fn a_damaged_byte_of_either_copy_is_read_and_repaired_from_the_other() {
        let h = sample();
        let img = h.encode();
        assert!(Header::repair(&img).is_none(), "nothing to repair");
        for at in (0..FIXED).chain(SEAL_AT..SEAL_AT + 8).chain(COPY_AT..COPY_SEAL_AT + 8) {
            let mut d = img;
            d[at] ^= 0x10;
            assert_eq!(Header::decode(&d, h.total_size).unwrap(), h, "byte {at}");
            assert_eq!(Header::repair(&d).map(|r| r.to_vec()), Some(img.to_vec()), "byte {at}");
        }
        // Both copies damaged: validated field by field (as a header from
        // before the seals is).
        let mut both = img;
        both[0] = b'X';
        both[COPY_AT] = b'X';
        assert!(Header::repair(&both).is_none());
        assert!(matches!(Header::decode(&both, h.total_size), Err(Error::Corrupt { .. })));
        let mut legacy = img;
        legacy[SEAL_AT..].fill(0);
        legacy[12] ^= 1; // another kind, unsealed: taken as it is
        assert_ne!(Header::decode(&legacy, h.total_size).unwrap().kind, h.kind);
    }

    #[test]
    fn long_names_are_cut_on_a_char_boundary() {
        let mut h = sample();
        h.name = "é".repeat(200); // 400 bytes
        let back = Header::decode(&h.encode(), h.total_size).unwrap();
        assert_eq!(back.name, "é".repeat(128));
    }
}
