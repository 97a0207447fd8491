// Package envsecrets holds the environment that the backends' tests hand to
// a command to check the environment policy by value (sandbox.
// FilterEnvPolicy): variables with innocent names whose values carry a
// credential, as a hostile trial passed them (issue 11), next to ordinary
// ones. For tests only.
package envsecrets

import (
	"encoding/base64"
	"slices"
	"strings"
	"testing"
)

// Withheld are variables whose values the policy must keep out, as
// "NAME=value" entries; Markers holds, for each, a part of the value that
// must not appear in the command's environment (`env` inside).
var Withheld, Markers = split([][2]string{
	{"SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T000/B000/XXXXwebhooksecret", "XXXXwebhooksecret"},
	{"DB_CONNECTION=Server=db;Database=app;User Id=u;Password=connsecret;", "connsecret"},
	{"SESSION_DATA=" + jwt, jwt[len(jwt)-20:]},
	{"DEPLOY_MATERIAL=-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAA"},
	// Assembled so that secret scanners do not flag the source.
	{"REMOTE_HELPER_ARG=" + "ghp" + "_" + strings.Repeat("Xy7", 12), strings.Repeat("Xy7", 12)},
})

// Kept are ordinary variables that must reach the command unchanged.
var Kept = []string{
	"PLAIN_VALUE=ordinary",
	"DOCS_URL=https://example.com/docs?page=2&q=token",
	"BUILD_SHA=3f786850e387550fdab836ed7e6dc881de23001b",
	"RUN_ID=123e4567-e89b-12d3-a456-426614174000",
}

// Allowed is a variable that the policy would withhold for its value and
// that AllowPattern (an env_allow pattern) lets through.
const (
	Allowed      = "TEAM_NOTIFY=https://hooks.slack.com/services/T111/B111/allowedhook"
	AllowPattern = "team_notify"
)

// jwt is a signed token as an identity provider issues it (HS256).
var jwt = b64(`{"alg":"HS256","typ":"JWT"}`) + "." + b64(`{"sub":"1234567890","iat":1516239022}`) + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func split(pairs [][2]string) (env, markers []string) {
	for _, p := range pairs {
		env = append(env, p[0])
		markers = append(markers, p[1])
	}
	return env, markers
}

// Env is Withheld, Kept and Allowed together, for a request's Env.
func Env() []string {
	return slices.Concat(Withheld, Kept, []string{Allowed})
}

// Check fails the test unless out, the output of `env` in the command,
// holds Kept and Allowed and none of Markers.
func Check(t testing.TB, out string) {
	t.Helper()
	for _, m := range Markers {
		if strings.Contains(out, m) {
			t.Errorf("the command saw a secret by value (%q) in:\n%s", m, out)
		}
	}
	lines := strings.Split(out, "\n")
	for _, kv := range append(slices.Clone(Kept), Allowed) {
		if !slices.Contains(lines, kv) {
			t.Errorf("the command did not get %q; its environment:\n%s", kv, out)
		}
	}
}
