package hostview

import (
	"path"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultEnvDeny is the documented deny list of environment variable name
// patterns (path.Match syntax, matched against the name only, ignoring
// case) that never reach a sandboxed command:
//
//   - agent and bus sockets: the ssh and gpg agents, the D-Bus session and
//     system buses, the Docker daemon address and client config, Kerberos
//     ticket caches;
//   - model providers' keys and tokens: every *_API_KEY and *_API_TOKEN, the
//     OpenAI, Anthropic, Azure OpenAI and Hugging Face families, Claude
//     Code's OAuth token and Bedrock's bearer token;
//   - other secrets by name: *_TOKEN and TOKEN (GH_TOKEN, GITHUB_TOKEN,
//     NPM_TOKEN, VAULT_TOKEN, CARGO_REGISTRY_TOKEN, TF_TOKEN_*, ...),
//     *SECRET*, *PASSWORD* (PGPASSWORD), *PASSWD*, *_PWD (MYSQL_PWD),
//     *_ACCESS_KEY*, *_PRIVATE_KEY, *_KEY (KAGGLE_KEY), *_CREDENTIALS,
//     *_PAT (GITHUB_PAT), *_JWT, *_AUTH (NPM_CONFIG__AUTH), DATABASE_URL;
//   - corral's own settings and secrets (CORRAL_*);
//   - by value, whatever the name (FilterEnvPolicy, CredentialInValue): a
//     URL with a password (scheme://user:password@host, as REDIS_URL or
//     MONGODB_URI often do) or with a token in its parameters (?token=,
//     ?api_key=, ?sig=, X-Amz-Signature, ...); webhook and bot URLs
//     (Slack, Discord, Microsoft Teams, Zapier, Telegram, and a generated
//     id after /hooks/ on any host); connection strings with a password
//     (Password=, Pwd=, libpq password=, Azure AccountKey=); PEM private
//     keys; JWTs; Authorization headers; and the token formats of GitHub,
//     GitLab, Slack, Stripe, AWS (access key ids), Google, OpenAI,
//     Anthropic, npm, PyPI and Hugging Face.
//
// The env_deny setting adds patterns; env_allow lets names through, whether
// the name or the value would have kept them out.
var DefaultEnvDeny = []string{
	"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNUPGHOME",
	"DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "KRB5CCNAME",
	"DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
	"*_API_KEY", "*_API_TOKEN", "*_APIKEY",
	"OPENAI_*", "ANTHROPIC_*", "AZURE_OPENAI_*", "CLAUDE_CODE_OAUTH_TOKEN",
	"AWS_BEARER_TOKEN_BEDROCK", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
	"*_TOKEN", "*_TOKEN_*", "TOKEN", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*_PWD",
	"*_ACCESS_KEY*", "*_PRIVATE_KEY", "*_CREDENTIALS", "*_PAT", "*_JWT", "*_AUTH",
	"*_KEY", "API_KEY", "APIKEY", "DATABASE_URL", "TF_TOKEN_*",
	"*_PASS", "*PASSPHRASE*", "CREDENTIALS", "AUTH", "*_COOKIE", "*_COOKIES",
	"CORRAL_*",
}

// EnvDenied reports whether the variable called name matches a pattern of
// deny, ignoring case. Malformed patterns never match.
func EnvDenied(name string, deny []string) bool {
	return envDenied(strings.ToUpper(name), deny)
}

// envDenied is EnvDenied of a name already in upper case.
func envDenied(up string, deny []string) bool {
	for _, p := range deny {
		if ok, err := path.Match(strings.ToUpper(p), up); err == nil && ok {
			return true
		}
	}
	return false
}

// EnvDrop is a variable that FilterEnvPolicy withheld for its value: the
// variable's name and the kind of credential CredentialInValue found in it.
// It never holds the value, so it can be logged.
type EnvDrop struct {
	Name, Kind string
}

// FilterEnvPolicy is the environment policy of every backend: FilterEnv
// with deny, and without the variables whose value carries a credential
// (CredentialInValue), whatever their name. A variable whose name matches a
// pattern of allow (ignoring case) is kept all the same. withheld lists the
// variables dropped for their value, in env's order, for the caller to log;
// the ones deny names are not listed (DefaultEnvDeny documents them).
func FilterEnvPolicy(env, deny, allow []string, set ...string) (out []string, withheld []EnvDrop) {
	kept := make([]string, 0, len(env))
	allowed, denied := matcherFor(allow), matcherFor(deny)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !allowed.matches(name) {
			if denied.matches(name) {
				continue
			}
			if kind, ok := CredentialInValue(value); ok {
				withheld = append(withheld, EnvDrop{Name: name, Kind: kind})
				continue
			}
		}
		kept = append(kept, kv)
	}
	return FilterEnv(kept, nil, set...), withheld
}

