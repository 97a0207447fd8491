// Package helperbin finds the executable that corral hands its sandboxes,
// containers and pods as their helper (the modes of package reexec that
// run inside them): cmd/corral-helper, a fraction of corral's size, or
// corral's own executable when no usable helper is found.
//
// The candidates, in order (Locator.Path):
//
//  1. corral-helper next to corral's executable (symlinks resolved): how
//     packagers and images ship it, taken only where only root writes
//     (Trusted: no sandbox's command can have put it there);
//  2. corral-helper in corral's cache (<user cache dir>/corral/helper/KEY/),
//     KEY being corral's own Go build ID, built there by `corral doctor`
//     (Locator.Build) with the go command from corral's module source;
//  3. corral's own executable, with one helper.fallback event saying why
//     and how to ship the helper.
//
// A candidate is run (to ask its protocol) and used only when Trusted
// finds that no sandbox could have written it, and only when it answers reexec.ProtocolMode with this
// executable's reexec.Answer (the same protocol version and at least the
// same sandbox modes): a helper built from other source is refused, never
// run in a sandbox. The verdict is kept in a stamp file keyed by the
// candidate's identity (device, inode, size, modification and change
// times) and the expected answer, so a process pays a stat and a small
// read, not an exec, once a candidate was checked. The docker and
// kubernetes backends also need a static executable (no PT_INTERP: the
// image may have no C library); the bwrap backend takes any.
//
// Nothing is looked at before a helper is first needed, and only Build
// builds: other verbs never wait for the go command.
package helperbin
