package kubernetes

import (
	"strings"
	"testing"
	"time"
)

// TestHomeVerdict: a home pod is marked while this corral uses it, and
// removed only once its mark has stood unchanged for the idle timeout by
// this corral's clock.
func TestHomeVerdict(t *testing.T) {
	for _, c := range []struct {
		used      bool
		unchanged time.Duration
		want      string
	}{
		{true, 0, "mark"},
		{true, time.Hour, "mark"},
		{false, 29 * time.Minute, ""},
		{false, 30 * time.Minute, "remove"},
		{false, time.Hour, "remove"},
	} {
		if got := homeVerdict(c.used, c.unchanged, 30*time.Minute); got != c.want {
			t.Errorf("homeVerdict(%v, %s) = %q, want %q", c.used, c.unchanged, got, c.want)
		}
	}
}

// TestHomePodName: the same for every corral with the same session and
// settings, another for another session or settings, a valid pod name
// that randomName never makes.
func TestHomePodName(t *testing.T) {
	a := homePodName("s", "h1")
	if a != homePodName("s", "h1") || a == homePodName("s", "h2") || a == homePodName("t", "h1") {
		t.Errorf("names: %s %s %s", a, homePodName("s", "h2"), homePodName("t", "h1"))
	}
	if !strings.HasPrefix(a, NamePrefix+"h") || len(a) != len(NamePrefix)+21 || len(randomName()) == len(a) {
		t.Errorf("name %q (random %q)", a, randomName())
	}
	// Names are not confused by a NUL in the session's name.
	if homePodName("a\x00b", "c") == homePodName("a", "b\x00c") {
		t.Error("a session's name and the hash run together")
	}
}
