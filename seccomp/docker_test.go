//go:build linux

package seccomp

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// dockerDecide evaluates a profile the way libseccomp does for a call on
// the native architecture: the first matching entry's action (entries with
// the same action commute), ANDing an entry's arguments.
func dockerDecide(t *testing.T, p dockerProfile, name string, args []uint64) string {
	t.Helper()
	for _, s := range p.Syscalls {
		if !slices.Contains(s.Names, name) {
			continue
		}
		match := true
		for _, a := range s.Args {
			if a.Op != "SCMP_CMP_MASKED_EQ" {
				t.Fatalf("unexpected op %s", a.Op)
			}
			var v uint64
			if int(a.Index) < len(args) {
				v = args[a.Index]
			}
			if v&a.Value != a.ValueTwo {
				match = false
			}
		}
		if match {
			if s.Action != "SCMP_ACT_ERRNO" {
				t.Fatalf("unexpected action %s", s.Action)
			}
			return errnoName(syscall.Errno(s.ErrnoRet))
		}
	}
	return "allow"
}

// TestDockerProfileMatchesBPF decides the same calls with the Docker
// profile (as libseccomp reads it) and with the BPF program: they must
// agree on every syscall of the native table and on the argument cases.
func TestDockerProfileMatchesBPF(t *testing.T) {
	p := nativePlatform(t)
	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := DockerProfile(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var prof dockerProfile
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&prof); err != nil {
				t.Fatalf("profile does not decode: %v", err)
			}
			if prof.DefaultAction != "SCMP_ACT_ALLOW" {
				t.Errorf("defaultAction %s", prof.DefaultAction)
			}
			archs := map[string]bool{}
			for _, a := range prof.ArchMap {
				archs[a.Architecture] = true
				if len(a.SubArchitectures) != 0 {
					t.Errorf("%s has sub-architectures %v: 32-bit calls would get through unfiltered by argument", a.Architecture, a.SubArchitectures)
				}
			}
			if !archs["SCMP_ARCH_X86_64"] || !archs["SCMP_ARCH_AARCH64"] || len(archs) != 2 {
				t.Errorf("archMap covers %v, want x86_64 and aarch64", archs)
			}
			prog, err := BPF(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			v := newVM(t, prog)
			type call struct {
				name string
				args []uint64
			}
			calls := []call{
				{"socket", []uint64{1}}, {"socket", []uint64{1 | 1<<32}}, {"socket", []uint64{2}},
				{"ioctl", []uint64{0, tiocsti}}, {"ioctl", []uint64{0, tiocsti | 7<<32}}, {"ioctl", []uint64{0, tioclinux}},
				{"ioctl", []uint64{0, 0x5401}}, {"ioctl", []uint64{tiocsti, 0}},
				{"clone", []uint64{17}}, {"clone", []uint64{0x3d0f00}}, {"unshare", []uint64{0x400}}, {"unshare", []uint64{0x80}},
			}
			for bit := uint64(1); bit != 0; bit <<= 1 {
				calls = append(calls, call{"clone", []uint64{bit}}, call{"unshare", []uint64{bit}},
					call{"socket", []uint64{afNetlink, 3, bit}}, call{"socket", []uint64{afNetlink | bit<<32, 3, bit}},
					call{"socketpair", []uint64{afUnix, 2 | bit}}, call{"socketpair", []uint64{afUnix | bit, 2}})
			}
			// Every socket type with and without the flags, in each domain
			// the rules name, and with junk in the upper halves.
			for _, domain := range []uint64{afUnix, afNetlink, afVsock, 2, afUnix | 1<<32} {
				for typ := uint64(0); typ < 16; typ++ {
					for _, flags := range []uint64{0, 0x800, 0x80000, 0x80800, 0xffff << 32} {
						calls = append(calls, call{"socketpair", []uint64{domain, typ | flags, 0}}, call{"socket", []uint64{domain, typ | flags, typ}})
					}
				}
			}
			for _, name := range p.info.SyscallNumbers {
				calls = append(calls, call{name, nil})
			}
			for _, c := range calls {
				want := retName(v.run(uint32(p.info.ID), uint32(p.info.SyscallNames[c.name]), c.args...))
				if got := dockerDecide(t, prof, c.name, c.args); got != want {
					t.Errorf("%s%x: Docker profile says %s, BPF says %s", c.name, c.args, got, want)
				}
			}
		})
	}
}

