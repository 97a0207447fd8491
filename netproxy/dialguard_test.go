package netproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// startTestDNS serves DNS on a loopback UDP port: names (lower case,
// without the final dot) get an A or AAAA answer with their address,
// names in drop get no answer at all, any other name NXDOMAIN. It returns
// a Go resolver whose queries, meant for the machine's name servers, are
// sent there instead: the resolver's errors still name the configured
// servers (such as 127.0.0.53:53), as they would in production.
func startTestDNS(t *testing.T, names map[string]netip.Addr, drop ...string) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = pc.Close()
		wg.Wait()
	})
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if msg := dnsAnswer(buf[:n], names, drop); msg != nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	})
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", pc.LocalAddr().String())
		},
	}
}

// dnsAnswer builds the answer of startTestDNS to the query q, or nil for
// none.
func dnsAnswer(q []byte, names map[string]netip.Addr, drop []string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	for _, d := range drop {
		if name == d {
			return nil
		}
	}
	addr, found := names[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(question)
	_ = b.StartAnswers()
	res := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET}
	switch {
	case found && question.Type == dnsmessage.TypeA && addr.Is4():
		_ = b.AResource(res, dnsmessage.AResource{A: addr.As4()})
	case found && question.Type == dnsmessage.TypeAAAA && addr.Is6():
		_ = b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: addr.As16()})
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// ownAddrs returns this machine's interface addresses that are neither
// loopback nor link-local (such as its LAN address or docker0's
// 172.17.0.1), the ones only the interface check of the default dialer
// refuses.
func ownAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	list, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own []netip.Addr
	for _, x := range list {
		ipn, ok := x.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		if localKind(a) == "" {
			own = append(own, a)
		}
	}
	return own
}

// proxyAnswer is what a client sees of one request through the proxies:
// the HTTP status and body, or the SOCKS5 reply code.
type proxyAnswer struct {
	code int
	body string
	rep  byte
}

// askProxy requests host:port through s by proto: "http" (an
// absolute-form GET), "connect" or "socks5".
func askProxy(t *testing.T, s *Server, proto, host, port string) proxyAnswer {
	t.Helper()
	switch proto {
	case "http":
		code, body, _ := get(t, proxyClient(s.HTTPSocket(), nil), "http://"+net.JoinHostPort(host, port)+"/")
		return proxyAnswer{code: code, body: body}
	case "connect":
		resp, _, _ := connectRaw(t, s.HTTPSocket(), net.JoinHostPort(host, port))
		body, _ := io.ReadAll(resp.Body)
		return proxyAnswer{code: resp.StatusCode, body: string(body)}
	default:
		pn, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatalf("bad port %q", port)
		}
		send := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}, host...)
		got := socksExchange(t, s.SOCKSSocket(), append(send, byte(pn>>8), byte(pn)))
		if len(got) != 12 {
			t.Fatalf("SOCKS5 %s: answer % x", host, got)
		}
		return proxyAnswer{rep: got[3]}
	}
}

