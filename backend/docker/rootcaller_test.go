package docker

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestKernelInterfacesNotWritable opens the kernel's settings and triggers
// for writing (no byte written) in a container under every profile that
// could: each open must fail, whoever runs corral (a root caller's
// container may hold host uid 0, see containerIDs).
func TestKernelInterfacesNotWritable(t *testing.T) {
	f := newFixture(t, nil)
	files := []string{
		"/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/net/ipv4/ip_forward",
		"/proc/sysrq-trigger", "/proc/irq/default_smp_affinity", "/sys/kernel/mm/transparent_hugepage/enabled",
		"/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/pids/cgroup.procs",
	}
	script := `for f in ` + strings.Join(files, " ") + `; do
  [ -e "$f" ] || continue
  if (exec 3>>"$f") 2>/dev/null; then echo "WRITABLE $f"; else echo "refused $f"; fi
done`
	for _, prof := range []sandbox.Profile{sandbox.ProfileRestricted, sandbox.ProfileWorkspace} {
		res, out := f.run("kernel-"+string(prof), script, func(r *sandbox.Request) { r.Profile = prof })
		if res.ExitCode != 0 || !strings.Contains(out, "refused /proc/sys/kernel/core_pattern") {
			t.Fatalf("profile %s: exit %d\n%s", prof, res.ExitCode, out)
		}
		if strings.Contains(out, "WRITABLE") {
			t.Errorf("profile %s (caller uid %d): a kernel interface opens for writing:\n%s", prof, os.Getuid(), out)
		}
	}
}

// TestRootCallerPersonsWorkspace: with docker.user "", a root caller's
// commands in a workspace that belongs to a person run as that person, so
// the container does not hold host uid 0 and what it writes is theirs.
func TestRootCallerPersonsWorkspace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it tests what a root caller's container holds (CI runs it as root)")
	}
	f := newFixture(t, nil)
	if err := os.Chown(f.ws, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	res, out := f.run("person", `id -u; id -g; touch made`)
	if res.ExitCode != 0 || out != "4242\n4243\n" {
		t.Fatalf("exit %d: %q, want uid 4242 and gid 4243", res.ExitCode, out)
	}
	st, err := os.Stat(filepath.Join(f.ws, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 4242 {
		t.Errorf("a file the container made belongs to %d, want 4242", sys.Uid)
	}
}

// TestNoSetIDFiles: as on bwrap, no container can leave a setuid or setgid
// file or directory in the workspace (a root caller's root-owned workspace
// runs as uid 0: such a file would be root's on the host).
func TestNoSetIDFiles(t *testing.T) {
	f := newFixture(t, nil)
	script := `cp /bin/sh ./shcopy
chmod 4755 ./shcopy 2>/dev/null && echo "chmod allowed"
python3 -c 'import os; os.close(os.open("pyfile", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null && echo "open allowed"
mkdir -m 2777 ./sgiddir 2>/dev/null && echo "mkdir allowed"
find . -perm /6000 | sed 's/^/SETID /'
echo end`
	res, out := f.run("setid", script)
	if res.ExitCode != 0 || !strings.HasSuffix(out, "end\n") || strings.Contains(out, "SETID") || strings.Contains(out, "allowed") {
		t.Errorf("a set-ID bit could be set (caller uid %d): exit %d\n%s", os.Getuid(), res.ExitCode, out)
	}
}
