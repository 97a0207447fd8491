package main

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// TestLayer checks the image's one layer: both executables root's and
// executable, nothing writable by the user or others but /tmp and the
// user's own home, and the same bytes for the same input.
func TestLayer(t *testing.T) {
	layer, err := Layer([]byte("corral-bytes"), []byte("helper-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		mode     int64
		uid, gid int
		body     string
	}
	got := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = entry{h.Mode, h.Uid, h.Gid, string(b)}
	}
	for name, want := range map[string]entry{
		"usr/local/bin/corral":        {0o755, 0, 0, "corral-bytes"},
		"usr/local/bin/corral-helper": {0o755, 0, 0, "helper-bytes"},
		"usr/local/bin/":              {0o755, 0, 0, ""},
		"tmp/":                        {0o1777, 0, 0, ""},
		"var/lib/corral/":             {0o700, UID, GID, ""},
		"work/":                       {0o755, 0, 0, ""},
	} {
		if e, ok := got[name]; !ok || e != want {
			t.Errorf("%s = %+v (present %v), want %+v", name, e, ok, want)
		}
	}
	for name, e := range got {
		if name == "tmp/" || name == "var/lib/corral/" {
			continue
		}
		if e.uid != 0 || e.gid != 0 || e.mode&0o022 != 0 {
			t.Errorf("%s: owner %d:%d mode %o: every other entry is root's and not writable by others", name, e.uid, e.gid, e.mode)
		}
	}
	if !bytes.Contains([]byte(got["etc/passwd"].body), []byte("corral:x:65532:65532:corral:/var/lib/corral:")) {
		t.Errorf("/etc/passwd lacks the user: %q", got["etc/passwd"].body)
	}
	again, _ := Layer([]byte("corral-bytes"), []byte("helper-bytes"))
	if !bytes.Equal(layer, again) {
		t.Error("the same executables gave another layer")
	}
	cfg := ImageConfig()
	if cfg.User != "65532:65532" || cfg.Entrypoint[0] != "/usr/local/bin/corral" || cfg.WorkingDir != "/work" {
		t.Errorf("config %+v", cfg)
	}
}
