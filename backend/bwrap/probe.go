package bwrap

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/seccomp"
)

// Diagnosis is what `corral doctor` reports about the bubblewrap sandbox on
// this machine, and what a failed sandbox start is explained with.
type Diagnosis struct {
	// Binary is the bwrap found, or nil; BinaryError says why not.
	Binary      *Binary `json:"bwrap,omitempty"`
	BinaryError string  `json:"bwrap_error,omitempty"`
	// ProbeOK is set when a minimal sandbox (every namespace unshared,
	// /proc mounted, loopback up, corral's syscall filter loaded with
	// --seccomp when it can be built) ran `true`; ProbeOutput is bwrap's
	// stderr when it did not.
	ProbeOK     bool   `json:"probe_ok"`
	ProbeOutput string `json:"probe_output,omitempty"`
	// MaxUserNamespaces is /proc/sys/user/max_user_namespaces (-1: unknown).
	MaxUserNamespaces int `json:"max_user_namespaces"`
	// UnprivilegedUsernsClone is Debian's old
	// kernel.unprivileged_userns_clone (-1: the knob does not exist).
	UnprivilegedUsernsClone int `json:"unprivileged_userns_clone"`
	// AppArmorRestrict is Ubuntu 24.04+'s
	// kernel.apparmor_restrict_unprivileged_userns (-1: does not exist).
	AppArmorRestrict int `json:"apparmor_restrict_unprivileged_userns"`
	// Prlimit is the path of prlimit(1), used only when the ptrace gate
	// cannot be (a setuid bwrap); "" when missing.
	Prlimit string `json:"prlimit,omitempty"`
	// Cause and Fix explain a failure in one sentence each.
	Cause string `json:"cause,omitempty"`
	Fix   string `json:"fix,omitempty"`
}

// Ready reports whether sandboxes can be built.
func (d *Diagnosis) Ready() bool { return d.Binary != nil && d.ProbeOK }

// Summary is a one-line explanation of a failure, naming the fix.
func (d *Diagnosis) Summary() string {
	if d.Ready() {
		return "the sandbox probe passes now; the failure may be specific to this command's mounts (run with --log-level debug)"
	}
	s := d.Cause
	if d.Fix != "" {
		s += "; fix: " + d.Fix
	}
	return s
}

// Diagnose probes the machine. bin may be nil, in which case bwrap is looked
// up at path (the bwrap setting; "" for the system locations). It never
// fails: what it cannot find out is reported as such.
func Diagnose(ctx context.Context, bin *Binary, path string) *Diagnosis {
	d := &Diagnosis{
		MaxUserNamespaces:       readIntFile("/proc/sys/user/max_user_namespaces"),
		UnprivilegedUsernsClone: readIntFile("/proc/sys/kernel/unprivileged_userns_clone"),
		AppArmorRestrict:        readIntFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
	}
	d.Prlimit, _ = LocateTool("prlimit", "")
	if bin == nil {
		b, err := FindBinary(ctx, path)
		if err != nil {
			d.BinaryError = err.Error()
			d.Cause = "bubblewrap (bwrap) is not installed or too old"
			d.Fix = InstallHint
			return d
		}
		bin = b
	}
	d.Binary = bin
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	args := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}
	// The filter, where it can be built (`corral doctor` reports it on its
	// own): every sandbox loads it, so the probe does too.
	filter, ferr := seccomp.File(seccomp.Options{DenyUnixSockets: true})
	if ferr == nil {
		defer filter.Close()
		args = append(args, "--seccomp", "3")
	}
	// A probe that failed because the host's mounts changed under it says
	// nothing about the machine: probe again, as Run retries.
	for attempt := 1; ; attempt++ {
		stderr.Reset()
		cmd := exec.CommandContext(ctx, bin.Path, append(args, "--", "true")...)
		if ferr == nil {
			cmd.ExtraFiles = []*os.File{filter}
		}
		cmd.Stderr = &stderr
		if err := runProbe(cmd); err == nil {
			d.ProbeOK = true
			return d
		}
		d.ProbeOutput = strings.TrimSpace(stderr.String())
		if !d.hostChanged() || attempt == maxStartAttempts || ctx.Err() != nil {
			break
		}
	}
	d.Cause, d.Fix = explain(d)
	return d
}

