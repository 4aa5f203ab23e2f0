//! Gives libtachyon.so the soname `libtachyon.so`, so that programs linked
//! against it (by any path) look it up by that name at run time.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtachyon.so");
}
