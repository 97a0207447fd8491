// Package backendtest is the conformance suite every backend runs: what a
// sandbox.Backend promises whatever it is (README's exit statuses, and
// that a command leaves nothing running; docs/sandbox.md's profiles, the
// environment policy, secrets' stand-ins, skills, review mode's refusal,
// what may be written, what a root caller's sandbox still cannot write). A backend's own tests call Run with a
// Harness that builds the backend as they build it; what a backend cannot
// do is stated by its sandbox.Traits or by the Harness's fields, never by
// its name. Test support: imported only by _test.go files.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/envsecrets"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// Harness is one backend under test.
type Harness struct {
	// New builds a fresh World for one case, as the backend's own tests
	// build the backend. It may call t.Setenv (HOME), so cases do not run
	// in parallel.
	New func(t *testing.T) *World
	// NoReview is set for a backend without review mode
	// (workspace_mode: review, sandbox.Request.LayerDir): it must refuse
	// such a request with sandbox.ErrPolicy naming workspace_mode review,
	// and run nothing.
	NoReview bool
	// NoHostBinds is set for a backend that mounts no host path (binds,
	// skills: kubernetes, whose pod is on another machine; it copies in
	// the workspace and secrets' files), so those are not checked.
	NoHostBinds bool
	// NoScratch is set for a backend that does not mount
	// sandbox.Request.ScratchDir (docker, kubernetes: /tmp is the
	// container's own), so the scratch directory is not among the writable
	// roots checked.
	NoScratch bool
	// PolicyNetwork is set for a backend whose sandbox keeps network
	// interfaces under the profiles without a network, cut off by a policy
	// outside it (kubernetes' NetworkPolicy): the profiles case does not
	// count interfaces there.
	PolicyNetwork bool
}

// World is one backend and the host directories of one case.
type World struct {
	// Backend is the backend under test. Secrets need it built with
	// corral's egress proxies (unless it is Unsandboxed).
	Backend sandbox.Backend
	// Workdir is a fresh host directory owned by the caller, the
	// commands' working directory. It holds nothing.
	Workdir string
	// Home is the host home directory (HOME) against which the backend
	// resolves ~ of secrets' files and skills: a fresh directory of the
	// test's.
	Home string
	// Env is the base environment of a command ("KEY=value": PATH, HOME).
	Env []string
}

// Run runs every case that applies to the backend h builds, each as a
// subtest.
func Run(t *testing.T, h Harness) {
	probe := h.New(t)
	tr := sandbox.TraitsOf(probe.Backend)
	t.Run("exit codes", func(t *testing.T) { exitCodes(t, h) })
	t.Run("end of a command", func(t *testing.T) { endOfCommand(t, h) })
	t.Run("env", func(t *testing.T) { env(t, h) })
	t.Run("secrets", func(t *testing.T) { secretStandIns(t, h, tr) })
	if h.NoReview {
		t.Run("review refused", func(t *testing.T) { reviewRefused(t, h) })
	}
	if tr.Unsandboxed {
		// Profiles, binds, skills and the host's protection are a
		// sandbox's: a backend without one promises none of them.
		return
	}
	t.Run("profiles", func(t *testing.T) { profiles(t, h, tr) })
	t.Run("writable roots", func(t *testing.T) { writableRoots(t, h, tr) })
	t.Run("root caller", func(t *testing.T) { rootCaller(t, h, tr) })
	t.Run("secret files", func(t *testing.T) { secretFiles(t, h) })
	if !h.NoHostBinds {
		t.Run("skills", func(t *testing.T) { skills(t, h) })
	}
}

// out is what a command printed and what became of it.
type out struct {
	res            *sandbox.Result
	stdout, stderr string
}

func (o out) String() string {
	return fmt.Sprintf("exit=%d signal=%d timed_out=%v\nstdout:\n%s\nstderr:\n%s", o.res.ExitCode, o.res.Signal, o.res.TimedOut, o.stdout, o.stderr)
}

// session is the name of a case's session: one per case, released when it
// ends (a session backend keeps a container or pod for it).
func session(t *testing.T, w *World) string {
	name := "bt-" + strings.ToLower(testkit.RandomAlnum(8))
	if sb, ok := w.Backend.(sandbox.SessionBackend); ok {
		t.Cleanup(func() { sb.Release(name) })
	}
	return name
}

