package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestPathOrder: a directory comes right before what it holds, before a
// name that sorts after its own with a byte below '/' ("a-b", "a.txt"),
// as a depth-first walk meets them; Changes and Scan use that order.
func TestPathOrder(t *testing.T) {
	want := []string{"a", "a/b", "a/b/c", "a-b", "a.txt", "ab", "b"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, cmpPath)
	if !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	write(t, filepath.Join(lower, "keep"), "k\n", 0o644)
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/b/c", "a-b", "a.txt", "ab", "b"} {
		write(t, filepath.Join(l.Upper(), p), p+"\n", 0o644)
	}
	if got := paths(t, l); !slices.Equal(got, want) {
		t.Errorf("Changes: %q, want %q", got, want)
	}
	// A stopped Walk stops.
	n := 0
	for _, err := range Walk(l, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 2 {
			break
		}
	}
	entries, err := Scan(l.Upper())
	if err != nil {
		t.Fatal(err)
	}
	var scanned []string
	for _, e := range entries {
		scanned = append(scanned, e.Path)
	}
	if !slices.Equal(scanned, want) {
		t.Errorf("Scan: %q, want %q", scanned, want)
	}
}

// TestApplyOldBaseOrder: a base.json an older corral wrote sorted as plain
// strings ("a-b" before "a/b") is read whole once, sorted into path
// order, and the apply goes on as if it had been; without that, the
// entries read out of order would be missed and every path a conflict.
func TestApplyOldBaseOrder(t *testing.T) {
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	for _, p := range []string{"a/b", "a-b", "a.txt"} {
		write(t, filepath.Join(lower, p), "host\n", 0o644)
	}
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	base, err := Scan(lower)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(base, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	data, _ := json.Marshal(base)
	if err := os.WriteFile(l.BasePath(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a/b", "a-b", "a.txt"} {
		write(t, filepath.Join(l.Upper(), p), "session\n", 0o644)
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v (conflicts %q)", err, res.Conflicts)
	}
	if want := []string{"a/b", "a-b", "a.txt"}; !slices.Equal(res.Applied, want) {
		t.Errorf("applied %q, want %q", res.Applied, want)
	}
	var got []string
	b, _ := os.ReadFile(l.BasePath())
	var list []Entry
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		got = append(got, e.Path)
	}
	if want := []string{"a", "a/b", "a-b", "a.txt"}; !slices.Equal(got, want) {
		t.Errorf("base.json after apply: %q, want %q", got, want)
	}
}

// TestApplyListsCapped: 1,500 conflicts list ListMax paths and count the
// rest, in the result and the error; applied over, the same for Applied.
func TestApplyListsCapped(t *testing.T) {
	const n = ListMax + 500
	root := testRoot(t)
	lower := filepath.Join(root, "lower")
	name := func(i int) string { return fmt.Sprintf("d%02d/f%04d", i/100, i) }
	for i := range n {
		write(t, filepath.Join(lower, name(i)), "host\n", 0o644)
	}
	l := New(filepath.Join(root, "layer"), lower)
	if err := l.Ensure(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		write(t, filepath.Join(l.Upper(), name(i)), "session\n", 0o644)
		write(t, filepath.Join(lower, name(i)), "host, edited\n", 0o644)
	}
	res, err := Apply(l, nil, ApplyOptions{})
	if !errors.Is(err, ErrConflict) || len(res.Conflicts) != ListMax || res.ConflictsTotal != n || !strings.HasSuffix(err.Error(), " and 500 more") {
		t.Fatalf("conflicts: %d listed, %d in all, %v", len(res.Conflicts), res.ConflictsTotal, err)
	}
	if res.Conflicts[0] != name(0) || res.Conflicts[ListMax-1] != name(ListMax-1) || res.AppliedTotal != 0 {
		t.Errorf("conflicts listed %q ... %q, applied %d", res.Conflicts[0], res.Conflicts[ListMax-1], res.AppliedTotal)
	}
	res, err = Apply(l, nil, ApplyOptions{Overwrite: true})
	if err != nil || len(res.Applied) != ListMax || res.AppliedTotal != n {
		t.Fatalf("overwrite: %d listed, %d in all, %v", len(res.Applied), res.AppliedTotal, err)
	}
	if got := read(t, filepath.Join(lower, name(n-1))); got != "session\n" {
		t.Errorf("%s = %q", name(n-1), got)
	}
}

// TestDiffRenameLimit: past renameMaxFiles deleted or added files no
// rename is looked for, and a line at the top says so; DiffLayer's
// output is Diff's.
func TestDiffRenameLimit(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `mv mv.txt moved.txt; mv dir dir2`)
	if out := diffOf(t, l, DiffOptions{}); !strings.Contains(out, "rename from mv.txt\n") || strings.Contains(out, "# renames not looked for") {
		t.Fatalf("diff:\n%s", out)
	}
	defer func(n int) { renameMaxFiles = n }(renameMaxFiles)
	renameMaxFiles = 2
	out := diffOf(t, l, DiffOptions{})
	if !strings.HasPrefix(out, "# renames not looked for: 3 deleted and 3 added files, more than 2 a side (name fewer paths to see them)\n") ||
		strings.Contains(out, "rename from") || !strings.Contains(out, "deleted file mode 100644\n--- a/mv.txt\n") {
		t.Errorf("diff past the limit:\n%s", out)
	}
}

