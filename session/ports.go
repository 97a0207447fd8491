package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/procfs"
	"github.com/corralhq/corral/portfwd"
	"github.com/corralhq/corral/sandbox"
)

// sandboxRecord is what a background process's sandbox file in the
// session's bg directory holds: the host process id of its outermost
// process (bwrap) and that process's start time, which together name it
// across pid reuse, so a corral process other than the one holding the
// process (corral port) can find it.
type sandboxRecord struct {
	ID        string `json:"id"`
	Command   string `json:"command"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// sandboxSuffix ends the name of a sandbox file: "<corral pid>-<id>.sandbox".
const sandboxSuffix = ".sandbox"

// sandboxFile is where process id's sandbox record lives.
func (s *Session) sandboxFile(id string) string {
	return filepath.Join(s.dir, "bg", strconv.Itoa(os.Getpid())+"-"+id+sandboxSuffix)
}

// recordSandbox is the OnStart of background process p: it notes the
// sandbox's host process for port forwards.
func (s *Session) recordSandbox(p *Process, pid int) {
	if pid <= 0 {
		return // no process on this host (docker, kubernetes)
	}
	st, ok := procfs.StartTime(pid)
	if !ok {
		return
	}
	p.mu.Lock()
	p.hostPID = pid
	p.mu.Unlock()
	if err := writeJSON(s.sandboxFile(p.ID), sandboxRecord{ID: p.ID, Command: p.Command, PID: pid, StartTime: st}); err != nil {
		s.m.log.Warn("session.background.record_failed", "session", s.name, "id", p.ID, "error", err)
	}
}

// sandboxes returns the records of the session's background processes
// that still run, held by this or any other corral process, oldest id
// first within each holder.
func (s *Session) sandboxes() []sandboxRecord {
	return liveSandboxes(s.dir)
}

// BackgroundProcess is a background command of a session whose sandbox
// runs on this host, as Background finds it.
type BackgroundProcess struct {
	// ID names it within its session ("bg-1"); Command is what was started.
	ID, Command string
	// PID is the host process id of its sandbox's outermost process
	// (bwrap's).
	PID int
}

// Background returns the background commands of the session in directory
// dir (Info.Dir) whose sandboxes run on this host, held by any corral
// process: those a backend reported a host process for
// (sandbox.Request.OnStart), while that process lives. Under LockDir the
// list is complete for such backends: a background command that is still
// starting holds LockDir off until it is listed here.
func Background(dir string) []BackgroundProcess {
	var out []BackgroundProcess
	for _, r := range liveSandboxes(dir) {
		out = append(out, BackgroundProcess{ID: r.ID, Command: r.Command, PID: r.PID})
	}
	return out
}

func liveSandboxes(dir string) []sandboxRecord {
	ents, err := os.ReadDir(filepath.Join(dir, "bg"))
	if err != nil {
		return nil
	}
	var out []sandboxRecord
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), sandboxSuffix) {
			continue
		}
		var r sandboxRecord
		if readJSON(filepath.Join(dir, "bg", e.Name()), &r) != nil || r.PID <= 0 {
			continue
		}
		if st, ok := procfs.StartTime(r.PID); !ok || st != r.StartTime || procfs.Zombie(r.PID) {
			continue // ended; its holder removes the file
		}
		out = append(out, r)
	}
	return out
}

// PortTarget is where a forward of a session's port goes.
type PortTarget struct {
	// ID and Command name the background process that listens.
	ID, Command string
	// NSPID is a host process id inside its network namespace.
	NSPID int
	// Addr is the address the relay connects to there.
	Addr netip.AddrPort

	// via, when set, is the backend that reaches the port itself
	// (sandbox.PortBackend; NSPID is 0 then), with the session's request.
	via sandbox.PortBackend
	req *sandbox.Request
}

// backendPortTimeout bounds one listing of a backend's listeners.
const backendPortTimeout = time.Minute

// portBackend returns the session's backend when it reaches ports itself
// (sandbox.PortBackend), with the request naming the session's sandbox;
// nil when the session has no spec (a manager without a resolver, as
// `corral sessions` uses) or its backend is not one (bwrap).
func (s *Session) portBackend() (sandbox.PortBackend, *sandbox.Request) {
	req, sp, _, err := s.SandboxRequest([]string{"true"})
	if err != nil {
		return nil, nil
	}
	pb, ok := sp.Backend.(sandbox.PortBackend)
	if !ok {
		return nil, nil
	}
	return pb, req
}

// backendListeners lists the listeners of the session's sandbox through pb.
func (s *Session) backendListeners(pb sandbox.PortBackend, req *sandbox.Request) ([]portfwd.Listener, error) {
	ctx, cancel := context.WithTimeout(context.Background(), backendPortTimeout)
	defer cancel()
	b, err := pb.PortListeners(ctx, req)
	if err != nil {
		return nil, err
	}
	return portfwd.ParseProcNetTCP(b)
}

// FindPort returns the running background process of the session (held
// by this or another corral process) whose sandbox listens on TCP port,
// with the address to relay to. When none does, the error (wrapping
// sandbox.ErrBadRequest) names the session and port and lists what does
// listen (portfwd.NotListening).
func (s *Session) FindPort(port int) (*PortTarget, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d is out of range 1-65535", sandbox.ErrBadRequest, port)
	}
	if pb, req := s.portBackend(); pb != nil {
		ls, err := s.backendListeners(pb, req)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the listening sockets of session %q: %v", sandbox.ErrBadRequest, s.name, err)
		}
		addr, ok := portfwd.DialTarget(ls, uint16(port))
		if !ok {
			c := portfwd.Candidate{ID: "the session's " + pb.Name() + " sandbox", Listeners: ls}
			return nil, fmt.Errorf("%w: %v", sandbox.ErrBadRequest, portfwd.NotListening(s.name, uint16(port), []portfwd.Candidate{c}))
		}
		return &PortTarget{ID: pb.Name(), Command: "the session's " + pb.Name() + " sandbox", Addr: addr, via: pb, req: req}, nil
	}
	recs := s.sandboxes()
	if len(recs) == 0 {
		var meta Meta
		_ = readJSON(filepath.Join(s.dir, "meta.json"), &meta)
		// By the backend's recorded traits, not its name.
		switch {
		case meta.Unsandboxed:
			return nil, fmt.Errorf("%w: session %q runs on the %s backend, without a sandbox: its servers listen on the host's own network (127.0.0.1:%d)", sandbox.ErrBadRequest, s.name, meta.Backend, port)
		case meta.HostPaths, meta.Backend == "":
		default:
			return nil, fmt.Errorf("%w: session %q last ran on the %s backend, whose sandbox cannot be reached without the session's settings", sandbox.ErrBadRequest, s.name, meta.Backend)
		}
	}
	cands := make([]portfwd.Candidate, len(recs))
	nsPIDs := make([]int, len(recs))
	for i, r := range recs {
		c := portfwd.Candidate{ID: r.ID, Command: r.Command}
		pid, err := portfwd.NamespacePID(r.PID)
		switch {
		case errors.Is(err, portfwd.ErrHostNetwork):
			c.HostNetwork = true
		case err != nil:
			c.Err = err
		default:
			nsPIDs[i] = pid
			c.Listeners, c.Err = portfwd.ListenersOf(pid)
		}
		cands[i] = c
	}
	i, addr, err := portfwd.Pick(s.name, uint16(port), cands)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrBadRequest, err)
	}
	return &PortTarget{ID: recs[i].ID, Command: recs[i].Command, NSPID: nsPIDs[i], Addr: addr}, nil
}

// ForwardPort forwards 127.0.0.1:hostPort on the host (0: a free port) to
// TCP port inside the sandbox of the session's background process that
// listens on it (FindPort). The forward ends when that process exits, when
// the session is closed (Close), or by its own Close; the session keeps
// it until then. Errors are FindPort's and portfwd.Start's.
func (s *Session) ForwardPort(port, hostPort int) (*portfwd.Forward, *PortTarget, error) {
	s.pmu.Lock()
	closed := s.closed
	s.pmu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	t, err := s.FindPort(port)
	if err != nil {
		return nil, nil, err
	}
	f, err := s.startForward(t, port, hostPort)
	if err != nil {
		return nil, nil, err
	}
	return f, t, nil
}

// startForward starts a forward to t and keeps it with the session.
func (s *Session) startForward(t *PortTarget, port, hostPort int) (*portfwd.Forward, error) {
	var f *portfwd.Forward
	var err error
	o := portfwd.Options{HostPort: hostPort, Log: s.m.log}
	if t.via != nil {
		pb, req, addr := t.via, t.req, t.Addr
		dial := func(ctx context.Context) (io.ReadWriteCloser, error) { return pb.DialPort(ctx, req, addr.String()) }
		alive := func() bool {
			ls, err := s.backendListeners(pb, req)
			_, ok := portfwd.DialTarget(ls, addr.Port())
			return err == nil && ok && !s.isClosed()
		}
		f, err = portfwd.StartDial(dial, addr, alive, backendNS(pb, s.name), o)
	} else {
		f, err = portfwd.Start(t.NSPID, t.Addr, o)
	}
	if err != nil {
		return nil, fmt.Errorf("forwarding port %d of session %q: %w", port, s.name, err)
	}
	s.pmu.Lock()
	if s.closed {
		s.pmu.Unlock()
		f.Close()
		return nil, ErrClosed
	}
	s.forwards = append(s.forwards, f)
	s.pmu.Unlock()
	s.m.log.Info("session.port.forwarded", "session", s.name, "port", port, "id", t.ID, "url", f.URL())
	return f, nil
}

// Poll intervals of autoForward: it looks often while a server starts,
// then less often.
const (
	autoForwardFirst = 100 * time.Millisecond
	autoForwardMax   = time.Second
	// autoForwardNoPID is how long autoForward waits for the backend to
	// report the sandbox's host process (sandbox.Request.OnStart, called
	// as the sandbox starts) before it concludes the backend has none
	// (docker) and stops looking.
	autoForwardNoPID = 30 * time.Second
)

// autoForward forwards each of ports once background process p's sandbox
// listens on it (Spec.Ports), at the same host port when that is free and
// else at any free one, until every port is forwarded, p ends or the
// session closes. The forwards end with p's sandbox (portfwd watches its
// process) or the session.
func (s *Session) autoForward(p *Process, ports []int) {
	wait := autoForwardFirst
	pending := append([]int(nil), ports...)
	begun := time.Now()
	for len(pending) > 0 {
		select {
		case <-p.done:
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, autoForwardMax)
		if s.isClosed() {
			return
		}
		p.mu.Lock()
		hostPID := p.hostPID
		p.mu.Unlock()
		if hostPID == 0 {
			if time.Since(begun) > autoForwardNoPID {
				return
			}
			continue
		}
		nsPID, err := portfwd.NamespacePID(hostPID)
		if err != nil {
			if errors.Is(err, portfwd.ErrHostNetwork) {
				return
			}
			continue
		}
		ls, err := portfwd.ListenersOf(nsPID)
		if err != nil {
			continue
		}
		pending = s.forwardListening(p, pending, ls, portfwd.NetNS(nsPID), func(addr netip.AddrPort) *PortTarget {
			return &PortTarget{ID: p.ID, Command: p.Command, NSPID: nsPID, Addr: addr}
		})
	}
}

// forwardListening forwards each of pending that ls shows listening, at
// the same host port when that is free and else at any free one, and
// returns the ports that do not listen yet. A port that a live forward of
// the session already reaches in namespace ns is left alone: under
// allowlist the session's processes share a namespace, and each one's
// autoForward sees the same listener.
func (s *Session) forwardListening(p *Process, pending []int, ls []portfwd.Listener, ns string, target func(netip.AddrPort) *PortTarget) []int {
	var still []int
	for _, port := range pending {
		addr, ok := portfwd.DialTarget(ls, uint16(port))
		if !ok {
			still = append(still, port)
			continue
		}
		s.fwdMu.Lock()
		if s.forwardedIn(ns, port) {
			s.fwdMu.Unlock()
			continue
		}
		t := target(addr)
		_, err := s.startForward(t, port, port)
		if err != nil && !errors.Is(err, ErrClosed) {
			_, err = s.startForward(t, port, 0) // the host port is taken
		}
		s.fwdMu.Unlock()
		if err != nil {
			s.m.log.Warn("session.port.forward_failed", "session", s.name, "id", p.ID, "port", port, "error", err)
		}
	}
	return still
}

// backendNS names a session's sandbox on a PortBackend, in the place of a
// network namespace's name (portfwd.NetNS).
func backendNS(pb sandbox.PortBackend, session string) string {
	return pb.Name() + ":" + session
}

// autoForwardBackend is autoForward on a backend that reaches ports
// itself: the session's sandbox is one network namespace (docker's
// container), looked at until each port listens there, p ends or the
// session closes.
func (s *Session) autoForwardBackend(p *Process, ports []int, pb sandbox.PortBackend, req *sandbox.Request) {
	wait := autoForwardFirst
	pending := append([]int(nil), ports...)
	ns := backendNS(pb, s.name)
	for len(pending) > 0 {
		select {
		case <-p.done:
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, autoForwardMax)
		if s.isClosed() {
			return
		}
		ls, err := s.backendListeners(pb, req)
		if err != nil {
			continue
		}
		pending = s.forwardListening(p, pending, ls, ns, func(addr netip.AddrPort) *PortTarget {
			return &PortTarget{ID: p.ID, Command: p.Command, Addr: addr, via: pb, req: req}
		})
	}
}

// forwardedIn reports whether a live forward goes to port in the
// namespace named ns (portfwd.NetNS, backendNS).
func (s *Session) forwardedIn(ns string, port int) bool {
	for _, f := range s.Forwards() {
		if int(f.Target().Port()) == port && ns != "" && f.NetNS() == ns {
			return true
		}
	}
	return false
}

// PortInfo is a listening port of a background process's sandbox.
type PortInfo struct {
	// Port is the port inside the sandbox.
	Port int `json:"port"`
	// URL is where the host reaches it ("http://127.0.0.1:N/"), or "" when
	// it is not forwarded.
	URL string `json:"url,omitempty"`
}

// Ports returns the TCP ports that background process id's sandbox listens
// on, with the URL of each one forwarded (by the ports setting or
// ForwardPort), ordered by port. It returns nil when the process has ended,
// shares the host's network, or its listeners cannot be read.
func (s *Session) Ports(id string) []PortInfo {
	p, err := s.proc(id)
	if err != nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	var ls []portfwd.Listener
	var ns string
	if pb, req := s.portBackend(); pb != nil {
		if ls, err = s.backendListeners(pb, req); err != nil {
			return nil
		}
		ns = backendNS(pb, s.name)
	} else {
		p.mu.Lock()
		hostPID := p.hostPID
		p.mu.Unlock()
		if hostPID == 0 {
			return nil
		}
		nsPID, err := portfwd.NamespacePID(hostPID)
		if err != nil {
			return nil
		}
		if ls, err = portfwd.ListenersOf(nsPID); err != nil {
			return nil
		}
		ns = portfwd.NetNS(nsPID)
	}
	// Forwards into this namespace, by target port.
	urls := map[int]string{}
	for _, f := range s.Forwards() {
		if ns != "" && f.NetNS() == ns {
			urls[int(f.Target().Port())] = f.URL()
		}
	}
	return portInfos(ls, urls)
}

// portInfos returns one PortInfo per port of ls (a port listening on IPv4
// and IPv6 is one; the lists come in any order: docker's are tcp then
// tcp6), ordered by port, with urls[port] as its URL.
func portInfos(ls []portfwd.Listener, urls map[int]string) []PortInfo {
	var out []PortInfo
	seen := map[int]bool{}
	for _, l := range ls {
		if seen[int(l.Port)] {
			continue
		}
		seen[int(l.Port)] = true
		out = append(out, PortInfo{Port: int(l.Port), URL: urls[int(l.Port)]})
	}
	slices.SortFunc(out, func(a, b PortInfo) int { return a.Port - b.Port })
	return out
}

// Forwards returns the session's forwards that still run.
func (s *Session) Forwards() []*portfwd.Forward {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	live := s.forwards[:0]
	for _, f := range s.forwards {
		select {
		case <-f.Done():
		default:
			live = append(live, f)
		}
	}
	s.forwards = live
	return append([]*portfwd.Forward(nil), live...)
}