// request is a command of argv in w's working directory under the
// workspace profile, in session sess.
func (w *World) request(sess string, argv ...string) *sandbox.Request {
	return &sandbox.Request{
		Argv:    argv,
		Env:     slices.Clone(w.Env),
		Policy:  sandbox.Policy{Workdir: w.Workdir, Profile: sandbox.ProfileWorkspace, Limits: sandbox.DefaultLimits},
		Session: sess,
		Timeout: 2 * time.Minute,
	}
}

// run runs req and fails the test when it could not be run.
func (w *World) run(t *testing.T, req *sandbox.Request) out {
	t.Helper()
	var so, se bytes.Buffer
	req.Stdout, req.Stderr = &so, &se
	res, err := w.Backend.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Argv, err)
	}
	return out{res, so.String(), se.String()}
}

// sh runs script with /bin/sh in session sess after mods.
func (w *World) sh(t *testing.T, sess, script string, mods ...func(*sandbox.Request)) out {
	t.Helper()
	req := w.request(sess, "/bin/sh", "-c", script)
	for _, m := range mods {
		m(req)
	}
	return w.run(t, req)
}

// runErr runs script after mods and returns Run's error.
func (w *World) runErr(sess, script string, mods ...func(*sandbox.Request)) error {
	req := w.request(sess, "/bin/sh", "-c", script)
	for _, m := range mods {
		m(req)
	}
	var buf bytes.Buffer
	req.Stdout, req.Stderr = &buf, &buf
	_, err := w.Backend.Run(context.Background(), req)
	return err
}

func profile(p sandbox.Profile) func(*sandbox.Request) {
	return func(r *sandbox.Request) { r.Profile = p }
}

// writeFile writes a host file (and its directories) for a case.
func writeFile(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// hostFile is the content of a host file, or "<absent>".
func hostFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "<absent>"
	}
	return string(b)
}

// exitCodes: README's exit statuses as Result.ExitCode: the command's own,
// 127 for a command not found, 126 for one that cannot be run (a
// directory), 128+N and Signal N for one killed by signal N.
func exitCodes(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	for _, tc := range []struct {
		name   string
		argv   []string
		code   int
		signal int
	}{
		{"zero", []string{"/bin/sh", "-c", "exit 0"}, 0, 0},
		{"one", []string{"/bin/sh", "-c", "exit 1"}, 1, 0},
		{"own", []string{"/bin/sh", "-c", "exit 42"}, 42, 0},
		{"not found", []string{"corral-backendtest-no-such-command"}, sandbox.ExitNotFound, 0},
		{"missing path", []string{"/corral-backendtest/no/such/file"}, sandbox.ExitNotFound, 0},
		{"a directory", []string{"/"}, sandbox.ExitCannotInvoke, 0},
		{"killed", []string{"/bin/sh", "-c", "kill -KILL $$"}, sandbox.ExitSignalBase + int(syscall.SIGKILL), int(syscall.SIGKILL)},
		{"terminated", []string{"/bin/sh", "-c", "kill -TERM $$"}, sandbox.ExitSignalBase + int(syscall.SIGTERM), int(syscall.SIGTERM)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := w.run(t, w.request(sess, tc.argv...))
			if o.res.ExitCode != tc.code || o.res.Signal != tc.signal || o.res.TimedOut {
				t.Errorf("%q: want exit %d signal %d, got %s", tc.argv, tc.code, tc.signal, o)
			}
		})
	}
	// A file that is not executable cannot be run either: 126. (Made by
	// the sandbox: a workspace may be its own, Traits.OwnWorkspace.)
	w.sh(t, sess, `printf '#!/bin/sh\necho ran\n' > noexec.sh; chmod 644 noexec.sh`)
	o := w.run(t, w.request(sess, filepath.Join(w.Workdir, "noexec.sh")))
	if o.res.ExitCode != sandbox.ExitCannotInvoke || strings.Contains(o.stdout, "ran") {
		t.Errorf("a file without x: want %d, got %s", sandbox.ExitCannotInvoke, o)
	}
}