// FilterEnv returns env ("KEY=value" entries) without the variables whose
// names match deny, and without malformed entries (no '=', empty name, NUL
// bytes), keeping the order. It then applies set: each "KEY=value" there
// replaces any earlier KEY, or is appended.
func FilterEnv(env, deny []string, set ...string) []string {
	out := make([]string, 0, len(env)+len(set))
	index := make(map[string]int, len(env)+len(set))
	add := func(kv string) {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 {
			return
		}
		if i, dup := index[name]; dup {
			out[i] = kv
			return
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	denied := matcherFor(deny)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if denied.matches(name) {
			continue
		}
		add(kv)
	}
	for _, kv := range set {
		add(kv)
	}
	return out
}

// LookupEnv returns the value of name in env ("KEY=value" entries), the last
// one winning as in execve(2) consumers like glibc's getenv.
func LookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true
		}
	}
	return val, found
}

// URLHasPassword reports whether s contains a URL whose user information
// has a password (scheme://user:password@host), as RFC 3986 section 3.2.1
// allows and deprecates.
func URLHasPassword(s string) bool {
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			return false
		}
		rest := s[i+3:]
		end := strings.IndexAny(rest, "/?# \t\n")
		if end < 0 {
			end = len(rest)
		}
		authority := rest[:end]
		if at := strings.LastIndexByte(authority, '@'); at > 0 && strings.Contains(authority[:at], ":") {
			return true
		}
		s = rest
	}
}

// envMatcher answers EnvDenied for one pattern list, remembering each
// name's answer: the same few dozen variables are filtered against the
// same lists for every command, and matching one name against every
// pattern costs more than the command's other environment work. The answer
// is a pure function of the upper-cased name and the list, so a remembered
// one is always right.
type envMatcher struct {
	pats []envPattern
	mu   sync.Mutex
	seen map[string]bool // upper-cased name -> denied
}

// envMatcherCap bounds a matcher's memory (names) and the number of lists
// kept (a long-running server whose settings change gets a new list now
// and then); beyond it answers are computed, not kept.
const envMatcherCap = 4096

var (
	envMatchers     sync.Map // patterns joined by NUL -> *envMatcher
	envMatcherLists atomic.Int32
)

// matcherFor returns the matcher of deny, shared by every caller with the
// same list.
func matcherFor(deny []string) *envMatcher {
	if len(deny) == 0 {
		return &envMatcher{}
	}
	key := strings.Join(deny, "\x00")
	if m, ok := envMatchers.Load(key); ok {
		return m.(*envMatcher)
	}
	m := &envMatcher{pats: make([]envPattern, len(deny)), seen: map[string]bool{}}
	for i, p := range deny {
		m.pats[i] = compileEnvPattern(p)
	}
	if envMatcherLists.Load() >= 64 {
		return m // used for this call only
	}
	got, loaded := envMatchers.LoadOrStore(key, m)
	if !loaded {
		envMatcherLists.Add(1)
	}
	return got.(*envMatcher)
}

// matches is EnvDenied(name, m's patterns).
func (m *envMatcher) matches(name string) bool {
	if len(m.pats) == 0 {
		return false
	}
	up := strings.ToUpper(name)
	m.mu.Lock()
	v, ok := m.seen[up]
	m.mu.Unlock()
	if ok {
		return v
	}
	v = false
	for _, p := range m.pats {
		if p.match(up) {
			v = true
			break
		}
	}
	m.mu.Lock()
	if len(m.seen) >= envMatcherCap {
		clear(m.seen)
	}
	m.seen[up] = v
	m.mu.Unlock()
	return v
}

// envPattern is one pattern of a matcher's list, upper-cased once, and
// split at its stars when '*' is its only special character, as in all of
// DefaultEnvDeny: such a pattern is matched by a few string searches
// instead of path.Match, which tried every position of every star and
// was, summed over the environment and the list, the largest cost of
// corral's own code in a `corral run` (a quarter of its instructions).
type envPattern struct {
	pat string
	// parts is pat split at '*'; nil when pat has another special
	// character ('?', '[', '\\'), and path.Match decides.
	parts []string
}

// compileEnvPattern returns p's envPattern.
func compileEnvPattern(p string) envPattern {
	up := strings.ToUpper(p)
	if strings.ContainsAny(up, "?[\\") {
		return envPattern{pat: up}
	}
	return envPattern{pat: up, parts: strings.Split(up, "*")}
}

// match reports what path.Match(e.pat, name) says of an upper-cased name
// (false for a malformed pattern). A '*' of path.Match never matches '/',
// so a name with one goes to path.Match too.
func (e envPattern) match(name string) bool {
	if e.parts == nil || strings.IndexByte(name, '/') >= 0 {
		ok, err := path.Match(e.pat, name)
		return err == nil && ok
	}
	if len(e.parts) == 1 {
		return name == e.pat
	}
	first, last := e.parts[0], e.parts[len(e.parts)-1]
	if len(name) < len(first)+len(last) || !strings.HasPrefix(name, first) || !strings.HasSuffix(name, last) {
		return false
	}
	// The stars between take what they must: each middle part at its
	// first place after the one before leaves the most room for the rest.
	mid := name[len(first) : len(name)-len(last)]
	for _, p := range e.parts[1 : len(e.parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}
