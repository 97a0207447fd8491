package portfwd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// tcpListen is the LISTEN state as /proc/net/tcp prints it (the kernel's
// TCP_LISTEN, include/net/tcp_states.h, in hex).
const tcpListen = "0A"

// Listener is a listening TCP socket of a network namespace.
type Listener struct {
	// Addr is the local address it is bound to (0.0.0.0 or :: for any).
	Addr netip.Addr
	// Port is its local port.
	Port uint16
}

// String returns "ADDR:PORT" ("[::]:8000" for IPv6).
func (l Listener) String() string { return netip.AddrPortFrom(l.Addr, l.Port).String() }

// ParseProcNetTCP returns the listening sockets in data, the text of
// /proc/PID/net/tcp or /proc/PID/net/tcp6, or both one after the other
// (proc(5)): a heading line, then one line per socket whose second field is the local address as hex
// (each 32-bit word of the address in the kernel's byte order, as %08X)
// ':' the port as hex, and whose fourth field is the state. Lines of
// other states are skipped; a malformed line is an error naming it.
func ParseProcNetTCP(data []byte) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "local_address") {
			continue // a heading (tcp and tcp6 may be given one after the other)
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("malformed line %q: fewer than 4 fields", line)
		}
		if f[3] != tcpListen {
			continue
		}
		l, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("malformed line %q: %w", line, err)
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// parseHexAddrPort parses "0100007F:1F40" (127.0.0.1:8000 on a
// little-endian machine) or its 32-digit IPv6 form.
func parseHexAddrPort(s string) (Listener, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return Listener{}, fmt.Errorf("local address %q has no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return Listener{}, fmt.Errorf("local port %q: %w", p, err)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return Listener{}, fmt.Errorf("local address %q is not 8 or 32 hex digits", a)
	}
	// The kernel prints each 32-bit word of the address (network byte
	// order in memory) as a number read in the host's byte order: write
	// the numbers back in that order to get the address's bytes.
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:i+4]))
	}
	addr, _ := netip.AddrFromSlice(b)
	return Listener{Addr: addr.Unmap(), Port: uint16(port)}, nil
}

// ListenersOf returns the listening TCP sockets (IPv4 and IPv6) of the
// network namespace of process pid, sorted by port.
func ListenersOf(pid int) ([]Listener, error) {
	var all []Listener
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			if name == "tcp6" && os.IsNotExist(err) {
				continue // a kernel without IPv6
			}
			return nil, fmt.Errorf("reading the listening sockets of process %d: %w", pid, err)
		}
		ls, err := ParseProcNetTCP(b)
		if err != nil {
			return nil, fmt.Errorf("reading /proc/%d/net/%s: %w", pid, name, err)
		}
		all = append(all, ls...)
	}
	slices.SortFunc(all, func(a, b Listener) int { return int(a.Port) - int(b.Port) })
	return all, nil
}

// DialTarget returns the address the relay connects to for port, given
// the namespace's listeners: 127.0.0.1 when a socket listens on port at
// 127.0.0.1 or 0.0.0.0, else [::1] for ::1 or ::, else the address it
// listens on; ok is false when nothing listens on port.
func DialTarget(ls []Listener, port uint16) (netip.AddrPort, bool) {
	var v6, other netip.Addr
	for _, l := range ls {
		if l.Port != port {
			continue
		}
		switch {
		case l.Addr.Is4() && (l.Addr.IsLoopback() || l.Addr.IsUnspecified()):
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port), true
		case l.Addr.Is6() && (l.Addr.IsLoopback() || l.Addr.IsUnspecified()):
			v6 = netip.IPv6Loopback()
		default:
			other = l.Addr
		}
	}
	switch {
	case v6.IsValid():
		return netip.AddrPortFrom(v6, port), true
	case other.IsValid():
		return netip.AddrPortFrom(other, port), true
	}
	return netip.AddrPort{}, false
}
