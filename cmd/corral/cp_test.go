package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/k8stest"
	"github.com/corralhq/corral/internal/testkit"
)

// TestCpSyncBwrap: corral cp puts a tree (modes, symlinks, a binary, a
// 50 MiB file) into a bwrap session's workspace, where its commands see
// it, and brings it back identical; sync pushes with --delete and pulls;
// paths outside the workspace and a missing session are refused by name;
// the person's own hooks go in (the push side refuses no .git).
func TestCpSyncBwrap(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if code, _, se := c.run(nil, "run", "--session", "w", "--", "echo old > stale"); code != 0 {
		t.Fatalf("first command: %d %s", code, se)
	}
	host := filepath.Join(filepath.Dir(c.home), "host")
	testkit.MakeTree(t, host, 50<<20)
	if code, _, se := c.run(nil, "cp", filepath.Join(host, "src"), "w:in"); code != 0 || !strings.Contains(se, "5 files") {
		t.Fatalf("cp in: %d %s", code, se)
	}
	code, so, se := c.run(nil, "run", "--session", "w", "--", `stat -c '%A %n' in/run.sh in/secret; readlink in/sub/link-out; wc -c < in/big`)
	if code != 0 || so != "-rwxr-xr-x in/run.sh\n-rw------- in/secret\n/etc/passwd\n52428800\n" {
		t.Errorf("in the sandbox: %d %q %s", code, so, se)
	}
	back := filepath.Join(filepath.Dir(c.home), "back")
	if code, _, se := c.run(nil, "cp", "--session", "w", ":in", back); code != 0 || !strings.Contains(se, "link-out: "+handback.WhyLinkOut) {
		t.Fatalf("cp out: %d %s (want sub/link-out, to /etc/passwd, held)", code, se)
	}
	// The symlink out of the destination comes when named.
	os.RemoveAll(back)
	if code, _, se := c.run(nil, "cp", "--session", "w", "--include-risky", "back/sub/link-out", ":in", back); code != 0 {
		t.Fatalf("cp out: %d %s", code, se)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src")), testkit.TreeHash(t, back); a != b {
		t.Errorf("round trip differs")
	}
	// A relative path starts at the session's current directory, as the
	// file tools' do; one that is not there is said with where it looked.
	if code, _, se := c.run(nil, "run", "--session", "w", "--", "mkdir -p up && cd up && echo r > result.txt"); code != 0 {
		t.Fatalf("cd up: %d %s", code, se)
	}
	res := filepath.Join(filepath.Dir(c.home), "result.txt")
	if code, _, se := c.run(nil, "cp", "w:result.txt", res); code != 0 {
		t.Errorf("cp w:result.txt from the session's cwd: %d %s", code, se)
	} else if b, _ := os.ReadFile(res); string(b) != "r\n" {
		t.Errorf("copied %q", b)
	}
	if code, _, se := c.run(nil, "cp", "w:nothing-here", res+"2"); code == 0 || !strings.Contains(se, "has no "+filepath.Join(c.work, "up", "nothing-here")) {
		t.Errorf("cp of a missing path: %d %s", code, se)
	}
	if code, _, se := c.run(nil, "run", "--session", "w", "--", "cd .."); code != 0 {
		t.Fatalf("cd ..: %d %s", code, se)
	}
	if code, _, se := c.run(nil, "sync", "--session", "w", "--delete", filepath.Join(host, "src/sub")); code != 0 || !strings.Contains(se, "deleted") {
		t.Fatalf("sync --delete: %d %s", code, se)
	}
	if _, err := os.Stat(filepath.Join(c.work, "stale")); err == nil {
		t.Error("sync --delete kept stale")
	}
	pulled := filepath.Join(filepath.Dir(c.home), "pulled")
	code, _, se = c.run(nil, "sync", "--session", "w", "--pull", "--include-risky", "link-out", "--include-risky", "link-in", pulled) // both lead out of DIR
	if code != 0 {
		t.Fatalf("sync --pull: %d %s", code, se)
	}
	if a, b := testkit.TreeHash(t, filepath.Join(host, "src/sub")), testkit.TreeHash(t, pulled); a != b {
		t.Errorf("sync round trip differs:\n%s\n%s\n%s", a, b, se)
	}
	os.MkdirAll(filepath.Join(host, "hooks"), 0o755)
	os.WriteFile(filepath.Join(host, "hooks/pre-commit"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(c.work, ".git/hooks"), 0o755)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cp", filepath.Join(host, "src/run.sh"), "w:/etc/x"}, "outside session w's workspace"},
		{[]string{"cp", filepath.Join(host, "src/run.sh"), "nope:x"}, `no session "nope" (corral sessions list shows them; a session exists once a command ran in it): start it with ` + "`corral run --session nope -- true`"},
		{[]string{"cp", "a", "b"}, "one of SRC and DST must be"},
		// Without --session: the current directory's session, as corral
		// mcp, diff and apply use (none here).
		{[]string{"sync", "x"}, `no session "dir:` + c.work + `"`},
		{[]string{"cp", ":in", "x"}, `no session "dir:` + c.work + `"`},
	} {
		code, _, se := c.run(nil, tc.args...)
		if code == 0 || !strings.Contains(se, tc.want) {
			t.Errorf("%q: %d %s, want %q", tc.args, code, se, tc.want)
		}
	}
	if code, _, se := c.run(nil, "cp", filepath.Join(host, "hooks"), "w:.git"); code != 0 {
		t.Errorf("cp of the person's hooks into .git: %d %s", code, se)
	}
	if _, err := os.Stat(filepath.Join(c.work, ".git/hooks/pre-commit")); err != nil {
		t.Errorf("the person's hook: %v", err)
	}
}

