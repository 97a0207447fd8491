package bwrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"
)

// The D-Bus side of userscope.go: reach this user's systemd manager, read
// its cgroup, and ask it for the scope. Names and signatures are those of
// org.freedesktop.systemd1(5).
const (
	systemdDest    = "org.freedesktop.systemd1"
	systemdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdManager = "org.freedesktop.systemd1.Manager"
	systemdUnit    = "org.freedesktop.systemd1.Unit"
)

// userScopeWait bounds all of asking for a scope: connecting, the calls,
// and waiting for the manager to move corral.
const userScopeWait = 10 * time.Second

// scopeHost is what asking for a scope reads of this process and machine;
// thisScopeHost is the real one (tests give fakes).
type scopeHost struct {
	uid, pid   int
	getenv     func(string) string
	facts      func() cgroupFacts
	procCgroup func() string
}

// thisScopeHost is scopeHost of this process.
func thisScopeHost() scopeHost {
	return scopeHost{
		uid: os.Getuid(), pid: os.Getpid(), getenv: os.Getenv, facts: readCgroupFacts,
		procCgroup: func() string { b, _ := os.ReadFile("/proc/self/cgroup"); return string(b) },
	}
}

// scopeError is why corral has no scope, with the fix to name.
type scopeError struct{ why, fix string }

func (e *scopeError) Error() string { return e.why }

// userManager is a connection to this user's systemd manager.
type userManager struct {
	conn *dbus.Conn
}

// dialUserManager connects to the user's systemd manager at the first of
// userBusSockets that answers, authenticated as this uid (EXTERNAL: the
// manager checks the socket's peer credentials). Every read and write on
// the connection ends by ctx's deadline.
func dialUserManager(ctx context.Context, h scopeHost) (*userManager, error) {
	var errs []error
	for _, s := range userBusSockets(h.getenv, h.uid) {
		c, err := dialBus(ctx, s, h.uid)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Path, err))
			continue
		}
		return &userManager{conn: c}, nil
	}
	return nil, &scopeError{why: fmt.Sprintf("no systemd user manager answered (%v)", errors.Join(errs...)), fix: fixNoManager}
}

// dialBus opens one D-Bus connection at s.
func dialBus(ctx context.Context, s busSocket, uid int) (*dbus.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", s.Path)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	c, err := dbus.DialUnix(uc, dbus.WithContext(ctx))
	if err != nil {
		uc.Close()
		return nil, err
	}
	if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(uid))}); err != nil {
		c.Close()
		return nil, fmt.Errorf("authenticating: %w", err)
	}
	if s.Hello {
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
	}
	return c, nil
}

func (m *userManager) close() { m.conn.Close() }

// property reads property iface.name of object obj.
func (m *userManager) property(ctx context.Context, obj dbus.ObjectPath, iface, name string) (any, error) {
	var v dbus.Variant
	err := m.conn.Object(systemdDest, obj).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, iface, name).Store(&v)
	return v.Value(), err
}

// controlGroup returns the manager's own cgroup (Manager.ControlGroup).
func (m *userManager) controlGroup(ctx context.Context) (string, error) {
	v, err := m.property(ctx, systemdPath, systemdManager, "ControlGroup")
	if err != nil {
		return "", fmt.Errorf("reading the user manager's ControlGroup: %w", err)
	}
	s, _ := v.(string)
	return s, nil
}

// startTransientUnitArgs returns the arguments of StartTransientUnit for
// unit with props: name, job mode "fail" (an existing unit of that name
// is an error, never replaced), the properties and no auxiliary units, in
// the signature org.freedesktop.systemd1(5) gives it, ssa(sv)a(sa(sv)).
func startTransientUnitArgs(unit string, props []scopeProperty) []any {
	type prop struct {
		Name  string
		Value dbus.Variant
	}
	type aux struct {
		Name  string
		Props []prop
	}
	ps := make([]prop, 0, len(props))
	for _, p := range props {
		ps = append(ps, prop{p.Name, dbus.MakeVariant(p.Value)})
	}
	return []any{unit, "fail", ps, []aux{}}
}

