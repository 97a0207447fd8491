package sandbox

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Validate reports the first thing that makes r malformed whatever the
// backend, so that every backend refuses the same requests alike and before
// it prepares anything:
//
//   - no command, an empty command name, or a NUL byte in an argument or
//     an environment entry (execve(2) takes C strings: a NUL would cut the
//     string short, so the command would not run what was asked; an entry
//     without "=" is not refused: the environment policy drops it);
//   - an unknown profile (ParseProfile);
//   - a scratch, home, cache or layer directory, or a bind's source or
//     destination that is set but not an absolute path (they are host
//     paths or sandbox paths, never relative to wherever corral happens
//     to run), nor a working or start directory, which may also be "~" or
//     "~/..." (the sandbox's home, which the backend resolves inside it);
//   - a negative limit, timeout or tmp size;
//   - a malformed protected-path pattern (CheckProtected);
//   - secrets under a profile without the egress proxy (CheckSecrets).
//
// What a backend cannot do (a user switch, more descriptors than its
// relay carries) is that backend's own refusal. Errors wrap ErrBadRequest.
// Pure: it reads no file.
func (r *Request) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, a...)...)
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return bad("no command given")
	}
	for _, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("command argument contains a NUL byte")
		}
	}
	for _, e := range r.Env {
		if strings.IndexByte(e, 0) >= 0 {
			return bad("environment entry %q contains a NUL byte", envName(e))
		}
	}
	if r.Profile != "" {
		if _, err := ParseProfile(string(r.Profile)); err != nil {
			return err
		}
	}
	for _, d := range []struct{ what, p string }{{"working directory", r.Workdir}, {"start directory", r.Dir}} {
		if d.p != "" && !filepath.IsAbs(d.p) && d.p != "~" && !strings.HasPrefix(d.p, "~/") {
			return bad("%s %q is not an absolute path", d.what, d.p)
		}
	}
	for _, d := range []struct{ what, p string }{
		{"scratch directory", r.ScratchDir},
		{"home directory", r.HomeDir}, {"cache directory", r.CacheDir}, {"layer directory", r.LayerDir},
	} {
		if d.p != "" && !filepath.IsAbs(d.p) {
			return bad("%s %q is not an absolute path", d.what, d.p)
		}
	}
	for i, b := range r.Binds {
		if !filepath.IsAbs(b.Src) {
			return bad("binds[%d].src %q is not an absolute path", i, b.Src)
		}
		if b.Dest != "" && !filepath.IsAbs(b.Dest) {
			return bad("binds[%d].dest %q is not an absolute path", i, b.Dest)
		}
	}
	if r.Limits.MemoryMB < 0 || r.Limits.CPUSeconds < 0 || r.Limits.MaxProcs < 0 {
		return bad("limits must not be negative (memory_mb %d, cpu_seconds %d, max_procs %d)", r.Limits.MemoryMB, r.Limits.CPUSeconds, r.Limits.MaxProcs)
	}
	if r.Timeout < 0 {
		return bad("timeout %s is negative", r.Timeout)
	}
	if r.TmpSizeMB < 0 {
		return bad("tmp_size_mb %d is negative", r.TmpSizeMB)
	}
	if err := CheckProtected(r.Protected); err != nil {
		return err
	}
	return CheckSecrets(r.Policy)
}

// envName is the name part of an environment entry, for messages: never
// the value, which may be a secret.
func envName(e string) string {
	name, _, _ := strings.Cut(e, "=")
	return strings.ReplaceAll(name, "\x00", `\0`)
}