// escapes is a script that starts processes named "sleep MARK" every way
// a process leaves its command's session and process group (setsid; a
// double fork into a new session, as a daemon does; a background job
// that ignores SIGTERM, as does the script itself, and so the setsid one
// that inherits that), waits until all three run and prints "up".
const escapes = `trap '' TERM
count() { c=0; for d in /proc/[0-9]*; do read -r n 2>/dev/null <"$d/comm" && [ "$n" = sleep ] && [ "$(tr '\0' ' ' 2>/dev/null <"$d/cmdline")" = "sleep $1 " ] && c=$((c+1)); done; echo $c; }
setsid sleep "$1" & (setsid sh -c 'sleep "$1" & exit 0' sh "$1" &)
(trap '' TERM; sleep "$1") &
until [ "$(count "$1")" -ge 3 ]; do sleep 0.05; done; echo up
`

// endOfCommand: when a command ends, nothing it started runs on, whatever
// its session or process group, on every backend (README: "Timeouts and
// what is left running"): at its first process's normal exit (as a bwrap
// sandbox's pid namespace ends with it), at Request.Timeout
// (Result.TimedOut, which the CLI reports as 124) and at the caller's
// cancellation, children that ignore SIGTERM included. Another command
// of the same session that is still running (a session's background
// process) is untouched by the others' ends. Nothing runs afterwards,
// neither on the host nor in the session's sandbox.
func endOfCommand(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	// Durations no other process uses name each command's sleeps.
	base := 9000000 + os.Getpid()%100000*10
	bgMark, exitMark, timeoutMark := fmt.Sprint(base+1), fmt.Sprint(base+2), fmt.Sprint(base+3)
	withArg := func(arg string) func(*sandbox.Request) {
		return func(r *sandbox.Request) { r.Argv = append(r.Argv, "sh", arg) }
	}
	// A background command, cancelled at the end.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bgUp := make(chan struct{})
	type bgEnd struct {
		res *sandbox.Result
		err error
	}
	bgDone := make(chan bgEnd, 1)
	go func() {
		req := w.request(sess, "/bin/sh", "-c", escapes+"wait")
		withArg(bgMark)(req)
		req.Stdout, req.Stderr = &upWriter{up: bgUp}, io.Discard
		res, err := w.Backend.Run(ctx, req)
		bgDone <- bgEnd{res, err}
	}()
	select {
	case <-bgUp:
	case e := <-bgDone:
		t.Fatalf("the background command ended before it was up: %v %v", e.res, e.err)
	}

	// A normal exit: what is left is ended.
	o := w.sh(t, sess, escapes+"exit 3", withArg(exitMark))
	if o.res.TimedOut || o.res.ExitCode != 3 || o.stdout != "up\n" {
		t.Fatalf("want exit 3 after up, got %s", o)
	}
	leftNone(t, w, sess, exitMark)

	// A timeout: all of it ends, those that ignore SIGTERM too. The
	// timeout should fall once the command is up (its escapes started);
	// a loaded machine can take longer than the first timeout to get
	// there (local's count reads every process of the host), so the
	// timeout doubles until it does: no verdict on the machine's speed.
	for timeout := 3 * time.Second; ; timeout *= 2 {
		o = w.sh(t, sess, escapes+"sleep "+timeoutMark+" & wait", withArg(timeoutMark), func(r *sandbox.Request) { r.Timeout = timeout })
		if !o.res.TimedOut || o.res.ExitCode == 0 {
			t.Fatalf("want a timed-out command, got %s", o)
		}
		leftNone(t, w, sess, timeoutMark)
		if o.stdout == "up\n" {
			break
		}
		if timeout >= 2*time.Minute {
			t.Fatalf("the command was not up within a timeout of %v: %s", timeout, o)
		}
		t.Logf("timed out at %v before the command was up; again with twice the time", timeout)
	}

	// The background command ran on through both.
	if n := len(sleepers(bgMark)) + inSandbox(t, w, sess, bgMark); n == 0 {
		t.Fatalf("the session's background command did not survive the other commands' ends")
	}
	cancel()
	e := <-bgDone
	if e.err != nil && !errors.Is(e.err, context.Canceled) {
		t.Fatalf("the cancelled command: %v", e.err)
	}
	leftNone(t, w, sess, bgMark)
}

// upWriter closes up when "up" has been written.
type upWriter struct {
	buf  bytes.Buffer
	up   chan struct{}
	done bool
}

