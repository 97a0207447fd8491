package inside

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// ModeSHA256 prints the SHA-256 of a file: `__corral-sha256 FILE` writes
// the hash in hex and a newline. The kubernetes backend checks a copy of
// corral's executable with it, run from that copy (images need not have
// sha256sum): a copy cut short does not run, or hashes to another value.
const ModeSHA256 = "__corral-sha256"

// sha256Main is ModeSHA256.
func sha256Main(args []string) int {
	if len(args) != 1 {
		return fail(ModeSHA256, errors.New("usage: __corral-sha256 FILE"))
	}
	f, err := os.Open(args[0])
	if err != nil {
		return fail(ModeSHA256, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fail(ModeSHA256, err)
	}
	fmt.Println(hex.EncodeToString(h.Sum(nil)))
	return 0
}
