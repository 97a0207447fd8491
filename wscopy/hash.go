package wscopy

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
)

// fileSHA hashes f from its start.
func fileSHA(f *os.File) (string, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