// TestDiffStatPastRows: with more --stat rows than are kept, the patches
// are made twice and the output is the same.
func TestDiffStatPastRows(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	want := diffOf(t, l, DiffOptions{Stat: true})
	defer func(n int) { statMaxRows = n }(statMaxRows)
	statMaxRows = 2
	if got := diffOf(t, l, DiffOptions{Stat: true}); got != want {
		t.Errorf("stat past %d rows:\n%s\nwant\n%s", statMaxRows, got, want)
	}
	if !strings.Contains(want, " files changed, ") {
		t.Errorf("stat:\n%s", want)
	}
}

// TestDiscardSpooled: Discard of part of the layer
// walked and spooled reads as before: the rest is kept, the session sees
// Lower's files again.
func TestDiscardSpooled(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	before := paths(t, l)
	if err := Discard(l, []string{"opq", "mod.txt"}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range before {
		if p != "mod.txt" && !strings.HasPrefix(p, "opq/") {
			want = append(want, p)
		}
	}
	if got := paths(t, l); !reflect.DeepEqual(got, want) {
		t.Errorf("left %q, want %q", got, want)
	}
	if _, err := os.Stat(l.spoolDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spool left: %v", err)
	}
	inOverlay(t, l, `test "$(cat opq/y)" = y; grep -qx 3 mod.txt`)
}

// TestOldJournal: the journal of an older corral (one JSON object with
// the token and every entry, sorted as plain strings) is still finished:
// a path it proves written is recorded and dropped from the layer, one
// it does not is left to the check, and its temporary files go.
func TestOldJournal(t *testing.T) {
	l := project(t)
	inOverlay(t, l, session)
	layerMod := read(t, filepath.Join(l.Upper(), "mod.txt"))
	write(t, filepath.Join(l.Lower, "mod.txt"), layerMod, 0o644) // written before the crash
	sum := sha256.Sum256([]byte(layerMod))
	tmp := tempPrefix + "00112233aabbccdd-7"
	write(t, filepath.Join(l.Lower, tmp), "half", 0o600) // beside mod.txt
	old := map[string]any{"token": "00112233aabbccdd", "entries": []map[string]any{
		{"path": "exec.sh", "type": "file", "mode": 0o755, "sha256": strings.Repeat("0", 64)},
		{"path": "mod.txt", "type": "file", "mode": 0o644, "sha256": hex.EncodeToString(sum[:])},
	}}
	data, _ := json.Marshal(old)
	if err := os.WriteFile(l.pendingPath(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(l, []string{"esc"}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.Upper(), "mod.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mod.txt, proven, still in the layer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Upper(), "exec.sh")); err != nil {
		t.Errorf("exec.sh, not proven, left the layer: %v", err)
	}
	if _, err := os.Stat(filepath.Join(l.Lower, tmp)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old apply's temporary file is left: %v", err)
	}
	if _, err := os.Stat(l.pendingPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("journal left: %v", err)
	}
	// base.json took mod.txt as written: a new change of it applies.
	inOverlay(t, l, `echo 11 >> mod.txt`)
	if _, err := Apply(l, []string{"mod.txt"}, ApplyOptions{}); err != nil {
		t.Fatalf("after the old journal: %v", err)
	}
}
