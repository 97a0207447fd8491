package inside

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte{0}, MaxFrame)} {
		if err := WriteFrame(&b, KindStdout, p); err != nil {
			t.Fatal(err)
		}
		if err := WriteMux(&b, KindStderr, 7, p); err != nil {
			t.Fatal(err)
		}
	}
	if WriteFrame(&b, 1, make([]byte, MaxFrame+1)) == nil {
		t.Error("oversized frame written")
	}
	buf := make([]byte, 0)
	for range 3 {
		k, p, err := ReadFrame(&b, buf)
		if err != nil || k != KindStdout {
			t.Fatal(k, err)
		}
		_ = p
		k, ch, _, err := ReadMux(&b, buf)
		if err != nil || k != KindStderr || ch != 7 {
			t.Fatal(k, ch, err)
		}
	}
	if _, _, err := ReadFrame(&b, buf); err != io.EOF {
		t.Errorf("end: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader([]byte{1, 0, 0, 0, 5, 'a'}), buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader([]byte{1, 0xff, 0, 0, 0}), buf); !errors.Is(err, ErrBadFrame) {
		t.Errorf("huge length: %v", err)
	}
}

func TestLookPathIn(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "plain"), []byte(""), 0o644)
	if p, err := lookPathIn("tool", []string{"PATH=/nonexistent:" + dir}); err != nil || p != exe {
		t.Errorf("tool: %q %v", p, err)
	}
	if _, err := lookPathIn("plain", []string{"PATH=" + dir}); err == nil {
		t.Error("a file without x bits was found")
	}
	if _, err := lookPathIn(filepath.Join(dir, "plain"), nil); err == nil {
		t.Error("a path to a non-executable was accepted")
	}
	if p, err := lookPathIn("sh", []string{"X=1"}); err != nil || p == "" {
		t.Errorf("sh with the default PATH: %q %v", p, err)
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"A=1", "PATH=/bin", "HOME=/tmp"}, []string{"PATH=/x", "B=2", "odd"})
	want := []string{"A=1", "PATH=/x", "HOME=/tmp", "B=2", "odd"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q want %q", got, want)
	}
}

func TestGitQuote(t *testing.T) {
	if got := gitQuote(`/w/a "b"\c`); got != `"/w/a \"b\"\\c"` {
		t.Errorf("%s", got)
	}
}