// TestDockerProfileSocketRules looks for the socket-family rules in the
// profile's JSON, as dockerd reads them: the AF_UNIX, AF_VSOCK and
// AF_NETLINK socket rules and the datagram socketpair rule with
// DenyUnixSockets, none of them without.
func TestDockerProfileSocketRules(t *testing.T) {
	type entry struct {
		Names    []string         `json:"names"`
		ErrnoRet uint             `json:"errnoRet"`
		Args     []map[string]any `json:"args"`
	}
	// argKey renders one arg as index:op:value:valueTwo.
	argKey := func(a map[string]any) string {
		return fmt.Sprintf("%v:%v:%#x:%#x", a["index"], a["op"], uint64(a["value"].(float64)), uint64(a["valueTwo"].(float64)))
	}
	for _, tc := range bothOptions {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := DockerProfile(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var prof struct {
				Syscalls []entry `json:"syscalls"`
			}
			if err := json.Unmarshal(raw, &prof); err != nil {
				t.Fatal(err)
			}
			got := map[string]uint{} // names and args -> errnoRet
			for _, e := range prof.Syscalls {
				if !slices.Contains(e.Names, "socket") && !slices.Contains(e.Names, "socketpair") {
					continue
				}
				keys := []string{strings.Join(e.Names, ",")}
				for _, a := range e.Args {
					keys = append(keys, argKey(a))
				}
				got[strings.Join(keys, " ")] = e.ErrnoRet
			}
			want := map[string]uint{}
			if tc.opts.DenyUnixSockets {
				const eq32 = "SCMP_CMP_MASKED_EQ:0xffffffff"
				want["socket 0:"+eq32+":0x1"] = uint(syscall.EPERM)
				want["socket 0:"+eq32+":0x28"] = uint(syscall.EPERM)
				// socketpair(AF_UNIX, type & 0xe == SOCK_DGRAM)
				want["socketpair 0:"+eq32+":0x1 1:SCMP_CMP_MASKED_EQ:0xe:0x2"] = uint(syscall.EPERM)
				// socket(AF_NETLINK, protocol with any of its 32 bits set)
				for i := range 32 {
					bit := uint64(1) << i
					want[fmt.Sprintf("socket 0:%s:0x10 2:SCMP_CMP_MASKED_EQ:%#x:%#x", eq32, bit, bit)] = uint(syscall.EPROTONOSUPPORT)
				}
			}
			for k, w := range want {
				if g, ok := got[k]; !ok {
					t.Errorf("profile lacks %s", k)
				} else if g != w {
					t.Errorf("%s: errnoRet %d, want %d", k, g, w)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("profile has unexpected entry %s", k)
				}
			}
		})
	}
}

