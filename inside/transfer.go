package inside

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/corralhq/corral/transfer"
)

// Modes that move file trees in and out of a pod's workspace (`corral cp`,
// `corral sync` on the kubernetes backend), run from corral's executable
// in the pod over an exec stream.
const (
	// ModeUntar reads a tar stream on stdin and writes it below ROOT:
	// `__corral-untar ROOT OPTIONS-JSON` (transfer.Options). It reads
	// stdin to its end before it answers, so stdout stays open for the
	// whole upload (containerd's CRI exec closes stdin as soon as stdout
	// ends), then prints one JSON line: transfer.Stats, or {"error": ...}
	// with exit status 1.
	ModeUntar = "__corral-untar"
	// ModeTar writes a tar of SRC (relative to ROOT) to stdout, entries
	// named TOP/...: `__corral-tar ROOT SRC TOP`; its last stderr line
	// is "sha256 HEX" of everything it wrote, for the receiver to check.
	ModeTar = "__corral-tar"
)

// UntarAnswer is ModeUntar's line.
type UntarAnswer struct {
	transfer.Stats
	Error string `json:",omitempty"`
	// Refused is set when the error is a refused entry (not worth a retry).
	Refused bool `json:",omitempty"`
}

func untarMain(args []string) int {
	if len(args) != 2 {
		return fail(ModeUntar, errors.New("usage: __corral-untar ROOT OPTIONS-JSON"))
	}
	var o transfer.Options
	if err := json.Unmarshal([]byte(args[1]), &o); err != nil {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return fail(ModeUntar, err)
	}
	st, err := transfer.Unpack(os.Stdin, args[0], o)
	a := UntarAnswer{Stats: st}
	if err != nil {
		a.Error, a.Refused = err.Error(), errors.Is(err, transfer.ErrRefused)
	}
	b, _ := json.Marshal(a)
	fmt.Println(string(b))
	if err != nil {
		return 1
	}
	return 0
}

func tarMain(args []string) int {
	if len(args) != 3 {
		return fail(ModeTar, errors.New("usage: __corral-tar ROOT SRC TOP"))
	}
	h := sha256.New()
	if _, err := transfer.Pack(io.MultiWriter(os.Stdout, h), args[0], args[1], args[2]); err != nil {
		return fail(ModeTar, err)
	}
	fmt.Fprintf(os.Stderr, "sha256 %s\n", hex.EncodeToString(h.Sum(nil)))
	return 0
}
