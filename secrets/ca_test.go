package secrets

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestLoadCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var cas [4]*CA
	var wg sync.WaitGroup
	for i := range cas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ca, err := LoadCA(dir)
			if err != nil {
				t.Error(err)
			}
			cas[i] = ca
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, ca := range cas[1:] {
		if !ca.Certificate().Equal(cas[0].Certificate()) {
			t.Fatal("concurrent LoadCA calls made different CAs")
		}
	}
	st, err := os.Stat(filepath.Join(dir, CAFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("CA directory mode %v, want 0700", d.Mode().Perm())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".ca-*")); len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	again, err := LoadCA(dir)
	if err != nil || !again.Certificate().Equal(cas[0].Certificate()) {
		t.Fatalf("LoadCA again: %v, same CA = %v", err, err == nil && again.Certificate().Equal(cas[0].Certificate()))
	}
	c := cas[0].Certificate()
	if !c.IsCA || !c.MaxPathLenZero || c.PublicKeyAlgorithm != x509.ECDSA || !strings.Contains(string(cas[0].CertPEM()), "BEGIN CERTIFICATE") || strings.Contains(string(cas[0].CertPEM()), "PRIVATE") {
		t.Errorf("CA certificate: IsCA %v, MaxPathLenZero %v, alg %v; PEM %q", c.IsCA, c.MaxPathLenZero, c.PublicKeyAlgorithm, cas[0].CertPEM())
	}

	if err := os.Chmod(filepath.Join(dir, CAFileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "readable by its owner only") {
		t.Errorf("LoadCA of a 0644 CA file: err = %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, CAFileName), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAFileName), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if ca, err := LoadCA(dir); err != nil || ca.Certificate().Equal(c) {
		t.Errorf("LoadCA over a damaged file: err %v; want a new CA", err)
	}
}

func TestCALeaf(t *testing.T) {
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	l, err := ca.Leaf("API.GitHub.com.")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: pool}); err != nil {
		t.Errorf("leaf does not verify for api.github.com: %v", err)
	}
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "github.com", Roots: pool}); err == nil {
		t.Error("leaf for api.github.com verifies for github.com")
	}
	if again, _ := ca.Leaf("api.github.com"); again != l {
		t.Error("leaf not cached")
	}
	for _, bad := range []string{"", "192.0.2.1", "a:b", "x/y"} {
		if _, err := ca.Leaf(bad); err == nil {
			t.Errorf("Leaf(%q) minted a certificate", bad)
		}
	}
	if m := ca.Minted(); len(m) != 1 || m[0] != "api.github.com" {
		t.Errorf("Minted = %v", m)
	}
}

// TestCALeafBound: the leaf cache keeps at most MaxLeaves certificates,
// dropping the least recently used: a command trying one subdomain after
// another of a wildcard secret host cannot grow it without end. A dropped
// host is minted again when asked for; a recently used one stays.
func TestCALeafBound(t *testing.T) {
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	host := func(i int) string { return fmt.Sprintf("h%d.example.com", i) }
	first, err := ca.Leaf(host(0))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ca.Leaf(host(1))
	if err != nil {
		t.Fatal(err)
	}
	n := 2*MaxLeaves + 10
	for i := 2; i < n; i++ {
		if _, err := ca.Leaf(host(i)); err != nil {
			t.Fatal(err)
		}
		if i%(MaxLeaves/2) == 0 {
			// Used now and then: never the least recently used.
			if l, _ := ca.Leaf(host(1)); l != kept {
				t.Fatalf("after %d hosts the recently used %s was minted again", i, host(1))
			}
		}
	}
	m := ca.Minted()
	if len(m) != MaxLeaves {
		t.Fatalf("the CA keeps %d certificates after %d hosts, want %d", len(m), n, MaxLeaves)
	}
	if m[0] != host(n-1) {
		t.Errorf("most recently used = %s, want %s", m[0], host(n-1))
	}
	if !slices.Contains(m, host(1)) || slices.Contains(m, host(0)) || slices.Contains(m, host(2)) {
		t.Errorf("kept %s: %v, %s: %v, %s: %v; want only the recently used %[5]s", host(0), slices.Contains(m, host(0)), host(2), slices.Contains(m, host(2)), host(1), slices.Contains(m, host(1)))
	}
	again, err := ca.Leaf(host(0))
	if err != nil {
		t.Fatal(err)
	}
	if again == first || again.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Error("a dropped host's certificate came back from the cache")
	}
	if len(ca.Minted()) != MaxLeaves {
		t.Errorf("the CA keeps %d certificates, want %d", len(ca.Minted()), MaxLeaves)
	}
}
