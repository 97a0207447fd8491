package hostview

import (
	"path"
	"slices"
	"strings"
	"testing"
)

func TestEnvDenied(t *testing.T) {
	for _, tc := range []struct {
		name string
		deny []string
		want bool
	}{
		{name: "SSH_AUTH_SOCK", deny: DefaultEnvDeny, want: true},
		{name: "SSH_AGENT_PID", deny: DefaultEnvDeny, want: true},
		{name: "DBUS_SESSION_BUS_ADDRESS", deny: DefaultEnvDeny, want: true},
		{name: "DOCKER_HOST", deny: DefaultEnvDeny, want: true},
		{name: "OPENAI_API_KEY", deny: DefaultEnvDeny, want: true},
		{name: "MY_SERVICE_API_KEY", deny: DefaultEnvDeny, want: true},
		{name: "_API_KEY", deny: DefaultEnvDeny, want: true},
		{name: "GITHUB_API_TOKEN", deny: DefaultEnvDeny, want: true},
		{name: "FOO_APIKEY", deny: DefaultEnvDeny, want: true},
		{name: "OPENAI_BASE_URL", deny: DefaultEnvDeny, want: true},
		{name: "ANTHROPIC_AUTH_TOKEN", deny: DefaultEnvDeny, want: true},
		{name: "AZURE_OPENAI_ENDPOINT", deny: DefaultEnvDeny, want: true},
		{name: "CLAUDE_CODE_OAUTH_TOKEN", deny: DefaultEnvDeny, want: true},
		{name: "HF_TOKEN", deny: DefaultEnvDeny, want: true},
		{name: "CORRAL_PROFILE", deny: DefaultEnvDeny, want: true},
		{name: "API_KEY", deny: DefaultEnvDeny, want: true},
		{name: "GITHUB_API_KEY_FILE", deny: DefaultEnvDeny, want: false},
		{name: "openai_api_key", deny: DefaultEnvDeny, want: true}, // matched ignoring case,
		{name: "SSH_AUTH_SOCK_X", deny: DefaultEnvDeny, want: false},
		{name: "PATH", deny: DefaultEnvDeny, want: false},
		{name: "HOME", deny: DefaultEnvDeny, want: false},
		{name: "CORRAL", deny: DefaultEnvDeny, want: false},
		{name: "AZURE_CLIENT_ID", deny: DefaultEnvDeny, want: false},
		{name: "ANY", deny: nil, want: false},
		{name: "X[", deny: []string{"X["}, want: false},
		{name: "X", deny: []string{"[", "X"}, want: true},
		{name: "FOO", deny: []string{"F?O"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EnvDenied(tc.name, tc.deny); got != tc.want {
				t.Errorf("EnvDenied(%q, %q) = %v, want %v", tc.name, tc.deny, got, tc.want)
			}
		})
	}
}

// TestDefaultEnvDenyWellFormed: a malformed pattern never matches, so a typo
// in the shipped list would silently let a secret through.
func TestDefaultEnvDenyWellFormed(t *testing.T) {
	for _, p := range DefaultEnvDeny {
		t.Run(p, func(t *testing.T) {
			if _, err := path.Match(p, "X"); err != nil {
				t.Errorf("path.Match(%q) error = %v, want nil", p, err)
			}
			if !EnvDenied(p, DefaultEnvDeny) {
				t.Errorf("EnvDenied(%q, DefaultEnvDeny) = false, want true", p)
			}
		})
	}
}

func TestFilterEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		deny []string
		set  []string
		want []string
	}{
		{
			name: "default deny list, order kept",
			env:  []string{"PATH=/bin", "OPENAI_API_KEY=sk", "HOME=/h", "MY_API_KEY=k", "SSH_AUTH_SOCK=/s", "LANG=C", "CORRAL_X=1"},
			deny: DefaultEnvDeny,
			want: []string{"PATH=/bin", "HOME=/h", "LANG=C"},
		},
		{
			name: "malformed entries dropped",
			env:  []string{"A=1", "noequals", "=value", "", "B=x\x00y", "C=", "D==2"},
			deny: DefaultEnvDeny,
			want: []string{"A=1", "C=", "D==2"},
		},
		{
			name: "set replaces an earlier value in place and appends new ones",
			env:  []string{"A=1", "TMPDIR=/old", "B=2"},
			deny: DefaultEnvDeny,
			set:  []string{"TMPDIR=/new", "TMP=/new"},
			want: []string{"A=1", "TMPDIR=/new", "B=2", "TMP=/new"},
		},
		{
			name: "later duplicate replaces the earlier one in place",
			env:  []string{"A=1", "B=2", "A=3"},
			want: []string{"A=3", "B=2"},
		},
		{
			name: "set applied in order, last wins",
			env:  []string{"A=1"},
			set:  []string{"B=1", "A=2", "B=3"},
			want: []string{"A=2", "B=3"},
		},
		{
			name: "set is not filtered by deny",
			env:  []string{"CORRAL_X=host"},
			deny: DefaultEnvDeny,
			set:  []string{"CORRAL_X=mine"},
			want: []string{"CORRAL_X=mine"},
		},
		{
			name: "malformed set entries dropped",
			env:  []string{"A=1"},
			set:  []string{"bad", "=x", "A=2"},
			want: []string{"A=2"},
		},
		{
			name: "denied name with malformed pattern kept",
			env:  []string{"X=1", "Y=2"},
			deny: []string{"[", "Y"},
			want: []string{"X=1"},
		},
		{
			name: "empty",
			want: []string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.env)
			got := FilterEnv(tc.env, tc.deny, tc.set...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("FilterEnv(%q, %q, %q) = %q, want %q", tc.env, tc.deny, tc.set, got, tc.want)
			}
			if !slices.Equal(in, tc.env) {
				t.Errorf("FilterEnv changed its input to %q, want %q", tc.env, in)
			}
		})
	}
}

