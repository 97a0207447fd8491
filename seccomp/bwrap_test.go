//go:build linux

package seccomp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bwrapRun runs argv in a bubblewrap sandbox as the brief's reference
// command builds it, with the filter file (if any) as descriptor 3.
func bwrapRun(t *testing.T, bwrap string, filter *os.File, env []string, argv ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent"}
	if filter != nil {
		args = append(args, "--seccomp", "3")
	}
	args = append(args, "--")
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, bwrap, args...)
	if filter != nil {
		cmd.ExtraFiles = []*os.File{filter}
	}
	cmd.Env = append(os.Environ(), env...)
	// A -race binary otherwise sleeps a second at exit.
	cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

func optsEnv(opts Options) []string {
	if opts.DenyUnixSockets {
		return []string{denyUnixEnv + "=1"}
	}
	return []string{denyUnixEnv + "=0"}
}

// TestBwrapFilter runs the helper inside real bwrap, with the filter passed
// as `--seccomp 3` through ExtraFiles, and once without a filter as the
// control.
func TestBwrapFilter(t *testing.T) {
	bwrap := requireBwrap(t)
	exe := selfExe(t)

	out, stderr, err := bwrapRun(t, bwrap, nil, []string{helperEnv + "=control"}, exe)
	if err != nil {
		t.Fatalf("control run: %v\n%s", err, stderr)
	}
	control := parseReport(t, out)
	t.Logf("unfiltered results: %v", control.Probes)
	checkControl(t, control)

	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			f, err := File(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out, stderr, err := bwrapRun(t, bwrap, f, []string{helperEnv + "=probe"}, exe)
			if err != nil {
				t.Fatalf("filtered run: %v\n%s", err, stderr)
			}
			checkFiltered(t, parseReport(t, out), tc.opts)
		})
	}
}

