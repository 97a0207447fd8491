package helperbin

import (
	"strings"
	"testing"
)

func TestCompatible(t *testing.T) {
	const want = "corral-helper-protocol 1\nA B C\n"
	for _, tc := range []struct {
		name, got, err string
	}{
		{name: "same", got: want},
		{name: "more modes", got: "corral-helper-protocol 1\nA B C D\n"},
		{name: "other order", got: "corral-helper-protocol 1\nC A B\n"},
		{name: "other version", got: "corral-helper-protocol 2\nA B C\n", err: `speaks "corral-helper-protocol 2"`},
		{name: "lacks a mode", got: "corral-helper-protocol 1\nA C\n", err: "lacks the helper modes B"},
		{name: "nothing", got: "", err: `speaks ""`},
		{name: "something else", got: "usage: tool [flags]\n", err: "built from other source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Compatible(tc.got, want)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("Compatible(%q) = %v, want error containing %q", tc.got, err, tc.err)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	const want = "corral-helper-protocol 1\nA B\n"
	next := func(f Facts) Facts { f.Source, f.Path = SourceNext, "/usr/bin/corral-helper"; return f }
	cache := func(f Facts) Facts { f.Source, f.Path = SourceCache, "/c/k/corral-helper"; return f }
	good := Facts{Answer: want, Static: true}
	dynamic := Facts{Answer: want}
	other := Facts{Answer: "corral-helper-protocol 0\nA B\n", Static: true}
	missing := Facts{Missing: true}
	broken := Facts{Err: "not an ELF executable: bad magic number"}
	for _, tc := range []struct {
		name       string
		cands      []Facts
		needStatic bool
		source     Source
		passed     []string // substrings, one per candidate passed over
	}{
		{name: "none", source: SourceSelf},
		{name: "both missing", cands: []Facts{next(missing), cache(missing)}, source: SourceSelf},
		{name: "next wins", cands: []Facts{next(good), cache(good)}, needStatic: true, source: SourceNext},
		{name: "cache when next missing", cands: []Facts{next(missing), cache(good)}, needStatic: true, source: SourceCache},
		{name: "other protocol refused", cands: []Facts{next(other), cache(missing)}, source: SourceSelf, passed: []string{"speaks"}},
		{name: "other protocol, then cache", cands: []Facts{next(other), cache(good)}, source: SourceCache, passed: []string{"next-to-corral /usr/bin/corral-helper: speaks"}},
		{name: "dynamic for bwrap", cands: []Facts{next(dynamic)}, source: SourceNext},
		{name: "dynamic refused for containers", cands: []Facts{next(dynamic), cache(missing)}, needStatic: true, source: SourceSelf, passed: []string{"dynamically linked"}},
		{name: "dynamic next, static cache", cands: []Facts{next(dynamic), cache(good)}, needStatic: true, source: SourceCache, passed: []string{"dynamically linked"}},
		{name: "unreadable refused", cands: []Facts{next(broken), cache(other)}, source: SourceSelf, passed: []string{"not an ELF", "speaks"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Choose(tc.cands, want, tc.needStatic, "/usr/bin/corral")
			if c.Source != tc.source {
				t.Fatalf("Choose = %s %s, want %s (passed %q)", c.Source, c.Path, tc.source, c.Passed)
			}
			if c.Source == SourceSelf && c.Path != "/usr/bin/corral" {
				t.Errorf("fallback path %q, want corral's own", c.Path)
			}
			if len(c.Passed) != len(tc.passed) {
				t.Fatalf("passed over %q, want %d reasons like %q", c.Passed, len(tc.passed), tc.passed)
			}
			for i, p := range tc.passed {
				if !strings.Contains(c.Passed[i], p) {
					t.Errorf("reason %d = %q, want it to contain %q", i, c.Passed[i], p)
				}
			}
		})
	}
}

func TestStampRoundTrip(t *testing.T) {
	for _, f := range []Facts{
		{Answer: "corral-helper-protocol 1\nA B\n", Static: true},
		{Answer: "corral-helper-protocol 1\nA B\n"},
		{Err: "does not answer: exit status 2", Static: true},
	} {
		g, ok := parseStamp(formatStamp(f))
		if !ok || g != f {
			t.Errorf("stamp of %+v read back as %+v (ok %v)", f, g, ok)
		}
	}
	if _, ok := parseStamp([]byte("garbage")); ok {
		t.Error("a stamp without its kind line was accepted")
	}
}
