package bwrap

import (
	"strings"
	"testing"
)

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p, base string
		want    bool
	}{
		{name: "equal", p: "/home/a", base: "/home/a", want: true},
		{name: "child", p: "/home/a/x", base: "/home/a", want: true},
		{name: "deep child", p: "/home/a/x/y/z", base: "/home/a", want: true},
		{name: "sibling sharing a prefix", p: "/home/ab", base: "/home/a", want: false},
		{name: "sibling child sharing a prefix", p: "/home/ab/x", base: "/home/a", want: false},
		{name: "parent", p: "/home", base: "/home/a", want: false},
		{name: "unrelated", p: "/etc/passwd", base: "/home/a", want: false},
		{name: "root contains root", p: "/", base: "/", want: true},
		{name: "root contains a top entry", p: "/etc", base: "/", want: true},
		{name: "root contains a deep path", p: "/var/tmp/x/y", base: "/", want: true},
		{name: "root does not contain a relative path", p: "etc", base: "/", want: false},
		{name: "root is not within a subdirectory", p: "/", base: "/home", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := within(tc.p, tc.base); got != tc.want {
				t.Errorf("within(%q, %q) = %v, want %v", tc.p, tc.base, got, tc.want)
			}
		})
	}
}

func TestIsCredentialRel(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{".ssh", true},
		{".ssh/id_ed25519", true},
		{".ssh/a/b", true},
		{".sshx", false},
		{"ssh", false},
		{".aws/credentials", true},
		{".netrc", true},
		{".netrc.bak", false},
		{".config", false},
		{".config/gh", true},
		{".config/gh/hosts.yml", true},
		{".config/ghx", false},
		{".config/git", false},
		{".config/git/credentials", true},
		{".config/corral", true},
		{".local/share/keyrings/login.keyring", true},
		{".local/share", false},
		{".local/state/corral/empty", true},
		{".cache", false},
		{".cache/corral", true},
		{".cache/pip", false},
		{".claude.json", true},
		{".claude", true},
		{"project/.ssh", false},
		{"", false},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			if got := isCredentialRel(tc.rel); got != tc.want {
				t.Errorf("isCredentialRel(%q) = %v, want %v", tc.rel, got, tc.want)
			}
		})
	}
}

func TestRelToHome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p, home string
		want    string
		wantOK  bool
	}{
		{name: "top entry", p: "/home/u/.ssh", home: "/home/u", want: ".ssh", wantOK: true},
		{name: "deep entry", p: "/home/u/.config/gh/hosts.yml", home: "/home/u", want: ".config/gh/hosts.yml", wantOK: true},
		{name: "home itself", p: "/home/u", home: "/home/u", wantOK: false},
		{name: "sibling sharing a prefix", p: "/home/uu/.ssh", home: "/home/u", wantOK: false},
		{name: "outside", p: "/etc/passwd", home: "/home/u", wantOK: false},
		{name: "parent of home", p: "/home", home: "/home/u", wantOK: false},
		{name: "no home", p: "/home/u/x", home: "", wantOK: false},
		{name: "home is root", p: "/etc", home: "/", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := relToHome(tc.p, tc.home)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("relToHome(%q, %q) = %q, %v, want %q, %v", tc.p, tc.home, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestIsNestedDir(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{".config", true},
		{".local", true},
		{".local/share", true},
		{".local/state", false},
		{".local/bin", false},
		{".config/nvim", false},
		{".cache", false},
		{"config", false},
		{".config/", false},
		{"", false},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			if got := isNestedDir(tc.rel); got != tc.want {
				t.Errorf("isNestedDir(%q) = %v, want %v", tc.rel, got, tc.want)
			}
		})
	}
}