func (u *upWriter) Write(p []byte) (int, error) {
	u.buf.Write(p)
	if !u.done && strings.Contains(u.buf.String(), "up\n") {
		u.done = true
		close(u.up)
	}
	return len(p), nil
}

// leftNone fails the test when a process "sleep mark" runs on the host or
// in the session's sandbox (a container or pod that outlives the
// command). A killed process leaves /proc when its parent has reaped it,
// which may be just after Run returned; a minute is far past that, and a
// process still there then was left running.
func leftNone(t *testing.T, w *World, sess, mark string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		left := sleepers(mark)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep %s left running on the host: %v", mark, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := inSandbox(t, w, sess, mark); n != 0 {
		t.Errorf("%d of sleep %s left running in the session's sandbox", n, mark)
	}
}

// inSandbox counts the processes "sleep mark" a command of session sess
// sees.
func inSandbox(t *testing.T, w *World, sess, mark string) int {
	t.Helper()
	o := w.sh(t, sess, `for p in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$p" 2>/dev/null; echo; done | grep -c "^sleep $1 *$" || true`,
		func(r *sandbox.Request) { r.Argv = append(r.Argv, "sh", mark) })
	n, err := strconv.Atoi(strings.TrimSpace(o.stdout))
	if err != nil {
		t.Fatalf("counting sleep %s: %s", mark, o)
	}
	return n
}

// sleepers lists the host's processes whose command line is "sleep mark".
func sleepers(mark string) []string {
	var left []string
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == "sleep "+mark {
			// Its parent and cgroup say whose it is.
			st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
			cg, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
			ppid := ""
			for l := range strings.SplitSeq(string(st), "\n") {
				if v, ok := strings.CutPrefix(l, "PPid:"); ok {
					ppid = strings.TrimSpace(v)
				}
			}
			left = append(left, fmt.Sprintf("pid %s (parent %s, cgroup %s)", filepath.Base(filepath.Dir(p)), ppid, strings.TrimSpace(string(cg))))
		}
	}
	return left
}

// env: the environment policy (hostview.FilterEnvPolicy) holds on every
// backend: ordinary variables pass, credentials by name and by value
// (envsecrets) and env_deny's are cleared, env_allow lets one through.
func env(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	o := w.sh(t, sess, `env`, func(r *sandbox.Request) {
		// The caller's own environment is the base; the variables
		// checked are the command's (a backend may drop the host's own:
		// docker).
		r.PolicyEnv = slices.Clone(r.Env)
		r.Env = append(r.Env, envsecrets.Env()...)
		r.Env = append(r.Env, "GITHUB_TOKEN=denied-by-name", "EXTRA_DENIED=by-env-deny", "VAULT_TOKEN=allowed-by-name")
		r.EnvDeny = []string{"EXTRA_*"}
		r.EnvAllow = []string{"vault_token", envsecrets.AllowPattern}
	})
	if o.res.ExitCode != 0 {
		t.Fatalf("env: %s", o)
	}
	envsecrets.Check(t, o.stdout)
	for _, bad := range []string{"denied-by-name", "by-env-deny"} {
		if strings.Contains(o.stdout, bad) {
			t.Errorf("the command saw %q:\n%s", bad, o.stdout)
		}
	}
	if !slices.Contains(strings.Split(o.stdout, "\n"), "VAULT_TOKEN=allowed-by-name") {
		t.Errorf("env_allow did not let VAULT_TOKEN through:\n%s", o.stdout)
	}
}

// realValue is a secret's real value, made when the test binary starts so
// that the binary (which a sandbox may read) does not hold it.
var realValue = "ghp_" + testkit.RandomAlnum(36)

// withSecret gives req the secret GITHUB_TOKEN from env:GH_REAL for
// api.allowed.test under the allowlist profile (env_allow names the
// source: it is cleared all the same).
func withSecret(r *sandbox.Request) {
	r.Profile = sandbox.ProfileAllowlist
	r.NetworkAllow = []string{"*.allowed.test"}
	r.Secrets = []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH_REAL", Hosts: []string{"api.allowed.test"}}}
	r.EnvAllow = []string{"GH_REAL"}
	r.Env = append(r.Env, "GH_REAL="+realValue)
	r.PolicyEnv = slices.Clone(r.Env)
}

