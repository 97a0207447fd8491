// Package dockertest gives tests a Docker engine, a small image built from
// this machine's own Debian files, and the static helper to mount in
// containers (StaticHelper, as users' containers get it; StaticCorral for
// tests that run corral itself). No registry is reachable where the tests run, so nothing
// is pulled: the image is a `docker import` of a root filesystem assembled
// here (bash, coreutils, util-linux's setsid, git, curl, python3 and the shared
// libraries they need, found with ldd).
//
// Tests call Engine first: it skips with a message naming what is missing
// (no daemon, no access to its socket), except when CORRAL_REQUIRE_DOCKER=1
// (set by .ci/run), where a missing engine fails the test instead.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// Engine returns a client of the engine named by DOCKER_HOST (or the
// default socket), skipping or failing the test when none answers.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = cli.Ping(ctx, client.PingOptions{})
	}
	if err != nil {
		msg := fmt.Sprintf("no Docker engine: %v (install docker.io and start dockerd as root; an unprivileged user needs to be in the docker group)", err)
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			t.Fatal(msg + "; CORRAL_REQUIRE_DOCKER=1 forbids skipping")
		}
		t.Skip(msg)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// tools are the programs copied into the test image (from /usr/bin unless
// absolute).
var tools = []string{
	"bash", "sh", "dash", "cat", "ls", "mkdir", "dirname", "setsid", "env", "sleep", "echo",
	"id", "touch", "rm", "rmdir", "stat", "wc", "head", "tail", "yes", "true", "false",
	"grep", "sed", "cp", "mv", "chmod", "ln", "readlink", "basename", "sort", "tr", "cut",
	"date", "tee", "timeout", "dd", "find", "xargs", "git", "python3", "uname", "nproc", "printf", "test",
	"curl",
}

// trees are directories copied whole (git's helpers and templates,
// python's standard library), minus the parts tests never use.
var trees = []string{"/usr/lib/git-core", "/usr/share/git-core", "/usr/lib/python3.11"}

func skipTree(p string) bool {
	for _, s := range []string{"/__pycache__", "/test/", "/tests/", "/idlelib", "/tkinter", "/turtledemo", "/ensurepip", "/lib2to3", "/pydoc_data", "/config-3.11"} {
		if strings.Contains(p+"/", s) {
			return true
		}
	}
	return strings.HasSuffix(p, "/test") || strings.HasSuffix(p, "/tests")
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// Image returns the reference of the test image, importing it on first use
// (once per machine: the tag carries a hash of the files that go in).
func Image(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageOnce.Do(func() { imageRef, imageErr = buildImage(cli) })
	if imageErr != nil {
		t.Fatalf("building the test image: %v", imageErr)
	}
	return imageRef
}

// Rootfs is the test image's root filesystem: the host files that go in.
// The kubernetes tests' image (internal/k8stest/mkimage) is the same.
type Rootfs struct {
	files []string
	// Tag names the content: 12 hex digits of a hash of every file's path,
	// size and modification time, so an image is built once per machine
	// and again when a package upgrade changes a file.
	Tag string
}

// CollectRootfs lists the image's files on this machine (the programs in
// tools, the trees, and the shared libraries ldd names for them). It fails
// when python3 or git is missing.
func CollectRootfs() (*Rootfs, error) {
	files, err := collect()
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, f := range files {
		st, err := os.Lstat(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "%s %d %d\n", f, st.Size(), st.ModTime().Unix())
	}
	return &Rootfs{files: files, Tag: hex.EncodeToString(h.Sum(nil))[:12]}, nil
}

// WriteTar writes the root filesystem as an uncompressed tar (a layer:
// merged /usr, /tmp 1777, an /etc with root and nobody).
func (r *Rootfs) WriteTar(w io.Writer) error { return writeRootfs(w, r.files) }

// BuildImage builds the image ref from buildContext (a tar holding a
// Dockerfile and what it copies; Engine API POST /build, nothing pulled
// when its FROM is local or scratch) and fails t, with the build's
// output, unless the engine then has ref.
func BuildImage(t testing.TB, cli *client.Client, ref string, buildContext io.Reader) {
	t.Helper()
	res, err := cli.ImageBuild(context.Background(), buildContext, client.ImageBuildOptions{Tags: []string{ref}, Remove: true, ForceRemove: true})
	if err != nil {
		t.Fatalf("building %s: %v", ref, err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if _, err := cli.ImageInspect(context.Background(), ref); err != nil {
		t.Fatalf("building %s: %v\n%s", ref, err, msg)
	}
}

func buildImage(cli *client.Client) (string, error) {
	rootfs, err := CollectRootfs()
	if err != nil {
		return "", err
	}
	files := rootfs.files
	ref := "corral-test:" + rootfs.Tag
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	var buf bytes.Buffer
	if err := writeRootfs(&buf, files); err != nil {
		return "", err
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{
		Changes: []string{`ENV PATH=/usr/local/bin:/usr/bin:/bin`, `CMD ["/bin/bash"]`},
	})
	if err != nil {
		return "", fmt.Errorf("docker import: %w", err)
	}
	_, _ = io.Copy(io.Discard, res)
	res.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("imported image %s not found: %w", ref, err)
	}
	return ref, nil
}

// collect lists the host files of the image (real paths), with the shared
// libraries of every ELF program among them.
func collect() ([]string, error) {
	set := map[string]bool{}
	var elfs []string
	for _, tl := range tools {
		p, err := systemLookPath(tl)
		if err != nil {
			if tl == "python3" || tl == "git" {
				return nil, fmt.Errorf("the test image needs %s on this machine (apt-get install %s)", tl, tl)
			}
			continue
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		set[r] = true
		set[p] = true // a symlink such as sh -> dash stays one
		elfs = append(elfs, r)
	}
	for _, tr := range trees {
		if _, err := os.Stat(tr); err != nil {
			continue
		}
		err := filepath.WalkDir(tr, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if skipTree(p) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
				set[p] = true
				if d.Type().IsRegular() && isDynamicELF(p) {
					elfs = append(elfs, p)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, e := range elfs {
		out, err := exec.Command("ldd", e).Output()
		if err != nil {
			continue // static, or not a program
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					set[f] = true
					if r, err := filepath.EvalSymlinks(f); err == nil {
						set[r] = true
					}
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	sort.Strings(out)
	return out, nil
}

func isDynamicELF(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, pr := range f.Progs {
		if pr.Type == elf.PT_DYNAMIC {
			return true
		}
	}
	return false
}

// writeRootfs writes a tar of files plus the skeleton of a root filesystem.
func writeRootfs(w io.Writer, files []string) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	var mkdir func(d string) error
	mkdir = func(d string) error {
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		if err := mkdir(filepath.Dir(d)); err != nil {
			return err
		}
		dirs[d] = true
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode})
	}
	for _, d := range []string{"/usr/bin", "/usr/lib", "/usr/lib64", "/usr/sbin", "/tmp", "/etc", "/proc", "/sys", "/dev", "/root", "/home", "/var/tmp", "/run"} {
		if err := mkdir(d); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}, {"sbin", "usr/sbin"}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l[0], Linkname: l[1], Mode: 0o777}); err != nil {
			return err
		}
	}
	etc := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for _, name := range []string{"etc/passwd", "etc/group", "etc/hosts"} {
		body := etc[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	written := map[string]bool{}
	for _, f := range files {
		// Files under /lib... land under /usr/lib... (merged /usr).
		dst := f
		for _, pre := range []string{"/lib/", "/lib64/", "/bin/", "/sbin/"} {
			if strings.HasPrefix(dst, pre) {
				dst = "/usr" + dst
			}
		}
		if written[dst] || dirs[dst] {
			continue
		}
		written[dst] = true
		if err := mkdir(filepath.Dir(dst)); err != nil {
			return err
		}
		st, err := os.Lstat(f)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(dst, "/")
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(f)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: st.Size()}); err != nil {
				return err
			}
			fh, err := os.Open(f)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, fh)
			fh.Close()
			if err != nil {
				return err
			}
		}
	}
	// sh is dash, as on Debian.
	return tw.Close()
}

