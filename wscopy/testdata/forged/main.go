// Command forged is corral's pod helper with a hostile tar mode, and the
// host-side driver that copies out of it, for wscopy's cluster tests
// (TestKubernetesForgedHelper). Built static (CGO_ENABLED=0), not with
// -race, so that the memory it measures is corral's own.
//
// In a pod, uploaded as the helper (kubernetes.Options.Helper), it is
// corral's helper (the agent and every mode of package inside) except
// for inside.ModeTar, which does what the file ROOT/.forge says:
//
//	escape     a well-formed archive, its hash on stderr as corral's helper
//	           prints it, holding TOP/ok.txt and, beside TOP, sibling.txt,
//	           .bashrc, .git/hooks/pre-commit and .git/config (core.fsmonitor)
//	stderr N   N MiB on stderr first, then the real archive and its hash
//	stdout N   an archive of one file TOP/big of N MiB, and its hash
//
// On the host, `forged copy-out KUBECONFIG NAMESPACE SESSION SRC DEST
// [TMPFS-DIR TMPFS-SIZE]` mounts a tmpfs at TMPFS-DIR when given (the
// caller starts it in a mount namespace of its own), runs wscopy.CopyOut
// of SESSION:SRC to DEST as `corral cp` does, and prints one JSON line:
// the error, whether it wraps transfer.ErrTooLarge, what was held back,
// what the tmpfs holds afterwards, and its own peak resident memory
// (VmHWM, KiB).
package main

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/transfer"
	"github.com/corralhq/corral/wscopy"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "copy-out" {
		os.Exit(copyOut(os.Args[2:]))
	}
	if len(os.Args) == 5 && os.Args[1] == inside.ModeTar {
		if b, err := os.ReadFile(filepath.Join(os.Args[2], ".forge")); err == nil {
			os.Exit(forge(strings.Fields(string(b)), os.Args[2], os.Args[3], os.Args[4]))
		}
	}
	reexec.Init()
	fmt.Fprintln(os.Stderr, "forged: no such mode")
	os.Exit(2)
}

// forge writes what mode says on stdout (see the package doc), and the
// hash of what it wrote as corral's helper does.
func forge(mode []string, root, src, top string) int {
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	h := sha256.New()
	w := io.MultiWriter(out, h)
	tw := tar.NewWriter(w)
	file := func(name string, mode int64, data []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))})
		_, _ = tw.Write(data)
	}
	if len(mode) == 0 {
		mode = []string{""}
	}
	n := 0
	if len(mode) > 1 {
		n, _ = strconv.Atoi(mode[1])
	}
	switch mode[0] {
	case "escape":
		_ = tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		file(top+"/ok.txt", 0o644, []byte("ok\n"))
		file("sibling.txt", 0o644, []byte("PWNED\n"))
		file(".bashrc", 0o644, []byte("echo PWNED\n"))
		_ = tw.WriteHeader(&tar.Header{Name: ".git/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: ".git/hooks/", Typeflag: tar.TypeDir, Mode: 0o755})
		file(".git/hooks/pre-commit", 0o755, []byte("#!/bin/sh\necho PWNED\n"))
		file(".git/config", 0o644, []byte("[core]\n\tfsmonitor = echo PWNED\n"))
	case "stderr":
		line := []byte(strings.Repeat("e", 1023) + "\n")
		ew := bufio.NewWriterSize(os.Stderr, 1<<20)
		for range n << 10 {
			_, _ = ew.Write(line)
		}
		_ = ew.Flush()
		if _, err := transfer.Pack(w, root, src, top); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 125
		}
	case "stdout":
		_ = tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: top + "/big", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(n) << 20})
		zeros := make([]byte, 1<<20)
		for range n {
			_, _ = tw.Write(zeros)
		}
	default:
		fmt.Fprintf(os.Stderr, "forged: unknown .forge %q\n", mode)
		return 125
	}
	if mode[0] != "stderr" {
		_ = tw.Close()
	}
	if err := out.Flush(); err != nil {
		return 125
	}
	fmt.Fprintf(os.Stderr, "sha256 %s\n", hex.EncodeToString(h.Sum(nil)))
	return 0
}

// result is copy-out's line.
type result struct {
	Error    string   `json:"error,omitempty"`
	TooLarge bool     `json:"too_large"`
	Refused  bool     `json:"refused"`
	Held     []string `json:"held,omitempty"`
	Files    int      `json:"files"`
	VmHWMKiB int64    `json:"vmhwm_kib"`
	// Left are the paths below the tmpfs after the copy (it goes with
	// this process's mount namespace, so the caller cannot look).
	Left []string `json:"left,omitempty"`
}

func copyOut(args []string) int {
	if len(args) != 5 && len(args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: forged copy-out KUBECONFIG NAMESPACE SESSION SRC DEST [TMPFS-DIR TMPFS-SIZE]")
		return 2
	}
	if len(args) == 7 {
		if err := unix.Mount("tmpfs", args[5], "tmpfs", 0, "size="+args[6]); err != nil {
			fmt.Fprintln(os.Stderr, "mounting the tmpfs:", err)
			return 2
		}
	}
	st := kubernetes.DefaultSettings
	st.Kubeconfig, st.Namespace = args[0], args[1]
	ctx := context.Background()
	e := kubernetes.NewEngine(kubernetes.Options{})
	defer e.Close()
	var r result
	pod, err := e.SessionPod(ctx, st, args[2])
	if err == nil {
		w := &wscopy.Workspace{Session: args[2], Root: pod.Workspace, Remote: e.Workspace(pod)}
		var res wscopy.Result
		res, err = wscopy.CopyOut(ctx, w, args[3], args[4], wscopy.Out{})
		r.Files = res.Files
		for _, h := range res.Held {
			r.Held = append(r.Held, h.Path)
		}
	}
	if err != nil {
		r.Error, r.TooLarge, r.Refused = err.Error(), errors.Is(err, transfer.ErrTooLarge), errors.Is(err, transfer.ErrRefused)
	}
	if len(args) == 7 {
		_ = filepath.WalkDir(args[5], func(p string, _ os.DirEntry, err error) error {
			if p != args[5] {
				r.Left = append(r.Left, p)
			}
			return err
		})
	}
	r.VmHWMKiB = vmHWM()
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

// vmHWM is the process's peak resident set (/proc/self/status VmHWM, KiB),
// -1 when unreadable.
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
