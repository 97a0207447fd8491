package kubernetes

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/inside"
)

// TestCheckChunk: the pod's answer to a read is refused unless it fits
// the read asked for.
func TestCheckChunk(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunk  inside.BgChunk
		offset int64
		max    int
		ok     bool
	}{
		{"fits", inside.BgChunk{Data: []byte("abc"), Size: 10}, 7, 3, true},
		{"empty past the end", inside.BgChunk{Data: []byte{}, Size: 10}, 20, 3, true},
		{"more than asked", inside.BgChunk{Data: []byte("abcd"), Size: 10}, 0, 3, false},
		{"past its size", inside.BgChunk{Data: []byte("abc"), Size: 9}, 7, 3, false},
		{"negative size", inside.BgChunk{Size: -1}, 0, 3, false},
		{"over the bound", inside.BgChunk{Size: inside.MaxBgOutput + 1<<20}, 0, 3, false},
	} {
		got, err := checkChunk(&c.chunk, c.offset, c.max)
		if (err == nil) != c.ok {
			t.Errorf("%s: %+v, %v", c.name, got, err)
		}
	}
}

func TestBgExit(t *testing.T) {
	if bgExit(nil) != nil {
		t.Error("a running process has an exit")
	}
	ex := bgExit(&inside.BgStatus{Exit: inside.Exit{Code: 137, Error: strings.Repeat("x", 10000)}, TimedOut: true, Dropped: -5})
	if ex.Code != 124 || !ex.TimedOut || ex.Dropped != 0 || len(ex.Error) > inside.MaxBgCommand+3 {
		t.Errorf("%+v", ex)
	}
	if ex := bgExit(&inside.BgStatus{Exit: inside.Exit{Code: 137}, Killed: true}); ex.Code != 137 || !ex.Killed {
		t.Errorf("%+v", ex)
	}
}
