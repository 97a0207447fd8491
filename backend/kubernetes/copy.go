package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/sparse"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// PodTarget is the live pod of a session as another corral process sees
// it (`corral cp`): its name, namespace and workspace path.
type PodTarget struct {
	Name, Namespace, Workspace string
	cl                         *cluster
}

// ErrNoPod is returned by SessionPod when the session has no live pod.
var ErrNoPod = errors.New("no running pod")

// SessionPod finds the Ready pod of session name in st's namespace,
// made by any corral process (AnnotationSession; a pod of scope shared
// is named "shared"). A pod lives as long as the corral that made it (an
// MCP server, `corral serve`), so a session whose corral has ended has
// none: the error wraps ErrNoPod and says so.
func (e *Engine) SessionPod(ctx context.Context, st Settings, name string) (*PodTarget, error) {
	cl, ns, err := e.target(&st)
	if err != nil {
		return nil, err
	}
	var pl corev1.PodList
	if err := cl.cs.list(ctx, ns, resPods, LabelManaged+"=true", &pl); err != nil {
		return nil, apiErr("listing pods", err)
	}
	var best *corev1.Pod
	for i := range pl.Items {
		p := &pl.Items[i]
		if p.Annotations[AnnotationSession] != name || p.DeletionTimestamp != nil || !podReady(p) || len(p.Spec.Containers) == 0 {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: session %s has no running pod in namespace %s (a pod lives as long as the corral process that made it, such as `corral mcp`; start the session's first command there)", ErrNoPod, name, ns)
	}
	return &PodTarget{Name: best.Name, Namespace: ns, Workspace: best.Spec.Containers[0].WorkingDir, cl: cl}, nil
}

// copyTries is how many times a copy is tried: containerd's CRI exec can
// cut a stream short without an error (field notes), which the hashes
// catch.
const copyTries = 3

// maxUntarAnswer bounds the answer of inside.ModeUntar that CopyIn keeps
// (one JSON line: transfer.Stats, whose Deleted lists what a sync
// removed); a longer one is an error, not a cause to hold more.
const maxUntarAnswer = 8 << 20

// CopyIn sends the tar archive in f to inside.ModeUntar in t's pod,
// which writes it below the workspace as o says (o.WantSHA256 is set to
// the archive's hash: a cut-short stream is refused there, and deletes
// nothing); a mismatch or a broken stream is tried again. A refused entry
// is not retried. What the pod prints is bounded: the last tail.Max bytes
// of stderr and maxUntarAnswer of stdout are kept.
func (e *Engine) CopyIn(ctx context.Context, t *PodTarget, f *os.File, o transfer.Options) (transfer.Stats, error) {
	return e.copyIn(ctx, t, ContainerName, f, o)
}

// copyIn is CopyIn through container (ContainerName, or
// HelperContainerName for a workspace mounted read-only in the other:
// carryWorkspace).
func (e *Engine) copyIn(ctx context.Context, t *PodTarget, container string, f *os.File, o transfer.Options) (transfer.Stats, error) {
	h := sha256.New()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return transfer.Stats{}, err
	}
	if _, err := io.Copy(h, f); err != nil {
		return transfer.Stats{}, err
	}
	o.WantSHA256 = hex.EncodeToString(h.Sum(nil))
	opts, _ := json.Marshal(o)
	var last error
	for try := 1; try <= copyTries; try++ {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return transfer.Stats{}, err
		}
		start := time.Now()
		var out bytes.Buffer
		var errb tail.Buffer
		lw := &limitWriter{w: &out, n: maxUntarAnswer}
		code, err := execStream(ctx, t.cl, t.Namespace, t.Name, container, []string{inside.Path, inside.ModeUntar, t.Workspace, string(opts)}, f, lw, &errb)
		var a inside.UntarAnswer
		jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &a)
		switch {
		case err != nil:
			last = fmt.Errorf("exec: %v", err)
		case lw.cut:
			return transfer.Stats{}, fmt.Errorf("%w: kubernetes backend: pod %s answered a copy with more than %d bytes; the copy's outcome is unknown", sandbox.ErrUnavailable, t.Name, maxUntarAnswer)
		case jerr != nil:
			last = fmt.Errorf("exit status %d: %s", code, strings.TrimSpace(errb.String()+out.String()))
		case a.Refused:
			// a.Error is the pod's transfer.ErrRefused error, its
			// "refused: " included.
			return a.Stats, fmt.Errorf("%w: %s", transfer.ErrRefused, strings.TrimPrefix(a.Error, transfer.ErrRefused.Error()+": "))
		case a.Error != "":
			last = errors.New(a.Error)
		default:
			e.log.Info("kubernetes.copy.in", "pod", t.Name, "bytes", a.Bytes, "files", a.Files, "duration", time.Since(start).String(), "try", try)
			return a.Stats, nil
		}
		e.log.Warn("kubernetes.copy.in_failed", "pod", t.Name, "try", try, "error", last)
		if ctx.Err() != nil {
			break
		}
	}
	return transfer.Stats{}, fmt.Errorf("%w: kubernetes backend: copying into pod %s failed: %v", sandbox.ErrUnavailable, t.Name, last)
}