// secretStandIns: a secret reaches a sandbox as a stand-in of the real
// value's shape in its variable; its source is cleared, and nothing a
// command can read holds the real value. Secrets outside the allowlist
// profile are refused, naming it and not the value. A backend without a
// sandbox refuses secrets (no proxy could swap a stand-in back).
func secretStandIns(t *testing.T, h Harness, tr sandbox.Traits) {
	w := h.New(t)
	sess := session(t, w)
	if tr.Unsandboxed {
		err := w.runErr(sess, `echo ran > ran`, withSecret)
		if !errors.Is(err, sandbox.ErrBadRequest) || strings.Contains(err.Error(), realValue) {
			t.Errorf("secrets without a sandbox: err = %v, want ErrBadRequest", err)
		}
		if hostFile(filepath.Join(w.Workdir, "ran")) != "<absent>" {
			t.Errorf("the command ran")
		}
		return
	}
	// The value is spelled in two halves so that the script (in
	// /proc/*/cmdline) does not hold it, and matched by the shell itself
	// (a grep's argument would); the first half alone is found (in the
	// script), so the processes were read.
	a, b := realValue[:10], realValue[10:]
	o := w.sh(t, sess, `echo "GT=$GITHUB_TOKEN"; echo "src=${GH_REAL-unset}"
a=`+a+`; b=`+b+`
p=$(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n')
case "$p" in *"$a$b"*) echo found ;; *"$a"*) echo 0 ;; *) echo "no processes read" ;; esac
echo done`, withSecret)
	standIn := ""
	for l := range strings.SplitSeq(o.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "GT="); ok {
			standIn = v
		}
	}
	if o.res.ExitCode != 0 || len(standIn) != len(realValue) || !strings.HasPrefix(standIn, "ghp_") || standIn == realValue {
		t.Fatalf("want a stand-in of the real value's length and prefix: %s", o)
	}
	if !strings.Contains(o.stdout, "src=unset\n0\ndone\n") || strings.Contains(o.stdout+o.stderr, realValue) {
		t.Errorf("the source or the real value reached the sandbox: %s", o)
	}
	// Stable for the process: the session's next command sees the same.
	if o := w.sh(t, sess, `echo "$GITHUB_TOKEN"`, withSecret); o.stdout != standIn+"\n" {
		t.Errorf("the next command's stand-in: %s, want %s", o, standIn)
	}
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace, sandbox.ProfileNetwork} {
		err := w.runErr(sess, `echo ran > ran`, withSecret, profile(p))
		if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), "allowlist") || strings.Contains(err.Error(), realValue) {
			t.Errorf("secrets under %s: err = %v, want ErrBadRequest naming the allowlist profile", p, err)
		}
	}
	if hostFile(filepath.Join(w.Workdir, "ran")) != "<absent>" {
		t.Errorf("a refused command ran")
	}
}

// secretFiles: a secret's file (~/.netrc) that holds the real value shows
// the stand-in in the sandbox, cannot be written there, and stays as it
// was on the host; a change shows at the next command; a missing file is
// refused, naming the entry, before anything runs.
func secretFiles(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	netrc := "machine api.allowed.test login x-user password " + realValue + "\n"
	writeFile(t, filepath.Join(w.Home, ".netrc"), netrc, 0o600)
	files := func(f ...string) func(*sandbox.Request) {
		return func(r *sandbox.Request) {
			withSecret(r)
			r.Secrets[0].Files = f
		}
	}
	o := w.sh(t, sess, `echo "GT=$GITHUB_TOKEN"; cat ~/.netrc; { echo x >> ~/.netrc; } 2>/dev/null && echo appended; echo done`, files("~/.netrc"))
	standIn := ""
	for l := range strings.SplitSeq(o.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, "GT="); ok {
			standIn = v
		}
	}
	if len(standIn) != len(realValue) || standIn == realValue {
		t.Fatalf("no stand-in: %s", o)
	}
	if want := "GT=" + standIn + "\n" + strings.ReplaceAll(netrc, realValue, standIn) + "done\n"; o.stdout != want || strings.Contains(o.stderr, realValue) {
		t.Errorf("want %q, got %s", want, o)
	}
	if got := hostFile(filepath.Join(w.Home, ".netrc")); got != netrc {
		t.Errorf("the host's .netrc changed: %q", got)
	}
	changed := "machine api.allowed.test login changed password " + realValue + "\n"
	writeFile(t, filepath.Join(w.Home, ".netrc"), changed, 0o600)
	if o := w.sh(t, sess, `cat ~/.netrc`, files("~/.netrc")); o.stdout != strings.ReplaceAll(changed, realValue, standIn) {
		t.Errorf("after a change: %s", o)
	}
	err := w.runErr(sess, `echo ran > ran`, files("~/missing-netrc"))
	if !errors.Is(err, sandbox.ErrBadRequest) || !strings.Contains(err.Error(), `files[0] "~/missing-netrc": cannot open the file`) {
		t.Errorf("a missing file: err = %v, want ErrBadRequest naming files[0]", err)
	}
	if hostFile(filepath.Join(w.Workdir, "ran")) != "<absent>" {
		t.Errorf("a refused command ran")
	}
}