// requireDocker skips unless a Docker daemon answers this user.
func requireDocker(t *testing.T) string {
	t.Helper()
	requireSandboxTest(t)
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("docker CLI not installed (apt install docker.io)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, docker, "version", "--format", "{{.Server.Version}}").CombinedOutput()
	if err != nil {
		t.Skipf("no Docker daemon reachable by uid %d (needs a running dockerd and access to /var/run/docker.sock or $DOCKER_HOST): %v: %s",
			os.Getuid(), err, bytes.TrimSpace(out))
	}
	t.Logf("Docker daemon %s", bytes.TrimSpace(out))
	return docker
}

func dockerCmd(t *testing.T, docker string, stdin []byte, args ...string) ([]byte, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	return out.Bytes(), stderr.Bytes(), err
}

var lddPath = regexp.MustCompile(`(?:=> )?(/\S+) \(0x`)

// imageTar returns a root filesystem holding the test binary, as
// /corral-seccomp.test, and the shared libraries it loads (a -race binary
// is dynamically linked), so no registry is needed.
func imageTar(t *testing.T, exe string) []byte {
	t.Helper()
	files := map[string]string{"/corral-seccomp.test": exe}
	out, err := exec.Command("ldd", exe).CombinedOutput()
	switch {
	case err == nil:
		for _, m := range lddPath.FindAllStringSubmatch(string(out), -1) {
			files[m[1]] = m[1]
		}
	case strings.Contains(string(out), "not a dynamic executable"):
	default:
		t.Fatalf("ldd %s: %v: %s", exe, err, out)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for dst, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(dst, "/")
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDockerProfile runs the helper in real containers, created with
// `docker run --security-opt seccomp=FILE` from an image imported from a
// tar, under each option's profile, and once unconfined as the control.
func TestDockerProfile(t *testing.T) {
	docker := requireDocker(t)
	exe := selfExe(t)
	tag := fmt.Sprintf("corral-seccomp-test:%d-%d", os.Getpid(), time.Now().UnixNano())
	if _, stderr, err := dockerCmd(t, docker, imageTar(t, exe), "import", "-", tag); err != nil {
		t.Fatalf("docker import: %v\n%s", err, stderr)
	}
	t.Cleanup(func() { _, _, _ = dockerCmd(t, docker, nil, "rmi", "-f", tag) })
	dir := testBase(t)

	var runs atomic.Int64
	run := func(t *testing.T, seccompOpt, mode string, opts Options) ([]byte, []byte, error) {
		// Named, and removed whatever happens: a client stopped by
		// dockerCmd's deadline leaves a --rm container running.
		name := fmt.Sprintf("corral-seccomp-%d-%d", os.Getpid(), runs.Add(1))
		t.Cleanup(func() { _, _, _ = dockerCmd(t, docker, nil, "rm", "-f", name) })
		args := []string{"run", "--rm", "--name", name, "--network", "none", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + seccompOpt,
			"-e", helperEnv + "=" + mode, "-e", "GORACE=atexit_sleep_ms=0"}
		for _, e := range optsEnv(opts) {
			args = append(args, "-e", e)
		}
		args = append(args, tag, "/corral-seccomp.test")
		return dockerCmd(t, docker, nil, args...)
	}

	out, stderr, err := run(t, "unconfined", "control", Options{})
	if err != nil {
		t.Fatalf("unconfined control container: %v\n%s", err, stderr)
	}
	control := parseReport(t, out)
	t.Logf("unconfined results: %v", control.Probes)
	checkControl(t, control)

	profiles := map[string]string{}
	for _, tc := range bothOptions {
		prof, err := DockerProfile(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, tc.name+".json")
		if err := os.WriteFile(path, prof, 0o644); err != nil {
			t.Fatal(err)
		}
		profiles[tc.name] = path
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := run(t, path, "probe", tc.opts)
			if err != nil {
				t.Fatalf("container with corral's profile: %v\n%s", err, stderr)
			}
			// libseccomp 2.5 (Docker 20.10's) predates open_tree_attr
			// (Linux 6.15); runc skips names it cannot resolve.
			checkFiltered(t, parseReport(t, out), tc.opts, "sweep:open_tree_attr")
		})
	}

	// What runc loaded, read back from the kernel and evaluated for calls
	// no process here can make (i386 and x32 may be off in the kernel).
	t.Run("loaded filter refuses foreign ABIs", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("reading a container's filter (PTRACE_SECCOMP_GET_FILTER) needs CAP_SYS_ADMIN; runs as root in CI")
		}
		args := []string{"run", "-d", "--rm", "--network", "none", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges", "--security-opt", "seccomp=" + profiles["deny-unix-sockets"],
			"-e", helperEnv + "=sleep", tag, "/corral-seccomp.test"}
		out, stderr, err := dockerCmd(t, docker, nil, args...)
		if err != nil {
			t.Fatalf("docker run -d: %v\n%s", err, stderr)
		}
		id := strings.TrimSpace(string(out))
		defer func() { _, _, _ = dockerCmd(t, docker, nil, "rm", "-f", id) }()
		out, stderr, err = dockerCmd(t, docker, nil, "inspect", "-f", "{{.State.Pid}}", id)
		if err != nil {
			t.Fatalf("docker inspect: %v\n%s", err, stderr)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || pid <= 0 {
			t.Fatalf("container pid %q: %v", out, err)
		}
		v := newForeignVM(t, dumpFilter(t, pid))
		p := nativePlatform(t)
		native := uint32(p.info.ID)
		if got := retName(v.run(native, uint32(p.info.SyscallNames["socket"]), 1)); got != "EPERM" {
			t.Fatalf("loaded filter answers socket(AF_UNIX) with %s: not corral's profile?", got)
		}
		for _, c := range []struct {
			name     string
			arch, nr uint32
		}{
			{"i386 getpid", 0x40000003, 20},
			{"i386 socketcall", 0x40000003, 102},
			{"arm getpid", 0x40000028, 20},
			{"x32 read", native, x32SyscallBit},
			{"x32 socket", native, x32SyscallBit | 41},
		} {
			// libseccomp's default bad-arch action, which runc keeps,
			// is SCMP_ACT_KILL: SECCOMP_RET_KILL_THREAD.
			if got := retName(v.run(c.arch, c.nr, 1)); got != "kill-thread" && got != "kill-process" {
				t.Errorf("%s: loaded filter answers %s, want a kill", c.name, got)
			}
		}
	})

	t.Run("i386", func(t *testing.T) {
		out, stderr, err := run(t, "unconfined", "i386", Options{})
		if err != nil {
			// The kernel refuses 32-bit calls itself (no IA-32 emulation,
			// or ia32_emulation=off): closed before the profile, and none
			// may get through under it either (its rule for a foreign
			// architecture is run against its BPF above).
			if out, _, perr := run(t, profiles["default"], "i386", Options{}); perr == nil {
				t.Fatalf("i386 call under corral's profile succeeded: %s", out)
			}
			t.Logf("this kernel refuses i386 calls without a filter (%v: %s)", err, firstLine(stderr))
			return
		}
		if rep := parseReport(t, out); rep.I386 == nil || *rep.I386 <= 0 {
			t.Fatalf("unconfined i386 getpid: %s", out)
		}
		// runc loads the profile with libseccomp's bad-arch action,
		// SECCOMP_RET_KILL_THREAD: the calling thread dies (the helper
		// sees it go and exits threadKilledExit); a filter that kills the
		// process gives SIGSYS. Either way the call never returned.
		out, stderr, err = run(t, profiles["default"], "i386", Options{})
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGSYS) && ee.ExitCode() != threadKilledExit {
			t.Fatalf("i386 call under corral's profile: err=%v stdout=%q stderr=%q, want exit %d (SIGSYS) or %d (its thread killed)", err, out, stderr, 128+int(syscall.SIGSYS), threadKilledExit)
		}
		t.Logf("i386 call under corral's profile: exit %d, %s", ee.ExitCode(), firstLine(stderr))
	})
}

