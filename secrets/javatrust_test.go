package secrets

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"github.com/corralhq/corral/internal/testcert"
)

// TrustStore holds the system bundle's certificates and the CA, once
// each, and nothing else.
func TestTrustStore(t *testing.T) {
	_, sys1 := testcert.New(t, "one.test")
	_, sys2 := testcert.New(t, "two.test")
	_, ca := testcert.New(t, "corral.test")
	system := bytes.Join([][]byte{sys1, []byte("# a comment\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), sys2, sys1}, nil)
	for _, tc := range []struct {
		name   string
		system []byte
		want   [][]byte
	}{
		{"system and CA", system, [][]byte{sys1, sys2, ca}},
		{"no system bundle", nil, [][]byte{ca}},
		{"the CA already in the system bundle", append(append([]byte{}, sys1...), ca...), [][]byte{sys1, ca}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p12, err := TrustStore(tc.system, ca)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pkcs12.DecodeTrustStore(p12, "")
			if err != nil {
				t.Fatalf("DecodeTrustStore: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d certificates, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				if c := pemCerts(w); !bytes.Equal(got[i].Raw, c[0].Raw) {
					t.Errorf("certificate %d is %s, want %s", i, got[i].Subject, c[0].Subject)
				}
			}
		})
	}
	if _, err := TrustStore(system, []byte("not a certificate")); !errors.Is(err, ErrNoCertificates) {
		t.Errorf("CA without a certificate: %v, want ErrNoCertificates", err)
	}
}

// The store made from this host's bundle holds every certificate of it
// and the CA; Java's keytool, where installed, lists them all.
func TestTrustStoreHostBundle(t *testing.T) {
	_, system := HostBundles()
	if system == nil {
		t.Skip("this host has no system CA bundle (apt-get install ca-certificates)")
	}
	_, ca := testcert.New(t, "corral.test")
	path, err := WriteTrustStore(t.TempDir(), system, ca)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pkcs12.DecodeTrustStore(data, "")
	if err != nil {
		t.Fatal(err)
	}
	want := len(pemCerts(system)) + 1
	if len(got) != want || len(got) < 10 {
		t.Fatalf("%d certificates, want %d (the host's bundle and the CA)", len(got), want)
	}
	if !bytes.Equal(got[len(got)-1].Raw, pemCerts(ca)[0].Raw) {
		t.Errorf("the last certificate is %s, want corral's CA", got[len(got)-1].Subject)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(system)
	if !pool.Equal(certPool(got[:len(got)-1])) {
		t.Errorf("the store's system certificates differ from the host bundle's")
	}
	keytool, err := exec.LookPath("keytool")
	if err != nil {
		t.Logf("no keytool on PATH: Java's view not checked")
		return
	}
	// keytool -list reads the file as Java does (JKS/PKCS12 dual format),
	// here with the password JDKs default to.
	out, err := exec.Command(keytool, "-list", "-keystore", path, "-storepass", "changeit").CombinedOutput()
	if err != nil {
		t.Fatalf("keytool -list: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "trustedCertEntry"); n != want {
		t.Errorf("keytool lists %d trusted certificates, want %d:\n%s", n, want, out)
	}
}

func certPool(certs []*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// HostJavaTrust writes the store once, keeps it while nothing changed,
// writes it again when its file is gone, and another for another CA.
func TestHostJavaTrustKept(t *testing.T) {
	dir := t.TempDir()
	_, ca := testcert.New(t, "corral.test")
	dests, path, err := HostJavaTrust(dir, ca)
	if err != nil {
		t.Fatal(err)
	}
	if len(dests) == 0 {
		if path != "" {
			t.Fatalf("no Java trust store on the host, yet a store %s", path)
		}
		t.Skip("no Java trust store on this host (apt-get install ca-certificates-java)")
	}
	st1, err := os.Stat(path)
	if err != nil || filepath.Dir(path) != dir {
		t.Fatalf("store %s: %v", path, err)
	}
	if _, p2, _ := HostJavaTrust(dir, ca); p2 != path {
		t.Errorf("second call: %s, want the kept %s", p2, path)
	} else if st2, err := os.Stat(p2); err != nil || !os.SameFile(st1, st2) {
		t.Errorf("second call rewrote the store: %v", err)
	}
	os.Remove(path)
	if _, p3, err := HostJavaTrust(dir, ca); err != nil || p3 != path {
		t.Errorf("after its file was removed: %s %v", p3, err)
	} else if _, err := os.Stat(p3); err != nil {
		t.Errorf("not written again: %v", err)
	}
	_, other := testcert.New(t, "other.test")
	if _, p4, _ := HostJavaTrust(dir, other); p4 == path {
		t.Errorf("another CA got the same store %s", p4)
	}
}

func TestJavaToolOptions(t *testing.T) {
	const proxy = "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128"
	for _, c := range []struct{ store, want string }{
		{"/etc/ssl/certs/java/cacerts", proxy + " -Djavax.net.ssl.trustStore=/etc/ssl/certs/java/cacerts"},
		{"", proxy},
		{"/etc/my certs/cacerts", proxy}, // the JVM would split it
		{"/etc/a\tb", proxy},
	} {
		if got := JavaToolOptions(proxy, c.store); got != c.want {
			t.Errorf("JavaToolOptions(%q) = %q, want %q", c.store, got, c.want)
		}
	}
}