func TestDefaultDialRefusesOwnAddresses(t *testing.T) {
	own := ownAddrs(t)
	if len(own) == 0 {
		t.Skip("this machine has no interface address besides loopback and link-local ones")
	}
	u := newUpstreams(t)
	// A service of this machine on each of its own addresses, which a
	// name under an allowed wildcard could be pointed at.
	names := map[string]netip.Addr{}
	var hits atomic.Int32
	type target struct {
		name, proto string
		addr        netip.Addr
		port        string
	}
	var targets []target
	verified := int32(0)
	for i, a := range own {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			t.Logf("%s: cannot listen (%v); skipped", a, err)
			continue
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				hits.Add(1)
				_ = c.Close()
			}
		}()
		// The service is reachable when dialled directly.
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
		if err != nil {
			t.Logf("%s: cannot connect to own listener (%v); skipped", a, err)
			continue
		}
		_ = c.Close()
		verified++
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		for _, proto := range []string{"http", "connect", "socks5"} {
			name := fmt.Sprintf("own%d-%s.allowed.test", i, proto)
			names[name] = a
			targets = append(targets, target{name, proto, a, port})
		}
	}
	if len(targets) == 0 {
		t.Skip("no own address could be listened on")
	}
	// The direct dials above are counted by the accept loops in their own
	// time: wait for them before counting from zero.
	for deadline := time.Now().Add(60 * time.Second); hits.Load() < verified && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	hits.Store(0)
	s, rec := startTestServer(t, u, func(o *Options) {
		o.Dial = nil
		o.resolver = startTestDNS(t, names)
	})
	for _, tc := range targets {
		proto := tc.proto
		t.Run(tc.name+"="+tc.addr.String(), func(t *testing.T) {
			got := askProxy(t, s, proto, tc.name, tc.port)
			want := "blocked by corral network allowlist: " + tc.name + " (resolves to a local address of this machine)"
			switch {
			case proto == "socks5" && got.rep != socksRepNotAllowed:
				t.Errorf("SOCKS5 reply %#x, want %#x (not allowed)", got.rep, socksRepNotAllowed)
			case proto != "socks5" && (got.code != http.StatusForbidden || strings.TrimSpace(got.body) != want):
				t.Errorf("got %d %q, want 403 %q", got.code, got.body, want)
			}
			if strings.Contains(got.body, tc.addr.String()) {
				t.Errorf("the body %q tells the sandbox the host's address", got.body)
			}
			a := rec.waitFor(t, "network.denied", tc.name)
			if a["proto"] != proto || a["session"] != "sess-1" || a["port"] != tc.port ||
				!strings.Contains(a["reason"], tc.addr.String()+" is assigned to an interface of this machine") {
				t.Errorf("network.denied record = %v", a)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the host's own services got %d connections through the proxy", n)
	}
}

func TestUpstreamFailureBody(t *testing.T) {
	u := newUpstreams(t)
	names := map[string]netip.Addr{}
	r := startTestDNS(t, names, "slow-http.allowed.test", "slow-connect.allowed.test", "slow-socks5.allowed.test")
	// What the resolver's own error says, which must stay in the log.
	_, lookupErr := r.LookupHost(context.Background(), "nx-http.allowed.test")
	var dnsErr *net.DNSError
	if !errors.As(lookupErr, &dnsErr) || !dnsErr.IsNotFound || dnsErr.Server == "" {
		t.Fatalf("test resolver: lookup error %v, want a not-found DNSError naming its server", lookupErr)
	}
	t.Logf("the resolver says: %v", lookupErr)

	s, rec := startTestServer(t, u, func(o *Options) {
		o.Dial = nil
		o.resolver = r
		o.DialTimeout = 300 * time.Millisecond
	})
	refused, recRefused := startTestServer(t, u, func(o *Options) {
		o.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, "127.0.0.1:1") // nothing listens there
		}
	})
	for _, tc := range []struct {
		label   string
		srv     *Server
		rec     *recorder
		reason  string
		rep     byte
		logErr  string // in the log record's error
		secrets []string
	}{
		{"nx", s, rec, "no such host", socksRepHostUnreachable, dnsErr.Server, []string{dnsErr.Server, ":53", " on ", "127.0.0.1"}},
		{"slow", s, rec, "timed out", socksRepHostUnreachable, "timeout", []string{dnsErr.Server, ":53", " on ", "127.0.0.1"}},
		{"refused", refused, recRefused, "connection refused", socksRepConnRefused, "127.0.0.1:1", []string{"127.0.0.1", "dial tcp"}},
	} {
		for _, proto := range []string{"http", "connect", "socks5"} {
			host := tc.label + "-" + proto + ".allowed.test"
			t.Run(host, func(t *testing.T) {
				got := askProxy(t, tc.srv, proto, host, "80")
				if proto == "socks5" {
					if got.rep != tc.rep {
						t.Errorf("SOCKS5 reply %#x, want %#x", got.rep, tc.rep)
					}
				} else {
					want := "corral proxy: cannot reach " + host + ":80: "
					if got.code != http.StatusBadGateway || !strings.HasPrefix(got.body, want) || !strings.Contains(got.body, tc.reason) {
						t.Errorf("got %d %q, want 502 %q...%q", got.code, got.body, want, tc.reason)
					}
					for _, secret := range tc.secrets {
						if strings.Contains(got.body, secret) {
							t.Errorf("body %q contains %q", got.body, secret)
						}
					}
				}
				a := tc.rec.waitFor(t, "network.upstream_failed", host)
				if a["session"] != "sess-1" || a["proto"] != proto || a["port"] != "80" || a["level"] != "INFO" ||
					!strings.Contains(a["reason"], tc.reason) || !strings.Contains(a["error"], tc.logErr) {
					t.Errorf("network.upstream_failed record = %v, want error with %q", a, tc.logErr)
				}
			})
		}
	}
}

