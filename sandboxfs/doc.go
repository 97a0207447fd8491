// Package sandboxfs gives corral's file tools (read_file, write_file,
// edit_file, search_files) exactly the view a command of the same session
// has: hidden paths do not exist, credential files read as empty, and a
// write outside the writable set fails with "read-only file system".
//
// Design: a sandbox spawn per file operation costs about 10-20 ms, too slow
// for an agent's stream of reads. Instead each session gets one long-lived
// sandbox, built by the session's backend from the same request a command
// gets, whose only process is this package's server: corral's own
// executable, bound read-only into the sandbox and re-executed with
// CORRAL_SANDBOXFS=serve (registered with reexec in reexec.go). The
// client talks to it with one JSON object per line on its stdin and stdout.
// No agent code ever runs in that sandbox. When the session's settings
// change (profile, working directory, binds), the server is replaced.
package sandboxfs
