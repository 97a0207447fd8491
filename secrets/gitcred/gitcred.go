// Package gitcred is the git credential helper corral ships for secrets
// (issue 14): inside a sandbox with secrets, git is configured through
// its environment ([Env]: GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n,
// GIT_CONFIG_VALUE_n, which git reads as command-line configuration) to
// ask corral's own executable, re-executed in the helper mode [Mode], for
// HTTPS credentials. For a host that a secret names, the helper answers
// the secret's user name (x-access-token unless the secret declares one)
// and its stand-in, read from the sandbox's environment; the egress proxy
// puts the real value in the Basic credential on the way out. So a remote
// URL never holds a token, and the helper never holds a real value.
//
// The protocol is git-credential(1) "CUSTOM HELPERS": git runs the
// helper with the action (get, store, erase) as its last argument and
// writes key=value lines, ended by a blank line or end of file, to its
// standard input; for get, the helper prints the attributes it knows.
package gitcred

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/corralhq/corral/internal/hostmatch"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
)

// Mode is the helper mode of corral's executable (os.Args[1]).
const Mode = "__corral-git-credential"

// DefaultUsername is the user name given with a stand-in when the secret
// declares none: the one GitHub documents for a token in HTTPS Basic
// authentication (GitLab and Gitea accept any user name with a token).
const DefaultUsername = "x-access-token"

func init() { reexec.Register(Mode, Main) }

// Spec is what the helper knows of one secret: its variable, the user
// name to answer, and its hosts (as hostmatch.Match reads them).
type Spec struct {
	Name, Username string
	Hosts          []string
}

// String gives the spec as one helper argument: NAME:USERNAME:HOST,HOST.
func (s Spec) String() string {
	return s.Name + ":" + s.Username + ":" + strings.Join(s.Hosts, ",")
}

// ParseSpec reads an argument made by Spec.String.
func ParseSpec(arg string) (Spec, error) {
	name, rest, ok1 := strings.Cut(arg, ":")
	user, hosts, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || name == "" || hosts == "" {
		return Spec{}, fmt.Errorf("gitcred: %q is not NAME:USERNAME:HOSTS", arg)
	}
	return Spec{Name: name, Username: user, Hosts: strings.Split(hosts, ",")}, nil
}

// Specs returns the helper's view of secs: the username defaulted, hosts
// as declared.
func Specs(secs []sandbox.Secret) []Spec {
	out := make([]Spec, 0, len(secs))
	for _, s := range secs {
		u := s.Username
		if u == "" {
			u = DefaultUsername
		}
		out = append(out, Spec{Name: s.Name, Username: u, Hosts: s.Hosts})
	}
	return out
}

// Env returns the entries that make git in a sandbox use the helper: exe
// is corral's executable as the sandbox sees it (an absolute path), secs
// the request's secrets. git (2.31 and later) reads GIT_CONFIG_COUNT
// pairs as configuration given on its command line, which applies after
// the system, global and repository files, so a repository's own
// credential.helper is asked first and this one after it. Nil when secs
// is empty.
func Env(exe string, secs []sandbox.Secret) []string {
	if len(secs) == 0 {
		return nil
	}
	// A value starting with "!" is a shell command git runs with the
	// action appended (gitcredentials(7)); quoting the path keeps a space
	// in it, and a quoted path no longer starts with "/", which git would
	// otherwise take as a helper's name.
	v := "!" + shellQuote(exe) + " " + Mode
	for _, s := range Specs(secs) {
		v += " " + shellQuote(s.String())
	}
	return []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=" + v}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Answer is the helper's whole decision: for action get with protocol
// https and a host (its port ignored) that a spec names, whose variable
// getenv finds set, the lines "username=U" and "password=STANDIN";
// otherwise nothing (git then asks the next helper or the terminal).
// The first matching spec wins. Other actions answer nothing.
func Answer(specs []Spec, action string, attrs map[string]string, getenv func(string) string) string {
	if action != "get" || attrs["protocol"] != "https" {
		return ""
	}
	host := attrs["host"]
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		host = h
	}
	for _, s := range specs {
		match := false
		for _, p := range s.Hosts {
			match = match || hostmatch.Match(p, host)
		}
		if v := getenv(s.Name); match && v != "" {
			return "username=" + s.Username + "\npassword=" + v + "\n"
		}
	}
	return ""
}

// ReadAttrs reads git's key=value lines up to a blank line or end of
// file (at most 64 KiB).
func ReadAttrs(r io.Reader) map[string]string {
	attrs := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(r, 64<<10))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			attrs[k] = v
		}
	}
	return attrs
}

// Main is the helper's entry point: args are the specs, then the action.
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "corral git credential helper: no action")
		return 2
	}
	var specs []Spec
	for _, a := range args[:len(args)-1] {
		s, err := ParseSpec(a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "corral git credential helper:", err)
			return 2
		}
		specs = append(specs, s)
	}
	attrs := ReadAttrs(os.Stdin)
	_, _ = io.WriteString(os.Stdout, Answer(specs, args[len(args)-1], attrs, os.Getenv))
	return 0
}
