package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/layer"
)

func TestWorkspaceDiff(t *testing.T) {
	f := newFixture(t)
	cs := f.connect(nil)
	r := callTool(t, cs, "workspace_diff", map[string]any{})
	if !r.isError || !strings.Contains(r.text, "workspace_mode is direct") {
		t.Fatalf("direct session: %v %q", r.isError, r.text)
	}

	sess, err := f.m.Open("test")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(f.work, "a.txt"), []byte("one\n"), 0o644)
	l := layer.New(filepath.Join(sess.Dir(), "layer"), f.work)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	// The upper entries a mount would make (the overlay itself is tested
	// in package layer).
	os.WriteFile(filepath.Join(l.Upper(), "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(l.Upper(), "big.txt"), []byte(strings.Repeat("a line of text\n", 4000)), 0o644)

	r = callTool(t, cs, "workspace_diff", map[string]any{"paths": []string{"a.txt"}})
	if r.isError || !strings.Contains(r.text, "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n") || r.data["files"] != float64(1) {
		t.Errorf("a.txt: %v %q %v", r.isError, r.text, r.data)
	}
	r = callTool(t, cs, "workspace_diff", map[string]any{"stat": true})
	if r.isError || !strings.Contains(r.text, " 2 files changed, 4001 insertions(+), 0 deletions(-)") {
		t.Errorf("stat: %q", r.text)
	}
	// Beyond the output limit (16 KiB here) the end is cut, and said.
	r = callTool(t, cs, "workspace_diff", map[string]any{})
	if r.isError || !strings.Contains(r.text, "[diff cut: ") || len(r.text) > 17<<10 || r.data["omitted_bytes"] == nil {
		t.Errorf("big diff: %d bytes, %q", len(r.text), r.text[max(0, len(r.text)-200):])
	}
	r = callTool(t, cs, "workspace_diff", map[string]any{"paths": []string{"/etc"}})
	if !r.isError || !strings.Contains(r.text, "outside") {
		t.Errorf("/etc: %q", r.text)
	}
}
