package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/backend/docker"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/testcert"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/toolfixture"
	"github.com/corralhq/corral/sandbox"
)

// TestDefaultsMatrix is issue 25's defaults matrix: what an agent runs
// most, through `corral run` with no settings file (HOME an empty
// directory, no CORRAL_* variable but the column's profile flag, and on
// docker the image), on bwrap under every profile and on docker under its
// default profile and allowlist (matrixProfiles). Each cell (a subtest named backend/profile/tool) runs one
// real toolchain offline: node -e; npm install of a local tarball; go
// build of a module; javac and java of a one-class program; python3 -m
// venv and pip install of a local wheel; cargo build of a crate without
// dependencies; gcc; make; git clone of a local repository; and, under
// allowlist, git clone over HTTPS from a server that wants a token corral
// holds as a secret (the sandbox sees a stand-in). Each must work. With
// the same defaults a memory bomb and a fork bomb must still be held: the
// memory bomb never gets past the default memory limit (bwrap's memory_mb,
// docker.memory) and the fork bomb is refused (EAGAIN) before the default
// process limit (max_procs, docker.pids_limit).
//
// Where the working directory is writable the cells work in a directory of
// their own in it; under restricted, in a new directory of $TMPDIR (where
// an agent would work then). The fixtures lie in the working directory
// (the only host directory a container sees).
//
// On bwrap the tools are the machine's own (toolfixture.SystemPath: Go's
// /usr/local/go/bin and the system's directories, which both CI users
// reach); on docker the image is dockertest.ToolchainImage, built from
// the same files. A tool missing here skips its cells, and fails them
// where CORRAL_REQUIRE_TOOLS=1 (.ci/run). The HTTPS server listens on
// the address git.corral-matrix.test resolves to, which must be routed to
// this machine but assigned to none of its interfaces (corral's proxy
// refuses names that lead to the machine's own addresses): .ci/run sets
// that up (a local route and a line in /etc/hosts).
func TestDefaultsMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the defaults matrix (-short)")
	}
	c := newCLI(t)
	c.env = []string{"HOME=" + c.home, "PATH=" + toolfixture.SystemPath, "LANG=C.UTF-8"}
	fx := writeMatrixFixtures(t, filepath.Join(c.work, "fx"))
	git := startMatrixGitServer(t, filepath.Join(c.work, "fx", "repo.git"), filepath.Dir(c.home))
	for _, backend := range []string{"bwrap", "docker"} {
		t.Run(backend, func(t *testing.T) {
			// The backends side by side: a container has one CPU.
			t.Parallel()
			var extra []string
			switch backend {
			case "bwrap":
				requireBwrap(t)
			case "docker":
				ref, err := dockertest.ToolchainImage(t, dockertest.Engine(t))
				if errors.Is(err, dockertest.ErrMissingTool) {
					toolfixture.Missing(t, err.Error())
				} else if err != nil {
					t.Fatalf("the toolchains image: %v", err)
				}
				// The one setting the docker column needs: the default
				// image cannot be pulled here.
				extra = []string{"CORRAL_DOCKER_IMAGE=" + ref}
				if h := os.Getenv("DOCKER_HOST"); h != "" {
					extra = append(extra, "DOCKER_HOST="+h)
				}
			}
			for _, profile := range matrixProfiles[backend] {
				t.Run(string(profile), func(t *testing.T) {
					col := matrixColumn{backend: backend, profile: profile, fx: fx, git: git, c: c, env: extra}
					for _, cell := range matrixCells {
						if cell.allowlistOnly && profile != sandbox.ProfileAllowlist {
							continue
						}
						t.Run(cell.name, func(t *testing.T) { col.run(t, cell) })
					}
				})
			}
		})
	}
}

// matrixProfiles are the profiles of each backend's columns: every one on
// bwrap; on docker the default (network, which has no network at all
// there: docker.network is none, so it is the workspace profile's
// container too) and allowlist (the proxies, the secrets).
var matrixProfiles = map[string][]sandbox.Profile{
	"bwrap":  {sandbox.ProfileRestricted, sandbox.ProfileWorkspace, sandbox.ProfileAllowlist, sandbox.ProfileNetwork},
	"docker": {sandbox.DefaultProfile, sandbox.ProfileAllowlist},
}

// matrixColumn is one backend under one profile.
type matrixColumn struct {
	backend string
	profile sandbox.Profile
	fx      string // the fixtures' directory
	git     *matrixGitServer
	c       *cli
	env     []string // for corral, beyond the cli's
}

