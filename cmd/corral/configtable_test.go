package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/config"
)

// TestConfigTableWidth: `corral config list` with no settings file keeps a
// short setting's row short, whatever the longest default value (the
// built-in protected_paths, hundreds of characters, padded every row to
// 515 when VALUE was the middle column), and each row is KEY, SOURCE, VALUE.
func TestConfigTableWidth(t *testing.T) {
	entries, err := config.List(filepath.Join(t.TempDir(), "none.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeConfigTable(&b, entries); err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, e := range entries {
		longest = max(longest, len(e.Text))
	}
	if longest < 200 {
		t.Fatalf("no default value is long (%d bytes): the test proves nothing", longest)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "KEY SOURCE VALUE" {
		t.Errorf("header %q, want KEY SOURCE VALUE", lines[0])
	}
	found := false
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("row padded past its value: %q", l)
		}
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "backend" {
			found = true
			if len(l) > 80 {
				t.Errorf("backend's row is %d characters wide: %q", len(l), l)
			}
		}
	}
	if !found {
		t.Errorf("no backend row in\n%s", b.String())
	}
}
