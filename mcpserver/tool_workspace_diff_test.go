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

// Review mode through the tools, with the real mount: write_file and
// edit_file say the change is in the layer, bash and read_file see it, the
// project on the host does not change, and workspace_diff shows it.
func TestReviewModeTools(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.work, "a.txt"), []byte("one\n"), 0o644)
	f.mu.Lock()
	f.spec.Review = true
	f.mu.Unlock()
	cs := f.connect(nil)
	r := callTool(t, cs, "write_file", map[string]any{"path": "b.txt", "content": "bee\n"})
	if r.isError || !strings.Contains(r.text, "review layer") {
		t.Fatalf("write_file: %v %q", r.isError, r.text)
	}
	r = callTool(t, cs, "edit_file", map[string]any{"path": "a.txt", "old_string": "one", "new_string": "uno"})
	if r.isError || !strings.Contains(r.text, "review layer") {
		t.Fatalf("edit_file: %v %q", r.isError, r.text)
	}
	if r = callTool(t, cs, "bash", map[string]any{"command": "cat a.txt b.txt"}); r.isError || !strings.Contains(r.text, "uno\nbee\n") {
		t.Errorf("bash: %v %q", r.isError, r.text)
	}
	if r = callTool(t, cs, "read_file", map[string]any{"path": "b.txt"}); r.isError || !strings.Contains(r.text, "bee") {
		t.Errorf("read_file: %v %q", r.isError, r.text)
	}
	if b, _ := os.ReadFile(filepath.Join(f.work, "a.txt")); string(b) != "one\n" {
		t.Errorf("host a.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(f.work, "b.txt")); err == nil {
		t.Error("host b.txt made")
	}
	r = callTool(t, cs, "workspace_diff", map[string]any{})
	if r.isError || !strings.Contains(r.text, "-one\n+uno\n") || !strings.Contains(r.text, "+++ b/b.txt") {
		t.Errorf("workspace_diff: %v %q", r.isError, r.text)
	}

	// A person discards it all (as corral discard does): the file tools
	// see the working directory again, not the discarded layer through the
	// mount they had, and a new write lands in the layer as it is now.
	infos, err := f.m.List()
	if err != nil || len(infos) != 1 {
		t.Fatalf("sessions: %v %v", infos, err)
	}
	l, err := layer.Open(filepath.Join(infos[0].Dir, "layer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := layer.Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if r = callTool(t, cs, "read_file", map[string]any{"path": "b.txt"}); !r.isError {
		t.Errorf("read_file of a discarded file: %q", r.text)
	}
	if r = callTool(t, cs, "read_file", map[string]any{"path": "a.txt"}); r.isError || !strings.Contains(r.text, "one") || strings.Contains(r.text, "uno") {
		t.Errorf("read_file a.txt after discard: %v %q", r.isError, r.text)
	}
	if r = callTool(t, cs, "write_file", map[string]any{"path": "c.txt", "content": "sea\n"}); r.isError {
		t.Fatalf("write_file after discard: %q", r.text)
	}
	if cs, err := layer.Changes(l, nil); err != nil || len(cs) != 1 || cs[0].Path != "c.txt" {
		t.Errorf("the layer after a write following discard: %+v %v", cs, err)
	}
}
