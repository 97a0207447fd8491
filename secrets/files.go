package secrets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/sandbox"
)

// MaxCredentialFileBytes bounds a secret's credential file (Secret.Files):
// a .netrc or registry config is a few lines; a larger file is more likely
// a mistake, and its copy is written for every change.
const MaxCredentialFileBytes = 1 << 20

// FileCopy is one of a secret's credential files as the sandbox gets it.
type FileCopy struct {
	// Secret is the secret's variable name (for messages).
	Secret string
	// Path is where the file appears in a bwrap sandbox: the host path,
	// "~/" expanded and symlinks resolved (a symlinked ~/.netrc keeps
	// leading to the copy, bound over its target).
	Path string
	// Given is the entry with "~/" expanded and cleaned, symlinks not
	// resolved: what a container's home is mapped from (the docker
	// backend), where no host symlink exists.
	Given string
	// Copy is the substituted copy on the host (0600, in a 0700
	// directory), bound read-only over Path.
	Copy string
}

// HomeDest returns where a credential file, given on the host as given
// ("~/" expanded, symlinks not resolved: FileCopy.Given), appears in a
// container whose HOME is containerHome: a file of the caller's home
// (home, or homeReal, its symlinks resolved) at the same place below
// containerHome, with inHome set; any other at its own path. A symlinked
// ~/.netrc thus appears as a regular file holding the stand-ins: the
// host's link target does not exist in a container. Pure.
func HomeDest(given, home, homeReal, containerHome string) (dest string, inHome bool) {
	for _, h := range []string{home, homeReal} {
		if rel, ok := hostview.RelToHome(given, filepath.Clean(h)); ok && h != "" {
			return path.Join(containerHome, rel), true
		}
	}
	return given, false
}

// ExpandFilePath expands a leading "~/" of a Secret.Files entry against
// home and cleans the result. It returns why p is refused ("" when not):
// it must be absolute or start with "~/" (a relative path would depend on
// where corral runs), and not be "/" or hold a NUL byte.
func ExpandFilePath(p, home string) (string, string) {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return "", "contains a NUL byte"
	case strings.HasPrefix(p, "~/"):
		if home == "" || !filepath.IsAbs(home) {
			return "", "starts with ~/ but the caller's home directory is unknown"
		}
		p = filepath.Join(home, p[2:])
	case !filepath.IsAbs(p):
		return "", "is not an absolute path or ~/path (a relative path would depend on where corral runs)"
	}
	p = filepath.Clean(p)
	if p == "/" || home != "" && p == filepath.Clean(home) {
		return "", "is a directory, not a credential file"
	}
	return p, ""
}

// ReplaceValues returns data with every occurrence of each secret's real
// value replaced by its stand-in, and for kind aws the secret access key
// by its stand-in too. A stand-in has its value's length (StandIn), so
// offsets and line lengths are kept. Longer values are replaced first,
// so a value that holds another is not cut in half. Pure.
func ReplaceValues(data []byte, secs []Secret) []byte {
	type pair struct{ real, stand string }
	var pairs []pair
	for _, s := range secs {
		if s.Value != "" {
			pairs = append(pairs, pair{s.Value, s.StandIn})
		}
		if s.Kind == KindAWS && s.SecretValue != "" {
			pairs = append(pairs, pair{s.SecretValue, s.SecretStandIn})
		}
	}
	// Insertion sort by length, longest first (a handful of entries).
	for i := 1; i < len(pairs); i++ {
		for j := i; j > 0 && len(pairs[j].real) > len(pairs[j-1].real); j-- {
			pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
		}
	}
	out := bytes.Clone(data)
	for _, p := range pairs {
		out = bytes.ReplaceAll(out, []byte(p.real), []byte(p.stand))
	}
	return out
}

// holdsValue reports whether data holds any real value of secs in any of
// the forms a response scrubber looks for (EncodedForms).
func holdsValue(data []byte, secs []Secret) bool {
	var pairs []Pair
	for _, s := range secs {
		if s.Value != "" && s.StandIn != "" {
			pairs = append(pairs, EncodedForms(s.Name, s.Value, s.StandIn)...)
		}
		if s.SecretValue != "" && s.SecretStandIn != "" {
			pairs = append(pairs, EncodedForms(s.SecretName, s.SecretValue, s.SecretStandIn)...)
		}
		if s.Value != "" && bytes.Contains(data, []byte(s.Value)) || s.SecretValue != "" && bytes.Contains(data, []byte(s.SecretValue)) {
			return true
		}
	}
	if len(pairs) == 0 {
		return false
	}
	sc, err := NewScrubber(pairs)
	return err != nil || len(sc.Bytes(bytes.Clone(data))) > 0
}