func TestLookupEnv(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		key    string
		want   string
		wantOK bool
	}{
		{name: "present", env: []string{"A=1", "B=2"}, key: "B", want: "2", wantOK: true},
		{name: "last wins", env: []string{"A=1", "B=2", "A=3"}, key: "A", want: "3", wantOK: true},
		{name: "empty value", env: []string{"A="}, key: "A", want: "", wantOK: true},
		{name: "value with =", env: []string{"A=b=c"}, key: "A", want: "b=c", wantOK: true},
		{name: "absent", env: []string{"A=1"}, key: "B", wantOK: false},
		{name: "prefix is not a match", env: []string{"AB=1"}, key: "A", wantOK: false},
		{name: "entry without =", env: []string{"A"}, key: "A", wantOK: false},
		{name: "malformed later entry does not hide", env: []string{"A=1", "A"}, key: "A", want: "1", wantOK: true},
		{name: "nil env", env: nil, key: "A", wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := LookupEnv(tc.env, tc.key)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("LookupEnv(%q, %q) = %q, %v, want %q, %v", tc.env, tc.key, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestFilterEnvPolicy(t *testing.T) {
	env := []string{"GITHUB_TOKEN=g", "NPM_TOKEN=n", "aws_secret_access_key=s", "DATABASE_URL=d", "HOME=/h", "TOKENIZERS_PARALLELISM=false"}
	got, _ := FilterEnvPolicy(env, append(append([]string{}, DefaultEnvDeny...), "HOME"), []string{"github_token"}, "TMPDIR=/s")
	want := []string{"GITHUB_TOKEN=g", "TOKENIZERS_PARALLELISM=false", "TMPDIR=/s"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("FilterEnvPolicy = %q, want %q", got, want)
	}
}

func TestEnvSecretsByNameAndValue(t *testing.T) {
	for _, tc := range []struct {
		kv   string
		kept bool
	}{
		{"PGPASSWORD=x", false}, {"MYSQL_PWD=x", false}, {"GITHUB_PAT=x", false}, {"TF_TOKEN_app_terraform_io=x", false},
		{"DB_PASS=x", false}, {"SMTP_PASS=x", false}, {"GPG_PASSPHRASE=x", false}, {"CREDENTIALS=x", false}, {"AUTH=x", false},
		{"SESSION_COOKIE=x", false}, {"PASSTHROUGH_MODE=1", true}, {"COMPASS_DIR=/x", true},
		{"KAGGLE_KEY=x", false}, {"NPM_CONFIG__AUTH=x", false}, {"CI_JOB_JWT=x", false}, {"PASSWORD=x", false},
		{"TOKEN=x", false}, {"SECRET=x", false}, {"REDIS_URL=redis://:pw@host:6379/0", false},
		{"MONGODB_URI=mongodb://user:pw@db.example/x?tls=true", false},
		{"REDIS_URL=redis://localhost:6379", true}, {"HOMEPAGE=https://user@example.com/", true},
		{"PWD=/x", true}, {"OLDPWD=/y", true}, {"TOKENIZERS_PARALLELISM=false", true}, {"PATH=/usr/bin", true},
		{"GIT_SSH_COMMAND=ssh -i key", true},
	} {
		got, _ := FilterEnvPolicy([]string{tc.kv}, DefaultEnvDeny, nil)
		if kept := len(got) == 1; kept != tc.kept {
			t.Errorf("%s: kept=%v, want %v", tc.kv, kept, tc.kept)
		}
	}
}

// The remembered answers of FilterEnv and FilterEnvPolicy are EnvDenied's:
// for every name, in any case, asked again, and for two lists sharing
// names (an answer for one list is never given for another).
func TestEnvMatcherRemembersEnvDenied(t *testing.T) {
	names := []string{"PATH", "path", "HOME", "OPENAI_API_KEY", "openai_api_key", "GH_TOKEN", "MY_SECRET_X", "LANG", "KEEP_ME", "keep_me", "CORRAL_X", "x[", ""}
	lists := [][]string{DefaultEnvDeny, {"KEEP_*"}, {"PATH"}, {"["}, nil}
	for round := 0; round < 2; round++ {
		for _, deny := range lists {
			m := matcherFor(deny)
			for _, n := range names {
				if got, want := m.matches(n), EnvDenied(n, deny); got != want {
					t.Errorf("round %d: matcher(%q).matches(%q) = %v, EnvDenied says %v", round, deny, n, got, want)
				}
			}
		}
	}
	env := []string{"PATH=/bin", "KEEP_ME=1", "GH_TOKEN=x"}
	if got := FilterEnv(env, []string{"KEEP_*"}); !slices.Equal(got, []string{"PATH=/bin", "GH_TOKEN=x"}) {
		t.Errorf("FilterEnv with KEEP_*: %q", got)
	}
	if got := FilterEnv(env, []string{"PATH"}); !slices.Equal(got, []string{"KEEP_ME=1", "GH_TOKEN=x"}) {
		t.Errorf("FilterEnv with PATH: %q", got)
	}
	if got, _ := FilterEnvPolicy(env, DefaultEnvDeny, []string{"GH_TOKEN"}); !slices.Equal(got, env) {
		t.Errorf("FilterEnvPolicy allowing GH_TOKEN: %q", got)
	}
}

// TestEnvPatternIsPathMatch: a matcher's pattern answers as path.Match
// does, for the shipped list and for patterns with stars anywhere, several
// stars, the other special characters (path.Match's, kept), malformed
// ones, and names with '/' (which a star does not match).
func TestEnvPatternIsPathMatch(t *testing.T) {
	pats := append([]string{
		"", "*", "**", "*A*", "A*", "*A", "A*B", "A*B*C", "*A*A*", "AB*BA", "A**B",
		"?", "A?C", "[AB]*", "[", "\\*", "A\\", "*/*", "A/*", "*_KEY", "*SECRET*",
	}, DefaultEnvDeny...)
	names := []string{
		"", "A", "B", "AB", "BA", "ABA", "ABBA", "ABC", "AXBXC", "ACB", "AAA", "A/B", "A/", "/A",
		"X_KEY", "_KEY", "KEY", "MY_SECRET_VALUE", "SECRET", "SECRE", "PATH", "OPENAI_API_KEY",
		"GH_TOKEN", "TOKEN_X", "A_TOKEN_B", "CORRAL_", "CORRAL", "A*B", "[A", "*",
	}
	for _, p := range pats {
		e := compileEnvPattern(p)
		for _, n := range names {
			ok, err := path.Match(p, n)
			if want := err == nil && ok; e.match(n) != want {
				t.Errorf("pattern %q, name %q: match = %v, path.Match says %v", p, n, !want, want)
			}
		}
	}
}