// newForeignVM loads a program another tool generated (libseccomp's), which
// may use any classic BPF instruction.
func newForeignVM(t *testing.T, filters []unix.SockFilter) vm {
	t.Helper()
	raw := make([]bpf.RawInstruction, len(filters))
	for i, f := range filters {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("loaded filter has instructions x/net/bpf does not know")
	}
	v, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatalf("loaded filter: %v", err)
	}
	return vm{t: t, vm: v}
}

// dumpFilter reads the newest seccomp filter of process pid with
// ptrace(PTRACE_SECCOMP_GET_FILTER), which needs CAP_SYS_ADMIN and
// CONFIG_CHECKPOINT_RESTORE.
func dumpFilter(t *testing.T, pid int) []unix.SockFilter {
	t.Helper()
	runtime.LockOSThread() // ptrace requests come from the attaching thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("PTRACE_ATTACH %d: %v", pid, err)
	}
	defer func() {
		if err := unix.PtraceDetach(pid); err != nil {
			t.Errorf("PTRACE_DETACH: %v", err)
		}
	}()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		t.Fatalf("waiting for tracee %d to stop: %v (status %v)", pid, err, ws)
	}
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	if n == 0 {
		t.Fatal("container process has no seccomp filter")
	}
	filters := make([]unix.SockFilter, n)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, uintptr(unsafe.Pointer(&filters[0])), 0, 0); e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	return filters
}

// TestDockerProfileRefusesMediation: a container has no connect(2)
// supervisor, so the mediated variant, which lets AF_UNIX stream sockets
// be made, must not reach Docker.
func TestDockerProfileRefusesMediation(t *testing.T) {
	if _, err := DockerProfile(Options{DenyUnixSockets: true, MediatedUnixSockets: true}); err == nil {
		t.Fatal("DockerProfile accepted MediatedUnixSockets")
	}
}
