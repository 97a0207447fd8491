package secrets

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// This file re-signs AWS Signature Version 4 requests (issue 14): a
// secret of kind aws is a key pair (access key id and secret access key);
// the sandbox holds a stand-in pair and signs with it, and the proxy, for
// the secret's hosts, checks that signature with the stand-in secret and
// signs the request again with the real pair. Source of every rule below:
// "Create a signed AWS API request" and "Elements of an AWS API request
// signature" in the IAM User Guide (canonical request, string to sign,
// signing key), and the AWS SigV4 test suite for the vectors in the tests.

// KindAWS is the Kind of a secret that is an AWS key pair.
const KindAWS = "aws"

// sigV4Algorithm is the only algorithm re-signed (SigV4A, which signs with
// an ECDSA key derived from the secret, is not).
const sigV4Algorithm = "AWS4-HMAC-SHA256"

// MaxSignedBody is the largest body the proxy reads to hash when a signed
// request carries no x-amz-content-sha256 header (its payload hash is then
// the body's SHA-256, which only the body gives); a larger one is refused.
const MaxSignedBody = 8 << 20

// ErrSigV4 means a request signed with an AWS stand-in could not be signed
// again; the proxy refuses it with the message, which names no secret
// value.
var ErrSigV4 = errors.New("AWS SigV4")

// sigV4Auth is a parsed Authorization header of SigV4.
type sigV4Auth struct {
	keyID, date, region, service string
	signedHeaders                []string
	signature                    string
}

// parseSigV4 parses "AWS4-HMAC-SHA256 Credential=ID/DATE/REGION/SERVICE/aws4_request,
// SignedHeaders=a;b, Signature=HEX"; ok is false for anything else.
func parseSigV4(v string) (a sigV4Auth, ok bool) {
	alg, rest, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || alg != sigV4Algorithm {
		return a, false
	}
	for _, part := range strings.Split(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			f := strings.Split(val, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return a, false
			}
			a.keyID, a.date, a.region, a.service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			a.signedHeaders = strings.Split(val, ";")
		case "Signature":
			a.signature = val
		}
	}
	return a, a.keyID != "" && len(a.signedHeaders) > 0 && a.signature != ""
}

func (a sigV4Auth) header() string {
	return fmt.Sprintf("%s Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, Signature=%s",
		sigV4Algorithm, a.keyID, a.date, a.region, a.service, strings.Join(a.signedHeaders, ";"), a.signature)
}

// uriEncode is SigV4's UriEncode: every byte but A-Z a-z 0-9 - _ . ~ as
// %XY (upper-case hex), and '/' kept when keepSlash.
func uriEncode(s string, keepSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' && keepSlash {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// canonicalQuery sorts the decoded parameters by name, then value, each
// encoded again by uriEncode.
func canonicalQuery(raw string) string {
	type kv struct{ k, v string }
	var ps []kv
	for _, p := range strings.Split(raw, "&") {
		if p == "" {
			continue
		}
		k, v, _ := strings.Cut(p, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			dk, dv = k, v
		}
		ps = append(ps, kv{uriEncode(dk, false), uriEncode(dv, false)})
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].k != ps[j].k {
			return ps[i].k < ps[j].k
		}
		return ps[i].v < ps[j].v
	})
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.k + "=" + p.v
	}
	return strings.Join(out, "&")
}

