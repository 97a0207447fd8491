package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// ChurnLabel is the label of every container Churn starts (its value
// names the churn), so that they, and nothing else, are removed after.
const ChurnLabel = "corral.test.churn"

// EngineIfAny returns a client of the engine, like Engine, or nil when
// none answers and CORRAL_REQUIRE_DOCKER=1 is not set (the test then goes
// on without it; it is logged). Under CORRAL_REQUIRE_DOCKER=1 a missing
// engine fails the test.
func EngineIfAny(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			t.Fatalf("no Docker engine: %v; CORRAL_REQUIRE_DOCKER=1 forbids going on without one", err)
		}
		t.Logf("no Docker engine (%v): going on without one", err)
		return nil
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// churnMain is the whole program of the churn image: it exits at once, or
// with "hold" waits to be stopped.
const churnMain = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hold" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	}
}
`

var (
	churnOnce sync.Once
	churnRef  string
	churnErr  error
)

// ChurnImage returns a tiny image (FROM scratch, one static Go program at
// /churn) for containers that only start and stop, importing it on first
// use; it needs the go tool. The tag carries a hash of the program, so it
// is built once per machine.
func ChurnImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	churnOnce.Do(func() { churnRef, churnErr = buildChurnImage(cli) })
	if churnErr != nil {
		t.Fatalf("building the churn image: %v", churnErr)
	}
	return churnRef
}

func buildChurnImage(cli *client.Client) (string, error) {
	dir, err := os.MkdirTemp(testDir(), "corral-churn-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(churnMain), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module churn\n\ngo 1.21\n"), 0o644); err != nil {
		return "", err
	}
	build := exec.Command(goTool(), "build", "-trimpath", "-o", "churn", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	body, err := os.ReadFile(filepath.Join(dir, "churn"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	ref := "corral-test-churn:" + hex.EncodeToString(sum[:])[:12]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "churn", Mode: 0o755, Size: int64(len(body))}); err != nil {
		return "", err
	}
	if _, err := tw.Write(body); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{
		Changes: []string{`ENTRYPOINT ["/churn"]`},
	})
	if err != nil {
		return "", fmt.Errorf("docker import: %w", err)
	}
	_, _ = io.Copy(io.Discard, res)
	res.Close()
	return ref, nil
}

// Churner keeps containers starting and stopping (see Churn).
type Churner struct {
	done    atomic.Int64
	errs    atomic.Int64
	halt    atomic.Bool
	wg      sync.WaitGroup
	t       testing.TB
	stopped sync.Once
}

// Done returns how many containers have gone through their whole life so
// far.
func (c *Churner) Done() int { return int(c.done.Load()) }

// Stop lets the container under way finish its life (a first one, if none
// has yet), ends the churn and returns how many containers went through
// it. It fails the test when none did, since then nothing churned and the
// test proved nothing.
func (c *Churner) Stop() int {
	c.stopped.Do(func() {
		c.halt.Store(true)
		c.wg.Wait()
		if c.Done() == 0 {
			c.t.Errorf("the churn took no container through its life (%d engine errors, logged): the test ran without containers starting and stopping", c.errs.Load())
		}
	})
	return c.Done()
}

// Churn keeps containers of image starting and stopping on the engine until
// Stop: one after another, alternately as `docker run --rm` does (create,
// start, wait for the exit, remove) and as create, start, stop, rm do (a
// container that waits to be stopped). Each start and removal mounts and
// unmounts on the host (the image's overlay, its /proc, /dev and /sys, a
// network namespace), which is the host change a bwrap start must
// withstand (backend/bwrap/retry.go). Every container is labelled
// ChurnLabel=<pid>-<n>; a cleanup force-removes any left, also when the
// test failed or never called Stop. Engine errors are logged and the churn
// goes on. Churn returns once a first container has gone through, so what
// the test does next happens while containers start and stop; it fails
// the test when that takes 2 minutes or 20 engine errors.
func Churn(t testing.TB, cli *client.Client, image string) *Churner {
	t.Helper()
	tag := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	c := &Churner{t: t}
	t.Cleanup(func() {
		c.halt.Store(true)
		cancel()
		c.wg.Wait()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		res, err := cli.ContainerList(rctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", ChurnLabel+"="+tag)})
		if err != nil {
			t.Errorf("listing the churn's containers: %v", err)
			return
		}
		for _, it := range res.Items {
			if _, err := cli.ContainerRemove(rctx, it.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Errorf("removing the churn's container %s: %v", it.ID, err)
			}
		}
	})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// Until stopped, and at least until one container went through
		// (unless the test is over): Stop must not stop a churn that did
		// nothing yet.
		for i := 0; ctx.Err() == nil && (!c.halt.Load() || c.Done() == 0); i++ {
			if err := churnOne(ctx, cli, image, tag, i%2 == 1); err != nil {
				if ctx.Err() == nil {
					t.Logf("churn: %v", err)
				}
				if c.errs.Add(1) >= 20 && c.Done() == 0 {
					return // the engine cannot do it: Stop says so
				}
				continue
			}
			c.done.Add(1)
		}
	}()
	// Return once the churn runs: a first container went through.
	deadline := time.Now().Add(2 * time.Minute)
	for c.Done() == 0 {
		if c.errs.Load() >= 20 || time.Now().After(deadline) {
			t.Fatalf("the churn took no container through its life in 2 minutes (%d engine errors, logged)", c.errs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// churnOne takes one container through its life: created, started, then
// waited for (hold false) or stopped (hold true), then removed. The
// removal is not cancelled with ctx, so a container is not left behind
// because stop came in the middle.
func churnOne(ctx context.Context, cli *client.Client, image, tag string, hold bool) error {
	cmd := []string{}
	if hold {
		cmd = []string{"hold"}
	}
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Cmd: cmd, Labels: map[string]string{ChurnLabel: tag}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cli.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{Force: true})
	}()
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if hold {
		zero := 0
		if _, err := cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &zero}); err != nil {
			return fmt.Errorf("stop: %w", err)
		}
	}
	w := cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		return fmt.Errorf("wait: %w", err)
	}
	return nil
}

// goTool is the go command: the one on PATH, else the one of the
// toolchain that built this test binary (CI runs the unprivileged pass with
// PATH=/usr/local/bin:/usr/bin:/bin, which Go's own installation in
// /usr/local/go/bin is not on).
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	//lint:ignore SA1019 the toolchain that built this binary is the one wanted
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "go" // the error then names it
}

// ChurnAsRoot starts Churn with ChurnImage when the test runs as root and
// an engine answers (EngineIfAny: under CORRAL_REQUIRE_DOCKER=1, as in CI,
// a missing engine fails the test), and returns it; otherwise nil. The
// load tests use it: containers starting and stopping next to a root
// caller's sandboxes is the case users met (bwrap copying a mount tree
// that Docker changed).
func ChurnAsRoot(t testing.TB) *Churner {
	t.Helper()
	if os.Getuid() != 0 {
		return nil
	}
	cli := EngineIfAny(t)
	if cli == nil {
		return nil
	}
	return Churn(t, cli, ChurnImage(t, cli))
}