var (
	staticOnce sync.Once
	staticPath string
	staticErr  error
)

// StaticCorral returns a statically linked corral executable: $CORRAL_TEST_BIN
// when it is one, else one built here with CGO_ENABLED=0 (needs the go
// tool). The docker backend mounts it in containers.
func StaticCorral(t testing.TB) string {
	t.Helper()
	staticOnce.Do(func() {
		if p := os.Getenv("CORRAL_TEST_BIN"); p != "" && !isDynamicELF(p) {
			staticPath = p
			return
		}
		dir, err := os.MkdirTemp(testDir(), "corral-static-")
		if err != nil {
			staticErr = err
			return
		}
		staticPath = filepath.Join(dir, "corral")
		cmd := exec.Command("go", "build", "-o", staticPath, "github.com/corralhq/corral/cmd/corral")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("CGO_ENABLED=0 go build: %v\n%s", err, out)
		}
		_ = os.Chmod(dir, 0o755)
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticPath
}

// testDir is where test trees go: $CORRAL_TEST_DIR, else /var/tmp.
func testDir() string {
	if d := os.Getenv("CORRAL_TEST_DIR"); d != "" {
		return d
	}
	return "/var/tmp"
}

// TestDir returns a new directory under $CORRAL_TEST_DIR (or /var/tmp),
// removed after the test; the daemon must see it at the same path.
func TestDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp(testDir(), "corral-docker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// systemLookPath finds a program in the system's own directories (Debian's
// packages), never in PATH, which may hold a version manager's shims.
func systemLookPath(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in /usr/bin, /bin, /usr/sbin or /sbin", name)
}

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

// StaticHelper returns the helper executable that corral hands containers
// and pods (cmd/corral-helper, static; package helperbin finds it beside
// corral or in its cache): $CORRAL_TEST_HELPERS/static when .ci/run built
// it, else one built here with CGO_ENABLED=0 (needs the go tool). Tests of
// what runs inside a container use it, as users' containers do.
func StaticHelper(t testing.TB) string {
	t.Helper()
	helperOnce.Do(func() {
		if d := os.Getenv("CORRAL_TEST_HELPERS"); d != "" {
			if p := filepath.Join(d, "static"); !isDynamicELF(p) {
				if _, err := os.Stat(p); err == nil {
					helperPath = p
					return
				}
			}
		}
		dir, err := os.MkdirTemp(testDir(), "corral-helper-")
		if err != nil {
			helperErr = err
			return
		}
		helperPath = filepath.Join(dir, "corral-helper")
		cmd := exec.Command("go", "build", "-ldflags=-s", "-o", helperPath, "github.com/corralhq/corral/cmd/corral-helper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("CGO_ENABLED=0 go build of corral-helper: %v\n%s", err, out)
		}
		_ = os.Chmod(dir, 0o755)
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperPath
}
