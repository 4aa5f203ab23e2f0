//! The checked-in header `include/tachyon/tachyon.h` is what cbindgen
//! makes of this crate now: CI fails when someone changed the C API (or
//! its doc comments) and forgot to regenerate it.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/tachyon/tachyon.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    if std::env::var_os("TACHYON_BLESS").is_some() {
        std::fs::write(&header, &fresh).expect("write the header");
        return;
    }
    let checked_in = std::fs::read(&header).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/tachyon/tachyon.h is stale (the C API or its docs changed). Regenerate it with\n\
         \n    TACHYON_BLESS=1 cargo test -p tachyon-ffi --test header\n\n\
         and commit it."
    );
}