// skills: a skill directory in a hidden dot entry of the home directory
// (docs/sandbox.md: skills) is shown read-only at its own path; the rest
// of that dot entry is not shown, and without the setting neither is the
// skill.
func skills(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	skills := filepath.Join(w.Home, ".agents", "skills")
	script := filepath.Join(skills, "hello", "run.sh")
	writeFile(t, script, "echo skill-ran\n", 0o644)
	writeFile(t, filepath.Join(w.Home, ".agents", "secret.txt"), "s3cret\n", 0o644)
	o := w.sh(t, sess, `sh `+script+`; touch `+filepath.Join(skills, "x")+` 2>&1 | grep -o 'Read-only file system'; cat `+filepath.Join(w.Home, ".agents", "secret.txt")+` 2>&1 | grep -o 'No such file'`,
		func(r *sandbox.Request) { r.Skills = []string{skills} })
	if o.stdout != "skill-ran\nRead-only file system\nNo such file\n" {
		t.Errorf("with skills: %s", o)
	}
	if hostFile(filepath.Join(skills, "x")) != "<absent>" {
		t.Errorf("the sandbox wrote into the skill directory")
	}
	o = w.sh(t, sess, `sh `+script+` 2>&1 | grep -c 'No such file'`)
	if strings.TrimSpace(o.stdout) != "1" {
		t.Errorf("without skills: %s", o)
	}
}

// reviewRefused: a backend without review mode refuses a request with a
// layer (sandbox.Request.LayerDir: "a backend that cannot keep that
// promise refuses the request (ErrPolicy)"), naming workspace_mode
// review, and nothing runs.
func reviewRefused(t *testing.T, h Harness) {
	w := h.New(t)
	sess := session(t, w)
	layer := filepath.Join(w.Home, "layer")
	err := w.runErr(sess, `echo ran > ran`, func(r *sandbox.Request) { r.LayerDir = layer })
	if !errors.Is(err, sandbox.ErrPolicy) || !strings.Contains(err.Error(), "workspace_mode review") {
		t.Errorf("err = %v, want ErrPolicy naming workspace_mode review", err)
	}
	if hostFile(filepath.Join(w.Workdir, "ran")) != "<absent>" {
		t.Errorf("the command ran and wrote to the host's working directory")
	}
}

