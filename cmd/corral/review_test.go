package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/layer"
)

// TestReviewVerbs drives corral diff, apply and discard on a session
// whose layer holds changes made through a real overlay mount.
func TestReviewVerbs(t *testing.T) {
	requireBwrap(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is missing: cannot make a real overlay mount")
	}
	c := newCLI(t)
	os.WriteFile(filepath.Join(c.work, "a.txt"), []byte("one\ntwo\n"), 0o644)
	os.WriteFile(filepath.Join(c.work, "b.txt"), []byte("bee\n"), 0o644)
	if code, _, se := c.run(nil, "run", "--session", "rev", "--", "true"); code != 0 {
		t.Fatalf("making the session: %d %s", code, se)
	}
	code, so, se := c.run(nil, "sessions", "show", "rev")
	var info struct {
		Dir string `json:"dir"`
	}
	if code != 0 || json.Unmarshal([]byte(so), &info) != nil || info.Dir == "" {
		t.Fatalf("sessions show: %d %s %s", code, so, se)
	}

	// A session without a layer, and no session at all.
	if code, _, se := c.run(nil, "diff", "--session", "rev"); code != 125 || !strings.Contains(se, "workspace_mode is direct") {
		t.Errorf("diff of a direct session: %d %q", code, se)
	}
	if code, _, se := c.run(nil, "apply", "--session", "nope"); code != 125 || !strings.Contains(se, `no session "nope"`) {
		t.Errorf("apply of no session: %d %q", code, se)
	}

	l := layer.New(filepath.Join(info.Dir, "layer"), c.work)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	opts := "lowerdir=" + l.Lower + ",upperdir=" + l.Upper() + ",workdir=" + l.Work() + ",userxattr"
	out, err := exec.Command("unshare", "--user", "--map-root-user", "--mount", "sh", "-ec",
		`mount -t overlay overlay -o "$1" "$2"; cd "$2"; echo three >> a.txt; echo bea > b.txt; echo new > c.txt`, "sh", opts, l.Lower).CombinedOutput()
	if err != nil {
		t.Fatalf("overlay: %v %s", err, out)
	}

	code, so, se = c.run(nil, "diff", "--session", "rev")
	if code != 0 || !strings.Contains(so, "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n two\n+three\n") || !strings.Contains(so, "+++ b/c.txt") || strings.Contains(so, "\x1b[") {
		t.Errorf("diff: %d\n%s\n%s", code, so, se)
	}
	code, so, _ = c.run(nil, "diff", "--session", "rev", "--stat", "a.txt")
	if want := " a.txt | 1 +\n 1 file changed, 1 insertion(+), 0 deletions(-)\n"; code != 0 || so != want {
		t.Errorf("diff --stat a.txt = %q, want %q", so, want)
	}

	// The host changes b.txt meanwhile: apply stops and names it.
	os.WriteFile(filepath.Join(c.work, "b.txt"), []byte("host\n"), 0o644)
	code, _, se = c.run(nil, "apply", "--session", "rev")
	if code != 125 || !strings.Contains(se, "  b.txt\n") || !strings.Contains(se, "--overwrite") || !strings.Contains(se, "corral discard") {
		t.Errorf("conflicting apply: %d %q", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "one\ntwo\n" {
		t.Errorf("a conflicting apply wrote a.txt: %q", b)
	}
	if !strings.Contains(se, `corral apply --session "rev" --merge`) {
		t.Errorf("the conflict does not offer --merge: %q", se)
	}
	// --merge cannot merge b.txt (no git here): it says why, writes nothing.
	code, _, se = c.run(nil, "apply", "--session", "rev", "--merge")
	if code != 125 || !strings.Contains(se, "  b.txt (no merge: git has no copy of the file as the session first saw it") {
		t.Errorf("apply --merge of an untracked file: %d %q", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "one\ntwo\n" {
		t.Errorf("a stopped apply --merge wrote a.txt: %q", b)
	}
	if code, _, se := c.run(nil, "apply", "--session", "rev", "--merge", "--overwrite"); code != 125 || !strings.Contains(se, "choose one") {
		t.Errorf("--merge --overwrite: %d %q", code, se)
	}
	if code, _, se := c.run(nil, "apply", "--session", "rev", "a.txt", "c.txt"); code != 0 || !strings.Contains(se, "applied 2 changes") {
		t.Errorf("apply a.txt c.txt: %d %q", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "one\ntwo\nthree\n" {
		t.Errorf("a.txt after apply: %q", b)
	}
	if code, _, se := c.run(nil, "discard", "--session", "rev", "b.txt"); code != 0 || !strings.Contains(se, "discarded 1 change") {
		t.Errorf("discard: %d %q", code, se)
	}
	if code, so, se := c.run(nil, "diff", "--session", "rev"); code != 0 || so != "" {
		t.Errorf("diff after all: %d %q %q", code, so, se)
	}
	if code, _, se := c.run(nil, "apply", "--session", "rev"); code != 0 || !strings.Contains(se, "nothing to apply") {
		t.Errorf("empty apply: %d %q", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "b.txt")); string(b) != "host\n" {
		t.Errorf("b.txt: %q", b)
	}
}

// TestReviewEndToEnd: a session under workspace_mode review changes the
// project only through corral apply, and its next command sees the
// applied and discarded state.
func TestReviewEndToEnd(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	os.WriteFile(filepath.Join(c.work, "a.txt"), []byte("a\nb\n"), 0o644)
	if code, _, se := c.run(nil, "config", "set", "workspace_mode", "review"); code != 0 {
		t.Fatalf("config set: %d %s", code, se)
	}
	if code, so, se := c.run(nil, "run", "--session", "e2e", "--", "echo hi > notes.txt; echo c >> a.txt; ln -s /etc/passwd pw"); code != 0 {
		t.Fatalf("a command in review mode: %d %s %s", code, so, se)
	}
	if _, err := os.Lstat(filepath.Join(c.work, "notes.txt")); err == nil {
		t.Fatal("the session wrote the project")
	}
	code, so, se := c.run(nil, "diff", "--session", "e2e", "--stat")
	if want := "# 1 risky path: the host would run it, or write out of the project through it (corral apply holds it back unless named with --include-risky PATH):\n" +
		"#   pw: " + handback.WhyLinkOut + "\n" +
		" pw        | 1 +\n a.txt     | 1 +\n notes.txt | 1 +\n 3 files changed, 3 insertions(+), 0 deletions(-)\n"; code != 0 || so != want {
		t.Errorf("diff --stat: %d %q %q, want %q", code, so, se, want)
	}
	// pw leads out of the project (to /etc/passwd): held unless named.
	if code, _, se := c.run(nil, "apply", "--session", "e2e", "--include-risky", "pw", "a.txt", "pw"); code != 0 {
		t.Fatalf("apply: %d %s", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "a\nb\nc\n" {
		t.Errorf("a.txt: %q", b)
	}
	if tg, err := os.Readlink(filepath.Join(c.work, "pw")); err != nil || tg != "/etc/passwd" {
		t.Errorf("pw: %q %v", tg, err)
	}
	if code, _, se := c.run(nil, "discard", "--session", "e2e"); code != 0 {
		t.Fatalf("discard: %d %s", code, se)
	}
	code, so, se = c.run(nil, "run", "--session", "e2e", "--", "cat a.txt; ls")
	if code != 0 || so != "a\nb\nc\na.txt\npw\n" {
		t.Errorf("the session after apply and discard: %d %q %q", code, so, se)
	}
	if code, so, _ := c.run(nil, "diff", "--session", "e2e"); code != 0 || so != "" {
		t.Errorf("diff after all: %q", so)
	}
}

// TestApplyWhileBackgroundRuns: the MCP server's session has a background
// process that still sees its layer: corral apply and discard refuse,
// naming it, and write nothing; once it is killed they go ahead while the
// server (its layer holder, its file server) still runs.
func TestApplyWhileBackgroundRuns(t *testing.T) {
	requireBwrap(t)
	applyWhileBackgroundRuns(t, newCLI(t))
}

// TestApplyWhileBackgroundRunsDocker: the same on docker, where the
// engine's mount of the layer also shows in host mount namespaces (mount
// propagation) and must not count as a process of the session.
// The same on rootful and rootless Podman.
func TestApplyWhileBackgroundRunsDocker(t *testing.T) {
	c, _ := dockerCLI(t)
	applyWhileBackgroundRuns(t, c)
}

func applyWhileBackgroundRuns(t *testing.T, c *cli) {
	os.WriteFile(filepath.Join(c.work, "a.txt"), []byte("one\n"), 0o644)
	cmd := exec.Command(corralBin, "mcp", "--session", "bgrev")
	cmd.Dir = c.work
	cmd.Env = append(append([]string{}, c.env...), "CORRAL_WORKSPACE_MODE=review")
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "review-test", Version: "v0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) (string, map[string]any) {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text string
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if r.IsError {
			t.Fatalf("%s: %s", name, text)
		}
		m, _ := r.StructuredContent.(map[string]any)
		return text, m
	}
	call("bash", map[string]any{"command": "echo two >> a.txt"})
	_, bg := call("bash", map[string]any{"command": "while :; do date > clock.txt; sleep 0.2; done", "background": true})
	id, _ := bg["id"].(string)
	if id == "" {
		t.Fatalf("no background id: %v", bg)
	}
	call("read_file", map[string]any{"path": "a.txt"}) // the file server is up too

	for _, verb := range []string{"apply", "discard"} {
		code, _, se := c.run(nil, verb, "--session", "bgrev")
		if code != 125 || !strings.Contains(se, "processes running that still see its layer") || !strings.Contains(se, "sleep") && !strings.Contains(se, "while") && !strings.Contains(se, "bash") {
			t.Errorf("%s with a background process: %d %q", verb, code, se)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "one\n" {
		t.Errorf("a refused apply wrote a.txt: %q", b)
	}
	call("bash_kill", map[string]any{"id": id})
	if code, _, se := c.run(nil, "apply", "--session", "bgrev", "a.txt"); code != 0 {
		t.Fatalf("apply after the kill, the server still up: %d %s", code, se)
	}
	if b, _ := os.ReadFile(filepath.Join(c.work, "a.txt")); string(b) != "one\ntwo\n" {
		t.Errorf("a.txt after apply: %q", b)
	}
	// The session goes on, on the new layer.
	if text, _ := call("bash", map[string]any{"command": "cat a.txt; test -f clock.txt && echo clock"}); !strings.Contains(text, "one\ntwo\nclock") {
		t.Errorf("the session after apply: %q", text)
	}
}

// TestReviewHostileNames: a sandboxed command picks names and contents
// that would drive the person's terminal (clear the screen, a bidi
// override, an OSC 52 clipboard write, a carriage return that hides
// what came before, a C1 CSI). What corral prints for people (its notes,
// corral diff and --stat, apply's messages) holds none of those bytes,
// shown as termsafe shows them instead, while corral apply writes the
// exact name and bytes.
func TestReviewHostileNames(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if code, _, se := c.run(nil, "config", "set", "workspace_mode", "review"); code != 0 {
		t.Fatalf("config set: %d %s", code, se)
	}
	name := "\x1b[2J\u202ex" // clears the screen; displays right to left
	content := "safe\x1b]52;c;ZXZpbA==\a\r\u009b31m\u202eevil\n"
	// The first command makes a nested git directory with a hook (a
	// protected path: the note names it) and a .envrc (a risky path:
	// diff lists it and apply holds it back, naming it).
	script := `N=$(printf '\033[2J\342\200\256x')
mkdir -p "$N/.git/hooks" "$N/.git/objects" "$N/.git/refs"
echo 'ref: refs/heads/main' > "$N/.git/HEAD"
printf '#!/bin/sh\n' > "$N/.git/hooks/pre-commit"
echo 'export EVIL=1' > "$N/.envrc"
printf 'safe\033]52;c;ZXZpbA==\007\r\302\23331m\342\200\256evil\n' > "$N.txt"`
	code, so, se := c.run(nil, "run", "--session", "hostile", "--", script)
	if code != 0 {
		t.Fatalf("the command: %d %q %q", code, so, se)
	}
	checkTermSafe(t, "run's notes", se)
	if !strings.Contains(se, `held 1 protected path the command made (programs on the host run them): "\033[2J\342\200\256x/.git/hooks" (removed)`) {
		t.Errorf("the notes do not name the path quoted: %q", se)
	}

	code, so, se = c.run(nil, "diff", "--session", "hostile")
	if code != 0 {
		t.Fatalf("diff: %d %q %q", code, so, se)
	}
	checkTermSafe(t, "diff", so+se)
	if want := "+++ \"b/\\033[2J\\342\\200\\256x.txt\"\n@@ -0,0 +1 @@\n+safe^[]52;c;ZXZpbA==^G^M<U+009B>31m<U+202E>evil\n"; !strings.Contains(so, want) {
		t.Errorf("diff does not show the content visibly, want %q in:\n%s", want, so)
	}
	code, so, se = c.run(nil, "diff", "--session", "hostile", "--stat")
	if code != 0 {
		t.Fatalf("diff --stat: %d %q %q", code, so, se)
	}
	checkTermSafe(t, "diff --stat", so+se)

	code, so, se = c.run(nil, "apply", "--session", "hostile")
	if code != 0 {
		t.Fatalf("apply: %d %q %q", code, so, se)
	}
	checkTermSafe(t, "apply", so+se)
	if !strings.Contains(se, `"\033[2J\342\200\256x/.envrc"`) {
		t.Errorf("apply does not name the held-back hook quoted: %q", se)
	}
	if b, err := os.ReadFile(filepath.Join(c.work, name+".txt")); err != nil || string(b) != content {
		t.Errorf("applied %q, %v; want %q", b, err, content)
	}
}

// checkTermSafe fails t when out holds a byte or character that drives a
// terminal: a C0 control other than tab and newline, DEL, a C1 control,
// a bidi control, or bytes that are not UTF-8.
func checkTermSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		bad := r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r <= 0x9f ||
			r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			bad = true
		}
		if bad {
			t.Errorf("%s printed %U at byte %d: %q", what, r, i, out)
			return
		}
	}
}