func TestFailureReason(t *testing.T) {
	dnsNX := &net.DNSError{Err: "no such host", Name: "x.test", Server: "127.0.0.53:53", IsNotFound: true}
	dnsSlow := &net.DNSError{Err: "i/o timeout", Name: "x.test", Server: "127.0.0.53:53", IsTimeout: true}
	dnsOther := &net.DNSError{Err: "server misbehaving", Name: "x.test", Server: "127.0.0.53:53"}
	opErr := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{opErr(dnsNX), "no such host"},
		{opErr(dnsSlow), "name lookup timed out"},
		{opErr(dnsOther), "name lookup failed"},
		{opErr(fmt.Errorf("%w: 10.0.0.1 is assigned to an interface of this machine", ErrLocalTarget)), "resolves to a local address of this machine"},
		{opErr(fmt.Errorf("%w: netlink: boom", errHostAddrs)), "the proxy cannot check the address (see its log)"},
		{opErr(os.NewSyscallError("connect", syscall.ECONNREFUSED)), "connection refused"},
		{opErr(context.DeadlineExceeded), "timed out"},
		{fmt.Errorf("wrapped: %w", os.ErrDeadlineExceeded), "timed out"},
		{opErr(os.NewSyscallError("connect", syscall.ENETUNREACH)), "unreachable"},
		{opErr(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), "unreachable"},
		{opErr(os.NewSyscallError("read", syscall.ECONNRESET)), "connection closed by the host"},
		{io.EOF, "connection closed by the host"},
		{errors.New("something at 127.0.0.53:53"), "connection failed"},
	} {
		if got := failureReason(tc.err); got != tc.want {
			t.Errorf("failureReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestAddrCache(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
		list  = []net.Addr{&net.IPNet{IP: net.ParseIP("192.0.2.7"), Mask: net.CIDRMask(24, 32)}}
		fail  error
	)
	c := &addrCache{ttl: 50 * time.Millisecond, list: func() ([]net.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if fail != nil {
			return nil, fail
		}
		return list, nil
	}}
	set := func(f func()) { mu.Lock(); f(); mu.Unlock() }

	for _, tc := range []struct {
		addr    string
		refused bool
	}{
		{"192.0.2.7:443", true},
		{"[::ffff:192.0.2.7]:443", true},
		{"192.0.2.8:443", false}, // same subnet, another machine
		{"127.0.0.1:80", true},   // by class, without listing
	} {
		err := c.refuse(tc.addr)
		if got := errors.Is(err, ErrLocalTarget); got != tc.refused || (!tc.refused && err != nil) {
			t.Errorf("refuse(%s) = %v, want refused=%v", tc.addr, err, tc.refused)
		}
	}
	if set(func() {}); calls != 1 {
		t.Errorf("the interfaces were listed %d times within the TTL, want once", calls)
	}

	// An address added to an interface is refused once the TTL is over.
	set(func() { list = append(list, &net.IPAddr{IP: net.ParseIP("2001:db8::7")}) })
	if err := c.refuse("[2001:db8::7]:443"); err != nil {
		t.Logf("refused within the TTL already: %v", err)
	}
	time.Sleep(60 * time.Millisecond)
	if err := c.refuse("[2001:db8::7]:443"); !errors.Is(err, ErrLocalTarget) {
		t.Errorf("new address after the TTL: %v, want refused", err)
	}

	// A failure to list fails the dial closed, with an error that says
	// why, and is not kept: the next dial lists again.
	set(func() { fail = errors.New("netlink: boom") })
	time.Sleep(60 * time.Millisecond)
	err := c.refuse("198.51.100.1:443")
	if !errors.Is(err, errHostAddrs) || errors.Is(err, ErrLocalTarget) || !strings.Contains(err.Error(), "netlink: boom") {
		t.Errorf("listing fails: refuse = %v, want errHostAddrs with the cause", err)
	}
	set(func() { fail = nil })
	if err := c.refuse("198.51.100.1:443"); err != nil {
		t.Errorf("after listing works again: refuse = %v", err)
	}

	// Concurrent dials share one cache.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_ = c.refuse("192.0.2.7:443")
			}
		})
	}
	wg.Wait()
}
