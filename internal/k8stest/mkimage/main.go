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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/dockertest"
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
		cfg := imageConfig{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Cmd: []string{"/bin/bash"}}
		if err := writeArchive(out, ref, layer.Bytes(), cfg); err != nil {
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
	return writeArchive(out, ref, layer.Bytes(), imageConfig{Entrypoint: []string{"/pause"}, User: "65535:65535"})
}

// imageConfig is the "config" of an OCI image configuration (image-spec
// config.md), the part these images set.
type imageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
}

// writeArchive writes a one-layer image in Docker's save format to out
// (through a temporary file, so a failed run leaves no half archive).
func writeArchive(out, ref string, layer []byte, cfg imageConfig) error {
	diffID := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(diffID[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	tw := tar.NewWriter(tmp)
	for _, f := range []struct {
		name string
		body []byte
	}{{configName, config}, {layerName, layer}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, bytes.NewReader(f.body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
