package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestParseBindFlag(t *testing.T) {
	base, err := os.MkdirTemp("/var/tmp", "corral-bindflag-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if base, err = filepath.EvalSymlinks(base); err != nil {
		t.Fatal(err)
	}
	colon := filepath.Join(base, "has:colon")   // exists, a colon in its name
	colonRW := filepath.Join(base, "x:rw")      // exists, looks like SRC:rw
	existing := filepath.Join(base, "existing") // exists, given relative below
	for _, d := range []string{colon, colonRW, existing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(base)

	for _, tc := range []struct {
		name    string
		in      string
		want    sandbox.Bind
		wantErr bool
	}{
		{name: "SRC", in: "/no/such/src", want: sandbox.Bind{Src: "/no/such/src", ReadOnly: true}},
		{name: "SRC:DEST", in: "/no/src:/dest", want: sandbox.Bind{Src: "/no/src", Dest: "/dest", ReadOnly: true}},
		{name: "SRC:DEST:rw", in: "/no/src:/dest:rw", want: sandbox.Bind{Src: "/no/src", Dest: "/dest", ReadOnly: false}},
		{name: "SRC:DEST:ro", in: "/no/src:/dest:ro", want: sandbox.Bind{Src: "/no/src", Dest: "/dest", ReadOnly: true}},
		{name: "SRC:ro", in: "/no/src:ro", want: sandbox.Bind{Src: "/no/src", ReadOnly: true}},
		{name: "SRC:rw", in: "/no/src:rw", want: sandbox.Bind{Src: "/no/src", ReadOnly: false}},
		{name: "escaped colon in absolute SRC", in: `/no/a\:b:/dest`, want: sandbox.Bind{Src: "/no/a:b", Dest: "/dest", ReadOnly: true}},
		{name: "escaped colon in relative SRC", in: `a\:b:/dest`, want: sandbox.Bind{Src: filepath.Join(base, "a:b"), Dest: "/dest", ReadOnly: true}},
		{name: "escaped colon in DEST", in: `/no/src:/d\:e:rw`, want: sandbox.Bind{Src: "/no/src", Dest: "/d:e", ReadOnly: false}},
		{name: "escaped colon only", in: `/no/a\:b`, want: sandbox.Bind{Src: "/no/a:b", ReadOnly: true}},
		{name: "backslash not before a colon kept", in: `/no/a\b`, want: sandbox.Bind{Src: `/no/a\b`, ReadOnly: true}},
		{name: "missing relative SRC made absolute", in: "rel/dir", want: sandbox.Bind{Src: filepath.Join(base, "rel", "dir"), ReadOnly: true}},
		{name: "missing relative SRC with DEST", in: "./rel:/dest:rw", want: sandbox.Bind{Src: filepath.Join(base, "rel"), Dest: "/dest", ReadOnly: false}},
		{name: "existing relative SRC made absolute", in: "existing", want: sandbox.Bind{Src: existing, ReadOnly: true}},
		{name: "existing SRC with a colon taken whole", in: colon, want: sandbox.Bind{Src: colon, ReadOnly: true}},
		{name: "existing SRC ending in :rw taken whole", in: colonRW, want: sandbox.Bind{Src: colonRW, ReadOnly: true}},
		{name: "existing SRC with an escaped colon and :rw", in: filepath.Join(base, `has\:colon`) + ":rw", want: sandbox.Bind{Src: colon, ReadOnly: false}},
		{name: "relative DEST refused", in: "/no/src:dest", wantErr: true},
		{name: "relative DEST with mode refused", in: "/no/src:dest:rw", wantErr: true},
		{name: "too many colons", in: "/a:/b:/c", wantErr: true},
		{name: "too many colons with mode", in: "/a:/b:/c:ro", wantErr: true},
		{name: "unknown mode is a third path", in: "/a:/b:rx", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBindFlag(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseBindFlag(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got != tc.want {
				t.Errorf("parseBindFlag(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if !filepath.IsAbs(got.Src) {
				t.Errorf("parseBindFlag(%q).Src = %q, want an absolute path", tc.in, got.Src)
			}
		})
	}
}
