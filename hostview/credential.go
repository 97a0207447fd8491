package hostview

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"sync"

	"github.com/corralhq/corral/internal/lazyre"
)

// CredentialInValue reports whether value (an environment variable's value)
// carries a credential whatever the variable is called, and of which kind: a
// short reason for logs such as "url-password" or "github-token", never a
// part of the value. It looks for
//
//   - URLs with a password (scheme://user:password@host, see URLHasPassword;
//     also jdbc:oracle:thin:user/password@...), kind "url-password";
//   - URLs with a secret in a query or fragment parameter (token,
//     access_token, api_key, apikey, key, sig, signature, secret, password,
//     X-Amz-Signature, X-Goog-Signature and the like, see secretParams),
//     kind "url-token";
//   - webhook and bot URLs whose path is the secret: Slack
//     (hooks.slack.com/services, /workflows, /triggers), Discord
//     (discord.com or discordapp.com /api/webhooks), Microsoft Teams
//     (*.webhook.office.com, outlook.office.com/webhook), Zapier
//     (hooks.zapier.com/hooks), Telegram (api.telegram.org/bot<token>), and
//     on any host a /hooks/<id> whose id looks generated (Mattermost,
//     Rocket.Chat), see webhookKind;
//   - connection strings and settings with a password: Password= or Pwd= in
//     ADO.NET, ODBC and JDBC strings, password= in libpq key=value strings
//     (and --password=), kind "password-field"; Azure storage and Service Bus
//     AccountKey=, SharedAccessKey=, SharedAccessSignature=, kind
//     "azure-key";
//   - PEM private keys (-----BEGIN ... PRIVATE KEY-----, OpenSSH's and PGP's
//     too) and PuTTY key files, kind "private-key";
//   - JWTs (and JWEs): dot-separated base64url parts whose first decodes to a
//     JSON object with "alg", kind "jwt";
//   - an HTTP Authorization header with Basic, Bearer or Token credentials,
//     kind "auth-header";
//   - the token formats that big providers document as recognisable, see
//     providerTokens (GitHub ghp_/gho_/ghu_/ghs_/ghr_/github_pat_, GitLab
//     glpat-, Slack xox?-, Stripe sk_/rk_ live and test keys, AWS access key
//     ids AKIA/ASIA, Google AIza, OpenAI sk-, Anthropic sk-ant-, npm npm_,
//     PyPI pypi-AgE, Hugging Face hf_).
//
// Opaque secrets with no recognisable shape (a random base64 string, an AWS
// secret access key) are not found here; DefaultEnvDeny catches those by the
// variable's name.
//
// Answers are kept by value (valueMemo): a session passes the same
// variables to every command, and the checks cost about 60 µs per command
// where a lookup costs a hash of each value.
func CredentialInValue(value string) (kind string, ok bool) {
	if value == "" {
		return "", false
	}
	if kind, ok, known := credentialMemo.get(value); known {
		return kind, ok
	}
	kind, ok = credentialInValue(value)
	credentialMemo.put(value, kind, ok)
	return kind, ok
}

// credentialMemo holds CredentialInValue's answers.
var credentialMemo = valueMemo{max: 1 << 20}

// valueMemo maps values to the answers of a pure function of them, within
// max bytes: each entry counts its value's length plus memoEntryBytes (the
// map's own share, so that many short values are bounded too), a value
// longer than max/16 is not kept, and the map starts afresh when the bytes
// held would pass max. The values are a session's variables, which the
// command in the sandbox chooses.
type valueMemo struct {
	mu    sync.Mutex
	m     map[string]memoAnswer
	bytes int
	max   int
}

// memoEntryBytes is what an entry of valueMemo counts beyond its value's
// bytes: the string and answer headers and the map's slot, rounded up.
const memoEntryBytes = 96

type memoAnswer struct {
	kind string
	ok   bool
}

func (c *valueMemo) get(v string) (kind string, ok, known bool) {
	c.mu.Lock()
	a, known := c.m[v]
	c.mu.Unlock()
	return a.kind, a.ok, known
}

func (c *valueMemo) put(v, kind string, ok bool) {
	if len(v) > c.max/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(v) + memoEntryBytes
	if c.m == nil || c.bytes+n > c.max {
		c.m, c.bytes = map[string]memoAnswer{}, 0
	}
	if _, dup := c.m[v]; !dup {
		c.m[strings.Clone(v)] = memoAnswer{kind, ok}
		c.bytes += n
	}
}

