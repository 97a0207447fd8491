package secrets

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// CAFileName is the file, in the directory given to [LoadCA], that holds
// the CA's certificate and private key in PEM (mode 0600).
const CAFileName = "ca.pem"

// Validity of corral's certificates.
const (
	// CAValidity is how long a new CA certificate is valid; a CA that
	// expires within CARenewBefore is replaced by a new one.
	CAValidity    = 10 * 365 * 24 * time.Hour
	CARenewBefore = 30 * 24 * time.Hour
	// LeafValidity is how long a minted leaf certificate is valid (from an
	// hour ago, for clocks a little behind); a cached one is minted again
	// when it has less than an hour left.
	LeafValidity = 7 * 24 * time.Hour
)

// MaxLeaves bounds the leaf certificates a CA keeps in memory (about 1 KiB
// each): past it, the least recently used one is dropped (and minted again
// if asked for). Without a bound a command could grow corral's memory
// without end through a wildcard secret host (*.example.com), making the
// proxy mint one certificate per subdomain it tries.
const MaxLeaves = 256

// CA is corral's own certificate authority: one ECDSA P-256 key and a
// self-signed certificate, made once and kept in corral's state directory
// (which every sandbox hides), used by the egress proxy to mint leaf
// certificates for the hosts a declared secret names, so that it can
// terminate TLS for those hosts and swap stand-ins for real values.
//
// Why per user and never outside the state directory: whoever holds the
// key can impersonate any site to every sandbox that trusts the CA (each
// sandbox of this user trusts it, through the bundle corral binds in), so
// the key must be readable by corral alone: one CA per user, in that
// user's 0700 state directory, file 0600, never copied into a sandbox,
// never put in the host's own trust store. A sandbox sees the certificate
// only (public), and trusting it gains a sandbox nothing: only corral's
// proxy, outside the sandbox, has the key.
//
// A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu      sync.Mutex
	leafKey *ecdsa.PrivateKey
	// leaves maps a host to its element of lru, whose Value is a
	// *cachedLeaf; lru's front is the most recently used.
	leaves map[string]*list.Element
	lru    list.List
	now    func() time.Time
}

// cachedLeaf is one entry of CA's leaf cache.
type cachedLeaf struct {
	host string
	cert *tls.Certificate
}

// LoadCA returns the CA kept in dir/[CAFileName], making it (and dir, mode
// 0700) when there is none, or when the one there cannot be parsed or
// expires within CARenewBefore. Two processes that make one at once agree
// on a single file (it is written under a temporary name and linked into
// place; the loser reads the winner's). Errors name the file; a file whose
// mode lets other users read it is refused.
func LoadCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets: creating the CA directory: %w", err)
	}
	path := filepath.Join(dir, CAFileName)
	for range 3 {
		ca, err := readCA(path)
		if err == nil && time.Until(ca.cert.NotAfter) > CARenewBefore {
			return ca, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errBadCA) {
			return nil, err
		}
		if err == nil || errors.Is(err, errBadCA) {
			// Expiring or unreadable: replace it.
			_ = os.Remove(path)
		}
		if err := writeNewCA(dir, path); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("secrets: %s keeps changing; another corral may be replacing it", path)
}

var errBadCA = errors.New("not a usable CA")

func readCA(path string) (*CA, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets: %s has mode %v; the CA key must be readable by its owner only (chmod 600 it, or remove it to make a new CA)", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("secrets: reading %s: %w", path, err)
	}
	var ca CA
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			if ca.cert, err = x509.ParseCertificate(b.Bytes); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", errBadCA, path, err)
			}
			ca.certPEM = pem.EncodeToMemory(b)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", errBadCA, path, err)
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("%w: %s: the key is not ECDSA", errBadCA, path)
			}
			ca.key = ek
		}
	}
	if ca.cert == nil || ca.key == nil || !ca.cert.IsCA || !ca.key.PublicKey.Equal(ca.cert.PublicKey) {
		return nil, fmt.Errorf("%w: %s", errBadCA, path)
	}
	ca.leaves = map[string]*list.Element{}
	ca.now = time.Now
	return &ca, nil
}

// writeNewCA makes a CA and links it into place at path; fs.ErrExist
// means another process was first.
func writeNewCA(dir, path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("secrets: making the CA key: %w", err)
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject: pkix.Name{
			CommonName:   fmt.Sprintf("corral sandbox CA (uid %d on %s)", os.Getuid(), host),
			Organization: []string{"corral"},
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("secrets: making the CA certificate: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("secrets: encoding the CA key: %w", err)
	}
	data := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})...)
	tmp, err := os.CreateTemp(dir, ".ca-*.pem")
	if err != nil {
		return fmt.Errorf("secrets: writing the CA: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 before anything is written to it.
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("secrets: writing the CA: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("secrets: writing the CA: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secrets: writing the CA: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return fmt.Errorf("secrets: writing the CA: %w", err)
	}
	return nil
}

func randomSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// CertPEM returns the CA certificate in PEM (public; what a sandbox's
// trust bundle gets).
func (c *CA) CertPEM() []byte { return c.certPEM }

// Certificate returns the parsed CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for host (a DNS name, lower-cased), signed by
// the CA, with the chain [leaf, CA]: minted on first use and kept in
// memory until it has less than an hour left, or until MaxLeaves more
// recently used hosts have pushed it out. The caller decides which
// hosts get one (the egress proxy: only hosts some declared secret names,
// and only the host of the CONNECT). IP addresses and empty names are
// refused.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || strings.ContainsAny(host, ":/ ") || strings.Trim(host, "0123456789.") == "" {
		return nil, fmt.Errorf("secrets: no certificate for %q: not a host name", host)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if e := c.leaves[host]; e != nil {
		if l := e.Value.(*cachedLeaf).cert; l.Leaf.NotAfter.Sub(now) > time.Hour {
			c.lru.MoveToFront(e)
			return l, nil
		}
		c.lru.Remove(e)
		delete(c.leaves, host)
	}
	if c.leafKey == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("secrets: making a leaf key: %w", err)
		}
		c.leafKey = k
	}
	notAfter := now.Add(LeafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("secrets: minting a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey, Leaf: leaf}
	c.leaves[host] = c.lru.PushFront(&cachedLeaf{host, l})
	for c.lru.Len() > MaxLeaves {
		old := c.lru.Remove(c.lru.Back()).(*cachedLeaf)
		delete(c.leaves, old.host)
	}
	return l, nil
}

// Minted returns the hosts whose certificates the CA keeps now (minted in
// this process and not yet pushed out, at most MaxLeaves), most recently
// used first, for tests and diagnostics.
func (c *CA) Minted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, c.lru.Len())
	for e := c.lru.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*cachedLeaf).host)
	}
	return out
}
