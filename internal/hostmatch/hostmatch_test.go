package hostmatch

import "testing"

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"github.com", "github.com", true},
		{"github.com", "GitHub.COM.", true},
		{"GitHub.com.", "github.com", true},
		{"github.com", "api.github.com", false},
		{"*.github.com", "api.github.com", true},
		{"*.github.com", "A.B.GitHub.com", true},
		{"*.github.com", "github.com", false},
		{"*.github.com", "xgithub.com", false},
		{"*.github.com", ".github.com", false},
		{"*.test", "x.test", true},
		{"github.com", "", false},
		{"", "", false},
	} {
		if got := Match(tc.pattern, tc.host); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}