// credentialInValue is CredentialInValue without the memo.
func credentialInValue(value string) (kind string, ok bool) {
	// Every check starts with a literal test, so that an ordinary value
	// (LS_COLORS, PATH) costs a few substring searches, not a regexp each:
	// the policy runs for every variable of every command.
	lower := strings.ToLower(value)
	has := func(s string, subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has(value, "PRIVATE KEY", "PuTTY-User-Key-File-") && privateKeyRE.MatchString(value):
		return "private-key", true
	case URLHasPassword(value), has(lower, "jdbc:oracle:") && oracleUserPassRE.MatchString(value):
		return "url-password", true
	}
	if kind, ok := credentialInURLs(value); ok {
		return kind, true
	}
	// A webhook written without its scheme (hooks.slack.com/services/...).
	if !strings.Contains(value, "://") && has(lower, "hooks.slack.com/", "/api/webhooks/", "webhook.office.com", "hooks.zapier.com/", "api.telegram.org/bot") {
		if kind, ok := credentialInURLs("https://" + strings.TrimSpace(value)); ok {
			return kind, true
		}
	}
	if strings.Count(value, ".") >= 2 && hasJWT(value) {
		return "jwt", true
	}
	for _, p := range providerTokens {
		if !has(value, p.hints...) {
			continue
		}
		for _, m := range p.re.FindAllString(value, -1) {
			if p.check == nil || p.check(m) {
				return p.kind, true
			}
		}
	}
	switch {
	case has(lower, "password") && passwordFieldRE.MatchString(value), has(lower, "pwd") && pwdFieldRE.MatchString(value):
		return "password-field", true
	case has(lower, "accountkey", "sharedaccess") && azureKeyRE.MatchString(value):
		return "azure-key", true
	case has(lower, "authorization") && authHeaderRE.MatchString(value),
		has(lower, "bearer", "basic", "token") && authValueRE.MatchString(value):
		return "auth-header", true
	case has(lower, `"auth"`) && dockerAuthRE.MatchString(value):
		return "registry-auth", true
	}
	return "", false
}

