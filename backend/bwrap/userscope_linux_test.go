package bwrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
)

// TestStartTransientUnitArgs: the call corral makes has the signature
// systemd's manager declares for StartTransientUnit (a call of another
// shape is refused as an unknown method), and the properties carry the
// types systemd reads them as: PIDs au, Delegate b, the rest s
// (org.freedesktop.systemd1(5), systemd.resource-control(5)).
func TestStartTransientUnitArgs(t *testing.T) {
	args := startTransientUnitArgs("app-corral-42.scope", userScopeProperties(42))
	if got := dbus.SignatureOf(args...).String(); got != "ssa(sv)a(sa(sv))" {
		t.Fatalf("signature %q, want ssa(sv)a(sa(sv))", got)
	}
	want := map[string]string{"PIDs": "au", "Delegate": "b", "Slice": "s", "CollectMode": "s", "Description": "s"}
	msg := &dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(systemdPath),
		dbus.FieldMember:    dbus.MakeVariant("StartTransientUnit"),
		dbus.FieldInterface: dbus.MakeVariant(systemdManager),
		dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(args...)),
	}, Body: args}
	if err := msg.IsValid(); err != nil {
		t.Fatalf("the call is not a valid D-Bus message: %v", err)
	}
	for _, p := range userScopeProperties(42) {
		if got := dbus.MakeVariant(p.Value).Signature().String(); got != want[p.Name] {
			t.Errorf("property %s has signature %q, want %q", p.Name, got, want[p.Name])
		}
	}
}

// fakeManager stands in for a systemd user manager on a Unix socket: it
// speaks D-Bus's handshake (EXTERNAL, with or without an initial
// response, D-Bus specification "Authentication Protocol") and answers the calls corral makes
// as systemd does, recording them. With bus set it is a message bus,
// which wants Hello first; without, a manager's private socket, which
// knows no Hello.
type fakeManager struct {
	t    *testing.T
	uid  int
	bus  bool
	fail bool // the scope's start fails

	mu    sync.Mutex
	calls []string
	props map[string]dbus.Variant
	state string // the unit's ActiveState; "" not loaded
	moved bool   // the scope holds the caller
}

// listen serves f on a new socket at path until the test ends.
func (f *fakeManager) listen(path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		f.t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
}

func (f *fakeManager) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	if b, err := r.ReadByte(); err != nil || b != 0 {
		return
	}
	for begun := false; !begun; {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		w := strings.Fields(line)
		switch {
		case len(w) == 1 && w[0] == "AUTH":
			fmt.Fprint(c, "REJECTED EXTERNAL\r\n")
		case len(w) == 2 && w[0] == "AUTH" && w[1] == "EXTERNAL":
			// No initial response: the identity is the socket's peer
			// credentials, which an empty DATA confirms.
			fmt.Fprint(c, "DATA\r\n")
		case len(w) == 1 && w[0] == "DATA":
			fmt.Fprint(c, "OK 0123456789abcdef0123456789abcdef\r\n")
		case len(w) == 3 && w[0] == "AUTH" && w[1] == "EXTERNAL":
			if id, err := hex.DecodeString(w[2]); err != nil || string(id) != strconv.Itoa(f.uid) {
				fmt.Fprint(c, "REJECTED EXTERNAL\r\n")
				continue
			}
			fmt.Fprint(c, "OK 0123456789abcdef0123456789abcdef\r\n")
		case len(w) == 1 && w[0] == "NEGOTIATE_UNIX_FD":
			fmt.Fprint(c, "ERROR\r\n")
		case len(w) == 1 && w[0] == "BEGIN":
			begun = true
		default:
			fmt.Fprint(c, "ERROR\r\n")
		}
	}
	helloed := false
	for {
		msg, err := dbus.DecodeMessage(r)
		if err != nil {
			return
		}
		member, _ := msg.Headers[dbus.FieldMember].Value().(string)
		sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
		reply := func(body ...any) {
			m := &dbus.Message{Type: dbus.TypeMethodReply, Headers: map[dbus.HeaderField]dbus.Variant{dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial())}, Body: body}
			if len(body) > 0 {
				m.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
			}
			_ = m.EncodeTo(c, binary.LittleEndian)
		}
		fail := func(name string) {
			m := &dbus.Message{Type: dbus.TypeError, Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()), dbus.FieldErrorName: dbus.MakeVariant(name),
				dbus.FieldSignature: dbus.MakeVariant(dbus.SignatureOf(name))}, Body: []any{name}}
			_ = m.EncodeTo(c, binary.LittleEndian)
		}
		f.mu.Lock()
		f.calls = append(f.calls, member)
		switch {
		case member == "Hello" && f.bus:
			helloed = true
			reply(":1.7")
		case member == "Hello", f.bus && !helloed:
			fail("org.freedesktop.DBus.Error.UnknownMethod")
		case member == "Get" && len(msg.Body) == 2 && msg.Body[1] == "ControlGroup":
			reply(dbus.MakeVariant(userMgr))
		case member == "Get" && len(msg.Body) == 2 && msg.Body[1] == "ActiveState":
			reply(dbus.MakeVariant(f.state))
		case member == "StartTransientUnit" && sig.String() == "ssa(sv)a(sa(sv))":
			f.props = map[string]dbus.Variant{}
			for _, p := range msg.Body[2].([][]any) {
				f.props[p[0].(string)] = p[1].(dbus.Variant)
			}
			if f.fail {
				f.state = "failed"
			} else {
				f.state, f.moved = "active", true
			}
			reply(dbus.ObjectPath("/org/freedesktop/systemd1/job/1"))
		case member == "GetUnit" && f.state == "":
			fail("org.freedesktop.systemd1.NoSuchUnit")
		case member == "GetUnit":
			reply(dbus.ObjectPath("/org/freedesktop/systemd1/unit/app_2dcorral_2d42_2escope"))
		default:
			fail("org.freedesktop.DBus.Error.UnknownMethod")
		}
		f.mu.Unlock()
	}
}

