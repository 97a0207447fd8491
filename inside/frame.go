package inside

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame kinds on the relay's stdout. Kinds 1 and 2 carry the command's
// stdout and stderr; kind 3+i carries what the command wrote to descriptor
// 3+i (an extra output descriptor).
const (
	KindStdout byte = 1
	KindStderr byte = 2
	// KindStarted carries the command's process group id (decimal), sent
	// once as soon as the command runs.
	KindStarted byte = 'P'
	// KindExit carries the command's [Exit] as JSON; it is the last frame.
	KindExit byte = 'X'
)

// Frame kinds on the relay's stdin, which is a control stream from corral
// (the relay was started with --control).
const (
	// KindStdin carries bytes for the command's stdin.
	KindStdin byte = 0x10
	// KindStdinEOF closes the command's stdin.
	KindStdinEOF byte = 0x11
	// KindSignal carries a signal number (decimal) for the command's
	// session.
	KindSignal byte = 0x12
)

// MaxFrame is the largest payload of one frame, in bytes.
const MaxFrame = 64 << 10

// frameHeader is one byte of kind and four bytes of big-endian length.
const frameHeader = 5

// WriteFrame writes one frame: kind, the payload's length as a big-endian
// uint32, then the payload (at most MaxFrame bytes).
func WriteFrame(w io.Writer, kind byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	buf := make([]byte, frameHeader+len(payload))
	buf[0] = kind
	binary.BigEndian.PutUint32(buf[1:frameHeader], uint32(len(payload)))
	copy(buf[frameHeader:], payload)
	_, err := w.Write(buf)
	return err
}

// ErrBadFrame is returned by ReadFrame for a frame longer than MaxFrame:
// the stream is not the relay's.
var ErrBadFrame = errors.New("malformed relay frame")

// ReadFrame reads one frame written by WriteFrame into buf (grown as
// needed) and returns its kind and payload. At the end of the stream it
// returns io.EOF; a stream cut inside a frame gives io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte) (kind byte, payload []byte, err error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h[0], buf, nil
}

// Exit is the relay's last report.
type Exit struct {
	// Code is the command's exit status, or 128+N when it died of signal N.
	Code int `json:"code"`
	// Signal is the signal that ended the command, or 0.
	Signal int `json:"signal,omitempty"`
	// OOM is set when the container's memory cgroup killed a process (its
	// oom_kill count rose) while the command ran.
	OOM bool `json:"oom,omitempty"`
	// OOMKnown is set when the oom_kill count could be read at all
	// (cgroup v2 memory.events, or v1 memory.oom_control on kernels 4.13+).
	OOMKnown bool `json:"oom_known,omitempty"`
	// OOMKills is by how much that count rose while the command ran: the
	// processes the memory limit killed (in the whole cgroup, so a
	// background process of the same container counts too).
	OOMKills int64 `json:"oom_kills,omitempty"`
	// Leftover is how many processes the command had started that were
	// still running when its first process exited, wherever they went
	// (setsid, a double fork): corral's reaper killed them
	// (internal/reaper), as the end of a bwrap sandbox would.
	Leftover int `json:"leftover,omitempty"`
	// Error says why the command could not be started ("bash: not found");
	// Code is then 127 or 126, as a shell reports it.
	Error string `json:"error,omitempty"`
}