// CredentialFiles reads the Files of specs (resolved as secs, in the same
// order) on the host, home being the caller's home for "~/", parses each
// by its name (FormatOf) and writes its copy (FilterCredentials with all
// of secs, so one file may carry several secrets: only their entries,
// with stand-ins, then ReplaceValues) to dir/HASH-NAME: 0600 in a 0700
// directory, named by its path and content so a changed source gives a
// new copy and a running sandbox keeps the one it has. No copy ever holds
// a real value in any form a response scrubber knows (checked after
// substitution). Errors wrap ErrUnusable (bad path, missing, not a
// regular file, larger than MaxCredentialFileBytes; ErrUnparsable: a kind
// of file corral does not parse, or one not valid in its format) or are
// the write's; they name the secret and "files", never a value.
func CredentialFiles(dir, home string, specs []sandbox.Secret, secs []Secret) ([]FileCopy, error) {
	var out []FileCopy
	for _, sp := range specs {
		for i, f := range sp.Files {
			key := fmt.Sprintf("%s files[%d] %q", sp.Name, i, f)
			p, why := ExpandFilePath(f, home)
			if why != "" {
				return nil, fmt.Errorf("%w %s: %s", ErrUnusable, key, why)
			}
			given := p
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			data, err := readCredentialFile(p)
			if err != nil {
				return nil, fmt.Errorf("%w %s: %v", ErrUnusable, key, err)
			}
			format := FormatOf(given, p)
			if isSourceFile(specs, given, p) {
				format = FormatValueFile
			}
			if format == "" {
				return nil, fmt.Errorf("%w %s: corral cannot parse this kind of file, and will not show it whole (it may hold other credentials); it parses %s", ErrUnparsable, key, KnownFormats)
			}
			sub, err := FilterCredentials(format, data, secs)
			if err != nil {
				return nil, fmt.Errorf("%w %s (read as %s): %v", ErrUnparsable, key, format, err)
			}
			// A value in a setting that is no credential (a query string)
			// becomes the stand-in too; any form of one left refuses.
			sub = ReplaceValues(sub, secs)
			if holdsValue(sub, secs) {
				return nil, fmt.Errorf("%w %s: a real value survived the substitution", ErrUnusable, key)
			}
			cp, err := writeCopy(dir, p, sub)
			if err != nil {
				return nil, fmt.Errorf("secret %s: writing the copy of %s: %w", sp.Name, p, err)
			}
			out = append(out, FileCopy{Secret: sp.Name, Path: p, Given: given, Copy: cp})
		}
	}
	return out, nil
}

// isSourceFile reports whether given (or p, its symlinks resolved) is the
// file: source of one of specs.
func isSourceFile(specs []sandbox.Secret, given, p string) bool {
	for _, sp := range specs {
		for _, src := range sp.Sources() {
			f, ok := sandbox.SourceFile(src)
			if !ok {
				continue
			}
			if r, err := filepath.EvalSymlinks(f); err == nil {
				f = r
			}
			if f == given || f == p {
				return true
			}
		}
	}
	return false
}

func readCredentialFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("cannot open the file: %w", errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, errors.New("is not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCredentialFileBytes+1))
	if err != nil {
		return nil, errors.New("cannot read the file")
	}
	if len(b) > MaxCredentialFileBytes {
		return nil, fmt.Errorf("is larger than %d bytes (1 MiB)", MaxCredentialFileBytes)
	}
	return b, nil
}

// writeCopy writes data to dir/HASH-BASE unless it is there already; a
// copy found there has its modification time renewed (CopyLease).
func writeCopy(dir, path string, data []byte) (string, error) {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(data)
	name := hex.EncodeToString(h.Sum(nil)[:10]) + "-" + strings.TrimPrefix(filepath.Base(path), ".")
	cp := filepath.Join(dir, name)
	if b, err := os.ReadFile(cp); err == nil && bytes.Equal(b, data) && renew(cp) == nil {
		return cp, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.Write(cp, data, 0o600, false); err != nil {
		return "", err
	}
	return cp, nil
}

// CopyLease is how long a credential file copy (CredentialFiles, OwnCopy)
// is kept after its last use: each use renews its modification time, and
// PruneCopies removes only copies unused for longer. A copy is needed from
// the moment it is written until the sandbox or container has bound it,
// milliseconds later; after that the mount holds the file's inode, so
// removing the name takes nothing from a running sandbox (unlink(2) of a
// bind mount's source leaves the mount working). An hour covers any
// start, however slow, many times over.
const CopyLease = time.Hour

// renew sets p's modification time to now: the copy is in use.
func renew(p string) error {
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// OwnCopy gives uid its own copy of the credential file copy src (in
// the same directory: NAME-uUID, 0600, owned by uid:gid), for a sandbox
// or container that runs as uid while corral runs as root: a copy per
// identity, so that giving it to one never takes it from another. An
// existing copy of that owner and content is renewed (CopyLease) and
// reused. Only root can give a file away (chown(2)).
func OwnCopy(src string, uid, gid int) (string, error) {
	own := fmt.Sprintf("%s-u%d", src, uid)
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", src, err)
	}
	if st, err := os.Stat(own); err == nil && ownedBy(st, uid) {
		if b, err := os.ReadFile(own); err == nil && bytes.Equal(b, data) && renew(own) == nil {
			return own, nil
		}
	}
	tmp := own + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", own, err)
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("giving %s to uid %d: %w", own, uid, err)
	}
	if err := os.Rename(tmp, own); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("writing %s: %w", own, err)
	}
	return own, nil
}

// ownedBy reports whether st belongs to uid.
func ownedBy(st os.FileInfo, uid int) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == uid
}

// PruneCopies removes the credential file copies in dir (CredentialFiles'
// and OwnCopy's, and their interrupted temporary files) that were last
// used before now-lease, and returns their paths. A copy in use is renewed
// at every command that needs it (writeCopy, OwnCopy), and one already
// bound stays readable through its mount after the name is gone
// (CopyLease), so no live process loses a file it needs; copies hold
// stand-ins only, never a real value. Entries that are not regular files
// are left alone. A missing dir is no error.
func PruneCopies(dir string, lease time.Duration, now time.Time) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		st, err := e.Info()
		if err != nil || !Stale(st.ModTime(), lease, now) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
	}
	return removed, nil
}

// Stale reports whether a copy last used at used is past its lease at now:
// used before now-lease. A time in the future (a clock set back) is not
// stale. Pure.
func Stale(used time.Time, lease time.Duration, now time.Time) bool {
	return used.Before(now.Add(-lease))
}
