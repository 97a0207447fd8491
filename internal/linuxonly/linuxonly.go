//go:build linux

// Package linuxonly makes a build of corral for another system fail with
// one message that says why, instead of a list of missing Linux calls:
// corral's sandboxes are Linux namespaces, seccomp, overlayfs, bubblewrap
// and O_TMPFILE files. The packages that call Linux alone import it for
// its side effect; on Linux it is empty.
package linuxonly
