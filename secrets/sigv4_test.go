package secrets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The key pair of the AWS SigV4 test suite.
const (
	vecKeyID  = "AKIDEXAMPLE"
	vecSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
)

// sigV4Vectors: the first two are the AWS SigV4 test suite's get-vanilla
// and get-vanilla-query-order-key-case; the others were signed by
// botocore 1.43 (SigV4Auth and S3SigV4Auth) at the suite's date, an
// independent implementation: encoded path and query, a header with runs
// of spaces, and S3's single-encoded path with a payload hash header.
var sigV4Vectors = []struct {
	name, url string
	headers   map[string]string
	auth      string
}{
	{"get-vanilla", "https://example.amazonaws.com/", nil,
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"},
	{"get-vanilla-query-order-key-case", "https://example.amazonaws.com/?Param2=value2&Param1=value1", nil,
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"},
	{"botocore: encoded path and query, spaces in a header", "https://example.amazonaws.com/a%20b/%2A~x?y=%E2%82%AC&x=a%20b", map[string]string{"My-Header1": "  a   b  "},
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=0ce8575518ead050f9433991c2033c3a1a7a24d0b941f396cd509a5ca0c5351e"},
	{"botocore: s3", "https://bucket.s3.amazonaws.com/a%20b/c.txt", map[string]string{"X-Amz-Content-Sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=3a7e8db93050469d6746f2bf60b51f320a35170b80ee6426d92a059a17cff104"},
}

// TestResignAWSVectors takes each vector's request as signed with a
// stand-in pair (the suite's) and re-signs it with another pair, then
// takes that as the stand-in and re-signs with the suite's pair again:
// the result must be the vector's signature byte for byte, so both the
// check of the stand-in signature and the signing follow the spec.
func TestResignAWSVectors(t *testing.T) {
	suite := Secret{Name: "AWS_ACCESS_KEY_ID", Kind: KindAWS, Hosts: []string{"*.amazonaws.com"}, SecretName: "AWS_SECRET_ACCESS_KEY"}
	there, back := suite, suite
	there.StandIn, there.SecretStandIn, there.Value, there.SecretValue = vecKeyID, vecSecret, "AKIAREALREALREAL0000", "realrealrealrealrealrealrealrealrealreal"
	back.StandIn, back.SecretStandIn, back.Value, back.SecretValue = there.Value, there.SecretValue, vecKeyID, vecSecret
	for _, v := range sigV4Vectors {
		t.Run(v.name, func(t *testing.T) {
			r, err := http.NewRequest("GET", v.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("X-Amz-Date", "20150830T123600Z")
			for k, val := range v.headers {
				r.Header.Set(k, val)
			}
			r.Header.Set("Authorization", v.auth)
			host := r.URL.Hostname()
			name, err := ResignAWS(r, host, []Secret{there})
			mid := r.Header.Get("Authorization")
			if err != nil || name != "AWS_ACCESS_KEY_ID" || !strings.Contains(mid, "Credential=AKIAREALREALREAL0000/20150830/") || mid == v.auth {
				t.Fatalf("re-signing the vector: name %q, err %v, Authorization %q", name, err, mid)
			}
			if _, err := ResignAWS(r, host, []Secret{back}); err != nil {
				t.Fatal(err)
			}
			if got := r.Header.Get("Authorization"); got != v.auth {
				t.Errorf("signed back with the suite's pair:\n got %s\nwant %s", got, v.auth)
			}
		})
	}
}

func TestResignAWSRefusals(t *testing.T) {
	s := Secret{Name: "AWS_ACCESS_KEY_ID", Kind: KindAWS, Hosts: []string{"*.amazonaws.com"}, StandIn: vecKeyID, SecretStandIn: vecSecret, Value: "AKIAREALREALREAL0000", SecretValue: "real/real"}
	v := sigV4Vectors[0]
	mk := func(tweak func(*http.Request)) *http.Request {
		r, _ := http.NewRequest("GET", v.url, nil)
		r.Header.Set("X-Amz-Date", "20150830T123600Z")
		r.Header.Set("Authorization", v.auth)
		tweak(r)
		return r
	}
	for _, tc := range []struct {
		name  string
		r     *http.Request
		host  string
		err   string
		wantN string
	}{
		{"a signed header changed after signing", mk(func(r *http.Request) { r.Host = "other.amazonaws.com" }), "other.amazonaws.com", "does not verify with AWS_ACCESS_KEY_ID's stand-in pair", ""},
		{"no X-Amz-Date", mk(func(r *http.Request) { r.Header.Del("X-Amz-Date") }), "example.amazonaws.com", "no X-Amz-Date", ""},
		{"a session token", mk(func(r *http.Request) { r.Header.Set("X-Amz-Security-Token", "t") }), "example.amazonaws.com", "session token", ""},
		{"another key id is left alone", mk(func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(v.auth, vecKeyID, "AKIDOTHER", 1))
		}), "example.amazonaws.com", "", ""},
		{"a host the secret does not belong to is left alone", mk(func(*http.Request) {}), "example.com", "", ""},
		{"not SigV4", mk(func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+vecKeyID) }), "example.amazonaws.com", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.r.Header.Get("Authorization")
			name, err := ResignAWS(tc.r, tc.host, []Secret{s})
			if tc.err == "" && (err != nil || name != tc.wantN) || tc.err != "" && (err == nil || !errors.Is(err, ErrSigV4) || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("ResignAWS = %q, %v; want error containing %q", name, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "real") {
				t.Errorf("error holds the real value: %v", err)
			}
			if got := tc.r.Header.Get("Authorization"); got != before {
				t.Errorf("Authorization changed to %q", got)
			}
		})
	}
}

// TestResignAWSBody: a signed POST without x-amz-content-sha256 is hashed
// from its body, which must reach the server byte for byte; a body larger
// than MaxSignedBody is refused.
func TestResignAWSBody(t *testing.T) {
	s := Secret{Name: "AK", Kind: KindAWS, Hosts: []string{"sts.amazonaws.com"}, StandIn: vecKeyID, SecretStandIn: vecSecret, Value: "AKIAREALREALREAL0000", SecretValue: "real"}
	sign := func(body string) *http.Request {
		r, _ := http.NewRequest("POST", "https://sts.amazonaws.com/", strings.NewReader(body))
		r.Header.Set("X-Amz-Date", "20150830T123600Z")
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		a := sigV4Auth{keyID: vecKeyID, date: "20150830", region: "us-east-1", service: "sts", signedHeaders: []string{"content-type", "host", "x-amz-date"}}
		sum := sha256.Sum256([]byte(body))
		a.signature = sigV4Signature(vecSecret, a, sigV4StringToSign(r, a, "20150830T123600Z", hex.EncodeToString(sum[:]), true))
		r.Header.Set("Authorization", a.header())
		return r
	}
	body := "Action=GetCallerIdentity&Version=2011-06-15&k=" + vecKeyID
	r := sign(body)
	if name, err := ResignAWS(r, "sts.amazonaws.com", []Secret{s}); err != nil || name != "AK" {
		t.Fatalf("ResignAWS = %q, %v", name, err)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Errorf("body after re-signing = %q, want %q", got, body)
	}
	big := sign(strings.Repeat("x", MaxSignedBody+1))
	if _, err := ResignAWS(big, "sts.amazonaws.com", []Secret{s}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a body over MaxSignedBody: err = %v", err)
	}
}