// profiles: docs/sandbox.md's table: the working directory is read-only
// under restricted and writable under the others; restricted, workspace
// and allowlist have no network but loopback (their sandbox's only
// interface is lo, unless the backend cuts it off by a policy outside:
// Harness.PolicyNetwork). A session's change of profile keeps what its
// commands made in the workspace (on kubernetes, carried into the new
// pod).
func profiles(t *testing.T, h Harness, tr sandbox.Traits) {
	w := h.New(t)
	sess := session(t, w)
	// Made by the sandbox: a workspace may be its own (OwnWorkspace).
	w.sh(t, sess, `echo workspace > README`)
	for _, p := range sandbox.Profiles {
		t.Run(string(p), func(t *testing.T) {
			name := "made-" + string(p)
			var mods []func(*sandbox.Request)
			mods = append(mods, profile(p))
			if p == sandbox.ProfileAllowlist {
				mods = append(mods, func(r *sandbox.Request) { r.NetworkAllow = []string{"*.allowed.test"} })
			}
			// Readable, and there: README, made above under the
			// session's first profile. Where the workspace is the
			// sandbox's own (OwnWorkspace), a change of profile is a new
			// sandbox (kubernetes: a new pod), which gets the old one's
			// workspace carried over.
			o := w.sh(t, sess, `{ echo `+string(p)+` > `+name+`; } 2>/dev/null && echo wrote; [ "$(cat "$1")" = workspace ] && echo read
sed -n 's/^ *\([^:]*\):.*/if \1/p' /proc/net/dev`, append(mods, func(r *sandbox.Request) { r.Argv = append(r.Argv, "sh", filepath.Join(w.Workdir, "README")) })...)
			wrote := strings.Contains(o.stdout, "wrote\n")
			if wrote != p.Writable() || !strings.Contains(o.stdout, "read\n") {
				t.Errorf("working directory writable %v (want %v) and readable: %s", wrote, p.Writable(), o)
			}
			if !tr.OwnWorkspace {
				want := "<absent>"
				if p.Writable() {
					want = string(p) + "\n"
				}
				if got := hostFile(filepath.Join(w.Workdir, name)); got != want {
					t.Errorf("the host's file: %q, want %q", got, want)
				}
			}
			if !p.HostNetwork() && !h.PolicyNetwork {
				var ifs []string
				for l := range strings.SplitSeq(o.stdout, "\n") {
					if v, ok := strings.CutPrefix(l, "if "); ok {
						ifs = append(ifs, v)
					}
				}
				if !slices.Equal(ifs, []string{"lo"}) {
					t.Errorf("interfaces %q, want lo alone: %s", ifs, o)
				}
			}
		})
	}
}

