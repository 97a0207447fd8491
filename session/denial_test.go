package session

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/hostview"
)

// TestDenialReasons: a command that hits the sandbox's wall gets one line
// saying how, per kind: a read-only path, a hidden one, no network, a
// system call the filter refuses; a command that fails for its own reasons
// gets none.
func TestDenialReasons(t *testing.T) {
	f := newFixture(t)
	home := filepath.Join(f.base, "home")
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("key"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.open("denials")
	for _, c := range []struct {
		name, cmd, kind, says string
	}{
		{"read-only", "touch /usr/corral-denial-test", hostview.DenialReadOnly, "/usr/corral-denial-test is read-only in this sandbox (profile workspace); writable: "},
		{"hidden", "cat " + filepath.Join(home, ".ssh", "id_ed25519"), hostview.DenialHidden, filepath.Join(home, ".ssh", "id_ed25519") + " exists on the host but is hidden"},
		{"network", "python3 -c 'import socket; socket.getaddrinfo(\"example.com\", 80)'", hostview.DenialNetwork, "no network (profile workspace)"},
		{"syscall", "python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)'", hostview.DenialSyscall, "new Unix sockets (AF_UNIX) are refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.exec(s, c.cmd)
			if r.ExitCode == 0 || len(r.Denials) == 0 {
				t.Fatalf("exit %d, denials %+v; output %q", r.ExitCode, r.Denials, r.Output.Text)
			}
			if d := r.Denials[0]; d.Kind != c.kind || !strings.Contains(d.Message, c.says) {
				t.Errorf("denial %+v, want kind %s saying %q", d, c.kind, c.says)
			}
		})
	}
	if r := f.exec(s, "echo no such thing >&2; ls "+filepath.Join(f.work, "missing")); r.ExitCode == 0 || len(r.Denials) != 0 {
		t.Errorf("an ordinary failure got denials: %+v", r.Denials)
	}
}
