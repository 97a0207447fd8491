package secrets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	// Path is where the file appears in the sandbox: the host path, "~/"
	// expanded and symlinks resolved.
	Path string
	// Copy is the substituted copy on the host (0600, in a 0700
	// directory), bound read-only over Path.
	Copy string
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

// holdsValue reports whether data holds any real value of secs.
func holdsValue(data []byte, secs []Secret) bool {
	for _, s := range secs {
		if s.Value != "" && bytes.Contains(data, []byte(s.Value)) {
			return true
		}
		if s.SecretValue != "" && bytes.Contains(data, []byte(s.SecretValue)) {
			return true
		}
	}
	return false
}

// CredentialFiles reads the Files of specs (resolved as secs, in the same
// order) on the host, home being the caller's home for "~/", and writes
// each substituted copy (ReplaceValues with all of secs, so one file may
// carry several secrets) to dir/HASH-NAME: 0600 in a 0700
// directory, named by its path and content so a changed source gives a
// new copy and a running sandbox keeps the one it has. No copy ever holds
// a real value (checked after substitution). Errors wrap ErrUnusable
// (bad path, missing, not a regular file, larger than
// MaxCredentialFileBytes) or are the write's; they name the secret and
// "files", never a value.
func CredentialFiles(dir, home string, specs []sandbox.Secret, secs []Secret) ([]FileCopy, error) {
	var out []FileCopy
	for _, sp := range specs {
		for i, f := range sp.Files {
			key := fmt.Sprintf("%s files[%d] %q", sp.Name, i, f)
			p, why := ExpandFilePath(f, home)
			if why != "" {
				return nil, fmt.Errorf("%w %s: %s", ErrUnusable, key, why)
			}
			if r, err := filepath.EvalSymlinks(p); err == nil {
				p = r
			}
			data, err := readCredentialFile(p)
			if err != nil {
				return nil, fmt.Errorf("%w %s: %v", ErrUnusable, key, err)
			}
			sub := ReplaceValues(data, secs)
			if holdsValue(sub, secs) {
				return nil, fmt.Errorf("%w %s: a real value survived the substitution", ErrUnusable, key)
			}
			cp, err := writeCopy(dir, p, sub)
			if err != nil {
				return nil, fmt.Errorf("secret %s: writing the copy of %s: %w", sp.Name, p, err)
			}
			out = append(out, FileCopy{Secret: sp.Name, Path: p, Copy: cp})
		}
	}
	return out, nil
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

// writeCopy writes data to dir/HASH-BASE unless it is there already.
func writeCopy(dir, path string, data []byte) (string, error) {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(data)
	name := hex.EncodeToString(h.Sum(nil)[:10]) + "-" + strings.TrimPrefix(filepath.Base(path), ".")
	cp := filepath.Join(dir, name)
	if b, err := os.ReadFile(cp); err == nil && bytes.Equal(b, data) {
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
