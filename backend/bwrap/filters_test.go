package bwrap

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/seccomp"
)

// TestFilterCache: every open of a cached filter holds exactly the program
// of its own Options (never another Options' bytes), starts at offset 0
// whatever an earlier open read, cannot be written, and the cache survives
// the caller closing its open and is rebuilt after close.
func TestFilterCache(t *testing.T) {
	if err := seccomp.Probe(); err != nil {
		t.Skipf("seccomp filters unavailable here: %v", err)
	}
	var c filterCache
	defer c.close()
	opts := []seccomp.Options{{}, {DenyUnixSockets: true}, {DenyUnixSockets: true, MediatedUnixSockets: true}}
	distinct := map[string]bool{}
	for round := 0; round < 3; round++ {
		for _, o := range opts {
			want, err := seccomp.BPF(o)
			if err != nil {
				t.Fatal(err)
			}
			distinct[string(want)] = true
			f, err := c.open(o)
			if err != nil {
				t.Fatalf("open(%+v): %v", o, err)
			}
			got, err := io.ReadAll(f) // moves this open's offset to the end
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("round %d open(%+v) read %d bytes (%v), want the %d of its own program", round, o, len(got), err, len(want))
			}
			if _, err := unix.Write(int(f.Fd()), []byte("x")); err == nil {
				t.Errorf("open(%+v) accepted a write", o)
			}
			seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
			if want := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL; err != nil || seals&want != want {
				t.Errorf("open(%+v) seals = %#x, %v; want %#x", o, seals, err, want)
			}
			f.Close()
		}
		if round == 1 {
			if err := c.close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(distinct) != len(opts) {
		t.Fatalf("the test's Options give %d distinct programs, want %d (it could not catch a mix-up)", len(distinct), len(opts))
	}
	if len(c.files) != len(opts) {
		t.Errorf("cache holds %d memfds, want one per Options (%d)", len(c.files), len(opts))
	}
}

// BenchmarkFilterFile compares a new sealed memfd per command ("new") with
// a fresh open of the cached one ("cached").
func BenchmarkFilterFile(b *testing.B) {
	o := seccomp.Options{DenyUnixSockets: true, MediatedUnixSockets: true}
	b.Run("new", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			f, err := seccomp.File(o)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("cached", func(b *testing.B) {
		var c filterCache
		defer c.close()
		for i := 0; i < b.N; i++ {
			f, err := c.open(o)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
}