// CopyOut writes a tar of src (relative to the pod's workspace; entries
// named top/...) from inside.ModeTar into f, checked against the hash the
// pod reports; a mismatch or a broken stream is tried again. f is
// truncated before each try. The pod's helper is not trusted with the
// host's memory or disk: of its stderr only the last tail.Max bytes are
// kept (the hash is its last line), and once it has sent more than limit
// bytes (> 0) on stdout the exec is ended, f truncated, and the error
// wraps transfer.ErrTooLarge (not retried).
func (e *Engine) CopyOut(ctx context.Context, t *PodTarget, src, top string, f *os.File, limit int64) error {
	var last error
	for try := 1; try <= copyTries; try++ {
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		start := time.Now()
		h := sha256.New()
		var errb tail.Buffer
		xctx, cancel := context.WithCancel(ctx)
		// Zeros as holes: a sparse file's archive takes the spool's disk
		// only for its data (internal/sparse).
		sw := sparse.NewWriter(f)
		cw := &capWriter{w: io.MultiWriter(sw, h), max: limit, over: cancel}
		code, err := execStream(xctx, t.cl, t.Namespace, t.Name, ContainerName, []string{inside.Path, inside.ModeTar, t.Workspace, src, top}, nil, cw, &errb)
		cancel()
		if err == nil {
			err = sw.Finish()
		}
		if cw.exceeded {
			_ = f.Truncate(0)
			e.log.Warn("kubernetes.copy.out_too_large", "pod", t.Name, "limit", limit)
			return fmt.Errorf("%w: pod %s sent more than %d bytes for %s", transfer.ErrTooLarge, t.Name, limit, src)
		}
		got := hex.EncodeToString(h.Sum(nil))
		want := lastSHA(errb.String())
		switch {
		case err != nil:
			last = fmt.Errorf("exec: %v", err)
		case code != 0:
			last = fmt.Errorf("exit status %d: %s", code, errb.String())
			if code == 125 {
				return fmt.Errorf("kubernetes backend: reading %s in pod %s: %s", src, t.Name, errb.String())
			}
		case want != got:
			last = fmt.Errorf("received sha256 %s, the pod sent %q (a cut-short stream)", got, want)
		default:
			e.log.Info("kubernetes.copy.out", "pod", t.Name, "bytes", cw.n, "duration", time.Since(start).String(), "try", try)
			return nil
		}
		e.log.Warn("kubernetes.copy.out_failed", "pod", t.Name, "try", try, "error", last)
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: kubernetes backend: copying out of pod %s failed: %v", sandbox.ErrUnavailable, t.Name, last)
}

// capWriter passes at most max bytes (max <= 0: no bound) to w; the
// write that would pass more writes nothing, fails, sets exceeded and
// calls over (ending the exec: client-go goes on reading a stream whose
// writer failed, discarding it, until the stream ends).
type capWriter struct {
	w        io.Writer
	n, max   int64
	over     func()
	exceeded bool
}

func (c *capWriter) Write(b []byte) (int, error) {
	if c.max > 0 && c.n+int64(len(b)) > c.max {
		if !c.exceeded {
			c.exceeded = true
			c.over()
		}
		return 0, transfer.ErrTooLarge
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// lastSHA returns the hash of ModeTar's last "sha256 HEX" stderr line.
func lastSHA(stderr string) string {
	var h string
	sc := bufio.NewScanner(strings.NewReader(stderr))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "sha256 "); ok {
			h = v
		}
	}
	return h
}