// matrixCell is one tool's check.
type matrixCell struct {
	name string
	// tools must be on this machine for the bwrap backend (the docker
	// image holds them all); "venv" stands for python3 with venv and pip.
	tools []string
	// script runs under bash -e in the cell's directory; @FX@ is the
	// fixtures' directory, @GIT_URL@ the HTTPS repository's URL.
	script string
	// want is the last line of stdout, on exit status 0; check, when set,
	// judges the result instead.
	want  string
	check func(t *testing.T, col matrixColumn, r matrixResult)
	// allowlistOnly: secrets work under allowlist only.
	allowlistOnly bool
}

// matrixResult is what corral run gave.
type matrixResult struct {
	code           int
	stdout, stderr string
}

func (r matrixResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", r.code, ends(r.stdout, 1500), ends(r.stderr, 1500))
}

// ends is s, or its first and last n bytes when it is longer than 2n (a
// Go runtime's fatal error says why first, then dumps every goroutine,
// then corral says what it makes of it).
func ends(s string, n int) string {
	if len(s) <= 2*n {
		return s
	}
	return s[:n] + "\n[... " + strconv.Itoa(len(s)-2*n) + " bytes ...]\n" + s[len(s)-n:]
}

var matrixCells = []matrixCell{
	{name: "node", tools: []string{"node"}, script: `node -e 'console.log(6 * 7)'`, want: "42"},
	{name: "npm", tools: []string{"node", "npm"}, script: `printf '{"name": "app", "version": "1.0.0", "license": "MIT"}\n' > package.json
npm install --offline --no-audit --no-fund --no-update-notifier @FX@/npm/tiny-1.0.0.tgz >&2
node -e 'console.log(require("tiny"))'`, want: "42"},
	{name: "go", tools: []string{"go"}, script: `cp -R @FX@/go/. .
go build -o hello .
./hello 2>&1`, want: "42"},
	{name: "java", tools: []string{"java", "javac"}, script: `javac -d . @FX@/java/Hello.java
java -cp . Hello`, want: "42"},
	{name: "python", tools: []string{"venv"}, script: `python3 -m venv v
v/bin/pip install -q --no-index --find-links @FX@/wheels tinywheel >&2
v/bin/python -c 'import tinywheel; print(tinywheel.VALUE)'`, want: "42"},
	{name: "cargo", tools: []string{"cargo"}, script: `cp -R @FX@/crate/. .
cargo build --offline -q
./target/debug/plain`, want: "42"},
	{name: "gcc", tools: []string{"gcc"}, script: `gcc -o hello @FX@/c/hello.c
./hello`, want: "42"},
	{name: "make", tools: []string{"make", "gcc"}, script: `cp @FX@/c/hello.c @FX@/c/Makefile .
make -s >&2
./hello`, want: "42"},
	{name: "git-clone-local", tools: []string{"git"}, script: `git clone -q @FX@/repo.git r
cat r/answer`, want: "42"},
	{name: "git-clone-https-secret", tools: []string{"git"}, allowlistOnly: true, script: `GIT_TERMINAL_PROMPT=0 git clone -q @GIT_URL@ r
cat r/answer`, want: "42"},
	{name: "memory-bomb", tools: []string{"python3"}, script: `python3 @FX@/bombs/memory.py`, check: checkMemoryBomb},
	{name: "fork-bomb", tools: []string{"python3"}, script: `python3 @FX@/bombs/fork.py`, check: checkForkBomb},
}