// TestCpOutHoldsRisky: what an ordinary command in a bwrap session makes
// that would run on the host is held back by sync --pull and cp out
// (riskyHandBack).
func TestCpOutHoldsRisky(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	riskyHandBack(t, c, "w", func(script string) {
		t.Helper()
		if code, so, se := c.run(nil, "run", "--session", "w", "--", script); code != 0 {
			t.Fatalf("command %q: %d %s %s", script, code, so, se)
		}
	}, false)
}

// TestDockerCpOutHoldsRisky: the same on docker.
func TestDockerCpOutHoldsRisky(t *testing.T) {
	c, _ := dockerCLI(t)
	sess := "risky-" + itoa(os.Getpid())
	riskyHandBack(t, c, sess, func(script string) {
		t.Helper()
		if code, so, se := c.run(nil, "run", "--session", sess, "--", script); code != 0 {
			t.Fatalf("command %q: %d %s %s", script, code, so, se)
		}
	}, false)
}

// TestCpOutHoldsRiskyKubernetes: the same on kubernetes, where nothing
// protects the workspace's own .git, .bashrc or editor settings from its
// commands (the pod's workspace is not the host's): those at its top are
// held back too. A session's pod lives as long as the corral that made
// it, so the commands run in one `corral exec -i` that reads them from
// stdin, while corral cp and sync run beside it.
func TestCpOutHoldsRiskyKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	cl := k8stest.Require(t)
	c := newCLI(t)
	c.env = append(c.env, "CORRAL_BACKEND=kubernetes", "CORRAL_KUBERNETES_KUBECONFIG="+os.Getenv(k8stest.EnvKubeconfig),
		"CORRAL_KUBERNETES_NAMESPACE="+cl.Namespace, "CORRAL_KUBERNETES_IMAGE="+cl.Image, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m")
	sess := "risky-" + itoa(os.Getpid())
	// A first command records the session (its backend, its working
	// directory); corral exec does not.
	if code, so, se := c.run(nil, "run", "--session", sess, "--", "true"); code != 0 {
		t.Fatalf("first command: %d %s %s", code, so, se)
	}
	holder := exec.Command(corralBin, "exec", "--session", sess, "-i", "--", "bash", "-c", `while IFS= read -r l; do eval "$l"; echo "DONE $?"; done`)
	holder.Dir, holder.Env = c.work, c.env
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var herr bytes.Buffer
	holder.Stderr = &herr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		if err := holder.Wait(); err != nil {
			t.Errorf("corral exec: %v\n%s", err, herr.String())
		}
	})
	lines := bufio.NewScanner(outR)
	riskyHandBack(t, c, sess, func(script string) {
		t.Helper()
		if _, err := io.WriteString(in, script+"\n"); err != nil {
			t.Fatalf("corral exec: %v\n%s", err, herr.String())
		}
		var out []string
		for lines.Scan() {
			if st, ok := strings.CutPrefix(lines.Text(), "DONE "); ok {
				if st != "0" {
					t.Fatalf("command %q: status %s: %q", script, st, out)
				}
				return
			}
			out = append(out, lines.Text())
		}
		t.Fatalf("corral exec ended: %q\n%s", out, herr.String())
	}, true)
}