// startScope asks for the transient scope unit with props.
func (m *userManager) startScope(ctx context.Context, unit string, props []scopeProperty) error {
	var job dbus.ObjectPath
	err := m.conn.Object(systemdDest, systemdPath).CallWithContext(ctx, systemdManager+".StartTransientUnit", 0, startTransientUnitArgs(unit, props)...).Store(&job)
	if err != nil {
		return fmt.Errorf("StartTransientUnit %s: %w", unit, err)
	}
	return nil
}

// unitState returns unit's ActiveState, or "" when the manager has no
// such unit loaded (a failed transient scope is unloaded at once:
// CollectMode inactive-or-failed).
func (m *userManager) unitState(ctx context.Context, unit string) (string, error) {
	var p dbus.ObjectPath
	err := m.conn.Object(systemdDest, systemdPath).CallWithContext(ctx, systemdManager+".GetUnit", 0, unit).Store(&p)
	var de dbus.Error
	if errors.As(err, &de) && de.Name == "org.freedesktop.systemd1.NoSuchUnit" {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	v, err := m.property(ctx, p, systemdUnit, "ActiveState")
	s, _ := v.(string)
	return s, err
}

// probeUserManager returns the user manager's cgroup without changing
// anything, for doctor's forecast; the error is a *scopeError.
func probeUserManager(h scopeHost) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), userScopeWait)
	defer cancel()
	m, cg, err := managerAndCgroup(ctx, h)
	if err != nil {
		return "", err
	}
	m.close()
	return cg, nil
}

// managerAndCgroup dials the user's manager and asks for its cgroup; the
// caller closes the manager. Errors are *scopeError.
func managerAndCgroup(ctx context.Context, h scopeHost) (*userManager, string, error) {
	m, err := dialUserManager(ctx, h)
	if err != nil {
		return nil, "", err
	}
	cg, err := m.controlGroup(ctx)
	if err != nil {
		m.close()
		return nil, "", &scopeError{why: err.Error(), fix: fixNoManager}
	}
	return m, cg, nil
}

// joinUserScope moves this process into a new transient scope of the
// user's systemd manager (userscope.go) and returns its name once
// /proc/self/cgroup shows it there: the manager answers StartTransientUnit
// with a job and moves the process when the job runs, so the answer alone
// says nothing. A manager that cannot give a scope memory is not asked
// (userScopeFits). Errors are *scopeError; the whole is bounded by
// userScopeWait.
func joinUserScope(ctx context.Context, h scopeHost) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, userScopeWait)
	defer cancel()
	m, cg, err := managerAndCgroup(ctx, h)
	if err != nil {
		return "", err
	}
	defer m.close()
	if why, fix := userScopeFits(h.facts(), cg); why != "" {
		return "", &scopeError{why: why, fix: fix}
	}
	unit := userScopeUnit(h.pid)
	if err := m.startScope(ctx, unit, userScopeProperties(h.pid)); err != nil {
		return "", &scopeError{why: err.Error(), fix: fixNotDelegated}
	}
	state := "unknown"
	joined := waitFor(userScopeWait, func() bool {
		if inUserScope(h.procCgroup(), unit) {
			return true
		}
		if s, err := m.unitState(ctx, unit); err == nil {
			state = s
			if s == "" || s == "failed" {
				return true // it will not come: say so now
			}
		} else if ctx.Err() != nil {
			return true
		}
		return false
	})
	if inUserScope(h.procCgroup(), unit) {
		return unit, nil
	}
	if state == "" {
		state = "failed and unloaded"
	}
	if !joined {
		state += ", still not holding corral after " + userScopeWait.String()
	}
	return "", &scopeError{why: fmt.Sprintf("your systemd user manager did not move corral into the scope %s (state: %s)", unit, state), fix: fixNotDelegated}
}
