//go:build !linux

package linuxonly

// The build stops here on every system but Linux, naming the reason.
var _ = corral_builds_for_linux_only__its_sandboxes_are_linux_namespaces_seccomp_and_overlayfs