// run runs one cell in this column and judges it.
func (col matrixColumn) run(t *testing.T, cell matrixCell) {
	if col.backend == "bwrap" {
		for _, tool := range cell.tools {
			if tool == "venv" {
				toolfixture.RequireVenv(t)
			} else {
				toolfixture.Tool(t, tool)
			}
		}
	}
	prelude := fmt.Sprintf("mkdir -p %[1]s && cd %[1]s\n", filepath.Join(col.c.work, "cells", col.backend+"-"+string(col.profile), cell.name))
	if !col.profile.Writable() {
		prelude = "d=$(mktemp -d) && cd \"$d\"\n"
	}
	script := strings.NewReplacer("@FX@", col.fx, "@GIT_URL@", col.git.url).Replace(cell.script)
	env := append([]string{}, col.env...)
	served := col.git.served.Load()
	if cell.allowlistOnly {
		if col.git.missing != "" {
			toolfixture.Missing(t, col.git.missing)
		}
		env = append(env, col.git.env...)
	}
	args := []string{"run", "--profile", string(col.profile)}
	if col.backend != "bwrap" {
		args = append(args, "--backend", col.backend)
	}
	args = append(args, "--", "bash", "-e", "-c", prelude+script)
	t0 := time.Now()
	// As cli.run does, but failing this subtest (the backends run in
	// parallel).
	cmd := exec.Command(corralBin, args...)
	cmd.Dir = col.c.work
	cmd.Env = append(append([]string{}, col.c.env...), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var ee *exec.ExitError
	if err := cmd.Run(); err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	code, so, se := cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	r := matrixResult{code: code, stdout: so, stderr: se}
	t.Logf("%s in %s", cell.name, time.Since(t0).Round(time.Millisecond))
	if strings.Contains(so+se, col.git.token) {
		t.Errorf("the secret's real value reached the sandbox:\n%s", r)
	}
	if cell.check != nil {
		cell.check(t, col, r)
		return
	}
	lines := strings.Split(strings.TrimSpace(so), "\n")
	if code != 0 || lines[len(lines)-1] != cell.want {
		t.Errorf("want exit 0 and %q last on stdout; got %s", cell.want, r)
	}
	if cell.allowlistOnly && col.git.served.Load() == served {
		t.Errorf("the server saw no request with the real token")
	}
}

// memoryLimitMiB is the column's default memory bound: bwrap's memory_mb,
// or docker.memory.
func (col matrixColumn) memoryLimitMiB(t *testing.T) int {
	if col.backend == "bwrap" {
		return sandbox.DefaultLimits.MemoryMB
	}
	m := docker.SettingsOf(config.Defaults()).Memory
	n, err := strconv.Atoi(strings.TrimRight(m, "bkmgBKMG"))
	if err != nil {
		t.Fatalf("docker.memory default %q: %v", m, err)
	}
	switch strings.ToLower(m[len(m)-1:]) {
	case "g":
		return n << 10
	case "m":
		return n
	}
	t.Fatalf("docker.memory default %q: not in m or g", m)
	return 0
}

// processLimit is the column's default process bound: max_procs, or
// docker.pids_limit.
func (col matrixColumn) processLimit() int {
	if col.backend == "bwrap" {
		return sandbox.DefaultLimits.MaxProcs
	}
	return docker.SettingsOf(config.Defaults()).PidsLimit
}

// memoryBomb touches 64 MiB more at a time, saying how much it holds
// after each, up to 4 GiB; a MemoryError (an address space or data limit)
// ends it with status 3, the kernel's OOM killer (a memory cgroup) with
// SIGKILL.
const memoryBomb = `import sys
held, chunks = 0, []
try:
    while held < 4096:
        chunks.append(b"x" * (64 << 20))
        held += 64
        print(held, flush=True)
except MemoryError:
    print("MemoryError", flush=True)
    sys.exit(3)
print("not held", flush=True)
`

// checkMemoryBomb: the bomb must end in failure, never having held more
// than the column's memory limit.
func checkMemoryBomb(t *testing.T, col matrixColumn, r matrixResult) {
	limit := col.memoryLimitMiB(t)
	most := 0
	for l := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		if n, err := strconv.Atoi(l); err == nil && n > most {
			most = n
		}
	}
	if r.code == 0 || strings.Contains(r.stdout, "not held") || most > limit {
		t.Errorf("the memory bomb was not held under %d MiB (it held %d MiB): %s", limit, most, r)
	}
	t.Logf("memory bomb: exit %d after holding %d MiB (limit %d MiB)", r.code, most, limit)
}

// forkBomb starts cat processes (posix_spawn, so each costs a process,
// not a copy of python) reading a pipe, until the kernel refuses one or
// 4096 run; then it closes the pipe, waits for them all and prints how
// many it started and the refusal's errno name.
const forkBomb = `import errno, os
r, w = os.pipe()
pids, err = [], None
while len(pids) < 4096:
    try:
        pids.append(os.posix_spawn("/bin/cat", ["cat"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, r, 0)]))
    except OSError as e:
        err = e.errno
        break
os.close(w)
for p in pids:
    os.waitpid(p, 0)
print(len(pids), errno.errorcode.get(err, "none"), flush=True)
`

var forkBombLine = regexp.MustCompile(`(?m)^(\d+) (\w+)$`)

// checkForkBomb: the bomb must be refused with EAGAIN before the column's
// process limit, and end on its own.
func checkForkBomb(t *testing.T, col matrixColumn, r matrixResult) {
	limit := col.processLimit()
	m := forkBombLine.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("the fork bomb did not finish: %s", r)
	}
	n, _ := strconv.Atoi(m[1])
	if m[2] != "EAGAIN" || n >= limit {
		t.Errorf("the fork bomb was not held under %d processes: it started %d, then %s: %s", limit, n, m[2], r)
	}
	t.Logf("fork bomb: %d processes, then %s (limit %d)", n, m[2], limit)
}

