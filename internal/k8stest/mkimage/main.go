// Command mkimage writes the images of the test cluster (.ci/k8s-cluster
// up) as docker-save archives for `ctr images import`: no registry is
// reachable where the tests run.
//
//	go run ./internal/k8stest/mkimage -test -dir DIR
//	    the test image: the root filesystem internal/dockertest assembles
//	    for the docker tests, as DIR/test-TAG.tar (kept when present); its
//	    reference is printed and written to DIR/test-ref
//	go run ./internal/k8stest/mkimage -pause FILE -ref REF -o OUT
//	    an image of one static program at /pause, its entrypoint (the pod
//	    sandbox's pause)
//
// The archive layout is Docker's image save format (manifest.json, the
// image config, one layer tar), which containerd's importer reads.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/dockertest"
	"github.com/corralhq/corral/internal/imagearchive"
)

// TestRepo is the test image's repository; its tag is the root
// filesystem's Tag.
const TestRepo = "localhost/corral-test"

func main() {
	test := flag.Bool("test", false, "write the test image into -dir")
	dir := flag.String("dir", "", "directory of the test image")
	pause := flag.String("pause", "", "static pause program to wrap")
	ref := flag.String("ref", "", "reference of the pause image")
	out := flag.String("o", "", "output archive of the pause image")
	flag.Parse()
	var err error
	switch {
	case *test && *dir != "":
		err = writeTest(*dir)
	case *pause != "" && *ref != "" && *out != "":
		err = writePause(*pause, *ref, *out)
	default:
		err = fmt.Errorf("usage: mkimage -test -dir DIR | -pause FILE -ref REF -o OUT")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func writeTest(dir string) error {
	rootfs, err := dockertest.CollectRootfs()
	if err != nil {
		return err
	}
	ref := TestRepo + ":" + rootfs.Tag
	out := filepath.Join(dir, "test-"+rootfs.Tag+".tar")
	if _, err := os.Stat(out); err != nil {
		var layer bytes.Buffer
		if err := rootfs.WriteTar(&layer); err != nil {
			return err
		}
		cfg := imagearchive.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Cmd: []string{"/bin/bash"}}
		if err := imagearchive.Write(out, ref, layer.Bytes(), cfg); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "test-ref"), []byte(ref+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Println(ref)
	return nil
}

func writePause(prog, ref, out string) error {
	body, err := os.ReadFile(prog)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: int64(len(body))}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	// 65535:65535 is the user the upstream pause image runs as.
	return imagearchive.Write(out, ref, layer.Bytes(), imagearchive.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"})
}
