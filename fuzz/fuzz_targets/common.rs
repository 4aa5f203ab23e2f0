// Shared by the fuzz targets: a private segment directory, and writing a
// mutated copy of a template segment under a name.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Once;

fn dir_of_this_process() -> PathBuf {
    PathBuf::from(format!("/dev/shm/tachyon-fuzz-{}", std::process::id()))
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

/// Removes the private directory when libFuzzer ends the process (it calls
/// `exit`, so no destructor runs): /dev/shm is left as it was found.
extern "C" fn remove_private_dir() {
    let _ = std::fs::remove_dir_all(dir_of_this_process());
}

/// Points the library at a private directory under /dev/shm (once),
/// removed when the process exits.
pub fn private_dir() -> PathBuf {
    static INIT: Once = Once::new();
    let dir = dir_of_this_process();
    INIT.call_once(|| {
        let _ = std::fs::create_dir_all(&dir);
        std::env::set_var("TACHYON_SHM_DIR", &dir);
        // SAFETY: registers a plain `extern "C" fn()`, as atexit expects.
        unsafe { atexit(remove_private_dir) };
    });
    dir
}

/// Applies `patches` (each: 4-byte offset, 8-byte value, little-endian) to
/// `bytes` at `offset % len`, as far as they fit.
pub fn patch(bytes: &mut [u8], patches: &[u8]) {
    for p in patches.chunks_exact(12) {
        if bytes.is_empty() {
            return;
        }
        let off = u32::from_le_bytes(p[..4].try_into().unwrap()) as usize % bytes.len();
        let n = (bytes.len() - off).min(8);
        bytes[off..off + n].copy_from_slice(&p[4..4 + n]);
    }
}

/// A little-endian reader of fuzz input.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    pub fn u64(&mut self) -> Option<u64> {
        if self.0.len() < 8 {
            return None;
        }
        let (w, rest) = self.0.split_at(8);
        self.0 = rest;
        Some(u64::from_le_bytes(w.try_into().unwrap()))
    }
}

/// A word to plant in a ring cell's control word: a sequence near `pos`
/// (or anywhere) and a tag of each kind the protocol knows, or garbage.
/// Tokens of attach slots 0 to 7 (the harness's own live handles) are
/// never forged: a forged live claim is indistinguishable from a real one.
pub fn cell_word(sel: u8, pos: u64, raw: u64) -> u64 {
    let seq = match sel & 3 {
        0 => pos as u32,
        1 => (pos as u32).wrapping_add(1),
        2 => (pos as u32).wrapping_add((raw >> 40) as u32 % 9).wrapping_sub(4),
        _ => (raw >> 32) as u32,
    };
    let tag = match (sel >> 2) & 3 {
        0 => 0,
        1 => 0x8000_0000,
        2 => raw as u32 & 0x3fff_ffff,
        _ => raw as u32,
    };
    no_live_token((u64::from(seq) << 32) | u64::from(tag))
}

/// `word` with its tag moved off the tokens of attach slots 0 to 7 (the
/// harness's own live handles): a forged live claim cannot be told from a
/// real one (a documented limit, not a finding).
pub fn no_live_token(word: u64) -> u64 {
    let tag = word as u32;
    if tag & 0x7f < 8 && tag & !0x3fff_ffff == 0 && tag >> 7 != 0 {
        word | 0x40
    } else {
        word
    }
}

/// The file of segment `name` in the private directory.
pub fn file_of(name: &str) -> PathBuf {
    let suffix = format!(".{name}");
    std::fs::read_dir(private_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no file for {name}"))
}
