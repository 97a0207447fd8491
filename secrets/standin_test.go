package secrets

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, 32)

// class maps a byte to its class for shape comparison.
func class(c byte) byte {
	switch {
	case c >= 'a' && c <= 'z':
		return 'a'
	case c >= 'A' && c <= 'Z':
		return 'A'
	case c >= '0' && c <= '9':
		return '0'
	}
	return c
}

func TestStandInShape(t *testing.T) {
	for _, tc := range []struct{ value, prefix string }{
		{"ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_"},
		{"github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV", "github_pat_"},
		{"sk-ant-api03-abcDEF123-xyz_789", "sk-ant-api03-"},
		{"sk-ant-abcdefghij", "sk-ant-"},
		{"sk-proj-abcdefghij", "sk-proj-"},
		{"sk-abcdefghij0123", "sk-"},
		{"xoxb-1234-5678-abcdEFGH", "xoxb-"},
		{"AKIAIOSFODNN7EXAMPLE", "AKIA"},
		{"glpat-xxxxxxxxxxxxxxxxxxxx", "glpat-"},
		{"plainopaquetoken.With/Other+Chars=", ""},
		{"ghp_", ""}, // a prefix alone is not a prefix
	} {
		t.Run(tc.value, func(t *testing.T) {
			if got := Prefix(tc.value); got != tc.prefix {
				t.Errorf("Prefix = %q, want %q", got, tc.prefix)
			}
			if len(tc.value) < 8 {
				return
			}
			si, ok := StandIn(testKey, "T", tc.value)
			if !ok || si == tc.value {
				t.Fatalf("StandIn = %q, %v: want a different value", si, ok)
			}
			if len(si) != len(tc.value) || !strings.HasPrefix(si, tc.prefix) {
				t.Errorf("StandIn = %q: want length %d and prefix %q", si, len(tc.value), tc.prefix)
			}
			for i := range si {
				if class(si[i]) != class(tc.value[i]) {
					t.Errorf("byte %d: %q has class %q, value's %q has %q", i, si[i], class(si[i]), tc.value[i], class(tc.value[i]))
				}
			}
			same := 0
			for i := len(tc.prefix); i < len(si); i++ {
				if si[i] == tc.value[i] && class(si[i]) != si[i] {
					same++
				}
			}
			if n := len(si) - len(tc.prefix); same > n/2 {
				t.Errorf("StandIn %q keeps %d of %d letters and digits of the value", si, same, n)
			}
		})
	}
}

func TestStandInStableAndKeyed(t *testing.T) {
	v := "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
	a, _ := StandIn(testKey, "GITHUB_TOKEN", v)
	b, _ := StandIn(testKey, "GITHUB_TOKEN", v)
	if a != b {
		t.Errorf("same key, name, value: %q then %q", a, b)
	}
	other := bytes.Repeat([]byte{8}, 32)
	for _, c := range []struct {
		key  []byte
		name string
	}{{other, "GITHUB_TOKEN"}, {testKey, "GH_TOKEN"}} {
		if s, _ := StandIn(c.key, c.name, v); s == a {
			t.Errorf("key %x name %s gives the same stand-in", c.key[:2], c.name)
		}
	}
	if k1, k2 := ProcessKey(), ProcessKey(); !bytes.Equal(k1, k2) || len(k1) != 32 || bytes.Equal(k1, make([]byte, 32)) {
		t.Errorf("ProcessKey = %x, %x: want one random 32-byte key", k1, k2)
	}
}

func TestStandInNoLetters(t *testing.T) {
	if _, ok := StandIn(testKey, "T", "--------__"); ok {
		t.Error("a value with no letters or digits got a stand-in")
	}
}

func TestSecretNeverPrintsValue(t *testing.T) {
	s := Secret{Name: "GITHUB_TOKEN", Value: "ghp_realrealrealreal", StandIn: "ghp_standstandstand0"}
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		out := fmt.Sprintf(f, s) + fmt.Sprintf(f, []Secret{s}) + fmt.Sprintf(f, &s)
		if strings.Contains(out, "real") || !strings.Contains(out, "GITHUB_TOKEN") {
			t.Errorf("Sprintf(%q) = %q", f, out)
		}
	}
}