// TestPolicyListsConsistent checks the shipped lists against each other: an
// allowlisted entry must not be a credential store (it would be shown), the
// nested allowlist only names children of the nested directories, and the
// top allowlist only names dot entries of the home directory itself.
func TestPolicyListsConsistent(t *testing.T) {
	for _, a := range homeAllow {
		t.Run("homeAllow/"+a, func(t *testing.T) {
			if isCredentialRel(a) {
				t.Errorf("isCredentialRel(%q) = true, want false for an allowlisted entry", a)
			}
			if !strings.HasPrefix(a, ".") || strings.Contains(a, "/") {
				t.Errorf("homeAllow entry %q: want a top-level dot entry", a)
			}
		})
	}
	for _, a := range nestedAllow {
		t.Run("nestedAllow/"+a, func(t *testing.T) {
			if isCredentialRel(a) {
				t.Errorf("isCredentialRel(%q) = true, want false for an allowlisted entry", a)
			}
			i := strings.LastIndex(a, "/")
			if i < 0 || !isNestedDir(a[:i]) {
				t.Errorf("nestedAllow entry %q: parent is not a nested directory", a)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		want    Version
		wantErr bool
	}{
		{name: "debian 12", out: "bubblewrap 0.8.0\n", want: Version{0, 8, 0}},
		{name: "two-digit minor", out: "bubblewrap 0.11.1", want: Version{0, 11, 1}},
		{name: "rc suffix", out: "bubblewrap 0.10.0-rc1\n", want: Version{0, 10, 0}},
		{name: "suffix on minor", out: "bubblewrap 0.9rc", want: Version{0, 9, 0}},
		{name: "two components", out: "bubblewrap 0.4", want: Version{0, 4, 0}},
		{name: "surrounding space", out: "  bubblewrap   1.2.3  \n", want: Version{1, 2, 3}},
		{name: "empty", out: "", wantErr: true},
		{name: "only the name", out: "bubblewrap", wantErr: true},
		{name: "other program", out: "firejail 0.8.0", wantErr: true},
		{name: "garbage", out: "command not found", wantErr: true},
		{name: "non-numeric major", out: "bubblewrap x.8.0", wantErr: true},
		{name: "non-numeric minor", out: "bubblewrap 0.x.0", wantErr: true},
		{name: "empty component", out: "bubblewrap 0..1", wantErr: true},
		{name: "leading dash", out: "bubblewrap -1.2.3", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVersion(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseVersion(%q) error = %v, want error %v", tc.out, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseVersion(%q) = %v, want %v", tc.out, got, tc.want)
			}
		})
	}
}

func TestVersionString(t *testing.T) {
	for _, tc := range []struct {
		v    Version
		want string
	}{
		{Version{0, 8, 0}, "0.8.0"},
		{Version{0, 11, 1}, "0.11.1"},
		{Version{1, 0, 12}, "1.0.12"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := tc.v.String(); got != tc.want {
				t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
			}
			back, err := ParseVersion("bubblewrap " + tc.v.String())
			if err != nil || back != tc.v {
				t.Errorf("ParseVersion(String()) = %v, %v, want %v, nil", back, err, tc.v)
			}
		})
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		name                string
		v                   Version
		major, minor, patch int
		want                bool
	}{
		{name: "equal", v: Version{0, 8, 0}, major: 0, minor: 8, patch: 0, want: true},
		{name: "older patch", v: Version{0, 8, 0}, major: 0, minor: 8, patch: 1, want: false},
		{name: "newer patch", v: Version{0, 8, 2}, major: 0, minor: 8, patch: 1, want: true},
		{name: "older minor, higher patch", v: Version{0, 7, 9}, major: 0, minor: 8, patch: 0, want: false},
		{name: "two-digit minor is newer", v: Version{0, 10, 0}, major: 0, minor: 8, patch: 1, want: true},
		{name: "newer minor, lower patch", v: Version{0, 9, 0}, major: 0, minor: 8, patch: 5, want: true},
		{name: "newer major", v: Version{1, 0, 0}, major: 0, minor: 99, patch: 99, want: true},
		{name: "older major", v: Version{0, 99, 99}, major: 1, minor: 0, patch: 0, want: false},
		{name: "zero against min", v: Version{}, major: 0, minor: 8, patch: 0, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.AtLeast(tc.major, tc.minor, tc.patch); got != tc.want {
				t.Errorf("%v.AtLeast(%d, %d, %d) = %v, want %v", tc.v, tc.major, tc.minor, tc.patch, got, tc.want)
			}
		})
	}
}

func TestFeaturesFor(t *testing.T) {
	for _, tc := range []struct {
		v    Version
		want Features
	}{
		{Version{0, 3, 3}, Features{}},
		{Version{0, 4, 9}, Features{}},
		{Version{0, 5, 0}, Features{Perms: true, JSONStatus: true}},
		{Version{0, 6, 3}, Features{Perms: true, JSONStatus: true}},
		{Version{0, 7, 0}, Features{Perms: true, JSONStatus: true, Size: true}},
		{Version{0, 8, 0}, Features{Perms: true, JSONStatus: true, Size: true}},
		{Version{0, 11, 1}, Features{Perms: true, JSONStatus: true, Size: true}},
		{Version{1, 0, 0}, Features{Perms: true, JSONStatus: true, Size: true}},
	} {
		t.Run(tc.v.String(), func(t *testing.T) {
			if got := FeaturesFor(tc.v); got != tc.want {
				t.Errorf("FeaturesFor(%v) = %+v, want %+v", tc.v, got, tc.want)
			}
		})
	}
}