var (
	// PEM (RFC 7468) private key labels: PRIVATE KEY, RSA/EC/DSA/OPENSSH/
	// ENCRYPTED PRIVATE KEY; PGP's armor; PuTTY's .ppk header.
	privateKeyRE = lazyre.New(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d+:`)
	// Oracle's thin driver puts user/password@ before the host, with no "://".
	oracleUserPassRE = lazyre.New(`(?i)jdbc:oracle:[a-z0-9]+:[^/@:\s]+/[^@\s]+@`)
	// Password in ';'-separated (ADO.NET, ODBC, JDBC SQL Server) or
	// whitespace-separated (libpq) key=value settings, or a --password= flag;
	// the value must not be empty.
	passwordFieldRE = lazyre.New(`(?i)(?:^|[;\s-])password\s*=\s*(?:[^;\s'"]|'[^']|"[^"])`)
	// ODBC's PWD keyword, only where keywords start: a shell snippet's
	// "PWD=/dir" is not a connection string.
	pwdFieldRE = lazyre.New(`(?i)(?:^|;)\s*pwd\s*=\s*(?:[^;\s'"]|'[^']|"[^"])`)
	// Azure storage and Service Bus connection strings.
	azureKeyRE = lazyre.New(`(?i)(?:^|;)\s*(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*[^;\s]`)
	// A header line with credentials, not a reference such as "$TOKEN".
	authHeaderRE = lazyre.New(`(?i)\bauthorization\s*:\s*(?:basic|bearer|token)\s+[A-Za-z0-9+/=._~-]{8,}`)
	// A header's value alone, the whole variable: "Bearer eyJ...",
	// "Basic dXNlcjpwYXNz" (RFC 6750, RFC 7617).
	authValueRE = lazyre.New(`(?i)^\s*(?:basic|bearer|token)\s+[A-Za-z0-9+/=._~-]{12,}\s*$`)
	// A registry's credentials as Docker's config.json and
	// DOCKER_AUTH_CONFIG keep them: "auth": base64(user:password).
	dockerAuthRE = lazyre.New(`"auth"\s*:\s*"[A-Za-z0-9+/=]{8,}"`)
)

// tokenUserRE is a URL user that looks like a generated key.
var tokenUserRE = lazyre.New(`^[A-Za-z0-9_-]+$`)

// providerToken is a token format a provider documents as recognisable
// (most add the prefix so that secret scanners find leaked tokens).
type providerToken struct {
	kind string
	// hints are literal parts of which every match holds one.
	hints []string
	re    *lazyre.Regexp
	// check, when set, must accept the match too.
	check func(match string) bool
}

// providerTokens are checked in order; sk-ant- comes before sk-.
var providerTokens = []providerToken{
	// GitHub: personal, OAuth, user-to-server, server-to-server, refresh
	// tokens and fine-grained personal tokens (github.blog, 2021-04-05 and
	// 2022-10-18).
	{kind: "github-token", hints: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}, re: lazyre.New(`\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})`)},
	// GitLab: personal, deploy, runner, pipeline trigger and CI/CD job
	// tokens (docs.gitlab.com, "Token prefixes").
	{kind: "gitlab-token", hints: []string{"glpat-", "gldt-", "glrt-", "glptt-", "glcbt-"}, re: lazyre.New(`\bgl(?:pat|dt|rt|ptt|cbt)-[A-Za-z0-9_.-]{20,}`)},
	// Slack bot, user, app-level and legacy tokens.
	{kind: "slack-token", hints: []string{"xox", "xapp-"}, re: lazyre.New(`\b(?:xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,})`)},
	// Stripe secret and restricted keys (test keys read test data only, but
	// are secrets all the same).
	{kind: "stripe-key", hints: []string{"k_live_", "k_test_"}, re: lazyre.New(`\b[sr]k_(?:live|test)_[A-Za-z0-9]{20,}`)},
	// AWS access key ids: long-term (AKIA) and temporary (ASIA). The id
	// alone is not enough to sign, but it always travels with its secret.
	{kind: "aws-access-key-id", hints: []string{"AKIA", "ASIA"}, re: lazyre.New(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`)},
	// Google API keys.
	{kind: "google-api-key", hints: []string{"AIza"}, re: lazyre.New(`\bAIza[A-Za-z0-9_-]{35}`)},
	// Anthropic API and admin keys (sk-ant-api03-..., sk-ant-admin01-...).
	{kind: "anthropic-key", hints: []string{"sk-ant-"}, re: lazyre.New(`\bsk-ant-[A-Za-z0-9_-]{20,}`)},
	// OpenAI keys: legacy sk- + 48, sk-proj-, sk-svcacct-, sk-admin-. A
	// digit is required so that a long kebab-case word is not a key.
	{kind: "openai-key", hints: []string{"sk-"}, re: lazyre.New(`\bsk-[A-Za-z0-9_-]{32,}`), check: hasDigit},
	// npm access tokens.
	{kind: "npm-token", hints: []string{"npm_"}, re: lazyre.New(`\bnpm_[A-Za-z0-9]{36}\b`)},
	// PyPI API tokens: macaroons whose first bytes encode the location
	// (pypi.org gives AgEI, test.pypi.org AgEN).
	{kind: "pypi-token", hints: []string{"pypi-AgE"}, re: lazyre.New(`\bpypi-AgE[A-Za-z0-9_-]{50,}`)},
	// Hugging Face user access tokens.
	{kind: "huggingface-token", hints: []string{"hf_"}, re: lazyre.New(`\bhf_[A-Za-z0-9]{30,}\b`)},
}

func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

// secretParams reports whether name (lower case) is a query or fragment
// parameter whose value is a credential: API keys and tokens, OAuth tokens
// in a fragment, Azure SAS and presigned S3 and GCS URLs' signatures.
func secretParams(name string) bool {
	switch name {
	case "token", "access_token", "accesstoken", "auth_token", "authtoken",
		"refresh_token", "id_token", "private_token", "session_token",
		"security_token", "x-amz-security-token",
		"api_key", "apikey", "api-key", "key",
		"sig", "signature", "x-amz-signature", "x-goog-signature",
		"secret", "client_secret", "password", "passwd", "pwd", "auth":
		return true
	}
	return false
}

// credentialInURLs looks at every scheme://... in s for secrets in its
// parameters or in a webhook path.
func credentialInURLs(s string) (string, bool) {
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			return "", false
		}
		rest := s[i+3:]
		end := strings.IndexAny(rest, " \t\r\n\"'<>`")
		if end < 0 {
			end = len(rest)
		}
		if kind, ok := credentialInURL(rest[:end]); ok {
			return kind, true
		}
		s = rest
	}
}

// credentialInURL checks one URL without its scheme and "://".
func credentialInURL(u string) (string, bool) {
	authority := u
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		authority = u[:i]
	}
	host := authority[strings.LastIndexByte(authority, '@')+1:]
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	rest := u[len(authority):]
	fragment := ""
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest, fragment = rest[:i], rest[i+1:]
	}
	p, query, _ := strings.Cut(rest, "?")
	if kind, ok := webhookKind(host, p); ok {
		return kind, true
	}
	// A key as the URL's user with no password (a Sentry DSN,
	// https://<key>@o1.ingest.sentry.io/1): long, random, with a digit.
	if at := strings.LastIndexByte(authority, '@'); at > 0 {
		if user := authority[:at]; len(user) >= 20 && hasDigit(user) && tokenUserRE.MatchString(user) {
			return "url-user-key", true
		}
	}
	if secretParam(query) || secretParam(fragment) {
		return "url-token", true
	}
	return "", false
}

// secretParam reports whether the a=b&c=d parameters q hold a non-empty
// value for one of secretParams.
func secretParam(q string) bool {
	for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if v != "" && secretParams(strings.ToLower(k)) {
			return true
		}
	}
	return false
}

var (
	discordWebhookRE  = lazyre.New(`^/api/(?:v\d+/)?webhooks/\d+/[A-Za-z0-9_-]+`)
	telegramBotRE     = lazyre.New(`^/(?:file/)?bot\d+:[A-Za-z0-9_-]{20,}`)
	generatedHookIDRE = lazyre.New(`/hooks/(?:[A-Za-z0-9]+/)?([A-Za-z0-9]{17,})(?:/|$)`)
)

// webhookKind recognises webhook and bot URLs whose path carries the secret
// (whoever has the URL can post as the hook or bot), by host and path.
//
// A /hooks/ path on any other host (Mattermost's /hooks/<id>, Rocket.Chat's
// /hooks/<id>/<token>, self-hosted and so on any host) counts only when a
// segment after it looks generated: 17 or more letters and digits, mixing
// both. The prefix alone is too broad: documentation (react.dev's
// /reference/react/hooks/...), repositories' hooks directories and
// application routes use it for ordinary names.
func webhookKind(host, p string) (string, bool) {
	switch {
	case host == "hooks.slack.com" && hasPathPrefix(p, "/services/", "/workflows/", "/triggers/"):
		return "slack-webhook", true
	case isDiscordHost(host) && discordWebhookRE.MatchString(p):
		return "discord-webhook", true
	case strings.HasSuffix(host, ".webhook.office.com") && len(p) > 1,
		(host == "outlook.office.com" || host == "outlook.office365.com") && hasPathPrefix(p, "/webhook/"):
		return "teams-webhook", true
	case host == "hooks.zapier.com" && hasPathPrefix(p, "/hooks/"):
		return "zapier-webhook", true
	case host == "api.telegram.org" && telegramBotRE.MatchString(p):
		return "telegram-bot-token", true
	}
	for _, m := range generatedHookIDRE.FindAllStringSubmatch(p, -1) {
		if id := m[1]; hasDigit(id) && strings.ContainsFunc(id, isLetter) {
			return "webhook-url", true
		}
	}
	return "", false
}

func isLetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

func isDiscordHost(host string) bool {
	for _, d := range []string{"discord.com", "discordapp.com"} {
		if host == d || host == "ptb."+d || host == "canary."+d {
			return true
		}
	}
	return false
}

// hasPathPrefix reports whether p starts with one of prefixes and goes on
// after it.
func hasPathPrefix(p string, prefixes ...string) bool {
	for _, pre := range prefixes {
		if len(p) > len(pre) && strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}

// hasJWT reports whether s contains a JWS or JWE in compact serialisation
// (RFC 7515 section 7.1, RFC 7516 section 7.1): three or more base64url
// parts separated by dots, the first a JSON object with "alg" (the one
// header parameter both require), the second not empty.
func hasJWT(s string) bool {
	inRun := func(r rune) bool {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.'
	}
	notInRun := func(r rune) bool { return !inRun(r) }
	for {
		i := strings.IndexFunc(s, inRun)
		if i < 0 {
			return false
		}
		s = s[i:]
		end := strings.IndexFunc(s, notInRun)
		if end < 0 {
			end = len(s)
		}
		run := s[:end]
		s = s[end:]
		for {
			head, rest, ok := strings.Cut(run, ".")
			if !ok {
				break
			}
			payload, _, ok := strings.Cut(rest, ".")
			if !ok {
				break // no third part
			}
			if payload != "" && isJOSEHeader(head) {
				return true
			}
			run = rest
		}
	}
}

// isJOSEHeader reports whether part is base64url (unpadded) of a JSON object
// with "alg".
func isJOSEHeader(part string) bool {
	// A JSON object's base64 starts with "e" ("{" is 0x7b).
	if len(part) < 8 || part[0] != 'e' {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(part)
	if err != nil {
		return false
	}
	var header map[string]json.RawMessage
	return json.Unmarshal(raw, &header) == nil && header["alg"] != nil
}