// writableRoots: what a command may write is sandbox.WritableRoots (the
// working directory and the scratch directory but under restricted, a
// read-write bind under every profile); a write there reaches the host's
// file, and a read-only bind, the rest of the home directory and the
// host's other files stay as they are.
func writableRoots(t *testing.T, h Harness, tr sandbox.Traits) {
	w := h.New(t)
	sess := session(t, w)
	dir := func(name string) string {
		p := filepath.Join(w.Home, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rw, ro, outside := dir("bind-rw"), dir("bind-ro"), dir("outside")
	var scratch string
	if !h.NoScratch {
		scratch = dir("scratch")
	}
	writeFile(t, filepath.Join(ro, "f"), "orig\n", 0o644)
	writeFile(t, filepath.Join(outside, "f"), "orig\n", 0o644)
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace} {
		t.Run(string(p), func(t *testing.T) {
			req := w.request(sess)
			req.Profile = p
			req.ScratchDir = scratch
			if !h.NoHostBinds {
				req.Binds = []sandbox.Bind{{Src: rw}, {Src: ro, ReadOnly: true}}
			}
			// Each writable root gets a file; every other path keeps its
			// own.
			var script strings.Builder
			want := map[string]string{}
			for _, root := range sandbox.WritableRoots(req) {
				f := filepath.Join(root.Path, "made-"+string(p))
				fmt.Fprintf(&script, "echo %s > %s && echo 'wrote %s'\n", p, f, f)
				want[f] = string(p) + "\n"
			}
			for _, f := range []string{filepath.Join(ro, "f"), filepath.Join(outside, "f")} {
				fmt.Fprintf(&script, "{ echo changed > %s; } 2>/dev/null\n", f)
				want[f] = "orig\n"
			}
			for _, d := range []string{ro, outside, w.Home} {
				f := filepath.Join(d, "new-"+string(p))
				fmt.Fprintf(&script, "{ echo new > %s; } 2>/dev/null\n", f)
				want[f] = "<absent>"
			}
			script.WriteString("echo done\n")
			req.Argv = []string{"/bin/sh", "-c", script.String()}
			o := w.run(t, req)
			if !strings.HasSuffix(o.stdout, "done\n") {
				t.Fatalf("%s", o)
			}
			for f, v := range want {
				if v != "<absent>" && v != "orig\n" && !strings.Contains(o.stdout, "wrote "+f+"\n") {
					t.Errorf("a writable root refused %s: %s", f, o)
				}
				if tr.OwnWorkspace && strings.HasPrefix(f, w.Workdir+"/") {
					continue // the sandbox's own volume, not the host's
				}
				if got := hostFile(f); got != v {
					t.Errorf("the host's %s: %q, want %q", f, got, v)
				}
			}
		})
	}
}

// kernelInterfaces are host kernel settings and triggers no sandbox may
// open for writing, whoever runs corral (a root caller's sandbox once set
// kernel.core_pattern). Opening without writing changes nothing.
var kernelInterfaces = []string{
	"/proc/sys/kernel/core_pattern",
	"/proc/sys/vm/drop_caches",
	"/proc/sys/net/ipv4/conf/all/route_localnet",
	"/proc/sys/net/ipv4/ip_forward",
	"/proc/sysrq-trigger",
	"/proc/irq/default_smp_affinity",
	"/sys/kernel/mm/transparent_hugepage/enabled",
	"/sys/fs/cgroup/cgroup.procs",
	"/sys/fs/cgroup/pids/cgroup.procs",
}

// setIDScript tries every way to leave a set-user-ID or set-group-ID file
// or directory behind (chmod, install -m, a creating open with the bit,
// mkdir -m, mknod of a fifo with it) and lists what it made that has
// either bit afterwards (none may). The working directory itself is not
// the command's: a kubernetes pod's volume is set-group-ID by the
// kubelet (fsGroup), a host directory by its owner.
const setIDScript = `cp /bin/sh ./shcopy
chmod 4755 ./shcopy 2>/dev/null && echo "chmod allowed"
chmod u+s ./shcopy 2>/dev/null && echo "chmod u+s allowed"
install -m 4755 /bin/sh ./shinstall 2>/dev/null && echo "install allowed"
python3 -c 'import os; os.close(os.open("pyfile", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null && echo "open allowed"
mkdir -m 2777 ./sgiddir 2>/dev/null && echo "mkdir allowed"
mkfifo -m 2644 ./fifo 2>/dev/null && echo "mknod allowed"
find . -mindepth 1 -perm /6000 | sed 's/^/SETID /'
echo end`

// rootCaller: whoever runs corral (root in CI's first pass, a person in
// its second), a sandbox cannot open the host's kernel settings and
// triggers for writing under any profile, cannot leave a set-ID file
// behind (a root caller's would be root's on the host), and cannot write a
// protected path of the workspace (a git hook: sandbox.DefaultProtected).
func rootCaller(t *testing.T, h Harness, tr sandbox.Traits) {
	w := h.New(t)
	sess := session(t, w)
	// Planted before the first command: a session's container or pod
	// protects what exists when it starts. A workspace of the sandbox's
	// own (OwnWorkspace) has no host file to protect.
	hook := filepath.Join(w.Workdir, ".git", "hooks", "pre-commit")
	if !tr.OwnWorkspace {
		writeFile(t, filepath.Join(w.Workdir, ".git", "HEAD"), "ref: refs/heads/main\n", 0o644)
		writeFile(t, hook, "#!/bin/sh\nexit 0\n", 0o755)
	}
	script := `for f in ` + strings.Join(kernelInterfaces, " ") + `; do
  [ -e "$f" ] || continue
  if (exec 3>>"$f") 2>/dev/null; then echo "WRITABLE $f"; else echo "refused $f"; fi
done`
	for _, p := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace, sandbox.ProfileNetwork} {
		o := w.sh(t, sess, script, profile(p))
		if o.res.ExitCode != 0 || !strings.Contains(o.stdout, "refused /proc/sys/kernel/core_pattern") || strings.Contains(o.stdout, "WRITABLE") {
			t.Errorf("profile %s (caller uid %d): a kernel interface opens for writing: %s", p, os.Getuid(), o)
		}
	}
	o := w.sh(t, sess, setIDScript)
	if !strings.HasSuffix(o.stdout, "end\n") || strings.Contains(o.stdout, "SETID") || strings.Contains(o.stdout, "allowed") {
		t.Errorf("a set-ID bit could be set (caller uid %d): %s", os.Getuid(), o)
	}
	if tr.OwnWorkspace {
		return // no host file of the workspace to protect
	}
	w.sh(t, sess, `{ echo 'echo pwned' >> .git/hooks/pre-commit; } 2>/dev/null; rm -f .git/hooks/pre-commit 2>/dev/null; echo done`)
	if got := hostFile(hook); got != "#!/bin/sh\nexit 0\n" {
		t.Errorf("caller uid %d: a protected path of the workspace was written: %q", os.Getuid(), got)
	}
}
