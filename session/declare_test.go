package session

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

func TestParseDeclared(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		ok   bool
	}{
		{"empty", "", nil, true},
		{"plain", "declare -x A=\"1\"\ndeclare -x B=\"two words\"\n", []string{"A=1", "B=two words"}, true},
		{"escapes in double quotes", `declare -x C="q\"\$` + "\\`" + `\\"` + "\n", []string{"C=q\"$`\\"}, true},
		{"bash 4.4 newline inside quotes", "declare -x M=\"line1\nline2\"\ndeclare -x N=\"n\"\n", []string{"M=line1\nline2", "N=n"}, true},
		{"ansi-c", `declare -x A=$'x\001y\nz\'q\\\E\t'` + "\n", []string{"A=x\x01y\nz'q\\\x1b\t"}, true},
		{"ansi-c hex, unicode, control", `declare -x H=$'\x41\u00e9\cA\377'` + "\n", []string{"H=Aé\x01\xff"}, true},
		{"unset exported", "declare -x OLDPWD\ndeclare -x P=\"/\"\n", []string{"P=/"}, true},
		{"other flags", "declare -ix I=\"3\"\ndeclare -rx R=\"r\"\ndeclare -nx REF=\"I\"\n", []string{"I=3", "R=r", "REF=I"}, true},
		{"array skipped", "declare -ax ARR=([0]=\"a\" [1]=\"b)c\")\ndeclare -x Z=\"1\"\n", []string{"Z=1"}, true},
		{"assoc skipped", "declare -Ax AS=([k]=\"v\" [\"x y\"]=\")\" [q]=$'\\')' )\ndeclare -x Z=\"1\"\n", []string{"Z=1"}, true},
		{"empty value", "declare -x E=\"\"\n", []string{"E="}, true},
		{"equals in value", "declare -x E=\"a=b\"\n", []string{"E=a=b"}, true},
		{"not declare", "export A=\"1\"\n", nil, false},
		{"unterminated", "declare -x A=\"1\n", nil, false},
		{"unterminated ansi-c", "declare -x A=$'1\n", nil, false},
		{"bad name", "declare -x 1A=\"1\"\n", nil, false},
		{"unquoted value", "declare -x A=1\n", nil, false},
		{"unterminated array", "declare -ax A=([0]=\"1\"\n", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseDeclared(tt.in)
			if ok != tt.ok || ok && !slices.Equal(got, tt.want) {
				t.Errorf("parseDeclared(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestParseDeclaredRealBash: what this machine's bash prints for values
// holding every byte but NUL, quotes, newlines and invalid UTF-8, in the C
// locale and in a UTF-8 one (bash 5.2 quotes differently in each), parses
// back to the values bash passes to a child.
func TestParseDeclaredRealBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash is needed: ", err)
	}
	var all []byte
	for c := 1; c < 256; c++ {
		all = append(all, byte(c))
	}
	vals := map[string]string{
		"ALL":    string(all),
		"QUOTES": `'"$` + "`" + `\ $(x) ${y}`,
		"NL":     "a\nb\n",
		"UTF":    "é中\xff\xc3",
		"EMPTY":  "",
		"MAGIC":  stateMagic,
		"DECL":   "\ndeclare -x EVIL=\"1\"\n",
	}
	for _, loc := range []string{"C", "C.UTF-8"} {
		env := []string{"LC_ALL=" + loc, "PATH=" + os.Getenv("PATH")}
		for k, v := range vals {
			env = append(env, k+"="+v)
		}
		cmd := exec.Command(bash, "--noprofile", "--norc", "-c", `declare -ax ARR=(1 ")"); export UNSET; builtin declare -px`)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseDeclared(string(out))
		if !ok {
			t.Fatalf("%s: not parsed: %q", loc, out)
		}
		m := map[string]string{}
		for _, kv := range got {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		for k, v := range vals {
			if m[k] != v {
				t.Errorf("%s: %s = %q, want %q", loc, k, m[k], v)
			}
		}
		for _, k := range []string{"ARR", "UNSET", "EVIL"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s: %s was kept", loc, k)
			}
		}
	}
}

// TestParseStateRecord: the record is the last NUL and magic; a cwd or
// value that holds the magic is not one.
func TestParseStateRecord(t *testing.T) {
	rec := func(cwd, decl string) string {
		return "\x00" + stateMagic + "\x000\x00\x00" + cwd + "\x00" + decl
	}
	tests := []struct {
		name, in, cwd string
		env           []string
		ok            bool
	}{
		{"one", rec("/w", "declare -x A=\"1\"\n"), "/w", []string{"A=1"}, true},
		{"after started", "corral-started\x00" + rec("/w", ""), "/w", nil, true},
		{"last wins", rec("/forged", "declare -x F=\"1\"\n") + rec("/w", ""), "/w", nil, true},
		{"cwd ending in the magic", "corral-started\x00" + rec("/x/"+stateMagic, "declare -x A=\"1\"\n"), "/x/" + stateMagic, []string{"A=1"}, true},
		{"relative cwd", rec("x", ""), "", nil, false},
		{"malformed variables", rec("/w", "garbage"), "", nil, false},
		{"short", "\x00" + stateMagic + "\x000\x00", "", nil, false},
		{"not after a NUL", stateMagic + "\x000\x00\x00/w\x00", "", nil, false},
		{"none", "corral-started\x00", "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, _, ok := parseState([]byte(tt.in))
			if ok != tt.ok || ok && (st.Cwd != tt.cwd || !slices.Equal(st.Env, tt.env)) {
				t.Errorf("parseState(%q) = %q %q %v; want %q %q %v", tt.in, st.Cwd, st.Env, ok, tt.cwd, tt.env, tt.ok)
			}
		})
	}
}

// The variables that act on a shell before its first line are renamed
// for the wrapper to restore, unless the environment policy withholds
// them by name; SHELLOPTS and BASHOPTS are not kept at all.
func TestShieldStartEnv(t *testing.T) {
	for _, c := range []struct {
		env, want []string
		pol       sandbox.Policy
	}{
		{env: []string{"A=1", "PATH=/bin"}, want: []string{"A=1", "PATH=/bin"}},
		{env: []string{"BASH_ENV=/x", "LD_PRELOAD=/y.so", "ENV=/z", "BASH_COMPAT=31", "GLIBC_TUNABLES=t", "LD_LIBRARY_PATH=/l", "A=1"},
			want: []string{"__corral_env_BASH_ENV=/x", "__corral_env_LD_PRELOAD=/y.so", "__corral_env_ENV=/z", "__corral_env_BASH_COMPAT=31", "__corral_env_GLIBC_TUNABLES=t", "__corral_env_LD_LIBRARY_PATH=/l", "A=1"}},
		{env: []string{"LD_PRELOAD=/y.so", "LD_LIBRARY_PATH=/l"}, pol: sandbox.Policy{EnvDeny: []string{"LD_PRELOAD"}},
			want: []string{"LD_PRELOAD=/y.so", "__corral_env_LD_LIBRARY_PATH=/l"}},
		{env: []string{"LD_PRELOAD=/y.so"}, pol: sandbox.Policy{EnvDeny: []string{"LD_*"}, EnvAllow: []string{"LD_PRELOAD"}},
			want: []string{"__corral_env_LD_PRELOAD=/y.so"}},
		{env: []string{"LD_SECRET=s"}, want: []string{"LD_SECRET=s"}}, // DefaultEnvDeny's *SECRET*
	} {
		if got := shieldStartEnv(c.env, c.pol); !slices.Equal(got, c.want) {
			t.Errorf("shieldStartEnv(%q, %+v) = %q, want %q", c.env, c.pol, got, c.want)
		}
	}
	kept, notes := keepEnv([]string{"SHELLOPTS=noexec", "BASHOPTS=extdebug", "A=1"})
	if !slices.Equal(kept, []string{"A=1"}) || len(notes) != 2 {
		t.Errorf("keepEnv kept %q, notes %q", kept, notes)
	}
}