// writeMatrixFixtures writes the cells' inputs under dir, all readable by
// everyone (a root caller's sandbox holds an unprivileged identity) and
// made here, offline: an npm tarball, a wheel, a Go module, a crate, a
// Java class, a C program with its Makefile, a bare git repository, the
// bombs. It returns dir.
func writeMatrixFixtures(t *testing.T, dir string) string {
	t.Helper()
	for _, d := range []string{"npm", "wheels"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	toolfixture.NpmTarball(t, filepath.Join(dir, "npm"))
	toolfixture.Wheel(t, filepath.Join(dir, "wheels"))
	toolfixture.GoModule(t, filepath.Join(dir, "go"), false)
	toolfixture.PlainCrate(t, filepath.Join(dir, "crate"))
	toolfixture.JavaClass(t, filepath.Join(dir, "java"))
	toolfixture.CProgram(t, filepath.Join(dir, "c"))
	toolfixture.Write(t, filepath.Join(dir, "bombs"), map[string]string{"memory.py": memoryBomb, "fork.py": forkBomb})
	toolfixture.GitRepo(t, filepath.Join(dir, "repo.git"))
	return dir
}

// matrixGitHost is the HTTPS git server's name: .ci/run makes it resolve
// to an address routed to this machine and assigned to none of its
// interfaces.
const matrixGitHost = "git.corral-matrix.test"

// matrixGitServer serves a bare repository over HTTPS with git's smart
// HTTP protocol (git http-backend through CGI), to requests whose Basic
// password is its token only.
type matrixGitServer struct {
	// missing, when not empty, says why there is no server here.
	missing string
	url     string   // the repository's URL
	token   string   // the real token, which the sandbox must never see
	env     []string // for corral: the secret, its source and the server's CA
	// served counts the requests that carried the real token.
	served atomic.Int64
}

// startMatrixGitServer starts the server for the bare repository repo
// (which git on this machine can read) at matrixGitHost, its certificate
// trusted by corral through SSL_CERT_FILE (a file written in dir), and
// returns it with the environment that makes its token a corral secret
// for that host. Without the name, or an address for it that this machine
// can listen on, the server says so in missing (its cells skip, or fail
// where tools are required).
func startMatrixGitServer(t *testing.T, repo, dir string) *matrixGitServer {
	t.Helper()
	s := &matrixGitServer{token: "ghp_" + testkit.RandomAlnum(36)}
	addrs, err := net.LookupHost(matrixGitHost)
	if err != nil || len(addrs) == 0 {
		s.missing = fmt.Sprintf("%s does not resolve (%v): .ci/run adds it to /etc/hosts, with a local route for its address", matrixGitHost, err)
		return s
	}
	if ip := net.ParseIP(addrs[0]); ip == nil || ip.IsLoopback() {
		s.missing = fmt.Sprintf("%s resolves to %s: corral's proxy refuses loopback; it must be an address routed to this machine but assigned to none of its interfaces (.ci/run)", matrixGitHost, addrs[0])
		return s
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
	if err != nil {
		s.missing = fmt.Sprintf("cannot listen on %s, the address of %s (%v): .ci/run routes it to this machine (ip route add local ADDR/32 dev lo)", addrs[0], matrixGitHost, err)
		return s
	}
	gitPath := toolfixture.Tool(t, "git")
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1"}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); !ok || pass != s.token {
			w.Header().Set("WWW-Authenticate", `Basic realm="corral-matrix"`)
			http.Error(w, "token needed", http.StatusUnauthorized)
			return
		}
		s.served.Add(1)
		backend.ServeHTTP(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	cert, caPEM := testcert.New(t, matrixGitHost)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s.url = "https://" + net.JoinHostPort(matrixGitHost, port) + "/" + filepath.Base(repo)
	// corral's proxy checks the upstream against the system's roots,
	// which Go reads from SSL_CERT_FILE when it is set.
	bundle := filepath.Join(dir, "matrix-upstream-ca.pem")
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err := os.WriteFile(bundle, append(append(system, '\n'), caPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = []string{"SSL_CERT_FILE=" + bundle, "MATRIX_GIT_REAL=" + s.token,
		`CORRAL_SECRETS=[{name: GIT_TOKEN, from: "env:MATRIX_GIT_REAL", hosts: [` + matrixGitHost + `]}]`}
	return s
}
