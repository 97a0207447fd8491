package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/sandbox"
)

// fixture is a docker backend on the real engine with the test image.
type fixture struct {
	t   testing.TB
	cli *client.Client
	e   *Engine
	b   *Backend
	ws  string
	log *testkit.LogBuf
}

func newFixture(t testing.TB, mutate func(*Settings)) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("docker integration test (-short)")
	}
	cli := dockertest.Engine(t)
	st := DefaultSettings
	st.Image = dockertest.Image(t, cli)
	if mutate != nil {
		mutate(&st)
	}
	lb := &testkit.LogBuf{}
	ws0 := dockertest.TestDir(t)
	e := NewEngine(Options{
		Egress:        testPool(t, lb),
		QuarantineDir: filepath.Join(ws0, "quarantine"),
		EmptyFile:     filepath.Join(ws0, "empty"),
		ProfileDir:    filepath.Join(ws0, "seccomp"),
		ReviewDir:     filepath.Join(ws0, "podman-review"),
		Helper:        dockertest.StaticHelper(t),
		Logger:        slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})),
		KillGrace:     time.Second,
	})
	t.Cleanup(func() { e.Close() })
	ws := dockertest.TestDir(t)
	if err := os.WriteFile(ws+"/README", []byte("workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, cli: cli, e: e, b: e.Backend(st), ws: ws, log: lb}
}

// perProcess says whether the engine under test holds containers'
// limits per process (Flavor.PerProcess: a rootless Podman that cannot
// limit them by cgroups).
func (f *fixture) perProcess() bool {
	f.t.Helper()
	fl, err := f.e.flavor(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return fl.PerProcess != ""
}

// run runs a bash command line in session sess and returns the result and
// its combined output.
func (f *fixture) run(sess, script string, mod ...func(*sandbox.Request)) (*sandbox.Result, string) {
	f.t.Helper()
	var out bytes.Buffer
	req := &sandbox.Request{
		Argv: []string{"bash", "-c", script}, Policy: sandbox.Policy{Workdir: f.ws, Profile: sandbox.ProfileWorkspace}, Session: sess, Stdout: &out, Stderr: &out, Timeout: time.Minute,
		Env: []string{"PATH=/usr/bin:/bin", "HOSTONLY=x"}, PolicyEnv: []string{"HOSTONLY=x"},
	}
	for _, m := range mod {
		m(req)
	}
	res, err := f.b.Run(context.Background(), req)
	if err != nil {
		f.t.Fatalf("Run(%q): %v", script, err)
	}
	return res, out.String()
}

// containers lists the corral containers of key (all states).
func (f *fixture) containers(key string) []string {
	f.t.Helper()
	flt := client.Filters{}.Add("label", LabelEnv+"=1")
	if key != "" {
		flt = flt.Add("label", LabelKey+"="+key)
	}
	res, err := f.cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: flt})
	if err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, c := range res.Items {
		o, _ := owner.Parse(c.Labels[LabelOwner])
		if o.PID != os.Getpid() {
			continue // another test process's
		}
		names = append(names, strings.TrimPrefix(c.Names[0], "/"))
	}
	return names
}

// buildHelperOnlyImage imports an image holding nothing but /tmp.
func buildHelperOnlyImage(t *testing.T, f *fixture) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777})
	tw.Close()
	ref := "corral-test-empty:1"
	res, err := f.cli.ImageImport(context.Background(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	return ref
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	return ptmx, tty
}

// testPool is an allowlist proxy pool whose upstream dialer maps the test
// names (*.allowed.test, *.test.evil) to an HTTP server on the host's
// loopback that answers "hello from HOST".
func testPool(t testing.TB, lb *testkit.LogBuf) *egress.Pool {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	t.Cleanup(srv.Close)
	dir, err := os.MkdirTemp("/var/tmp", "cn-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := egress.NewPool(egress.Options{
		Dir:    dir,
		Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		},
		Linger: -1,
	})
	t.Cleanup(func() { p.Close() })
	return p
}

// secretsEngine is an engine with every directory secrets need (the
// quarantine, trust and secret files' folders) under state, the allowlist
// proxies of pool, and the static corral as its helper: the engine of the
// secrets tests and of the conformance suite.
func secretsEngine(t *testing.T, state string, pool *egress.Pool, logger *slog.Logger) *Engine {
	e := NewEngine(Options{
		Egress:         pool,
		QuarantineDir:  filepath.Join(state, "quarantine"),
		EmptyFile:      filepath.Join(state, "empty"),
		TrustDir:       filepath.Join(state, "trust"),
		SecretFilesDir: filepath.Join(state, "secretfiles"),
		ProfileDir:     filepath.Join(state, "seccomp"),
		ReviewDir:      filepath.Join(state, "podman-review"),
		Helper:         dockertest.StaticHelper(t),
		Logger:         logger,
		KillGrace:      time.Second,
	})
	t.Cleanup(func() { e.Close() })
	return e
}
