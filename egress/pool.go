package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/procfs"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
)

// DefaultLinger is how long a Pool keeps a server that no sandbox uses any
// more, ready for the session's next command, when Options.Linger is zero.
const DefaultLinger = time.Minute

// ErrClosed is returned by [Pool.Get] after [Pool.Close]. It wraps
// sandbox.ErrUnavailable: the command must not run.
var ErrClosed = fmt.Errorf("egress: the allowlist proxy pool is closed: %w", sandbox.ErrUnavailable)

// Options configure a [Pool].
type Options struct {
	// Dir is the directory under which each server gets a socket directory
	// of its own, Dir/<pid>-<n> (mode 0700, removed when the server
	// closes). It is created (0700) if missing. Unix socket paths are
	// limited to 107 bytes, so Dir should be at most about 80 bytes long;
	// a longer one makes Get fail. Required.
	Dir string
	// Logger receives the servers' records (network.denied, raised to Warn
	// so that corral's default log level shows it; network.allowed at
	// Debug) and the pool's own (egress.started, egress.closed at Debug).
	// Nil discards them.
	Logger *slog.Logger
	// SocketMode is the permission of the sockets (netproxy.Options.
	// SocketMode); zero means 0600, right for bwrap, whose sandbox runs as
	// the same uid. A container running as another uid needs 0666.
	SocketMode fs.FileMode
	// Dial, when set, replaces the servers' upstream dialer
	// (netproxy.Options.Dial). For tests only: the default dialer refuses
	// allowed names that resolve to loopback, link-local or the host's own
	// addresses.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Linger is how long a server no sandbox uses stays up for the next
	// command of its session; zero means DefaultLinger, a negative value
	// closes it at once.
	Linger time.Duration
	// CADir is the directory of corral's certificate authority
	// (secrets.LoadCA), which servers with secrets terminate TLS with:
	// inside corral's state directory, which every sandbox hides. Empty
	// makes a Get with secrets fail.
	CADir string
	// UpstreamRoots verifies the upstream servers of terminated
	// connections (netproxy.Options.UpstreamRoots); nil means the
	// system roots. For tests only.
	UpstreamRoots *x509.CertPool
}

// Pool keeps the running proxy servers of one corral process, one per
// session and policy, shared by the sandboxes of that session and
// reference counted. Create it with [NewPool]; it is safe for concurrent
// use.
type Pool struct {
	opts Options
	log  *slog.Logger

	caMu  sync.Mutex // guards ca and caErr
	ca    *secrets.CA
	caErr error

	mu      sync.Mutex
	servers map[string]*entry
	seq     int
	swept   bool
	closed  bool
}

// entry is one server and the leases on it.
type entry struct {
	key   string
	srv   *netproxy.Server
	dir   string
	refs  int
	timer *time.Timer // closes the server once it has been unused for Linger

	// amu guards attached and shut; it is held while an attachment starts
	// (which may take a while), never together with Pool.mu.
	amu      sync.Mutex
	attached map[string]io.Closer
	shut     bool
}

