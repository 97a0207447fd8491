package mcpserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/corralhq/corral/internal/atomicfile"
)

// TokenFileName is the file, in corral's state directory, that keeps the
// bearer token `corral serve` requires when no token is set. The state
// directory is hidden from every sandbox (hostview.BindHost.HiddenDirs), so
// a command that can reach the server's port (the network profile shares
// the host's loopback) still cannot learn the token.
const TokenFileName = "serve-token"

// maxTokenFile bounds what LoadOrCreateToken reads: a token is 64 hex
// characters; anything much larger is not one.
const maxTokenFile = 4096

// LoadOrCreateToken returns the bearer token kept in path, first creating
// the file (32 random bytes as 64 hex characters, mode 0600, written
// atomically; its directory is made 0700 when missing) when there is none.
// created reports whether it was made now. A token kept across restarts
// lets clients keep their configuration.
//
// It refuses (an error naming the fix) a path that is a symbolic link or
// not a regular file, a file another user owns or that group or others may
// read or write (the token would be theirs too), and a file whose content
// is not a token (at least 16 printable ASCII characters, no spaces; one
// trailing newline is ignored, as `echo TOKEN > FILE` writes it).
func LoadOrCreateToken(path string) (token string, created bool, err error) {
	tok, err := readTokenFile(path)
	if err == nil {
		return tok, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("making a bearer token: %w", err)
	}
	tok = hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("keeping the bearer token: %w", err)
	}
	if err := atomicfile.Write(path, []byte(tok+"\n"), 0o600, false); err != nil {
		return "", false, fmt.Errorf("keeping the bearer token: %w", err)
	}
	return tok, true, nil
}

// readTokenFile reads and checks a kept token; the error wraps
// fs.ErrNotExist when there is no file.
func readTokenFile(path string) (string, error) {
	// O_NOFOLLOW: a link planted in place of the file would hand its
	// target's content out as the token, or the token to its target.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("the bearer token file %s is a symbolic link: remove it, and corral serve makes a new token", path)
		}
		return "", fmt.Errorf("reading the bearer token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("reading the bearer token: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("the bearer token file %s is not a regular file (%s): remove it, and corral serve makes a new token", path, fi.Mode().Type())
	case st != nil && int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("the bearer token file %s belongs to user %d, not to you: remove it, and corral serve makes a new token", path, st.Uid)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("the bearer token file %s may be read or written by others (mode %04o): remove it, and corral serve makes a new token", path, fi.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("reading the bearer token: %w", err)
	}
	tok := strings.TrimSuffix(string(data), "\n")
	if !ValidToken(tok) {
		return "", fmt.Errorf("the bearer token file %s does not hold a token (16 to %d printable ASCII characters, no spaces): remove it, and corral serve makes a new one", path, maxTokenFile)
	}
	return tok, nil
}

// ValidToken reports whether s may serve as a bearer token: 16 to 4096
// printable ASCII characters without spaces, as an HTTP header carries them
// (RFC 6750 section 2.1 allows fewer; a short one is guessable).
func ValidToken(s string) bool {
	if len(s) < 16 || len(s) > maxTokenFile {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
