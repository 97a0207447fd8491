package bwrap

import (
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
