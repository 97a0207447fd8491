package sandbox

import (
	"path"
	"strings"
)

// DefaultEnvDeny is the documented deny list of environment variable name
// patterns (path.Match syntax, matched against the name only) that never
// reach a sandboxed command:
//
//   - agent and bus sockets: the ssh and gpg agents, the D-Bus session and
//     system buses, the Docker daemon address and client config;
//   - model providers' keys and tokens: every *_API_KEY and *_API_TOKEN, the
//     OpenAI, Anthropic, Azure OpenAI and Hugging Face families, Claude
//     Code's OAuth token and Bedrock's bearer token;
//   - corral's own settings and secrets (CORRAL_*).
var DefaultEnvDeny = []string{
	"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "GNUPGHOME",
	"DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS",
	"DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH",
	"*_API_KEY", "*_API_TOKEN", "*_APIKEY",
	"OPENAI_*", "ANTHROPIC_*", "AZURE_OPENAI_*", "CLAUDE_CODE_OAUTH_TOKEN",
	"AWS_BEARER_TOKEN_BEDROCK", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
	"CORRAL_*",
}

// EnvDenied reports whether the variable called name matches a pattern of
// deny. Malformed patterns never match.
func EnvDenied(name string, deny []string) bool {
	for _, p := range deny {
		if ok, err := path.Match(p, name); err == nil && ok {
			return true
		}
	}
	return false
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
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if EnvDenied(name, deny) {
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