// Attach returns the value kept with srv under name, starting it with start
// when there is none yet: something a backend needs once per server rather
// than per command, such as bwrap's holder of the network namespace that a
// session's allowlist commands share. A value that has an Alive() bool
// method reporting false is closed and started anew. The pool closes the
// attached values when it closes srv (linger expiry or [Pool.Close]),
// before the server itself.
//
// The caller must hold a lease on srv from [Pool.Get] while it calls
// Attach (so the server cannot close meanwhile). Errors: start's error as
// returned, [ErrClosed] after Close or when srv has closed, or an error
// wrapping sandbox.ErrUnavailable when srv is not one of the pool's
// servers. start runs with no pool-wide lock held: other sessions go on.
func (p *Pool) Attach(srv *netproxy.Server, name string, start func() (io.Closer, error)) (io.Closer, error) {
	p.mu.Lock()
	var e *entry
	for _, c := range p.servers {
		if c.srv == srv {
			e = c
			break
		}
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if e == nil {
		return nil, fmt.Errorf("%w: egress: the proxy server is not one of this pool's", sandbox.ErrUnavailable)
	}
	e.amu.Lock()
	defer e.amu.Unlock()
	if e.shut {
		return nil, ErrClosed
	}
	if v := e.attached[name]; v != nil {
		if a, ok := v.(interface{ Alive() bool }); !ok || a.Alive() {
			return v, nil
		}
		_ = v.Close()
		delete(e.attached, name)
		p.log.Warn("egress.attachment.restarted", "name", name, "dir", e.dir)
	}
	v, err := start()
	if err != nil {
		return nil, err
	}
	if e.attached == nil {
		e.attached = map[string]io.Closer{}
	}
	e.attached[name] = v
	return v, nil
}

// NewPool returns a pool that makes its servers under opts.Dir. Nothing is
// created before the first [Pool.Get].
func NewPool(opts Options) *Pool {
	l := opts.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	if opts.Linger == 0 {
		opts.Linger = DefaultLinger
	}
	return &Pool{opts: opts, log: slog.New(deniedAsWarn{l.Handler()}), servers: map[string]*entry{}}
}

// Get returns the running server for session and policy, starting one if
// there is none, and a release function the caller must call once (more
// calls do nothing) when the sandbox that uses it has ended. The server's
// sockets are srv.HTTPSocket() and srv.SOCKSSocket(), both in one
// directory of their own that can be bound into a sandbox. A server nobody
// holds is closed after Options.Linger, and the next one gets another
// directory: a sandbox that outlives one command (a container that binds
// the directory when it is created) must hold its lease as long as it
// lives.
//
// Requests are logged with session as their "session" attribute. Errors
// wrap sandbox.ErrUnavailable (the proxy cannot start: the directory
// cannot be made, a socket path is too long, a socket cannot be bound;
// the command must then not run), sandbox.ErrBadRequest wrapping
// netproxy.ErrInvalidPattern (a policy entry is malformed), or [ErrClosed].
//
// secs are the session's secrets (netproxy.Options.Secrets): their hosts
// must be in policy.Allow (the caller adds them), and the server
// terminates TLS for them with the pool's CA ([Pool.CA]); a CA that
// cannot be loaded fails Get with sandbox.ErrUnavailable.
func (p *Pool) Get(policy netproxy.Policy, session string, secs ...secrets.Secret) (*netproxy.Server, func(), error) {
	if err := policy.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: network allowlist: %w", sandbox.ErrBadRequest, err)
	}
	var ca *secrets.CA
	if len(secs) > 0 {
		var err error
		if ca, err = p.CA(); err != nil {
			return nil, nil, err
		}
	}
	key := poolKey(policy, session, secs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	e := p.servers[key]
	if e == nil {
		var err error
		if e, err = p.startLocked(key, policy, session, secs, ca); err != nil {
			return nil, nil, err
		}
		p.servers[key] = e
	}
	e.refs++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	var once sync.Once
	return e.srv, func() { once.Do(func() { p.release(e) }) }, nil
}

// poolKey identifies a server: the session, the policy's entries in
// order, and each secret's name, stand-in (which changes with the real
// value, so a changed value gets a new server), hosts and headers.
func poolKey(policy netproxy.Policy, session string, secs []secrets.Secret) string {
	k := session + "\x00" + strings.Join(policy.Allow, "\x01") + "\x00" + strings.Join(policy.Deny, "\x01")
	for _, s := range secs {
		k += "\x00" + s.Name + "\x01" + s.StandIn + "\x01" + strings.Join(s.Hosts, "\x02") + "\x01" + strings.Join(s.Headers, "\x02")
	}
	return k
}

// CA returns corral's certificate authority, loaded (or made) from
// Options.CADir on first use and kept. Errors wrap sandbox.ErrUnavailable;
// a passing one (sandbox.IsTransient: too many open files) stays in the
// chain and is not kept, so the next call tries again.
func (p *Pool) CA() (*secrets.CA, error) {
	p.caMu.Lock()
	defer p.caMu.Unlock()
	if p.ca != nil || p.caErr != nil {
		return p.ca, p.caErr
	}
	if p.opts.CADir == "" {
		p.caErr = fmt.Errorf("%w: secrets: no directory for corral's certificate authority configured", sandbox.ErrUnavailable)
		return nil, p.caErr
	}
	ca, err := secrets.LoadCA(p.opts.CADir)
	if err != nil {
		err = fmt.Errorf("%w: secrets need corral's certificate authority, which could not be loaded: %w", sandbox.ErrUnavailable, err)
		if !sandbox.IsTransient(err) {
			p.caErr = err
		}
		return nil, err
	}
	p.ca = ca
	return ca, nil
}

func (p *Pool) startLocked(key string, policy netproxy.Policy, session string, secs []secrets.Secret, ca *secrets.CA) (*entry, error) {
	if p.opts.Dir == "" {
		return nil, fmt.Errorf("%w: allowlist proxy: no socket directory configured", sandbox.ErrUnavailable)
	}
	if err := os.MkdirAll(p.opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: allowlist proxy: creating %s: %w", sandbox.ErrUnavailable, p.opts.Dir, err)
	}
	if !p.swept {
		p.swept = true
		SweepStale(p.opts.Dir)
	}
	p.seq++
	dir := filepath.Join(p.opts.Dir, fmt.Sprintf("%d-%d", os.Getpid(), p.seq))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: allowlist proxy: creating %s: %w", sandbox.ErrUnavailable, dir, err)
	}
	srv, err := netproxy.Start(netproxy.Options{
		Policy:        policy,
		Dir:           dir,
		SocketMode:    p.opts.SocketMode,
		Logger:        p.log,
		Session:       session,
		Dial:          p.opts.Dial,
		Secrets:       secs,
		CA:            ca,
		UpstreamRoots: p.opts.UpstreamRoots,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: allowlist proxy could not start, so the command does not run: %w", sandbox.ErrUnavailable, err)
	}
	names := make([]string, len(secs))
	for i, s := range secs {
		names[i] = s.Name
	}
	p.log.Debug("egress.started", "session", session, "dir", dir, "allow", policy.Allow, "deny", policy.Deny, "secrets", names)
	return &entry{key: key, srv: srv, dir: dir}, nil
}

// release drops one lease on e and arranges for the server to close when
// it was the last.
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	e.refs--
	if e.refs > 0 || p.servers[e.key] != e {
		p.mu.Unlock()
		return
	}
	if p.opts.Linger < 0 {
		delete(p.servers, e.key)
		p.mu.Unlock()
		_ = p.shut(e)
		return
	}
	defer p.mu.Unlock()
	e.timer = time.AfterFunc(p.opts.Linger, func() {
		p.mu.Lock()
		if e.refs > 0 || p.servers[e.key] != e {
			p.mu.Unlock()
			return
		}
		delete(p.servers, e.key)
		p.mu.Unlock()
		_ = p.shut(e)
	})
}

