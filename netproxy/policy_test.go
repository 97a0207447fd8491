package netproxy

import (
	"errors"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	p := Policy{
		Allow: []string{
			"allowed.test", "*.allowed.test", "Exact.Example.COM.", "*.wild.example",
			"192.0.2.7", "[2001:db8::1]", "::ffff:198.51.100.1", "*.test2",
		},
		Deny: []string{"blocked.allowed.test", "*.deep.allowed.test", "192.0.2.8"},
	}
	for _, tc := range []struct {
		host    string
		allowed bool
		reason  string // substring
	}{
		// Exact names, case and trailing dots.
		{"allowed.test", true, `"allowed.test"`},
		{"ALLOWED.Test", true, ""},
		{"allowed.test.", true, ""},
		{"allowed.test..", false, "malformed"},
		{"exact.example.com", true, ""},
		{"EXACT.EXAMPLE.COM.", true, ""},
		{"sub.exact.example.com", false, "not in allowlist"},
		// Wildcards match strict subdomains only.
		{"api.allowed.test", true, `"*.allowed.test"`},
		{"a.b.allowed.test", true, ""},
		{"API.ALLOWED.TEST.", true, ""},
		{"allowed.test.evil", false, "not in allowlist"},
		{"evilallowed.test", false, ""},
		{"xallowed.test", false, ""},
		{"wild.example", false, ""},
		{"x.wild.example", true, ""},
		{"a.test2", true, ""},
		{"test2", false, ""},
		// Deny beats allow.
		{"blocked.allowed.test", false, `denied by "blocked.allowed.test"`},
		{"Blocked.Allowed.Test.", false, "denied"},
		{"x.blocked.allowed.test", true, ""},
		{"deep.allowed.test", true, ""},
		{"x.deep.allowed.test", false, "denied"},
		// IPv4.
		{"192.0.2.7", true, `"192.0.2.7"`},
		{"192.0.2.8", false, "denied"},
		{"192.0.2.9", false, "IP address not in allowlist"},
		{"127.0.0.1", false, "IP address"},
		{"::ffff:192.0.2.7", true, ""},
		{"198.51.100.1", true, ""},
		// Legacy IPv4 spellings are never names.
		{"127.1", false, "numeric"},
		{"2130706433", false, "numeric"},
		{"0x7f.0.0.1", false, "numeric"},
		{"1.allowed.test", true, ""},
		// IPv6, bare and bracketed.
		{"2001:db8::1", true, ""},
		{"[2001:db8::1]", true, ""},
		{"2001:DB8:0:0:0:0:0:1", true, ""},
		{"[2001:db8::2]", false, "IP address"},
		{"::1", false, "IP address"},
		{"[::1]", false, "IP address"},
		{"[192.0.2.7]", false, "malformed"},
		// Malformed.
		{"", false, "malformed"},
		{".", false, "malformed"},
		{"a..allowed.test", false, "malformed"},
		{".allowed.test", false, "malformed"},
		{"api.allowed.test:443", false, "malformed"},
		{"api allowed.test", false, "malformed"},
		{"api.allowed.test\x00", false, "malformed"},
		{"*.allowed.test", false, "malformed"},
		{"bücher.allowed.test", false, "malformed"},
		{"xn--bcher-kva.allowed.test", true, ""},
		{strings.Repeat("a", 64) + ".allowed.test", false, "malformed"},
		{strings.Repeat("a", 63) + ".allowed.test", true, ""},
		{strings.Repeat("a.", 124) + "allowed.test", false, "malformed"},
	} {
		t.Run(tc.host, func(t *testing.T) {
			ok, reason := p.Decide(tc.host)
			if ok != tc.allowed || !strings.Contains(reason, tc.reason) {
				t.Errorf("Decide(%q) = %v, %q; want %v, reason containing %q", tc.host, ok, reason, tc.allowed, tc.reason)
			}
		})
	}
}

func TestDecideZeroPolicyRefusesAll(t *testing.T) {
	for _, h := range []string{"example.com", "localhost", "127.0.0.1", "::1"} {
		if ok, _ := (Policy{}).Decide(h); ok {
			t.Errorf("zero Policy allowed %q", h)
		}
	}
}

func TestDecideSkipsInvalidEntries(t *testing.T) {
	p := Policy{Allow: []string{"*", "*.com:443", "http://a.test/", "a.*.test", "ok.test"}}
	for _, h := range []string{"x.com", "a.test", "a.b.test", "*"} {
		if ok, reason := p.Decide(h); ok {
			t.Errorf("Decide(%q) = true (%s); invalid entries must never match", h, reason)
		}
	}
	if ok, _ := p.Decide("ok.test"); !ok {
		t.Error("the valid entry stopped matching")
	}
}

