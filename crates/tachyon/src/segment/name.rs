//! Segment names and the files they map to.
//!
//! As in the .NET SharedMemory library on Linux:
//!
//! * an unprefixed or `Local\` name belongs to the calling user and lives in
//!   `<dir>/tachyon.u{uid}.{escaped}`;
//! * a `Global\` name is one per machine, `<dir>/tachyon.global.{escaped}`,
//!   usable only by the user who created it;
//! * `/`, `%`, `\` and control characters are escaped as `%XX`
//!   (`a/b%c` → `a%2Fb%25c`);
//! * a name whose escaped form is longer than [`MAX_ESCAPED`] bytes is cut
//!   and ends in `~` plus a 64-bit hash of the whole name, so two long names
//!   that differ only at the end stay distinct.
//!
//! `<dir>` is `/dev/shm`, or the value of the environment variable
//! [`DIR_ENV`] when set.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// Environment variable that moves segments out of `/dev/shm` (tests,
/// containers).
pub const DIR_ENV: &str = "TACHYON_SHM_DIR";
/// Default directory of segment files.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// First component of every segment file name.
pub const FILE_PREFIX: &str = "tachyon";
/// Longest escaped name kept whole in a file name.
pub const MAX_ESCAPED: usize = 200;

/// Who a name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "snake_case"))]
pub enum Scope {
    /// One user's private name space (unprefixed or `Local\`).
    User(u32),
    /// The machine-wide name space (`Global\`).
    Global,
}

/// A validated segment name and where its file lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentName {
    /// The name exactly as the caller gave it.
    pub given: String,
    /// Its scope.
    pub scope: Scope,
    /// The name without its prefix.
    pub bare: String,
    /// The file name (no directory).
    pub file_name: String,
}

impl SegmentName {
    /// Validates `name` for the calling user.
    ///
    /// ```
    /// use tachyon::segment::name::{Scope, SegmentName};
    /// let n = SegmentName::parse(r"Local\a/b%c").unwrap();
    /// assert_eq!(n.bare, "a/b%c");
    /// assert!(n.file_name.ends_with(".a%2Fb%25c"));
    /// assert!(matches!(n.scope, Scope::User(_)));
    /// assert!(SegmentName::parse("").is_err());
    /// ```
    pub fn parse(name: &str) -> Result<SegmentName> {
        Self::parse_for(name, crate::platform::process::euid())
    }

    /// Validates `name` as user `uid` would see it.
    pub fn parse_for(name: &str, uid: u32) -> Result<SegmentName> {
        let bad = |reason| Error::InvalidName { name: name.to_owned(), reason };
        if name.is_empty() {
            return Err(bad("the name is empty"));
        }
        if name.contains('\0') {
            return Err(bad("the name contains a NUL byte"));
        }
        let (scope, bare) = match name.split_once('\\') {
            None => (Scope::User(uid), name),
            Some((prefix, rest)) if prefix.eq_ignore_ascii_case("local") => (Scope::User(uid), rest),
            Some((prefix, rest)) if prefix.eq_ignore_ascii_case("global") => (Scope::Global, rest),
            Some(_) => {
                return Err(bad(r"unknown prefix: a '\' may only follow Local or Global"));
            }
        };
        if bare.is_empty() {
            return Err(bad("the name is empty after its prefix"));
        }
        let scope_part = match scope {
            Scope::User(uid) => format!("u{uid}"),
            Scope::Global => "global".to_owned(),
        };
        let file_name = format!("{FILE_PREFIX}.{scope_part}.{}", shorten(bare, &escape(bare)));
        Ok(SegmentName { given: name.to_owned(), scope, bare: bare.to_owned(), file_name })
    }

    /// The full path of the segment file.
    pub fn path(&self) -> PathBuf {
        dir().join(&self.file_name)
    }
}

/// The directory holding segment files.
pub fn dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// The file-name prefix of every segment of `scope`.
pub fn scope_prefix(scope: Scope) -> String {
    match scope {
        Scope::User(uid) => format!("{FILE_PREFIX}.u{uid}."),
        Scope::Global => format!("{FILE_PREFIX}.global."),
    }
}

fn needs_escape(c: char) -> bool {
    matches!(c, '/' | '%' | '\\') || c.is_control()
}

/// `%XX`-escapes the bytes that cannot (or should not) appear in a file name.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if needs_escape(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Reverses [`escape`]; `None` if `s` is not a valid escaped name.
pub fn unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn shorten(bare: &str, escaped: &str) -> String {
    if escaped.len() <= MAX_ESCAPED {
        return escaped.to_owned();
    }
    let keep = MAX_ESCAPED - 17; // room for '~' and 16 hex digits
    let mut cut = keep;
    // Do not split a character or a %XX escape ('%' only ever starts one).
    let b = escaped.as_bytes();
    while !escaped.is_char_boundary(cut) || b[cut - 1] == b'%' || b[cut - 2] == b'%' {
        cut -= 1;
    }
    format!("{}~{:016x}", &escaped[..cut], fnv1a64(bare.as_bytes()))
}

/// FNV-1a, 64 bits: stable across processes, builds and Rust versions
/// (unlike `std`'s hasher), which a name on disk needs.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escaping_matches_the_dotnet_rule() {
        assert_eq!(escape("a/b%c"), "a%2Fb%25c");
        assert_eq!(escape(r"x\y"), "x%5Cy");
        assert_eq!(escape("tab\there"), "tab%09here");
        assert_eq!(escape("plain-name_1.2"), "plain-name_1.2");
    }

    #[test]
    fn prefixes() {
        let l = SegmentName::parse_for(r"Local\q", 7).unwrap();
        let u = SegmentName::parse_for("q", 7).unwrap();
        assert_eq!(l.file_name, u.file_name);
        assert_eq!(u.file_name, "tachyon.u7.q");
        let g = SegmentName::parse_for(r"Global\q", 7).unwrap();
        assert_eq!(g.file_name, "tachyon.global.q");
        assert_eq!(g.scope, Scope::Global);
        // Prefixes match case-insensitively, as on Windows.
        assert_eq!(SegmentName::parse_for(r"GLOBAL\q", 7).unwrap().file_name, g.file_name);
        for bad in ["", "\0", "a\0b", r"Session\x", r"\x", r"Global\", r"Local\"] {
            assert!(
                matches!(SegmentName::parse_for(bad, 7), Err(Error::InvalidName { .. })),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn long_names_are_shortened_and_stay_distinct() {
        let a = format!("{}a", "x".repeat(1000));
        let b = format!("{}b", "x".repeat(1000));
        let na = SegmentName::parse_for(&a, 0).unwrap();
        let nb = SegmentName::parse_for(&b, 0).unwrap();
        assert_ne!(na.file_name, nb.file_name);
        assert!(na.file_name.len() <= 255);
    }

    proptest! {
        #[test]
        fn escape_round_trips(s in "\\PC*") {
            prop_assert_eq!(unescape(&escape(&s)), Some(s.clone()));
        }

        #[test]
        fn file_names_are_valid(s in proptest::collection::vec(any::<char>(), 1..400)) {
            let s: String = s.into_iter().filter(|&c| c != '\0' && c != '\\').collect();
            prop_assume!(!s.is_empty());
            let n = SegmentName::parse_for(&s, 1000).unwrap();
            prop_assert!(n.file_name.len() <= 255);
            prop_assert!(!n.file_name.contains('/'));
            prop_assert!(!n.file_name.contains('\0'));
        }
    }
}