// shut closes e's attachments and server and removes its socket
// directory.
func (p *Pool) shut(e *entry) error {
	e.amu.Lock()
	e.shut = true
	var errs []error
	for _, v := range e.attached {
		errs = append(errs, v.Close())
	}
	e.attached = nil
	e.amu.Unlock()
	err := errors.Join(append(errs, e.srv.Close())...)
	_ = os.Remove(e.dir)
	p.log.Debug("egress.closed", "dir", e.dir)
	return err
}

// Close closes every server of the pool, also those still in use (their
// sandboxes lose the network), and makes later Gets fail with [ErrClosed].
// It returns the servers' close errors, joined.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	entries := make([]*entry, 0, len(p.servers))
	for k, e := range p.servers {
		if e.timer != nil {
			e.timer.Stop()
		}
		entries = append(entries, e)
		delete(p.servers, k)
	}
	p.mu.Unlock()
	var errs []error
	for _, e := range entries {
		errs = append(errs, p.shut(e))
	}
	return errors.Join(errs...)
}

// SweepStale removes the socket directories under dir (a Pool's
// Options.Dir) of corral processes that are gone (killed before they could
// clean up) and returns their paths. A directory of a process that still
// exists, or may (kill(2) answers other than ESRCH), is kept, and so is one
// whose name is not a pool's ("<pid>-<n>"). A Pool sweeps its directory
// when it starts its first server; `corral cleanup` calls it too.
func SweepStale(dir string) []string {
	return procfs.SweepDead(dir, func(name string) (int, bool) {
		pidText, _, ok := strings.Cut(name, "-")
		pid, err := strconv.Atoi(pidText)
		return pid, ok && err == nil
	})
}

// Check starts a proxy server with an empty policy in a new directory
// under dir and closes it again, for `corral doctor`: nil means the
// allowlist profile's proxy can start here. The error says why not.
func Check(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d, err := os.MkdirTemp(dir, "check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	srv, err := netproxy.Start(netproxy.Options{Dir: d})
	if err != nil {
		return err
	}
	return srv.Close()
}

// deniedAsWarn raises network.denied records to Warn, so that a refused
// host shows at corral's default log level (warn).
type deniedAsWarn struct{ h slog.Handler }

// Enabled implements slog.Handler: an Info record may be a network.denied
// that Handle raises to Warn.
func (d deniedAsWarn) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, l) || l == slog.LevelInfo && d.h.Enabled(ctx, slog.LevelWarn)
}

// Handle implements slog.Handler.
func (d deniedAsWarn) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "network.denied" && r.Level < slog.LevelWarn {
		r.Level = slog.LevelWarn
	}
	if !d.h.Enabled(ctx, r.Level) {
		return nil
	}
	return d.h.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (d deniedAsWarn) WithAttrs(as []slog.Attr) slog.Handler {
	return deniedAsWarn{d.h.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (d deniedAsWarn) WithGroup(name string) slog.Handler { return deniedAsWarn{d.h.WithGroup(name)} }
