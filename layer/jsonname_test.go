package layer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestJSONNamesLossless: names and targets that are not UTF-8 survive
// the layer's JSON files byte for byte, apart from the U+FFFD names they
// became before; valid UTF-8 is written as it always was.
func TestJSONNamesLossless(t *testing.T) {
	for _, v := range []any{
		&Entry{Path: "d/n\xff\x80", Type: "symlink", Target: "../t\xfe"},
		&Entry{Path: "n\uFFFD\uFFFD", Type: "file", Size: 3},
		&journalEntry{Path: "a\x80/b", Type: "symlink", Target: "\xff", Merge: "m\xc3"},
		&provenItem{Path: "p\xff", Known: true},
		&discardItem{Path: "x\xfey", Kind: Added, NewDir: true},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := json.Unmarshal(b, back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(back, v) {
			t.Errorf("%T through %s came back as %+v", v, b, back)
		}
	}
	// As an older corral wrote them.
	var e Entry
	if err := json.Unmarshal([]byte(`{"path":"a/b","type":"symlink","mode":511,"mtime":1,"target":"x"}`), &e); err != nil || e != (Entry{Path: "a/b", Type: "symlink", Mode: 0o777, MTime: 1, Target: "x"}) {
		t.Errorf("an older entry: %+v %v", e, err)
	}
	if b, _ := json.Marshal(Entry{Path: "é/ok", Type: "dir"}); !strings.Contains(string(b), `"path":"é/ok"`) {
		t.Errorf("a UTF-8 entry is written as %s", b)
	}
}

// TestApplyNamesNotUTF8: a session's files whose names are not UTF-8 (a
// Latin-1 name), beside one named as such a name would be mangled, are
// applied as the bytes they are, and discard works on them too (a
// hostile trial made apply and discard fail for good, after part of the
// apply was written).
func TestApplyNamesNotUTF8(t *testing.T) {
	l := project(t)
	inOverlay(t, l, `printf 'benign\n' > "$(printf 'n\377\200')"; printf 'evil\n' > "$(printf 'n\357\277\275\357\277\275')"; mkdir "$(printf 'd\351')"; printf 'in\n' > "$(printf 'd\351/f\377')"; ln -s "$(printf 't\376')" "$(printf 'l\377')"`)
	res, err := Apply(l, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"n\xff\x80": "benign\n", "n\uFFFD\uFFFD": "evil\n", "d\xe9/f\xff": "in\n"} {
		if got := read(t, filepath.Join(l.Lower, name)); got != want {
			t.Errorf("%q: %q, want %q", name, got, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(l.Lower, "l\xff")); err != nil || target != "t\xfe" {
		t.Errorf("the symlink: %q %v", target, err)
	}
	if left := paths(t, l); !slices.Equal(left, nil) || res.AppliedTotal != 5 {
		t.Errorf("applied %d, left %q", res.AppliedTotal, left)
	}
	// Again, and discarded.
	inOverlay(t, l, `printf 'two\n' > "$(printf 'n\377\200')"; printf 'new\n' > "$(printf 'z\377')"`)
	if err := Discard(l, nil); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(l.Lower, "n\xff\x80")); got != "benign\n" || paths(t, l) != nil {
		t.Errorf("after discard: %q, left %q", got, paths(t, l))
	}
	if _, err := os.Lstat(filepath.Join(l.Lower, "z\xff")); err == nil {
		t.Error("discarded z\\377 is on the host")
	}
}