// hostChanged reports whether the probe failed only because the host's
// mounts changed while its sandbox was being built (see hostChangedLine):
// the machine can sandbox.
func (d *Diagnosis) hostChanged() bool {
	return !d.ProbeOK && hostChangedLine(strings.Split(d.ProbeOutput, "\n")) != ""
}

// explain maps a failed probe to its likely cause and fix.
func explain(d *Diagnosis) (cause, fix string) {
	out := d.ProbeOutput
	setuid := "or make bwrap setuid root as distributions without user namespaces do (`sudo chmod u+s " + d.Binary.Path + "`)"
	switch {
	case d.hostChanged():
		return "the host's mounts changed while the probe's sandbox was being built (Docker mounting or unmounting container layers, a directory made and removed); the machine can sandbox: " + firstLine(out),
			"run it again"
	case d.AppArmorRestrict == 1 && (strings.Contains(out, "uid map") || strings.Contains(out, "Permission denied") || strings.Contains(out, "Operation not permitted")):
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 24.04 and later): " + firstLine(out),
			"allow bwrap with an AppArmor profile (Ubuntu ships one as /etc/apparmor.d/bwrap-userns-restrict in the apparmor package: `sudo apparmor_parser -r /etc/apparmor.d/bwrap-userns-restrict`), or `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`, " + setuid
	case d.MaxUserNamespaces == 0:
		return "user namespaces are disabled (user.max_user_namespaces=0): " + firstLine(out),
			"`sudo sysctl user.max_user_namespaces=15000` (and in /etc/sysctl.d to keep it), " + setuid
	case d.UnprivilegedUsernsClone == 0:
		return "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): " + firstLine(out),
			"`sudo sysctl kernel.unprivileged_userns_clone=1` (and in /etc/sysctl.d to keep it), " + setuid
	case strings.Contains(out, "proc") && strings.Contains(out, "Operation not permitted"):
		return "bwrap cannot mount /proc, which happens when corral runs inside a container: " + firstLine(out),
			"run corral on the host, or give the container its own unmasked /proc (for Docker: --security-opt systempaths=unconfined --security-opt seccomp=unconfined, or use corral's docker backend instead)"
	case strings.Contains(out, "seccomp") || strings.Contains(out, "SECCOMP"):
		return "bwrap cannot load corral's syscall filter: " + firstLine(out),
			"run corral on a kernel with seccomp filters (CONFIG_SECCOMP_FILTER), outside a container whose own seccomp policy refuses seccomp(2) or prctl(PR_SET_SECCOMP)"
	case strings.Contains(out, "loopback") || strings.Contains(out, "RTM_NEWADDR"):
		return "bwrap cannot bring up loopback in a new network namespace (common when nested in a container): " + firstLine(out),
			"run corral on the host, or use the network profile (`corral config set profile network`)"
	case strings.Contains(out, "namespace") || strings.Contains(out, "uid map") || strings.Contains(out, "Permission denied"):
		return "bwrap cannot create the namespaces it needs: " + firstLine(out),
			"check that unprivileged user namespaces are enabled for your user (see your distribution's notes for bubblewrap), " + setuid
	}
	return "the sandbox probe failed: " + firstLine(out), "run `corral doctor` for details"
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return "(no message)"
	}
	return s
}

func readIntFile(p string) int {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// LimitsMechanism says, for `corral doctor`, how per-command limits are
// applied on this machine.
func LimitsMechanism(bin *Binary) string {
	switch {
	case os.Getuid() == 0:
		return "rlimits set on bwrap before it runs (ptrace gate); RLIMIT_NPROC set inside the sandbox's user namespace, which a run_as identity is subject to (root would not be)"
	case bin != nil && bin.Setuid:
		return "setuid bwrap: RLIMIT_DATA and RLIMIT_CPU through prlimit(1); max_procs is not enforced"
	}
	return "rlimits set on bwrap before it runs (ptrace gate); RLIMIT_NPROC set inside the sandbox's user namespace"
}
