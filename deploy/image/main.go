// Command image writes corral's container image, for `corral serve` in a
// cluster (deploy/, docs/kubernetes.md), as an archive that `docker load`,
// `podman load` and `ctr images import` read: no engine, registry or base
// image is needed to make it.
//
//	go run ./deploy/image [-o corral-image.tar] [-ref localhost/corral:dev]
//	go run ./deploy/image -corral PATH -helper PATH ...   # executables already built
//
// The image is distroless-style: one layer holding corral and corral-helper,
// static (CGO_ENABLED=0, -trimpath, symbols stripped), owned by root in
// root-owned directories so that corral takes the helper beside it
// (helperbin.Trusted); /etc/passwd and /etc/group name the user it runs
// as, 65532 ("corral"), who owns nothing in the image. The manifests run it
// with a read-only root filesystem: what corral writes (its state, caches,
// /tmp) goes to the volumes mounted there.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/imagearchive"
)

// UID and GID are the user the image runs as: not root, and not a user a
// node's own files belong to (65532 is distroless's "nonroot").
const UID, GID = 65532, 65532

// Home is the user's home and corral's state and cache directory in the
// image; the manifests mount a volume there.
const Home = "/var/lib/corral"

// Workdir is the image's working directory, empty and root's: the
// directory corral starts in names the default session ("dir:/work") and
// so the workspace's path in the sessions' pods, which must lie outside
// the pod's system trees (/var/lib would be refused).
const Workdir = "/work"

func main() {
	out := flag.String("o", "corral-image.tar", "archive to write")
	ref := flag.String("ref", "localhost/corral:dev", "the image's reference")
	corral := flag.String("corral", "", "corral executable to put in (empty: build ./cmd/corral)")
	helper := flag.String("helper", "", "corral-helper executable to put in (empty: build ./cmd/corral-helper)")
	flag.Parse()
	if err := run(*out, *ref, *corral, *helper); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Println(*ref)
}

func run(out, ref, corral, helper string) error {
	if corral == "" || helper == "" {
		dir, err := os.MkdirTemp("", "corral-image-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		for _, b := range []struct {
			path *string
			pkg  string
		}{{&corral, "./cmd/corral"}, {&helper, "./cmd/corral-helper"}} {
			if *b.path != "" {
				continue
			}
			*b.path = filepath.Join(dir, filepath.Base(b.pkg))
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s", "-o", *b.path, b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("go build %s: %w", b.pkg, err)
			}
		}
	}
	cb, err := os.ReadFile(corral)
	if err != nil {
		return err
	}
	hb, err := os.ReadFile(helper)
	if err != nil {
		return err
	}
	layer, err := Layer(cb, hb)
	if err != nil {
		return err
	}
	return imagearchive.Write(out, ref, layer, ImageConfig())
}

// ImageConfig is the image's configuration: `corral serve` on every
// address at port 8765 as UID:GID, in Workdir, with HOME at Home (the
// state and caches under it: XDG's defaults).
func ImageConfig() imagearchive.Config {
	return imagearchive.Config{
		User:         fmt.Sprintf("%d:%d", UID, GID),
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + Home},
		Entrypoint:   []string{"/usr/local/bin/corral"},
		Cmd:          []string{"serve", "--listen", "0.0.0.0:8765"},
		WorkingDir:   Workdir,
		ExposedPorts: map[string]struct{}{"8765/tcp": {}},
		Labels:       map[string]string{"org.opencontainers.image.source": "https://github.com/corralhq/corral"},
	}
}

// Layer returns the image's one layer: an uncompressed tar of corral and
// corral-helper at /usr/local/bin, the user's entries in /etc/passwd and
// /etc/group, /tmp (1777), Home (0700, the user's) and Workdir (empty). Every other entry
// is root's and not writable by others. Times are the Unix epoch, so the
// same executables give the same layer and digest.
func Layer(corral, helper []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(name string, mode int64, uid, gid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: gid, ModTime: epoch})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\ncorral:x:%d:%d:corral:%s:/sbin/nologin\n", UID, GID, Home)
	group := fmt.Sprintf("root:x:0:\ncorral:x:%d:\n", GID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("tmp", 0o1777, 0, 0) },
		func() error { return dir("usr", 0o755, 0, 0) },
		func() error { return dir("usr/local", 0o755, 0, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0, 0) },
		func() error { return file("usr/local/bin/corral", 0o755, corral) },
		func() error { return file("usr/local/bin/corral-helper", 0o755, helper) },
		func() error { return dir("var", 0o755, 0, 0) },
		func() error { return dir("var/lib", 0o755, 0, 0) },
		func() error { return dir(Home[1:], 0o700, UID, GID) },
		func() error { return dir(Workdir[1:], 0o755, 0, 0) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
