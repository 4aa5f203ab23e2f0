module tachyon/examples/go

go 1.19

require tachyon/bindings/go v0.0.0

// The binding of this checkout; it links target/release/libtachyon.so
// (cargo build --release -p tachyon-ffi).
replace tachyon/bindings/go => ../../bindings/go
