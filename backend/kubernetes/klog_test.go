package kubernetes

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

// TestKlogRouted: what client-go logs through klog (an error about a
// closed stream) reaches corral's logger at Debug as kubernetes.client,
// not stderr at error level.
func TestKlogRouted(t *testing.T) {
	var buf bytes.Buffer
	klogOnce = sync.Once{}
	routeKlog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	klog.ErrorS(nil, "Copying stderr failed", "err", "use of closed network connection")
	klog.Flush()
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "msg=kubernetes.client") || !strings.Contains(out, `detail="Copying stderr failed"`) {
		t.Errorf("klog's record: %q", out)
	}
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("klog's error kept its level: %q", out)
	}
}

// TestKlogQuietAboveDebug: with corral's log level above Debug (the
// default, warn) nothing of klog's shows, errors included (logr's slog
// sink hands them over without asking Enabled).
func TestKlogQuietAboveDebug(t *testing.T) {
	var buf bytes.Buffer
	klogOnce = sync.Once{}
	routeKlog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	klog.ErrorS(nil, "Copying stderr failed", "err", "use of closed network connection")
	klog.Error("Waiting for server to close stdin failed")
	klog.Flush()
	if buf.Len() != 0 {
		t.Errorf("klog's records reached a Warn logger: %q", buf.String())
	}
}