// headerValue is a signed header's canonical value: the values joined by
// commas, each trimmed with inner runs of spaces made one.
func headerValue(r *http.Request, name string) string {
	switch name {
	case "host":
		return r.Host
	case "content-length":
		if v := r.Header.Get("Content-Length"); v != "" {
			return v
		}
		return strconv.FormatInt(r.ContentLength, 10)
	}
	vals := r.Header.Values(name)
	for i, v := range vals {
		vals[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(vals, ",")
}

// sigV4StringToSign returns the string to sign of r under a, with the
// canonical URI encoded twice (every service but S3) or once (S3).
func sigV4StringToSign(r *http.Request, a sigV4Auth, amzDate, payloadHash string, doubleEncode bool) string {
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	uri := uriEncode(path, true)
	if doubleEncode {
		uri = uriEncode(uri, true)
	}
	var ch strings.Builder
	for _, h := range a.signedHeaders {
		ch.WriteString(h + ":" + headerValue(r, h) + "\n")
	}
	canonical := strings.Join([]string{r.Method, uri, canonicalQuery(r.URL.RawQuery), ch.String(), strings.Join(a.signedHeaders, ";"), payloadHash}, "\n")
	sum := sha256.Sum256([]byte(canonical))
	scope := a.date + "/" + a.region + "/" + a.service + "/aws4_request"
	return sigV4Algorithm + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// sigV4Signature signs stringToSign with the signing key derived from
// secret for a's date, region and service.
func sigV4Signature(secret string, a sigV4Auth, stringToSign string) string {
	k := hmacSHA256([]byte("AWS4"+secret), a.date)
	k = hmacSHA256(k, a.region)
	k = hmacSHA256(k, a.service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, stringToSign))
}

// ResignAWS signs r again with the real key pair of the aws secret of secs
// whose stand-in key id r's SigV4 Authorization names, when that secret
// belongs to host (Substitute has already refused one that does not). The
// request must have been signed with the stand-in pair (checked: the
// signature is recomputed with the stand-in secret, the canonical URI
// encoded twice or once as every service but S3 or S3 does, and the one
// that matches is used again); then the Credential names the real key id
// and the Signature is the real pair's, over the same signed headers,
// date and payload hash (x-amz-content-sha256 as sent, else the SHA-256
// of the body, read whole up to MaxSignedBody and put back). It returns
// the secret's name, or "" when r carries no such signature. Errors wrap
// ErrSigV4: a stand-in signature that does not verify, no X-Amz-Date, a
// body too large, a session token (X-Amz-Security-Token, which a
// stand-in pair has none of).
func ResignAWS(r *http.Request, host string, secs []Secret) (string, error) {
	a, ok := parseSigV4(r.Header.Get("Authorization"))
	if !ok {
		return "", nil
	}
	var s *Secret
	for i := range secs {
		if secs[i].Kind == KindAWS && secs[i].StandIn == a.keyID && secs[i].Belongs(host) {
			s = &secs[i]
		}
	}
	if s == nil {
		return "", nil
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if amzDate == "" || !strings.HasPrefix(amzDate, a.date) {
		return "", fmt.Errorf("%w: the request signed with %s's stand-in has no X-Amz-Date of the credential's date", ErrSigV4, s.Name)
	}
	if r.Header.Get("X-Amz-Security-Token") != "" {
		return "", fmt.Errorf("%w: the request signed with %s's stand-in carries a session token; corral's stand-in pair has none", ErrSigV4, s.Name)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		var body []byte
		if r.Body != nil {
			var err error
			body, err = io.ReadAll(io.LimitReader(r.Body, MaxSignedBody+1))
			if err != nil {
				return "", fmt.Errorf("%w: reading the body to hash: %v", ErrSigV4, err)
			}
			if len(body) > MaxSignedBody {
				return "", fmt.Errorf("%w: the body of a request signed with %s's stand-in is larger than %d bytes and has no x-amz-content-sha256 header (send one, such as UNSIGNED-PAYLOAD)", ErrSigV4, s.Name, MaxSignedBody)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		sum := sha256.Sum256(body)
		payload = hex.EncodeToString(sum[:])
	}
	for _, double := range []bool{true, false} {
		sts := sigV4StringToSign(r, a, amzDate, payload, double)
		if !hmac.Equal([]byte(sigV4Signature(s.SecretStandIn, a, sts)), []byte(a.signature)) {
			continue
		}
		a.keyID = s.Value
		a.signature = sigV4Signature(s.SecretValue, a, sts)
		r.Header.Set("Authorization", a.header())
		return s.Name, nil
	}
	return "", fmt.Errorf("%w: the request's signature does not verify with %s's stand-in pair (sign with the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY the sandbox holds, and keep the signed headers as they are)", ErrSigV4, s.Name)
}