// TestBwrapPrograms checks that ordinary programs still work under the
// strictest filter, and that Python meets its socket rules as the errors
// the table promises.
func TestBwrapPrograms(t *testing.T) {
	bwrap := requireBwrap(t)
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"bash pipeline", []string{"bash", "-c", "ls / >/dev/null && echo hi | cat"}, "hi\n"},
		{"subshells and command substitution", []string{"bash", "-c", `x=$(echo a; (echo b)); echo "$x" | tr -d '\n'; echo`}, "ab\n"},
		{"coreutils", []string{"sh", "-c", "seq 3 | sort -r | head -n1; stat -c %F / ; id -u >/dev/null && echo id"}, "3\ndirectory\nid\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := File(Options{DenyUnixSockets: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out, stderr, err := bwrapRun(t, bwrap, f, nil, tc.argv...)
			if err != nil {
				t.Fatalf("%v: %v\n%s", tc.argv, err, stderr)
			}
			if string(out) != tc.want {
				t.Errorf("%v printed %q, want %q", tc.argv, out, tc.want)
			}
		})
	}
	if ip, err := exec.LookPath("ip"); err == nil {
		t.Run("ip over NETLINK_ROUTE", func(t *testing.T) {
			f, err := File(Options{DenyUnixSockets: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out, stderr, err := bwrapRun(t, bwrap, f, nil, ip, "-o", "link", "show", "lo")
			if err != nil {
				t.Fatalf("ip link: %v\n%s", err, stderr)
			}
			if !strings.Contains(string(out), ": lo: ") {
				t.Errorf("ip link printed %q, want the loopback interface", out)
			}
		})
	}
	if py, err := exec.LookPath("python3"); err == nil {
		t.Run("python3 sockets", func(t *testing.T) {
			f, err := File(Options{DenyUnixSockets: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			script := `import socket, errno
try:
    socket.socket(socket.AF_UNIX)
    print("unix allowed")
except PermissionError as e:
    print("unix", errno.errorcode[e.errno])
a, b = socket.socketpair()
a.send(b"ok"); print(b.recv(2).decode())
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.send(b"sp"); print(b.recv(2).decode())
for name, typ in (("dgram", socket.SOCK_DGRAM), ("raw", socket.SOCK_RAW)):
    try:
        socket.socketpair(socket.AF_UNIX, typ)
        print(name, "pair allowed")
    except PermissionError as e:
        print(name, "pair", errno.errorcode[e.errno])
print("interfaces", [n for _, n in socket.if_nameindex()])
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
    print("uevent allowed")
except OSError as e:
    print("uevent", errno.errorcode[e.errno])
`
			out, stderr, err := bwrapRun(t, bwrap, f, nil, py, "-c", script)
			if err != nil {
				t.Fatalf("python3: %v\n%s", err, stderr)
			}
			// if_nameindex reads the interfaces over NETLINK_ROUTE.
			want := "unix EPERM\nok\nsp\ndgram pair EPERM\nraw pair EPERM\ninterfaces ['lo']\nuevent EPROTONOSUPPORT\n"
			if got := string(out); got != want {
				t.Errorf("python3 printed %q, want %q", got, want)
			}
		})
	}
}

// TestBwrapI386 shows a 32-bit call cannot get around the x86_64 rules: it
// kills the process, where without the filter it returns the pid.
func TestBwrapI386(t *testing.T) {
	bwrap := requireBwrap(t)
	exe := selfExe(t)
	out, stderr, err := bwrapRun(t, bwrap, nil, []string{helperEnv + "=i386"}, exe)
	f, ferr := File(Options{})
	if ferr != nil {
		t.Fatal(ferr)
	}
	defer f.Close()
	if err != nil {
		// The kernel refuses 32-bit calls itself (no IA-32 emulation, or
		// ia32_emulation=off): the route is closed before the filter, and
		// none may get through with it either (its rule for a foreign
		// architecture is run against its BPF in bpf_test.go).
		if out, _, ferr := bwrapRun(t, bwrap, f, []string{helperEnv + "=i386"}, exe); ferr == nil {
			t.Fatalf("filtered i386 call succeeded: %s", out)
		}
		t.Logf("this kernel refuses i386 calls without a filter (%v: %s)", err, firstLine(stderr))
		return
	}
	if rep := parseReport(t, out); rep.I386 == nil || *rep.I386 <= 0 {
		t.Fatalf("unfiltered i386 getpid: %s", out)
	}
	out, stderr, err = bwrapRun(t, bwrap, f, []string{helperEnv + "=i386"}, exe)
	// bwrap's pid 1 reports a child killed by signal N as exit 128+N.
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGSYS) {
		t.Fatalf("filtered i386 call: err=%v stdout=%q stderr=%q, want exit %d (SIGSYS)", err, out, stderr, 128+int(syscall.SIGSYS))
	}
}

// TestBwrapReadsToEOF pins down how bwrap reads --seccomp: from the current
// offset to end of file, so a File whose offset is at the end gives an empty
// program, which bwrap refuses instead of running unfiltered.
func TestBwrapReadsToEOF(t *testing.T) {
	bwrap := requireBwrap(t)
	f, err := File(Options{DenyUnixSockets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.ReadAll(f); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := bwrapRun(t, bwrap, f, nil, "true")
	if err == nil {
		t.Fatal("bwrap ran a command with an exhausted seccomp descriptor")
	}
	if !strings.Contains(string(stderr), "PR_SET_SECCOMP") {
		t.Errorf("bwrap's refusal does not mention seccomp: %s", stderr)
	}
	// Rewound, the same File works again.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := bwrapRun(t, bwrap, f, nil, "true"); err != nil {
		t.Fatalf("rewound File: %v\n%s", err, stderr)
	}
	// A length that is not a multiple of 8 is refused as well.
	short, err := os.CreateTemp(testBase(t), "short-*.bpf")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if _, err := short.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := bwrapRun(t, bwrap, short, nil, "true"); err == nil || !strings.Contains(string(stderr), "multiple of 8") {
		t.Errorf("3-byte program: err=%v stderr=%s, want bwrap's 'multiple of 8' refusal", err, stderr)
	}
}