// riskyHandBack: what an ordinary command in session sess of c makes
// (runIn runs one line there) that would run on the host, a repository
// three levels down with an executable hook and core.fsmonitor, a
// .bashrc, a .vscode task and, with top (where the backend does not
// protect them), the workspace's own .git/hooks/post-checkout, .git/config
// with core.fsmonitor and .bashrc, is held back by sync --pull and cp out:
// listed first with why, exit 0, not written, the host's own versions
// untouched and never deleted (--delete); written when named with
// --include-risky. A git project syncs in with its .git.
func riskyHandBack(t *testing.T, c *cli, sess string, runIn func(script string), top bool) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	proj := filepath.Join(filepath.Dir(c.home), "proj")
	os.MkdirAll(proj, 0o755)
	gitIn := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v %s", args, err, out)
		}
	}
	gitIn(proj, "init", "-q")
	os.WriteFile(filepath.Join(proj, "README"), []byte("hi\n"), 0o644)
	os.WriteFile(filepath.Join(proj, ".bashrc"), []byte("mine\n"), 0o644)
	// The push side takes a project's .git along.
	runIn("true")
	if code, _, se := c.run(nil, "sync", "--session", sess, proj); code != 0 {
		t.Fatalf("sync of a git project: %d %s", code, se)
	}
	// The hooks would leave this file on the host if they ran there.
	pwned := filepath.Join(c.home, "pwned")
	hook := `printf '#!/bin/sh\necho PWNED > ` + pwned + `\n'`
	fsmon := `printf '[core]\n\tfsmonitor = echo PWNED > ` + pwned + `\n'`
	script := `mkdir -p a/b/c/.git/hooks a/b/c/.git/objects a/b/c/.git/refs x .vscode2/.vscode && echo 'ref: refs/heads/main' > a/b/c/.git/HEAD && ` +
		hook + ` > a/b/c/.git/hooks/post-checkout && chmod +x a/b/c/.git/hooks/post-checkout && ` + fsmon + ` > a/b/c/.git/config && ` +
		`echo 'echo PWNED' > x/.bashrc && echo '{}' > .vscode2/.vscode/tasks.json && echo ok > a/b/c/file.txt`
	risky := []string{"a/b/c/.git/config", "a/b/c/.git/hooks/post-checkout", "x/.bashrc", ".vscode2/.vscode/tasks.json"}
	if top {
		script += ` && mkdir -p .git/hooks && ` + hook + ` > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && ` +
			fsmon + ` >> .git/config && echo 'echo PWNED' > .bashrc`
		risky = append(risky, ".git/hooks/post-checkout", ".git/config", ".bashrc")
	}
	runIn(script)
	os.MkdirAll(filepath.Join(proj, "x"), 0o755)
	os.WriteFile(filepath.Join(proj, "x/.bashrc"), []byte("mine\n"), 0o644)
	gitConfig, _ := os.ReadFile(filepath.Join(proj, ".git/config"))
	code, _, se := c.run(nil, "sync", "--session", sess, "--pull", "--delete", proj)
	want := fmt.Sprintf("corral sync: held back %d risky paths", len(risky))
	if code != 0 || !strings.HasPrefix(se, want) || strings.Index(se, "held back") > strings.Index(se, " bytes)") {
		t.Fatalf("sync --pull: %d %s, want it to start with %q", code, se, want)
	}
	for _, p := range risky {
		if !strings.Contains(se, "\n  "+p+": ") {
			t.Errorf("not listed: %s\n%s", p, se)
		}
	}
	for p, want := range map[string]string{"x/.bashrc": "mine\n", ".bashrc": "mine\n", ".git/config": string(gitConfig), "a/b/c/file.txt": "ok\n", "README": "hi\n"} {
		if b, err := os.ReadFile(filepath.Join(proj, p)); err != nil || string(b) != want {
			t.Errorf("the host's %s: %q %v, want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"a/b/c/.git/config", "a/b/c/.git/hooks/post-checkout", ".vscode2/.vscode/tasks.json", ".git/hooks/post-checkout"} {
		if _, err := os.Lstat(filepath.Join(proj, p)); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	gitIn(filepath.Join(proj, "a/b/c"), "status")
	gitIn(proj, "status")
	if _, err := os.Stat(pwned); err == nil {
		t.Error("a hook ran on the host")
	}
	// cp out: the same, into a new directory.
	dest := filepath.Join(filepath.Dir(c.home), "dest")
	code, _, se = c.run(nil, "cp", "--session", sess, ":a", dest)
	if code != 0 || !strings.HasPrefix(se, "corral cp: held back 2 risky paths") || !strings.Contains(se, "  dest/b/c/.git/hooks/post-checkout: a git hook") {
		t.Fatalf("cp out: %d %s", code, se)
	}
	if _, err := os.Lstat(filepath.Join(dest, "b/c/.git/config")); err == nil {
		t.Error("cp wrote .git/config")
	}
	if b, err := os.ReadFile(filepath.Join(dest, "b/c/file.txt")); err != nil || string(b) != "ok\n" {
		t.Errorf("cp out's file.txt: %q %v", b, err)
	}
	// All that was asked for held: nothing copied, and the exit status
	// says so (a new user's `corral cp S:.envrc .envrc` exited 0).
	only := filepath.Join(filepath.Dir(c.home), "dest-only")
	os.Mkdir(only, 0o755)
	code, _, se = c.run(nil, "cp", "--session", sess, ":x/.bashrc", only)
	if _, err := os.Lstat(filepath.Join(only, ".bashrc")); code != 1 || !strings.Contains(se, "nothing was copied: what was asked for was held back") || err == nil {
		t.Errorf("cp of a risky path alone: %d, written %v, %s", code, err == nil, se)
	}
	// Named, it is written.
	code, _, se = c.run(nil, "sync", "--session", sess, "--pull", "--include-risky", "x/.bashrc", proj)
	if b, _ := os.ReadFile(filepath.Join(proj, "x/.bashrc")); code != 0 || string(b) != "echo PWNED\n" || !strings.Contains(se, fmt.Sprintf("held back %d risky paths", len(risky)-1)) {
		t.Errorf("--include-risky: %d %q %s", code, b, se)
	}
	code, _, se = c.run(nil, "cp", "--session", sess, "--include-risky", "dest2/b/c/.git/hooks/post-checkout", ":a", filepath.Join(filepath.Dir(c.home), "dest2"))
	if fi, err := os.Stat(filepath.Join(filepath.Dir(c.home), "dest2/b/c/.git/hooks/post-checkout")); code != 0 || err != nil || fi.Mode()&0o100 == 0 || !strings.Contains(se, "held back 1 risky path") {
		t.Errorf("cp --include-risky: %d %v %s", code, err, se)
	}
	if strings.Contains(se, "names no risky path") {
		t.Errorf("a matching --include-risky was warned about: %s", se)
	}
	// A path not as listed (relative to the workspace, not to DEST's
	// parent) is said, not silently ignored.
	code, _, se = c.run(nil, "cp", "--session", sess, "--include-risky", "a/b/c/.git/hooks/post-checkout", ":a", filepath.Join(filepath.Dir(c.home), "dest3"))
	if code != 0 || !strings.Contains(se, "--include-risky a/b/c/.git/hooks/post-checkout names no risky path here") {
		t.Errorf("an unmatched --include-risky: %d %s", code, se)
	}
}

// TestDoctorKubernetes: `corral doctor --backend kubernetes` with corral's
// namespace-only kubeconfig reports each line of the cluster: the API
// server, the namespace, each permission, the runtime classes, seccomp,
// the pids limit not visible, and NetworkPolicy as the cluster says; an
// unreachable server is not ready and names the fix.
func TestDoctorKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("kubernetes cluster test (-short)")
	}
	cl := k8stest.Require(t)
	c := newCLI(t)
	env := []string{"CORRAL_KUBERNETES_KUBECONFIG=" + os.Getenv(k8stest.EnvKubeconfig), "CORRAL_KUBERNETES_NAMESPACE=" + cl.Namespace,
		"CORRAL_KUBERNETES_IMAGE=" + cl.Image, "CORRAL_KUBERNETES_MEMORY=256Mi", "CORRAL_KUBERNETES_CPUS=500m"}
	code, so, se := c.run(env, "doctor", "--backend", "kubernetes")
	policy := "warn kubernetes NetworkPolicy: not enforced (a probe pod under a deny-all NetworkPolicy still reached the API server"
	if os.Getenv("CORRAL_TEST_KUBE_NETWORKPOLICY_ENFORCED") == "1" {
		policy = "ok   kubernetes NetworkPolicy: enforced"
	}
	want := []string{
		"ok   kubernetes API server https://",
		"ok   kubernetes namespace " + cl.Namespace + " exists",
		"ok   kubernetes may create pods in " + cl.Namespace,
		"ok   kubernetes may create pods/exec in " + cl.Namespace,
		"ok   kubernetes may delete networkpolicies in " + cl.Namespace,
		"ok   kubernetes may create persistentvolumeclaims in " + cl.Namespace,
		"     kubernetes runtime classes: ",
		"     kubernetes.runtime_class: not set",
		"     kubernetes seccomp: RuntimeDefault",
		"     kubernetes pod pids limit: not visible to these credentials",
		policy,
		"     backend: kubernetes",
		"\nready\n",
	}
	for _, w := range want {
		if !strings.Contains(so, w) {
			t.Errorf("doctor lacks %q:\n%s\n%s", w, so, se)
		}
	}
	if code != 0 || strings.Contains(so, "FAIL kubernetes") {
		t.Errorf("doctor: exit %d\n%s", code, so)
	}
	kc := filepath.Join(c.home, "bad.kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600)
	code, so, _ = c.run([]string{"CORRAL_KUBERNETES_KUBECONFIG=" + kc}, "doctor", "--backend", "kubernetes")
	if code != 1 || !strings.Contains(so, "FAIL kubernetes API server https://127.0.0.1:1: not reachable") ||
		!strings.Contains(so, "fix:   the API server https://127.0.0.1:1 is not reachable") || !strings.Contains(so, "not ready") {
		t.Errorf("unreachable: exit %d\n%s", code, so)
	}
}

// TestHandBackHoldsConfiguredProtectedPaths: the setting protected_paths
// is part of the hand-back gate: corral cp out (and sync --pull, through
// the same wscopy.Out) holds a path it names back, as it holds a git hook.
func TestHandBackHoldsConfiguredProtectedPaths(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	cfg := filepath.Join(c.home, "corral.yaml")
	if err := os.WriteFile(cfg, []byte("protected_paths: [\"**/deploy.key\", \".git\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Made without the setting: with it, bwrap would have moved the file
	// to quarantine when the command ended (a pod's workspace has no such
	// guard, TestCpOutHoldsRiskyKubernetes).
	if code, so, se := c.run(nil, "run", "--session", "pp", "--", "mkdir -p out/sub && echo secret > out/sub/deploy.key && echo fine > out/ok.txt"); code != 0 {
		t.Fatalf("command: %d %s %s", code, so, se)
	}
	dest := filepath.Join(c.home, "dest")
	os.MkdirAll(dest, 0o755)
	code, _, se := c.run(nil, "--config", cfg, "cp", "--session", "pp", ":out", dest)
	if code != 0 || !strings.Contains(se, "out/sub/deploy.key") || !strings.Contains(se, "**/deploy.key") {
		t.Fatalf("cp out with a protected path: %d %s", code, se)
	}
	if _, err := os.Lstat(filepath.Join(dest, "out", "sub", "deploy.key")); err == nil {
		t.Error("cp wrote the protected path")
	}
	if b, err := os.ReadFile(filepath.Join(dest, "out", "ok.txt")); err != nil || string(b) != "fine\n" {
		t.Errorf("cp did not write the rest: %q %v", b, err)
	}
	// Without the setting the default list applies, which does not name it.
	dest2 := filepath.Join(c.home, "dest2")
	os.MkdirAll(dest2, 0o755)
	if code, _, se := c.run(nil, "cp", "--session", "pp", ":out", dest2); code != 0 || strings.Contains(se, "deploy.key") {
		t.Fatalf("cp out without the setting: %d %s", code, se)
	}
	if _, err := os.Lstat(filepath.Join(dest2, "out", "sub", "deploy.key")); err != nil {
		t.Errorf("without the setting the file was held: %v", err)
	}
}

// TestCpSyncRefuseReview: a review-mode session's files are its layer
// over the working directory, so cp and sync, which go to the directory
// itself, refuse it in every direction, naming review mode: before, a
// copy in wrote the project past review (discard then had nothing to
// drop), a copy out missed the session's own files, and sync --delete
// removed the project's files.
func TestCpSyncRefuseReview(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	review := []string{"CORRAL_WORKSPACE_MODE=review"}
	precious := filepath.Join(c.work, "precious.txt")
	if err := os.WriteFile(precious, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, se := c.run(review, "run", "--session", "rv", "--", "echo agent > agent.txt"); code != 0 {
		t.Fatalf("first command: %d %s", code, se)
	}
	host := t.TempDir()
	in := filepath.Join(host, "in.txt")
	os.WriteFile(in, []byte("in\n"), 0o644)
	for _, args := range [][]string{
		{"cp", in, "rv:in.txt"},
		{"cp", "rv:agent.txt", filepath.Join(host, "out.txt")},
		{"sync", "--session", "rv", "--delete", host},
		{"sync", "--session", "rv", "--pull", host},
	} {
		code, _, se := c.run(review, args...)
		if code == 0 || !strings.Contains(se, "review mode") {
			t.Errorf("%q on a review session: exit %d, %s; want a refusal naming review mode", args, code, se)
		}
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "mine\n" {
		t.Errorf("the project's own file after the refusals: %q %v", b, err)
	}
	for _, p := range []string{filepath.Join(c.work, "in.txt"), filepath.Join(c.work, "agent.txt"), filepath.Join(host, "out.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
}

// TestCpOutHoldsCorralsOwn: a copy out of a session never writes corral's
// own settings (the hostile trial wrote backend: local into
// ~/.config/corral from a session, and the next command ran unsandboxed);
// it is held back as risky and named.
func TestCpOutHoldsCorralsOwn(t *testing.T) {
	requireBwrap(t)
	c := newCLI(t)
	if code, _, se := c.run(nil, "run", "--session", "own", "--", "mkdir -p cfg/corral && echo 'backend: local' > cfg/corral/config.yaml"); code != 0 {
		t.Fatalf("first command: %d %s", code, se)
	}
	dst := filepath.Join(c.home, ".config")
	os.MkdirAll(dst, 0o700)
	_, _, se := c.run(nil, "cp", "own:cfg/corral", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "corral", "config.yaml")); err == nil {
		t.Fatalf("cp out wrote corral's own settings: %q (%s)", b, se)
	}
	if !strings.Contains(se, "corral's own") {
		t.Errorf("cp out does not say it held corral's own settings: %s", se)
	}
}
