package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/corralhq/corral/agentclient"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
)

// execStream runs argv in container (ContainerName or
// HelperContainerName) of pod with the given streams (stdin nil: none)
// and waits for it: the exit status, or an error when the exec itself
// failed. It speaks WebSocket and falls back to SPDY for API
// servers without it (client-go's NewFallbackExecutor, as kubectl does).
func execStream(ctx context.Context, cl *cluster, ns, pod, container string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	u := cl.cs.execURL(ns, pod, &corev1.PodExecOptions{
		Container: container, Command: argv,
		Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil,
	})
	ws, err := remotecommand.NewWebSocketExecutor(cl.cfg, "GET", u.String())
	if err != nil {
		return 0, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cl.cfg, "POST", u)
	if err != nil {
		return 0, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

// Helper returns the static helper executable the engine copies into
// every pod: Options.Helper, FindHelper's, else corral's own executable.
// Errors (sandbox.ErrUnavailable): it cannot be found, is not an ELF
// executable, or is dynamically linked.
func (e *Engine) Helper() (string, error) { return e.helperPath() }

// helperPath returns the static helper to copy into pods (Options.Helper,
// FindHelper, else corral's own executable).
func (e *Engine) helperPath() (string, error) {
	p := e.opts.Helper
	if p == "" && e.opts.FindHelper != nil {
		p = e.opts.FindHelper()
	}
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("%w: kubernetes backend: finding corral's executable: %v", sandbox.ErrUnavailable, err)
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		p = exe
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("%w: kubernetes backend: corral's helper %s is not an ELF executable: %v", sandbox.ErrUnavailable, p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%w: kubernetes backend: %s is dynamically linked, and the image may lack its C library; build corral statically: CGO_ENABLED=0 go build -o corral ./cmd/corral", sandbox.ErrUnavailable, p)
		}
	}
	return p, nil
}

// uploadScript receives a file on stdin into "$1.part" (in directory
// "$3", made when missing, mode "$4") and prints its SHA-256 computed by
// corral's executable "$2" (inside.ModeSHA256: images need not have
// sha256sum; for the helper itself "$2" is the copy, so one cut short
// does not run, or hashes to another value). The hash is printed only
// after cat has read all of stdin, so stdout stays open for the whole
// upload: containerd's CRI exec closes stdin as soon as stdout ends,
// which cuts a plain `cat > file` short without an error. The file is
// renamed into place only when the host says the hash matches (second
// step, finishScript).
const uploadScript = `set -e; umask 022; mkdir -p "$3"; cat > "$1.part"; chmod "$4" "$1.part"; "$2" ` + inside.ModeSHA256 + ` "$1.part"`

// finishScript makes the upload the file: renamed into place.
const finishScript = `set -e; mv -f "$1.part" "$1"`

// uploadHelper copies the helper at path into p's HelperDir (uploadFile,
// through HelperContainerName: the commands' container mounts it
// read-only).
func (e *Engine) uploadHelper(ctx context.Context, p *podRef, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: kubernetes backend: reading corral's helper: %v", sandbox.ErrUnavailable, err)
	}
	return e.uploadFile(ctx, p, HelperContainerName, "kubernetes.helper", "corral's helper", data, inside.Path, "0555", inside.Path+".part")
}

// maxUploadAnswer bounds what an upload's exec may print on stdout that
// is kept (the hash line, 65 bytes): whatever runs in the pod, corral's
// memory is not its to fill.
const maxUploadAnswer = 4096

// uploadFile copies data to dest (mode, octal) in container
// (HelperContainerName for what lies in HelperDir, ContainerName for
// what the commands' user owns), verified by its SHA-256 computed in the
// pod by the corral executable hasher; a mismatch or a broken stream is
// tried again, three times in all. what names the file in errors; the
// events are ev+".uploaded" and ev+".upload_failed".
func (e *Engine) uploadFile(ctx context.Context, p *podRef, container, ev, what string, data []byte, dest, mode, hasher string) error {
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	var last error
	for try := 1; try <= 3; try++ {
		start := time.Now()
		var out bytes.Buffer
		var errb tail.Buffer
		code, err := execStream(ctx, p.cl, p.namespace, p.name, container, []string{"sh", "-c", uploadScript, "sh", dest, hasher, filepath.Dir(dest), mode}, bytes.NewReader(data), &limitWriter{w: &out, n: maxUploadAnswer}, &errb)
		got := strings.TrimSpace(out.String())
		switch {
		case err != nil:
			last = fmt.Errorf("exec: %v", err)
		case code != 0:
			last = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(errb.String()))
		case got != want:
			last = fmt.Errorf("the pod received %q, want sha256 %s (a cut-short upload)", got, want)
		default:
			code, err = execStream(ctx, p.cl, p.namespace, p.name, container, []string{"sh", "-c", finishScript, "sh", dest}, nil, io.Discard, &errb)
			if err == nil && code == 0 {
				e.log.Info(ev+".uploaded", "pod", p.name, "file", dest, "bytes", len(data), "duration", time.Since(start).String(), "try", try)
				return nil
			}
			last = fmt.Errorf("installing it: %v %d %s", err, code, strings.TrimSpace(errb.String()))
		}
		e.log.Warn(ev+".upload_failed", "pod", p.name, "file", dest, "try", try, "error", last)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: kubernetes backend: copying %s into pod %s failed: %v", sandbox.ErrUnavailable, what, p.name, last)
}

// agentFor returns p's agent, starting it (one exec of inside.ModeAgent,
// kept open) when there is none or the last one ended.
func (e *Engine) agentFor(p *podRef) (*agentclient.Conn, error) {
	p.agentMu.Lock()
	defer p.agentMu.Unlock()
	if p.agent != nil && p.agent.Alive() {
		return p.agent, nil
	}
	argv := []string{inside.Path, inside.ModeAgent}
	if p.denyUnix {
		argv = append(argv, "--deny-unix")
	}
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &tail.Buffer{}
	a := agentclient.New(inW, outR, stderr, "kubernetes backend", p.name)
	go func() {
		code, err := execStream(ctx, p.cl, p.namespace, p.name, ContainerName, argv, inR, outW, stderr)
		if err == nil {
			err = fmt.Errorf("the agent exited with status %d", code)
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		e.log.Debug("kubernetes.agent.ended", "pod", p.name, "error", err)
	}()
	if p.stop != nil {
		p.stop()
	}
	p.agent, p.stop = a, cancel
	return a, nil
}

// signalFallback signals pgid through an exec of inside.ModeKill, for a
// command whose agent stream is stuck.
func (e *Engine) signalFallback(p *podRef, pgid int, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, err := execStream(ctx, p.cl, p.namespace, p.name, ContainerName, []string{inside.Path, inside.ModeKill, fmt.Sprint(int(sig)), fmt.Sprint(pgid)}, nil, io.Discard, io.Discard)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		e.log.Warn("kubernetes.signal_failed", "pod", p.name, "pgid", pgid, "signal", int(sig), "error", err)
	}
}