func TestValidatePattern(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		err     string // substring; empty means valid
	}{
		{"example.com", ""},
		{"Example.COM.", ""},
		{"*.example.com", ""},
		{"*.com", ""},
		{"*.test.", ""},
		{"localhost", ""},
		{"my_host.internal", ""},
		{"192.0.2.1", ""},
		{"2001:db8::1", ""},
		{"[2001:db8::1]", ""},
		{"", "empty"},
		{" example.com", "white space"},
		{"exa mple.com", "white space"},
		{"example.com\n", "white space"},
		{"*", "bare wildcard"},
		{"*.", "bare wildcard"},
		{"**.example.com", `"*" is only allowed`},
		{"*example.com", `"*" is only allowed`},
		{"a.*.example.com", `"*" is only allowed`},
		{"example.*", `"*" is only allowed`},
		{"*.*.example.com", `"*" is only allowed`},
		{"example.com:443", "ports"},
		{"*.example.com:443", "ports"},
		{"https://example.com", "URLs"},
		{"example.com/path", "URLs"},
		{"10.0.0.0/8", "CIDR"},
		{"a..com", "not a valid host name"},
		{".example.com", "not a valid host name"},
		{"exa$mple.com", "not a valid host name"},
		{"bücher.de", "not a valid host name"},
		{"127.1", "numeric"},
		{"*.0.1", "numeric"},
		{"[192.0.2.1]", "not a valid host name"},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			err := ValidatePattern(tc.pattern)
			if tc.err == "" {
				if err != nil {
					t.Errorf("ValidatePattern(%q) = %v, want nil", tc.pattern, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ValidatePattern(%q) = %v, want error containing %q", tc.pattern, err, tc.err)
			}
			if !errors.Is(err, ErrInvalidPattern) {
				t.Errorf("ValidatePattern(%q) = %v, not ErrInvalidPattern", tc.pattern, err)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := testPolicy.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	err := Policy{Allow: []string{"ok.test", "bad:1"}}.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "allow[1]: ") || !errors.Is(err, ErrInvalidPattern) {
		t.Errorf("Validate() = %v, want allow[1] ErrInvalidPattern", err)
	}
	err = Policy{Deny: []string{""}}.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "deny[0]: ") {
		t.Errorf("Validate() = %v, want deny[0]", err)
	}
}

func TestNodeOptions(t *testing.T) {
	for _, tc := range []struct{ shim, want string }{
		{"/dev/.corral/nodeshim.cjs", "--require=/dev/.corral/nodeshim.cjs"},
		{"", ""},
		{"nodeshim.cjs", ""}, // relative: Node would look it up from the command's cwd
		// Node splits NODE_OPTIONS at white space and reads quotes and
		// backslashes (node_options.cc, ParseNodeOptionsEnvVar).
		{"/a b/nodeshim.cjs", ""},
		{"/a\tb/nodeshim.cjs", ""},
		{"/a\"b/nodeshim.cjs", ""},
		{"/a'b/nodeshim.cjs", ""},
		{"/a\\b/nodeshim.cjs", ""},
	} {
		if got := NodeOptions(tc.shim); got != tc.want {
			t.Errorf("NodeOptions(%q) = %q, want %q", tc.shim, got, tc.want)
		}
	}
}

func TestJavaNonProxy(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{NoProxy, "localhost|127.0.0.1|[::1]"},
		{"", ""},
		{" a.example , ,fe80::1,10.0.0.1", "a.example|[fe80::1]|10.0.0.1"},
	} {
		if got := javaNonProxy(tc.in); got != tc.want {
			t.Errorf("javaNonProxy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestProxyEnv(t *testing.T) {
	env := map[string]string{}
	for _, kv := range ProxyEnv(3128, 1080, "/x/nodeshim.cjs") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("entry %q has no '='", kv)
		}
		if _, dup := env[k]; dup {
			t.Fatalf("duplicate %s", k)
		}
		env[k] = v
	}
	want := map[string]string{
		"http_proxy":             "http://127.0.0.1:3128",
		"HTTP_PROXY":             "http://127.0.0.1:3128",
		"https_proxy":            "http://127.0.0.1:3128",
		"HTTPS_PROXY":            "http://127.0.0.1:3128",
		"all_proxy":              "socks5h://127.0.0.1:1080",
		"ALL_PROXY":              "socks5h://127.0.0.1:1080",
		"no_proxy":               "localhost,127.0.0.1,::1",
		"NO_PROXY":               "localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY":     "1",
		"NODE_OPTIONS":           "--require=/x/nodeshim.cjs",
		"npm_config_proxy":       "http://127.0.0.1:3128",
		"npm_config_https_proxy": "http://127.0.0.1:3128",
		"PIP_PROXY":              "http://127.0.0.1:3128",
		"YARN_HTTP_PROXY":        "http://127.0.0.1:3128",
		"YARN_HTTPS_PROXY":       "http://127.0.0.1:3128",
		"JAVA_TOOL_OPTIONS":      "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=3128 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=3128 -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("got %d entries, want %d: %v", len(env), len(want), env)
	}
	// Without a shim path NODE_OPTIONS is left out, nothing else changes.
	for _, kv := range ProxyEnv(3128, 1080, "") {
		if strings.HasPrefix(kv, "NODE_OPTIONS=") {
			t.Errorf("ProxyEnv without a shim has %q", kv)
		}
	}
	if n := len(ProxyEnv(3128, 1080, "")); n != len(want)-1 {
		t.Errorf("ProxyEnv without a shim has %d entries, want %d", n, len(want)-1)
	}
	if got := ProxyEnv(0, 0, "/x/nodeshim.cjs"); got != nil {
		t.Errorf("ProxyEnv(0, 0) = %v, want nil", got)
	}
	for _, kv := range ProxyEnv(0, 1080, "/x/nodeshim.cjs") {
		if strings.HasPrefix(strings.ToLower(kv), "http") || strings.HasPrefix(kv, "NODE_") || strings.HasPrefix(kv, "JAVA_") {
			t.Errorf("ProxyEnv(0, 1080) has %q", kv)
		}
	}
}
