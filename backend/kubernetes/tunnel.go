package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/inside/tunnel"
	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// tunnelReadyTimeout bounds the wait for a new tunnel's pod side to
// listen (an exec start and a helper start: well under a second on an
// idle node).
const tunnelReadyTimeout = time.Minute

// pipeConn is a tunnel exec's stdout (read) and stdin (write) as one
// connection for yamux.
type pipeConn struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func (c pipeConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c pipeConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c pipeConn) Close() error {
	c.w.Close()
	return c.r.Close()
}

// tunnelFor makes sure p's tunnel (inside/tunnel: a second long-lived
// exec that carries the pod's proxied connections to p.proxy) runs,
// starting it when there is none or the last one ended, and waits until
// its pod side listens. A tunnel that cannot start is an error wrapping
// sandbox.ErrUnavailable: the command is not run (fail closed).
func (e *Engine) tunnelFor(ctx context.Context, p *podRef) error {
	p.tunMu.Lock()
	defer p.tunMu.Unlock()
	if p.tun != nil && p.tun.Alive() {
		return nil
	}
	if p.proxy == nil {
		return fmt.Errorf("%w: kubernetes backend: pod %s has no egress proxy", sandbox.ErrUnavailable, p.name)
	}
	if p.tunStop != nil {
		p.tunStop()
	}
	srv := p.proxy
	argv := tunnel.Argv(inside.Path, NetDir,
		net.JoinHostPort("127.0.0.1", fmt.Sprint(egress.HTTPPort)), net.JoinHostPort("127.0.0.1", fmt.Sprint(egress.SOCKSPort)))
	t0 := time.Now()
	xctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &tail.Buffer{}
	h, err := tunnel.NewHost(pipeConn{outR, inW}, func(k tunnel.Kind) (net.Conn, error) {
		sock := srv.HTTPSocket()
		if k == tunnel.KindSOCKS {
			sock = srv.SOCKSSocket()
		}
		var d net.Dialer
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		return d.DialContext(dctx, "unix", sock)
	}, e.log)
	if err != nil {
		cancel()
		return fmt.Errorf("%w: kubernetes backend: the tunnel: %v", sandbox.ErrUnavailable, err)
	}
	go func() {
		code, err := execStream(xctx, p.cl, p.namespace, p.name, ContainerName, argv, inR, outW, stderr)
		if err == nil {
			err = fmt.Errorf("the tunnel exited with status %d", code)
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		h.Close()
		cancel()
		e.log.Info("kubernetes.tunnel.ended", "pod", p.name, "error", err, "stderr", strings.TrimSpace(stderr.String()))
	}()
	t := time.NewTimer(tunnelReadyTimeout)
	defer t.Stop()
	select {
	case <-h.Ready():
	case <-h.Done():
		cancel()
		return fmt.Errorf("%w: kubernetes backend: the network tunnel of pod %s ended before it was ready: %s", sandbox.ErrUnavailable, p.name, strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		h.Close()
		cancel()
		return ctx.Err()
	case <-t.C:
		h.Close()
		cancel()
		return fmt.Errorf("%w: kubernetes backend: the network tunnel of pod %s was not ready in %s", sandbox.ErrUnavailable, p.name, tunnelReadyTimeout)
	}
	p.tun, p.tunStop = h, cancel
	e.log.Info("kubernetes.tunnel.started", "pod", p.name, "ready", time.Since(t0).String())
	return nil
}

// breakTunnel ends p's tunnel stream from corral's side (tests: a broken
// stream must fail closed).
func (e *Engine) breakTunnel(p *podRef) {
	p.tunMu.Lock()
	defer p.tunMu.Unlock()
	if p.tunStop != nil {
		p.tunStop()
	}
	if p.tun != nil {
		p.tun.Close()
	}
}

// maxBundle bounds an image's system trust bundle read from the pod
// (Debian's is about 200 KiB).
const maxBundle = 16 << 20

// readBundleScript prints the path of the first of its arguments that is
// a regular file (symlinks followed), then its content; exit 3 when none
// is.
const readBundleScript = `for f; do if [ -f "$f" ]; then printf '%s\n' "$f"; exec cat "$f"; fi; done; exit 3`

// prepareEgress copies into p what its allowlist commands need: the Node
// preload at NodeShimPath and, with secrets, the trust bundle at
// TrustBundle and the Java trust store at JavaTrustStore (the image's
// system bundle, read from the pod, else the host's, with corral's CA).
func (e *Engine) prepareEgress(ctx context.Context, p *podRef) error {
	if err := e.uploadFile(ctx, p, HelperContainerName, "kubernetes.nodeshim", "the Node preload", netproxy.NodeShim(), NodeShimPath, "0444", inside.Path); err != nil {
		return err
	}
	if p.egress.prep == nil {
		return nil
	}
	ca, err := e.opts.Egress.CA()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	var errb tail.Buffer
	lw := &limitWriter{w: &out, n: maxBundle}
	code, err := execStream(ctx, p.cl, p.namespace, p.name, ContainerName, append([]string{"sh", "-c", readBundleScript, "sh"}, secrets.SystemCABundles...), nil, lw, &errb)
	if err != nil {
		return fmt.Errorf("%w: kubernetes backend: reading the image's trust bundle: %v", sandbox.ErrUnavailable, err)
	}
	var system []byte
	from := "host"
	if path, data, ok := bytes.Cut(out.Bytes(), []byte("\n")); code == 0 && ok && !lw.cut {
		system, from = data, string(path)
	} else {
		_, system = secrets.HostBundles()
	}
	if err := e.uploadFile(ctx, p, HelperContainerName, "kubernetes.trust", "the trust bundle", secrets.Bundle(system, ca.CertPEM()), TrustBundle, "0444", inside.Path); err != nil {
		return err
	}
	store, err := secrets.TrustStore(system, ca.CertPEM())
	if err != nil {
		return fmt.Errorf("%w: secrets: the Java trust store: %v", sandbox.ErrUnavailable, err)
	}
	if err := e.uploadFile(ctx, p, HelperContainerName, "kubernetes.trust", "the Java trust store", store, JavaTrustStore, "0444", inside.Path); err != nil {
		return err
	}
	e.log.Info("kubernetes.trust.installed", "pod", p.name, "system_bundle", from, "bundle", TrustBundle, "java_store", JavaTrustStore)
	for _, f := range p.egress.files {
		// 0400: the stand-ins are the command's to read, not to edit by
		// mistake (the pod's user owns /tmp, so this is no barrier). They
		// go below HOME, in the commands' container.
		if err := e.uploadFile(ctx, p, ContainerName, "kubernetes.secretfile", "secret "+f.secret+"'s file "+f.given, f.data, f.dest, "0400", inside.Path); err != nil {
			return err
		}
	}
	return nil
}

// limitWriter keeps the first n bytes written to it and notes a cut.
type limitWriter struct {
	w   io.Writer
	n   int
	cut bool
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if len(b) > l.n {
		l.cut = true
		l.w.Write(b[:l.n])
		l.n = 0
		return len(b), nil
	}
	l.n -= len(b)
	return l.w.Write(b)
}
