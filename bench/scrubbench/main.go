// Command scrubbench measures what scrubbing a secret's host's answers
// costs (issue 26): a 100 MB download through corral's proxy from a
// secret's host (the TLS connection terminated, the answer scrubbed of the
// secret's value in every form EncodedForms lists) against the same
// download from a host without secrets (a blind tunnel, nothing looked
// at), in one run, from one local HTTPS server, and the scrubber alone on
// the same bytes against a plain copy.
//
//	go run -tags corralbench ./bench/scrubbench [-mb 100] [-rounds 5] [-data random|text]
//
// With -tags corralbench (netproxy's Server.SetScrubbing, which corral
// itself does not have) it also downloads from the secret's host with
// scrubbing turned off, in the same rounds: the ratio to that is what
// scrubbing costs; the ratio to the blind tunnel adds the cost of
// terminating TLS, which a secret's host paid before scrubbing came.
//
// "random" bytes stand for an archive or a binary, "text" (base64 of
// random bytes, lines of 76) for the worst case of text made of the
// characters the value's forms are made of. Each ratio is of the medians.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/secrets"
)

// setScrubbing is netproxy's Server.SetScrubbing in builds with -tags
// corralbench, else nil.
var setScrubbing func(*netproxy.Server, bool)

func main() {
	mb := flag.Int("mb", 100, "size of the download, MB")
	rounds := flag.Int("rounds", 5, "downloads per path; medians are compared")
	kind := flag.String("data", "random", "what is downloaded: random (binary) or text (base64 lines)")
	flag.Parse()
	data := makeData(*mb<<20, *kind)
	dir, err := os.MkdirTemp(benchDir(), "scrubbench-")
	check(err)
	defer os.RemoveAll(dir)

	// The upstream: one HTTPS server for *.bench.test.
	cert, pool := selfSigned("*.bench.test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = up.ServeTLS(ln, "", "") }()
	defer up.Close()

	ca, err := secrets.LoadCA(dir + "/ca")
	check(err)
	value := "ghp_" + alnum(36)
	standIn, _ := secrets.StandIn(secrets.ProcessKey(), "GITHUB_TOKEN", value)
	sec := secrets.Secret{Name: "GITHUB_TOKEN", Value: value, StandIn: standIn, Hosts: []string{"secret.bench.test"}}
	srv, err := netproxy.Start(netproxy.Options{
		Policy: netproxy.Policy{Allow: []string{"*.bench.test"}}, Dir: dir + "/net",
		Logger: slog.New(slog.DiscardHandler), Secrets: []secrets.Secret{sec}, CA: ca, UpstreamRoots: pool,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, ln.Addr().String())
		},
	})
	check(err)
	defer srv.Close()
	roots := pool.Clone()
	roots.AddCert(ca.Certificate())
	client := &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "corral-proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", srv.HTTPSocket())
		},
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true,
	}}
	download := func(host string) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("GET", "https://"+host+"/file", nil)
		req.Header.Set("Authorization", "Bearer "+standIn)
		resp, err := client.Do(req)
		check(err)
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		check(err)
		if n != int64(len(data)) {
			check(fmt.Errorf("%s: %d bytes, want %d", host, n, len(data)))
		}
		return time.Since(t0)
	}
	sc, err := secrets.NewScrubber(secrets.ScrubPairs([]secrets.Secret{sec}, "secret.bench.test"))
	check(err)
	var blind, scrubbed, unscrubbed, plainCopy, scrubCopy []time.Duration
	for r := range *rounds {
		blind = append(blind, download("plain.bench.test"))
		scrubbed = append(scrubbed, download("secret.bench.test"))
		if setScrubbing != nil {
			setScrubbing(srv, false)
			unscrubbed = append(unscrubbed, download("secret.bench.test"))
			setScrubbing(srv, true)
		}
		t0 := time.Now()
		_, _ = io.Copy(io.Discard, struct{ io.Reader }{bytes.NewReader(data)}) // read by 32 KiB as the scrubber is
		plainCopy = append(plainCopy, time.Since(t0))
		t0 = time.Now()
		_, _ = io.Copy(io.Discard, sc.Reader(bytes.NewReader(data), nil))
		scrubCopy = append(scrubCopy, time.Since(t0))
		fmt.Printf("round %d: blind tunnel %.3f s, secret's host %.3f s; scrubber alone %.3f s\n", r+1, blind[r].Seconds(), scrubbed[r].Seconds(), scrubCopy[r].Seconds())
	}
	mbs := func(d time.Duration) float64 { return float64(len(data)) / (1 << 20) / d.Seconds() }
	b, s := median(blind), median(scrubbed)
	fmt.Printf("%d MB of %s data, %d forms of one secret\n", *mb, *kind, len(secrets.ScrubPairs([]secrets.Secret{sec}, "secret.bench.test")))
	fmt.Printf("download, blind tunnel (no secret)   median %7.3f s  %7.0f MB/s\n", b.Seconds(), mbs(b))
	fmt.Printf("download, secret's host (scrubbed)   median %7.3f s  %7.0f MB/s\n", s.Seconds(), mbs(s))
	fmt.Printf("ratio (scrubbed/blind)                      %7.2f\n", s.Seconds()/b.Seconds())
	if len(unscrubbed) > 0 {
		u := median(unscrubbed)
		fmt.Printf("download, secret's host, not scrubbed median %7.3f s  %7.0f MB/s\n", u.Seconds(), mbs(u))
		fmt.Printf("ratio (scrubbed/not scrubbed)               %7.2f\n", s.Seconds()/u.Seconds())
	} else {
		fmt.Println("(build with -tags corralbench for the secret's host without scrubbing)")
	}
	fmt.Printf("scrubber alone (Reader to io.Discard) median %7.3f s  %7.0f MB/s (a plain copy: %.3f s)\n", median(scrubCopy).Seconds(), mbs(median(scrubCopy)), median(plainCopy).Seconds())
}

// makeData returns n bytes of kind.
func makeData(n int, kind string) []byte {
	rng := mrand.New(mrand.NewPCG(26, 26))
	raw := make([]byte, n)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	if kind != "text" {
		return raw
	}
	enc := []byte(base64.StdEncoding.EncodeToString(raw[:n/4*3]))
	out := make([]byte, 0, n+n/76)
	for len(enc) > 0 && len(out) < n {
		k := min(76, len(enc))
		out = append(append(out, enc[:k]...), '\n')
		enc = enc[k:]
	}
	return out[:n]
}

func alnum(n int) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[mrand.IntN(len(chars))]
	}
	return string(b)
}

// selfSigned returns a certificate for name and a pool that trusts it.
func selfSigned(name string) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	check(err)
	leaf, err := x509.ParseCertificate(der)
	check(err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func benchDir() string {
	if d := os.Getenv("CORRAL_TEST_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "scrubbench:", err)
		os.Exit(1)
	}
}
