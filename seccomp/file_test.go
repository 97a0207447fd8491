//go:build linux

package seccomp

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFile checks the memfd handed to bwrap: the program's bytes from
// offset 0, close-on-exec, sealed against change.
func TestFile(t *testing.T) {
	requireSandboxTest(t)
	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			want, err := BPF(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			f, err := File(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fd := f.Fd()
			flags, err := unix.FcntlInt(fd, unix.F_GETFD, 0)
			if err != nil || flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("F_GETFD = %#x, %v: want FD_CLOEXEC", flags, err)
			}
			seals, err := unix.FcntlInt(fd, unix.F_GET_SEALS, 0)
			wantSeals := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
			if err != nil || seals&wantSeals != wantSeals {
				t.Errorf("seals = %#x, %v: want %#x", seals, err, wantSeals)
			}
			got, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("memfd holds %d bytes that differ from BPF's %d", len(got), len(want))
			}
			if _, err := f.WriteAt([]byte{0}, 0); err == nil {
				t.Error("the sealed memfd accepted a write")
			}
		})
	}
}
