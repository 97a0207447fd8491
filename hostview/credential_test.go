package hostview

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The fake tokens are assembled at run time so that secret scanners do not
// flag this file.
func fake(prefix string, n int) string {
	return prefix + strings.Repeat("aB3", n/3+1)[:n]
}

func b64url(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// testJWT is a signed token as an identity provider issues it.
var testJWT = b64url(`{"alg":"HS256","typ":"JWT"}`) + "." + b64url(`{"sub":"1234567890","name":"x","iat":1516239022}`) + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"

// testPEM is the shape of an OpenSSH private key file.
const testPEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n"

func TestCredentialInValue(t *testing.T) {
	for _, tc := range []struct {
		name, value, kind string // kind "" means no credential
	}{
		// Found by a hostile trial: values that carried a credential past
		// the first version.
		{"bearer value", "Bearer abcdef0123456789abcdef", "auth-header"},
		{"basic value", "Basic dXNlcjpwYXNzd29yZA==", "auth-header"},
		{"docker auth json", `{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNzd29yZA=="}}}`, "registry-auth"},
		{"sentry dsn", "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/1", "url-user-key"},
		{"slack webhook without scheme", "hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXX", "slack-webhook"},
		{"git user is no key", "https://git@github.com/x/y.git", ""},
		{"the word bearer in prose", "Bearer tokens are described in RFC 6750", ""},
		// URLs with a password.
		{"userinfo password", "redis://:pw@host:6379/0", "url-password"},
		{"userinfo in a list", "https://proxy.golang.org,https://u:p@goproxy.corp/,direct", "url-password"},
		{"oracle thin user/password", "jdbc:oracle:thin:scott/tiger@//db.corp:1521/svc", "url-password"},
		// Tokens in URL parameters.
		{"token param", "https://api.example.com/v1?token=abc123", "url-token"},
		{"access_token param", "https://example.com/cb?state=x&access_token=abc", "url-token"},
		{"api_key param", "https://maps.example.com/?API_KEY=abc", "url-token"},
		{"apikey param", "https://example.com/?apikey=abc", "url-token"},
		{"key param", "https://chat.googleapis.com/v1/spaces/AAA/messages?key=abc", "url-token"},
		{"azure sas sig", "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&se=2030-01-01&sr=b&sp=r&sig=abc%3D", "url-token"},
		{"signature param", "https://example.com/f?signature=abc", "url-token"},
		{"secret param", "https://example.com/f?secret=abc", "url-token"},
		{"password param", "jdbc:mysql://db/app?user=u&password=p", "url-token"},
		{"presigned s3", "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=x&X-Amz-Signature=abcdef", "url-token"},
		{"presigned gcs", "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=abcdef", "url-token"},
		{"escaped param name", "https://example.com/?access%5Ftoken=abc", "url-token"},
		{"token in fragment", "https://app.example.com/cb#access_token=abc&token_type=bearer", "url-token"},
		// Webhook and bot URLs.
		{"slack services", "https://hooks.slack.com/services/T000/B000/XXXX", "slack-webhook"},
		{"slack workflows", "https://hooks.slack.com/workflows/T000/A000/123/abc", "slack-webhook"},
		{"slack triggers", "https://hooks.slack.com/triggers/T000/123/abc", "slack-webhook"},
		{"discord", "https://discord.com/api/webhooks/123456789/abcDEF-_x", "discord-webhook"},
		{"discordapp versioned", "https://discordapp.com/api/v10/webhooks/123/abc", "discord-webhook"},
		{"discord ptb", "https://ptb.discord.com/api/webhooks/123/abc", "discord-webhook"},
		{"teams", "https://contoso.webhook.office.com/webhookb2/0000@1111/IncomingWebhook/abc/2222", "teams-webhook"},
		{"teams legacy", "https://outlook.office.com/webhook/0000@1111/IncomingWebhook/abc/2222", "teams-webhook"},
		{"zapier", "https://hooks.zapier.com/hooks/catch/123456/abcdef/", "zapier-webhook"},
		{"telegram", "https://api.telegram.org/bot123456789:" + fake("AA", 33) + "/sendMessage", "telegram-bot-token"},
		{"mattermost", "https://chat.corp.example/hooks/" + "xj3k9f8q1m2n4b5v6c7z8a9s0d", "webhook-url"},
		{"rocket.chat", "https://rc.corp.example/hooks/" + fake("", 17) + "/" + fake("", 48), "webhook-url"},
		{"webhook in a command", "curl -X POST -d @msg.json 'https://hooks.slack.com/services/T0/B0/X'", "slack-webhook"},
		// Connection strings.
		{"ado.net password", "Server=x;Database=y;User Id=u;Password=p;", "password-field"},
		{"ado.net spaced", "Data Source=x; Initial Catalog=y; password = p", "password-field"},
		{"odbc pwd", "Driver={ODBC Driver 18 for SQL Server};Server=x;Uid=u;Pwd=p;", "password-field"},
		{"jdbc sqlserver", "jdbc:sqlserver://db.corp:1433;databaseName=app;user=u;password=p", "password-field"},
		{"libpq", "host=db dbname=app user=u password=secret sslmode=require", "password-field"},
		{"libpq quoted", "host=db password='a b'", "password-field"},
		{"password flag", "--host db --password=hunter2", "password-field"},
		{"azure storage", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc==;EndpointSuffix=core.windows.net", "azure-key"},
		{"azure service bus", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=abc=", "azure-key"},
		// Keys and tokens.
		{"openssh key", testPEM, "private-key"},
		{"rsa key", "-----BEGIN RSA PRIVATE KEY-----\nMIIE...", "private-key"},
		{"pkcs8 key escaped newlines", `-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----`, "private-key"},
		{"encrypted key", "-----BEGIN ENCRYPTED PRIVATE KEY-----", "private-key"},
		{"pgp key", "-----BEGIN PGP PRIVATE KEY BLOCK-----", "private-key"},
		{"putty key", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none", "private-key"},
		{"jwt", testJWT, "jwt"},
		{"jwt with alg none", b64url(`{"alg":"none"}`) + "." + b64url(`{"sub":"x"}`) + ".", "jwt"},
		{"jwt after bearer", "Bearer: " + testJWT, "jwt"},
		{"jwt after a dotted word", "cookie.session=" + testJWT, "jwt"},
		{"jwe", b64url(`{"alg":"RSA-OAEP","enc":"A256GCM"}`) + ".a.b.c.d", "jwt"},
		{"authorization bearer", "Authorization: Bearer abcdef123456", "auth-header"},
		{"authorization basic", "AUTHORIZATION: basic dXNlcjpwYXNzd29yZA==", "auth-header"},
		{"github classic", fake("ghp_", 36), "github-token"},
		{"github oauth", fake("gho_", 36), "github-token"},
		{"github user-to-server", fake("ghu_", 36), "github-token"},
		{"github app", fake("ghs_", 36), "github-token"},
		{"github refresh", fake("ghr_", 76), "github-token"},
		{"github fine-grained", fake("github_pat_", 22) + "_" + fake("", 59), "github-token"},
		{"github in a url", "https://x-access-token:" + fake("ghs_", 36) + "@github.com/o/r.git", "url-password"},
		{"github in a header", "header=" + fake("ghp_", 36), "github-token"},
		{"gitlab pat", fake("glpat-", 20), "gitlab-token"},
		{"gitlab deploy", fake("gldt-", 20), "gitlab-token"},
		{"slack bot", "xoxb-123456789012-1234567890123-" + fake("", 24), "slack-token"},
		{"slack user", "xoxp-1234-5678-" + fake("", 24), "slack-token"},
		{"slack app", "xapp-1-A0000-" + fake("", 24), "slack-token"},
		{"stripe live", fake("sk_live_", 24), "stripe-key"},
		{"stripe restricted", fake("rk_live_", 24), "stripe-key"},
		{"stripe test", fake("sk_test_", 24), "stripe-key"},
		{"aws access key id", "AKIA" + "IOSFODNN7EXAMPLE", "aws-access-key-id"},
		{"aws temporary key id", "ASIA" + "QWERTYUIOP123456", "aws-access-key-id"},
		{"google api key", fake("AIza", 35), "google-api-key"},
		{"openai legacy", fake("sk-", 48), "openai-key"},
		{"openai project", "sk-proj-" + fake("", 100), "openai-key"},
		{"anthropic", "sk-ant-api03-" + fake("", 93) + "AA", "anthropic-key"},
		{"npm", fake("npm_", 36), "npm-token"},
		{"pypi", fake("pypi-AgEIcHlwaS5vcmc", 60), "pypi-token"},
		{"hugging face", "hf_" + strings.Repeat("aBcD", 9)[:34], "huggingface-token"},

		// Ordinary values.
		{"empty", "", ""},
		{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/home/u/go/bin", ""},
		{"LS_COLORS", "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:cd=40;33;01:or=40;31;01:mi=00:su=37;41:sg=30;43:ca=00:tw=30;42:ow=34;42:st=37;44:ex=01;32:*.tar=01;31:*.pem=00;36:*.key=00;36:", ""},
		{"GOFLAGS", "-mod=mod -tags=netgo,osusergo -ldflags=-s", ""},
		{"GOPROXY", "https://proxy.golang.org,direct", ""},
		{"url without credentials", "https://user@example.com/path?q=1&page=2#top", ""},
		{"url with empty token", "https://example.com/?token=&x=1", ""},
		{"url with a token-ish name", "https://example.com/?tokens_total=3", ""},
		{"proxy", "http://127.0.0.1:3128", ""},
		{"slack api docs", "https://api.slack.com/messaging/webhooks", ""},
		{"slack hooks host alone", "https://hooks.slack.com/", ""},
		{"discord channel", "https://discord.com/channels/123/456", ""},
		{"react hooks docs", "https://react.dev/reference/react/hooks/useEffect", ""},
		{"repository hooks dir", "https://github.com/org/repo/tree/main/hooks/pre-commit", ""},
		{"numeric hook id", "https://api.github.com/repos/o/r/hooks/123456789012345678", ""},
		{"telegram docs", "https://core.telegram.org/bots/api", ""},
		{"base64 json without dots", b64url(`{"foo":"bar","alg":"x"}`), ""},
		{"base64 blob", base64.StdEncoding.EncodeToString([]byte("this is a fairly long blob that is not a token at all")), ""},
		{"three parts without alg", b64url(`{"typ":"JWT","kid":"1"}`) + "." + b64url(`{"sub":"x"}`) + ".sig", ""},
		{"hostname", "build-01.eu-west-1.compute.internal", ""},
		{"version", "1.26.0-rc.1", ""},
		{"git sha", "3f786850e387550fdab836ed7e6dc881de23001b", ""},
		{"uuid", "123e4567-e89b-12d3-a456-426614174000", ""},
		{"certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", ""},
		{"public key", "-----BEGIN PUBLIC KEY-----", ""},
		{"ssh public key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl u@host", ""},
		{"libpq without password", "host=db dbname=app user=u sslmode=require", ""},
		{"ado.net integrated", "Server=x;Database=y;Integrated Security=true;", ""},
		{"empty password", "Server=x;Password=;", ""},
		{"password file flag", "--password-file=/run/secrets/db", ""},
		{"shell PWD", "cd /x && PWD=/x make", ""},
		{"PS1", `\u@\h:\w\$ `, ""},
		{"header by reference", "Authorization: Bearer $TOKEN", ""},
		{"kebab-case sk-", "sk-this-is-a-long-kebab-case-identifier-name", ""},
		{"slovak locale", "sk_SK.UTF-8", ""},
		{"npm config", "npm_config_registry_and_some_long_name_here", ""},
		{"short ghp", "ghp_short", ""},
		{"AKIA too short", "AKIA1234", ""},
		{"lowercase akia", "akiaiosfodnn7example", ""},
		{"NODE_OPTIONS", "--max-old-space-size=4096 --enable-source-maps", ""},
		{"JAVA_TOOL_OPTIONS", "-Dfile.encoding=UTF-8 -Duser.timezone=UTC", ""},
		{"LESSOPEN", "| /usr/bin/lesspipe %s", ""},
		{"user agent", "npm/10.2.3 node/v20.10.0 linux x64 workspaces/false", ""},
		{"docker digest", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Twice: the second answer comes from the memo.
			for range 2 {
				kind, ok := CredentialInValue(tc.value)
				if kind != tc.kind || ok != (tc.kind != "") {
					t.Errorf("CredentialInValue(%q) = %q, %v, want %q, %v", tc.value, kind, ok, tc.kind, tc.kind != "")
				}
			}
		})
	}
}

// TestFilterEnvPolicyByValue: variables with innocent names are withheld for
// their value and reported by name and kind, never by value; env_allow lets
// one through; deny patterns still apply first.
func TestFilterEnvPolicyByValue(t *testing.T) {
	env := []string{
		"PATH=/usr/bin",
		"SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T000/B000/XXXX",
		"DB_CONNECTION=Server=x;Database=y;User Id=u;Password=p;",
		"SESSION=" + testJWT,
		"DEPLOY=" + testPEM,
		"NOTIFY_URL=https://hooks.slack.com/services/T1/B1/YYYY",
		"GITHUB_TOKEN=" + fake("ghp_", 36),
		"HOMEPAGE=https://example.com/",
	}
	got, withheld := FilterEnvPolicy(env, DefaultEnvDeny, []string{"notify_*"}, "TMPDIR=/t")
	want := []string{"PATH=/usr/bin", "NOTIFY_URL=https://hooks.slack.com/services/T1/B1/YYYY", "HOMEPAGE=https://example.com/", "TMPDIR=/t"}
	if !slices.Equal(got, want) {
		t.Errorf("FilterEnvPolicy kept %q, want %q", got, want)
	}
	wantDrops := []EnvDrop{{"SLACK_WEBHOOK_URL", "slack-webhook"}, {"DB_CONNECTION", "password-field"}, {"SESSION", "jwt"}, {"DEPLOY", "private-key"}}
	if !slices.Equal(withheld, wantDrops) {
		t.Errorf("withheld = %+v, want %+v", withheld, wantDrops)
	}
}

// The memo holds at most max bytes of values, keeps no value longer than
// max/16, and answers what it was told.
func TestValueMemoBounds(t *testing.T) {
	m := valueMemo{max: 1 << 10}
	m.put(strings.Repeat("x", 65), "k", true)
	if _, _, known := m.get(strings.Repeat("x", 65)); known {
		t.Error("a value over max/16 was kept")
	}
	for i := range 100 {
		m.put(fmt.Sprintf("%032d", i), "kind", i%2 == 0)
		if m.bytes > m.max {
			t.Fatalf("the memo holds %d bytes, over its %d", m.bytes, m.max)
		}
	}
	kind, ok, known := m.get(fmt.Sprintf("%032d", 98))
	if !known || kind != "kind" || !ok {
		t.Errorf("the last value put: %q %v %v", kind, ok, known)
	}
	if _, _, known := m.get(fmt.Sprintf("%032d", 0)); known {
		t.Error("the memo never started afresh")
	}
	// Short values count their entries too: a command that exports many
	// one-byte variables holds the memo to max/memoEntryBytes of them.
	for i := range 1000 {
		m.put(fmt.Sprint(i%10), "", false)
		m.put(fmt.Sprintf("%d", i), "", false)
	}
	if len(m.m) > m.max/memoEntryBytes {
		t.Errorf("the memo holds %d entries, over %d", len(m.m), m.max/memoEntryBytes)
	}
}
