package netproxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Modes of the test binary, which stands in for corral's executable:
//
//   - os.Args[1] == TrampolineArg: TrampolineMain, with the seccomp filter
//     of denyUnixSockets when NETPROXY_TEST_SECCOMP=deny-unix, and an
//     install step that fails when it is "fail";
//   - os.Args[1] == probeArg: probeMain, a sandboxed command that reports
//     what it can do;
//   - NETPROXY_TEST_MODE=forwarder: ForwarderMain(os.Args[1:]).
const probeArg = "netproxy-test-probe"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case TrampolineArg:
			var install func() error
			switch os.Getenv("NETPROXY_TEST_SECCOMP") {
			case "deny-unix":
				install = denyUnixSockets
			case "fail":
				install = func() error { return fmt.Errorf("no filter for you") }
			}
			os.Exit(TrampolineMain(os.Args[2:], install))
		case probeArg:
			os.Exit(probeMain(os.Args[2:]))
		}
	}
	if os.Getenv("NETPROXY_TEST_MODE") == "forwarder" {
		os.Exit(ForwarderMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// denyUnixSockets installs, on the calling thread, a seccomp filter that
// makes socket(AF_UNIX, ...) fail with EPERM: the kind of filter corral
// applies to sandboxed commands. It assumes a little-endian machine
// (args[0]'s low word at offset 16 of struct seccomp_data).
func denyUnixSockets() error {
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 3, K: unix.SYS_SOCKET},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 16}, // args[0], low word
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.AF_UNIX},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("PR_SET_SECCOMP: %w", err)
	}
	return nil
}

// probeMain is a sandboxed command for the forwarder tests. Arguments:
// PROXY_URL TARGET_URL EXIT_CODE. It prints "unix-socket: ok" or the
// error socket(AF_UNIX) gives, then "fetch: " and the status and body of
// GET TARGET_URL through the HTTP proxy at PROXY_URL, and exits with
// EXIT_CODE.
func probeMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "probe: want PROXY_URL TARGET_URL EXIT_CODE")
		return 2
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		_ = unix.Close(fd)
		fmt.Println("unix-socket: ok")
	} else {
		fmt.Println("unix-socket:", err)
	}
	proxyURL, err := url.Parse(args[0])
	if err != nil {
		fmt.Println("fetch:", err)
		return 2
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	resp, err := c.Get(args[1])
	if err != nil {
		fmt.Println("fetch:", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("fetch: %d %s\n", resp.StatusCode, body)
	}
	code, err := strconv.Atoi(args[2])
	if err != nil {
		return 2
	}
	return code
}
