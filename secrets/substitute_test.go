package secrets

import (
	"encoding/base64"
	"net/http"
	"reflect"
	"testing"
)

func TestMatchHost(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"github.com", "github.com", true},
		{"github.com", "GitHub.COM.", true},
		{"github.com", "api.github.com", false},
		{"github.com", "evilgithub.com", false},
		{"*.github.com", "api.github.com", true},
		{"*.github.com", "a.b.github.com", true},
		{"*.github.com", "github.com", false},
		{"*.github.com", "xgithub.com", false},
		{"*.github.com", ".github.com", false},
		{"github.com", "", false},
	} {
		if got := MatchHost(tc.pattern, tc.host); got != tc.want {
			t.Errorf("MatchHost(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestSubstitute(t *testing.T) {
	gh := Secret{Name: "GITHUB_TOKEN", Value: "ghp_REALREALREALREAL0", StandIn: "ghp_stndStndStndStnd1", Hosts: []string{"github.com", "*.github.com"}}
	ai := Secret{Name: "ANTHROPIC_API_KEY", Value: "sk-ant-REALREALREAL", StandIn: "sk-ant-stndstndstnd", Hosts: []string{"api.anthropic.com"}}
	gl := Secret{Name: "GITLAB_TOKEN", Value: "glpat-REALREALREAL", StandIn: "glpat-stndstndstnd", Hosts: []string{"gitlab.example"}, Headers: []string{"PRIVATE-TOKEN"}}
	all := []Secret{gh, ai, gl}
	tests := []struct {
		name    string
		in      http.Header
		target  string
		host    string
		overTLS bool
		want    http.Header
		res     Result
	}{
		{"bearer", http.Header{"Authorization": {"Bearer " + gh.StandIn}}, "/user", "api.github.com", true,
			http.Header{"Authorization": {"Bearer " + gh.Value}}, Result{Used: []string{"GITHUB_TOKEN"}}},
		{"token scheme, apex host, host case", http.Header{"Authorization": {"token " + gh.StandIn}}, "/", "GitHub.com", true,
			http.Header{"Authorization": {"token " + gh.Value}}, Result{Used: []string{"GITHUB_TOKEN"}}},
		{"basic password", http.Header{"Authorization": {"Basic " + b64("x-access-token:"+gh.StandIn)}}, "/r.git/info/refs", "github.com", true,
			http.Header{"Authorization": {"Basic " + b64("x-access-token:"+gh.Value)}}, Result{Used: []string{"GITHUB_TOKEN"}}},
		{"basic user", http.Header{"Authorization": {"Basic " + b64(gh.StandIn+":x-oauth-basic")}}, "/", "github.com", true,
			http.Header{"Authorization": {"Basic " + b64(gh.Value+":x-oauth-basic")}}, Result{Used: []string{"GITHUB_TOKEN"}}},
		{"x-api-key, lower-case name", http.Header{"x-api-key": {ai.StandIn}, "Anthropic-Version": {"2023-06-01"}}, "/v1/messages", "api.anthropic.com", true,
			http.Header{"x-api-key": {ai.Value}, "Anthropic-Version": {"2023-06-01"}}, Result{Used: []string{"ANTHROPIC_API_KEY"}}},
		{"declared header, other case", http.Header{"Private-Token": {" " + gl.StandIn + " "}}, "/api/v4/user", "gitlab.example", true,
			http.Header{"Private-Token": {gl.Value}}, Result{Used: []string{"GITLAB_TOKEN"}}},
		{"declared header of another secret is not replaced", http.Header{"Private-Token": {gh.StandIn}}, "/", "github.com", true,
			http.Header{"Private-Token": {gh.StandIn}}, Result{}},
		{"two secrets to one host both replaced", http.Header{"Authorization": {"Bearer " + gh.StandIn}, "X-Api-Key": {gh.StandIn}}, "/", "api.github.com", true,
			http.Header{"Authorization": {"Bearer " + gh.Value}, "X-Api-Key": {gh.Value}}, Result{Used: []string{"GITHUB_TOKEN"}}},
		{"partial: longer token kept", http.Header{"Authorization": {"Bearer " + gh.StandIn + "x"}}, "/", "github.com", true,
			http.Header{"Authorization": {"Bearer " + gh.StandIn + "x"}}, Result{}},
		{"partial: prefix of the stand-in kept", http.Header{"Authorization": {"Bearer " + gh.StandIn[:10]}}, "/", "github.com", true,
			http.Header{"Authorization": {"Bearer " + gh.StandIn[:10]}}, Result{}},
		{"stand-in in another header to its host kept", http.Header{"X-Note": {gh.StandIn}}, "/?t=" + gh.StandIn, "github.com", true,
			http.Header{"X-Note": {gh.StandIn}}, Result{}},
		{"no stand-in, nothing done", http.Header{"Authorization": {"Bearer other"}}, "/", "github.com", true,
			http.Header{"Authorization": {"Bearer other"}}, Result{}},
		{"misdirected: another host", http.Header{"Authorization": {"Bearer " + gh.StandIn}}, "/", "evil.example", true,
			http.Header{"Authorization": {"Bearer " + gh.StandIn}}, Result{Misdirected: []string{"GITHUB_TOKEN"}}},
		{"misdirected: another secret's host, none used", http.Header{"Authorization": {"Bearer " + gh.StandIn}, "X-Api-Key": {ai.StandIn}}, "/", "api.anthropic.com", true,
			http.Header{"Authorization": {"Bearer " + gh.StandIn}, "X-Api-Key": {ai.StandIn}}, Result{Misdirected: []string{"GITHUB_TOKEN"}}},
		{"misdirected: inside a basic credential", http.Header{"Authorization": {"Basic " + b64("u:"+ai.StandIn)}}, "/", "github.com", true,
			http.Header{"Authorization": {"Basic " + b64("u:"+ai.StandIn)}}, Result{Misdirected: []string{"ANTHROPIC_API_KEY"}}},
		{"misdirected: in the query", http.Header{}, "http://evil.example/?k=" + ai.StandIn, "evil.example", false,
			http.Header{}, Result{Misdirected: []string{"ANTHROPIC_API_KEY"}}},
		{"misdirected: embedded in a longer value", http.Header{"Cookie": {"s=" + gh.StandIn + ";"}}, "/", "evil.example", true,
			http.Header{"Cookie": {"s=" + gh.StandIn + ";"}}, Result{Misdirected: []string{"GITHUB_TOKEN"}}},
		{"plain http to its own host is misdirected", http.Header{"Authorization": {"Bearer " + gh.StandIn}}, "http://github.com/", "github.com", false,
			http.Header{"Authorization": {"Bearer " + gh.StandIn}}, Result{Misdirected: []string{"GITHUB_TOKEN"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			res := Substitute(h, tc.target, tc.host, tc.overTLS, all)
			if !reflect.DeepEqual(res, tc.res) {
				t.Errorf("result = %+v, want %+v", res, tc.res)
			}
			if !reflect.DeepEqual(h, tc.want) {
				t.Errorf("headers = %v, want %v", h, tc.want)
			}
		})
	}
}

// Bodies: Substitute has no access to a body by construction (so no test
// of it here could fail); that a body carrying a stand-in reaches the
// server unchanged through the proxy is checked by netproxy's
// TestTerminatedSubstitution and bwrap's end-to-end secrets test, and
// that ResignAWS, which reads a body to hash it, puts it back byte for
// byte by TestResignAWSBody.
