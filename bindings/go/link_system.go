//go:build tachyon_system

package tachyon

// Linking with the build tag tachyon_system: an installed libtachyon
// (cmake --install puts tachyon.pc in lib/pkgconfig), found by pkg-config:
//
//	sudo cmake --install build && sudo ldconfig
//	go build -tags tachyon_system ./...
//
// Set PKG_CONFIG_PATH for an installation outside the default prefixes.

/*
#cgo pkg-config: tachyon
*/
import "C"
