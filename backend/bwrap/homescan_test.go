package bwrap

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// The scan of other people's homes is kept between commands only while
// nothing it depends on changed: every change on the host below is seen by
// the next lookup, and an unchanged host is answered from the cache from
// the second lookup on (the first, all a corral run makes, takes no stamp).
func TestOtherHomeCredentialsCache(t *testing.T) {
	base := testBase(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if !searchableByOthers(nil, base) {
		t.Skipf("%s lies below a directory others cannot enter: set CORRAL_TEST_DIR to a directory on an all-enterable path", base)
	}
	mk := func(rel string, dir bool) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if dir {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte("secret\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine := mk("me", true)
	a, b := mk("a", true), mk("b", true)
	mk("a/.config", true)
	sshA := mk("a/.ssh", true)
	var c homeScanCache
	// Stamps are judged against a clock well past every change made here,
	// as if the host had settled; the racy case is tested below.
	later := func() time.Time { return time.Now().Add(time.Minute) }
	homes := []string{a, b}
	check := func(step string, want ...string) {
		t.Helper()
		got := c.lookup(mine, homes, later())
		if !slices.Equal(got, want) {
			t.Fatalf("%s: found %q, want %q", step, got, want)
		}
		if !slices.Equal(got, scanOtherHomes(homes)) {
			t.Fatalf("%s: cached answer %q differs from a fresh scan %q", step, got, scanOtherHomes(homes))
		}
	}
	check("first scan", sshA)
	if c.found != nil {
		t.Fatal("the first lookup kept its answer: it takes no stamp (a one-command process never asks again)")
	}
	check("second scan", sshA)
	kept := c.found
	check("unchanged host", sshA)
	if len(kept) == 0 || &c.found[0] != &kept[0] {
		t.Fatal("unchanged host: the scan was not kept")
	}
	ghA := mk("a/.config/gh", true) // in a directory below the home
	check("a store in .config", sshA, ghA)
	awsB := mk("b/.aws", true) // in another home
	check("a store in the other home", sshA, ghA, awsB)
	cargo := mk("b/.cargo/credentials.toml", false) // a new directory holding a file
	check("a credential file", sshA, ghA, awsB, cargo)
	if err := os.Remove(sshA); err != nil {
		t.Fatal(err)
	}
	check("a store removed", ghA, awsB, cargo)
	if err := os.Chmod(filepath.Join(a, ".config"), 0o700); err != nil {
		t.Fatal(err)
	}
	check("a directory closed to others", awsB, cargo)
	if err := os.Chmod(filepath.Join(a, ".config"), 0o755); err != nil {
		t.Fatal(err)
	}
	check("opened again", ghA, awsB, cargo)
	n := mk("n", true)
	npmrc := mk("n/.npmrc", false)
	homes = append(homes, n)
	check("a new home", ghA, awsB, cargo, npmrc)
	check("a different caller's home", ghA, awsB, cargo, npmrc)

	// A change as recent as the clock's tick is not kept: the next lookup
	// scans again.
	racy := homeScanCache{asked: true}
	mk("b/.kube", true)
	if got := racy.lookup(mine, homes, time.Now()); !slices.Contains(got, filepath.Join(b, ".kube")) {
		t.Fatalf("racy lookup: %q lacks b/.kube", got)
	}
	if racy.found != nil {
		t.Fatal("an answer read right after a change was kept")
	}
}
