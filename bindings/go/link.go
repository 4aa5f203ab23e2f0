//go:build !tachyon_system

package tachyon

// Linking, default: the header and the library of this checkout,
// include/tachyon/tachyon.h and target/release/libtachyon.so (build it
// first: cargo build --release -p tachyon-ffi). The run path points at
// target/release, so programs run without LD_LIBRARY_PATH.
//
// With the build tag tachyon_system (go build -tags tachyon_system) the
// binding uses an installed libtachyon instead, found through pkg-config
// (link_system.go).

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -ltachyon -Wl,-rpath,${SRCDIR}/../../target/release
*/
import "C"
