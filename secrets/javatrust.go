package secrets

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"github.com/corralhq/corral/internal/atomicfile"
)

// JavaTrustStores are the places distributions keep the trust store JVMs
// read by default: Debian and Ubuntu (package ca-certificates-java; the
// JDKs' lib/security/cacerts symlink to it), and Fedora and RHEL
// (ca-trust's extracted store, which their JDKs' cacerts symlink to).
// Under secrets, each that exists in the sandbox (or image) gets
// [TrustStore] over it.
var JavaTrustStores = []string{
	"/etc/ssl/certs/java/cacerts",
	"/etc/pki/ca-trust/extracted/java/cacerts",
}

// JavaToolOptions returns the JAVA_TOOL_OPTIONS value of a sandbox with
// secrets: proxyOpts (the proxy properties, netproxy.JavaToolOptions)
// and -Djavax.net.ssl.trustStore=store, store being where corral's
// [TrustStore] is bound in the sandbox (a path of [JavaTrustStores]).
// The property makes a JVM use that store whatever its own
// lib/security/cacerts holds, so a JDK with a cacerts file of its own
// (an unpacked tarball) trusts corral's CA too; the store holds the
// system bundle's certificates, so other hosts stay trusted. Java reads
// JAVA_TOOL_OPTIONS before its command line (HotSpot's argument order:
// JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS and the launcher's arguments, then
// _JAVA_OPTIONS; the last -D of a property wins), so a trust store the
// command names itself (-Djavax.net.ssl.trustStore=...) still wins:
// corral does not override a deliberate choice, and the secrets' hosts
// then fail the handshake. proxyOpts is returned unchanged when store is
// "" or holds white space (the JVM splits the value there). Pure.
func JavaToolOptions(proxyOpts, store string) string {
	if store == "" || strings.ContainsAny(store, " \t\n\r\v\f") {
		return proxyOpts
	}
	return proxyOpts + " -Djavax.net.ssl.trustStore=" + store
}

// ErrNoCertificates is TrustStore's error for inputs holding no
// certificate at all.
var ErrNoCertificates = errors.New("no certificate in the trust store's inputs")

// TrustStore returns a PKCS#12 trust store (RFC 7292) holding every
// certificate of system (a PEM bundle, possibly empty; blocks that are
// not certificates or do not parse are skipped, as OpenSSL does) and of
// caPEM, corral's CA certificate, without repeats, each marked with
// Java's trusted-certificate attribute (OID 2.16.840.1.113894.746875.1.1).
// The store has no password, neither encryption nor MAC (go-pkcs12's
// Passwordless, the form JDK 18+ ship their own cacerts in): a JVM loads
// its default trust store without a password when
// javax.net.ssl.trustStorePassword is unset, and then skips encrypted
// certificates, so a store protected with "changeit" reads as empty
// ("the trustAnchors parameter must be non-empty", measured on Java 17
// and 25). Any password given (keytool -storepass changeit) is accepted.
// Java 9 and later read it through their JKS/PKCS12 dual-format loader
// (keystore.type.compat, on by default) even where the file's name says
// JKS. Errors: [ErrNoCertificates] when caPEM holds none; encoding
// errors.
func TrustStore(system, caPEM []byte) ([]byte, error) {
	ca := pemCerts(caPEM)
	if len(ca) == 0 {
		return nil, fmt.Errorf("corral's CA: %w", ErrNoCertificates)
	}
	var entries []pkcs12.TrustStoreEntry
	aliases := map[string]bool{}
	for i, c := range append(pemCerts(system), ca...) {
		if slices.ContainsFunc(entries, func(o pkcs12.TrustStoreEntry) bool { return bytes.Equal(o.Cert.Raw, c.Raw) }) {
			continue
		}
		entries = append(entries, pkcs12.TrustStoreEntry{Cert: c, FriendlyName: storeAlias(c, i, aliases)})
	}
	return pkcs12.Passwordless.EncodeTrustStoreEntries(entries, "")
}

// storeAlias is c's alias in the store: its subject, lower-cased as
// keytool shows aliases, with " #i" added when another certificate took
// it already (Java keeps one entry per alias, so two roots with one
// subject, as Debian's bundle has, would otherwise lose one).
func storeAlias(c *x509.Certificate, i int, taken map[string]bool) string {
	a := strings.ToLower(c.Subject.String())
	if taken[a] {
		a += fmt.Sprintf(" #%d", i)
	}
	taken[a] = true
	return a
}

// pemCerts parses the CERTIFICATE blocks of data, skipping the others and
// those that do not parse.
func pemCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

// WriteTrustStore writes TrustStore(system, caPEM) to
// dir/truststore-HASH.p12 (0644: a sandbox reads it under its own
// identity; it holds public certificates only), HASH naming the inputs,
// so a written store never changes under a running sandbox, and returns
// its path. A store already there is kept. dir is made 0700 when
// missing.
func WriteTrustStore(dir string, system, caPEM []byte) (string, error) {
	sum := sha256.Sum256(Bundle(system, caPEM))
	path := filepath.Join(dir, "truststore-"+hex.EncodeToString(sum[:8])+".p12")
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		return path, nil
	}
	data, err := TrustStore(system, caPEM)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.Write(path, data, 0o644, false); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// HostJavaStores returns the entries of JavaTrustStores that exist on
// this host as regular files (symlinks resolved, without repeats).
func HostJavaStores() []string {
	var dests []string
	for _, c := range JavaTrustStores {
		r, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		if st, err := os.Stat(r); err == nil && st.Mode().IsRegular() && !slices.Contains(dests, r) {
			dests = append(dests, r)
		}
	}
	return dests
}

// HostJavaTrust is HostJavaStores and WriteTrustStore(dir, system, caPEM)
// (system: the host's PEM bundle, [HostBundles]) with their answer kept
// as [HostTrustBundle] keeps its own: given again while the host's
// bundles and Java stores (as stat(2) sees them), dir, caPEM and the
// written file stay as they were. path is "" (and nothing is written)
// when the host has no Java trust store. Errors are WriteTrustStore's.
func HostJavaTrust(dir string, caPEM []byte) (dests []string, path string, err error) {
	key := dir + "\x00" + string(caPEM) + "\x00" + hostBundlesStamp() + "\x00" + stamp(JavaTrustStores)
	javaTrust.mu.Lock()
	defer javaTrust.mu.Unlock()
	if javaTrust.key == key {
		if _, err := os.Stat(javaTrust.path); err == nil || javaTrust.path == "" {
			return slices.Clone(javaTrust.dests), javaTrust.path, nil
		}
	}
	dests = HostJavaStores()
	if len(dests) > 0 {
		_, system := HostBundles()
		if path, err = WriteTrustStore(dir, system, caPEM); err != nil {
			return nil, "", err
		}
	}
	javaTrust.key, javaTrust.dests, javaTrust.path = key, dests, path
	return slices.Clone(dests), path, nil
}

// javaTrust is HostJavaTrust's kept answer.
var javaTrust struct {
	mu        sync.Mutex
	key, path string
	dests     []string
}

// stamp is hostBundlesStamp for other paths.
func stamp(paths []string) string {
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(statStamp(p))
	}
	return b.String()
}