// seen returns the calls made so far and the scope's properties.
func (f *fakeManager) seen() ([]string, map[string]dbus.Variant) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls), f.props
}

// host is a scopeHost of pid 42 whose cgroup the fake moves, on a cgroup
// v2 machine whose user manager's cgroup has controllers ctl.
func (f *fakeManager) host(env map[string]string, ctl string) scopeHost {
	dir := "/sys/fs/cgroup" + userMgr
	return scopeHost{
		uid: f.uid, pid: 42, getenv: func(k string) string { return env[k] },
		facts: func() cgroupFacts {
			return facts(miUnified, pcSession, map[string]string{dir + "/cgroup.controllers": ctl, "/sys/fs/cgroup/cgroup.controllers": "memory pids"})
		},
		procCgroup: func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.moved {
				return "0::" + userMgr + "/app.slice/app-corral-42.scope\n"
			}
			return pcSession
		},
	}
}

// TestJoinUserScopeWithAFakeManager: the D-Bus side of asking for a scope,
// against a stand-in manager (no systemd runs here): the private socket
// first, without Hello; the session bus, with Hello, where there is no
// private socket; the scope's properties as sent; a failed start, a
// manager without memory, and no manager at all, each an error that says
// so and names the fix.
func TestJoinUserScopeWithAFakeManager(t *testing.T) {
	run := t.TempDir()
	t.Run("private socket", func(t *testing.T) {
		f := &fakeManager{t: t, uid: 1000}
		f.listen(filepath.Join(run, "a", "systemd", "private"))
		unit, err := joinUserScope(context.Background(), f.host(map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "a")}, "cpu memory pids"))
		if err != nil || unit != "app-corral-42.scope" {
			t.Fatalf("joinUserScope = %q, %v; want app-corral-42.scope", unit, err)
		}
		calls, props := f.seen()
		if calls[0] == "Hello" {
			t.Errorf("Hello sent on the manager's private socket: %v", calls)
		}
		want := map[string]any{"PIDs": []uint32{42}, "Delegate": true, "Slice": "app.slice", "CollectMode": "inactive-or-failed", "Description": "corral: memory cgroups of its sandboxes"}
		for k, v := range want {
			if got, ok := props[k]; !ok || !reflect.DeepEqual(got.Value(), v) {
				t.Errorf("property %s = %v, want %v", k, got, v)
			}
		}
		if cg, err := probeUserManager(f.host(map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "a")}, "")); err != nil || cg != userMgr {
			t.Errorf("probeUserManager = %q, %v; want %q", cg, err, userMgr)
		}
	})
	t.Run("session bus", func(t *testing.T) {
		f := &fakeManager{t: t, uid: 1000, bus: true}
		sock := filepath.Join(run, "b", "my bus")
		f.listen(sock)
		env := map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "b"), "DBUS_SESSION_BUS_ADDRESS": "unix:path=" + dbus.EscapeBusAddressValue(sock) + ",guid=0123"}
		unit, err := joinUserScope(context.Background(), f.host(env, "memory"))
		if calls, _ := f.seen(); err != nil || unit != "app-corral-42.scope" || calls[0] != "Hello" {
			t.Fatalf("joinUserScope = %q, %v (calls %v); want app-corral-42.scope after Hello", unit, err, calls)
		}
	})
	t.Run("the manager fails the scope", func(t *testing.T) {
		f := &fakeManager{t: t, uid: 1000, fail: true}
		f.listen(filepath.Join(run, "c", "systemd", "private"))
		_, err := joinUserScope(context.Background(), f.host(map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "c")}, "memory"))
		var se *scopeError
		if !errors.As(err, &se) || !strings.Contains(se.why, "did not move corral into the scope app-corral-42.scope (state: failed)") || se.fix != fixNotDelegated {
			t.Errorf("joinUserScope = %v; want the failed state and the delegation fix", err)
		}
	})
	t.Run("memory not delegated: not asked", func(t *testing.T) {
		f := &fakeManager{t: t, uid: 1000}
		f.listen(filepath.Join(run, "d", "systemd", "private"))
		_, err := joinUserScope(context.Background(), f.host(map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "d")}, "pids"))
		var se *scopeError
		if calls, _ := f.seen(); !errors.As(err, &se) || !strings.Contains(se.why, "memory is not delegated") || slices.Contains(calls, "StartTransientUnit") {
			t.Errorf("joinUserScope = %v (calls %v); want memory not delegated and no StartTransientUnit", err, calls)
		}
	})
	t.Run("no manager", func(t *testing.T) {
		f := &fakeManager{t: t, uid: 1000}
		_, err := joinUserScope(context.Background(), f.host(map[string]string{"XDG_RUNTIME_DIR": filepath.Join(run, "none")}, "memory"))
		var se *scopeError
		if !errors.As(err, &se) || !strings.Contains(se.why, "no systemd user manager answered") || se.fix != fixNoManager {
			t.Errorf("joinUserScope = %v; want no manager and its fix", err)
		}
	})
}
