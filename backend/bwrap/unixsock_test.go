package bwrap

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func sunAddr(family uint16, path string, extra ...byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, family)
	return append(append(b, path...), extra...)
}

func TestClassifyConnect(t *testing.T) {
	inet := make([]byte, 16)
	binary.NativeEndian.PutUint16(inet, unix.AF_INET)
	for _, tc := range []struct {
		name   string
		domain int
		addr   []byte
		action connectAction
		path   string
	}{
		{"inet socket", unix.AF_INET, inet, connectAsGiven, ""},
		{"inet6 socket with a unix address", unix.AF_INET6, sunAddr(unix.AF_UNIX, "/run/docker.sock", 0), connectAsGiven, ""},
		{"unix pathname", unix.AF_UNIX, sunAddr(unix.AF_UNIX, "/tmp/s", 0), connectPathname, "/tmp/s"},
		{"unix pathname without NUL", unix.AF_UNIX, sunAddr(unix.AF_UNIX, "/tmp/s"), connectPathname, "/tmp/s"},
		{"unix pathname, bytes after the NUL ignored", unix.AF_UNIX, sunAddr(unix.AF_UNIX, "rel/s", 0, 'x', 'y'), connectPathname, "rel/s"},
		{"unix relative pathname", unix.AF_UNIX, sunAddr(unix.AF_UNIX, "s.sock", 0), connectPathname, "s.sock"},
		{"unix abstract", unix.AF_UNIX, sunAddr(unix.AF_UNIX, "\x00name"), connectAsGiven, ""},
		{"unix family only (EINVAL from the kernel)", unix.AF_UNIX, sunAddr(unix.AF_UNIX, ""), connectAsGiven, ""},
		{"unix empty address", unix.AF_UNIX, nil, connectAsGiven, ""},
		{"unix AF_UNSPEC", unix.AF_UNIX, sunAddr(unix.AF_UNSPEC, "/tmp/s", 0), connectAsGiven, ""},
		{"unix socket, inet address (EINVAL)", unix.AF_UNIX, inet, connectAsGiven, ""},
		{"unix socket, address claims inet but path bytes", unix.AF_UNIX, sunAddr(unix.AF_INET, "/run/docker.sock"), connectAsGiven, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, p := classifyConnect(tc.domain, tc.addr)
			if a != tc.action || p != tc.path {
				t.Errorf("classifyConnect = %v %q, want %v %q", a, p, tc.action, tc.path)
			}
		})
	}
}

func TestDecidePathname(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		sock, bound bool
		errno       unix.Errno
		denied      bool
	}{
		{"bound in the sandbox", nil, true, true, 0, false},
		{"host socket", nil, true, false, unix.EACCES, true},
		{"not a socket", nil, false, false, unix.ECONNREFUSED, false},
		{"missing", unix.ENOENT, false, false, unix.ENOENT, false},
		{"loop", unix.ELOOP, false, false, unix.ELOOP, false},
		{"escape refused by RESOLVE_IN_ROOT", unix.EXDEV, false, false, unix.EXDEV, false},
		{"not an errno", errors.New("root unreadable"), false, false, unix.EACCES, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decidePathname(tc.err, tc.sock, tc.bound)
			if v.Errno != tc.errno || v.Denied != tc.denied {
				t.Errorf("decidePathname = %+v, want errno %v denied %v", v, tc.errno, tc.denied)
			}
		})
	}
}

// TestDiagDev: the kernel's internal dev_t (MAJOR<<20 | MINOR) to stat's
// encoding, including minors above 255 (tmpfs and overlay get anonymous
// devices 0:N with large N) and majors above 255.
func TestDiagDev(t *testing.T) {
	for _, tc := range []struct {
		major, minor uint32
	}{{0, 0}, {8, 1}, {0, 25}, {0, 300}, {0, 0xfffff}, {259, 3}, {0xfff, 0x12345}} {
		if got, want := diagDev(tc.major<<20|tc.minor), unix.Mkdev(tc.major, tc.minor); got != want {
			t.Errorf("diagDev(%d:%d) = %#x, want %#x", tc.major, tc.minor, got, want)
		}
	}
}

func TestUnixDiagRequest(t *testing.T) {
	b := unixDiagRequest(7)
	ne := binary.NativeEndian
	if len(b) != 40 || ne.Uint32(b) != 40 {
		t.Fatalf("length %d, header says %d; want 40", len(b), ne.Uint32(b))
	}
	if ne.Uint16(b[4:]) != 20 || ne.Uint16(b[6:]) != unix.NLM_F_REQUEST|unix.NLM_F_DUMP || ne.Uint32(b[8:]) != 7 {
		t.Errorf("header % x", b[:16])
	}
	r := b[16:]
	if r[0] != unix.AF_UNIX || ne.Uint32(r[4:]) != 0xffffffff || ne.Uint32(r[12:]) != udiagShowVFS {
		t.Errorf("unix_diag_req % x", r)
	}
}

// diagMsg builds one SOCK_DIAG_BY_FAMILY answer message with the given
// attributes (type, payload).
func diagMsg(seq uint32, attrs ...[]byte) []byte {
	ne := binary.NativeEndian
	body := make([]byte, unixDiagMsgLen)
	body[0] = unix.AF_UNIX
	for _, a := range attrs {
		body = append(body, a...)
		for len(body)%4 != 0 {
			body = append(body, 0)
		}
	}
	h := make([]byte, 16)
	ne.PutUint32(h, uint32(16+len(body)))
	ne.PutUint16(h[4:], 20)
	ne.PutUint32(h[8:], seq)
	return append(h, body...)
}

func attr(typ uint16, payload []byte) []byte {
	a := binary.NativeEndian.AppendUint16(nil, uint16(4+len(payload)))
	a = binary.NativeEndian.AppendUint16(a, typ)
	return append(a, payload...)
}

func vfsAttr(ino, dev uint32) []byte {
	p := binary.NativeEndian.AppendUint32(nil, ino)
	return attr(unixDiagAttrVFS, binary.NativeEndian.AppendUint32(p, dev))
}

func ctl(typ uint16, seq uint32, payload []byte) []byte {
	h := make([]byte, 16)
	binary.NativeEndian.PutUint32(h, uint32(16+len(payload)))
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint32(h[8:], seq)
	return append(h, payload...)
}

func TestParseUnixDiag(t *testing.T) {
	errMsg := binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(unix.EPERM)+1))
	for _, tc := range []struct {
		name    string
		buf     []byte
		done    bool
		ids     []vfsID
		wantErr bool
	}{
		{"one socket with a name and a file", append(diagMsg(5, attr(0, []byte("/tmp/s\x00")), vfsAttr(42, 0<<20|33)), ctl(3, 5, make([]byte, 4))...),
			true, []vfsID{{Dev: unix.Mkdev(0, 33), Ino: 42}}, false},
		{"unbound socket, not done yet", diagMsg(5), false, nil, false},
		{"two sockets, odd attribute lengths", append(diagMsg(5, attr(0, []byte("ab\x00")), vfsAttr(1, 8<<20|1)), diagMsg(5, vfsAttr(2, 259<<20|300))...),
			false, []vfsID{{Dev: unix.Mkdev(8, 1), Ino: 1}, {Dev: unix.Mkdev(259, 300), Ino: 2}}, false},
		{"a stale sequence is skipped", append(diagMsg(4, vfsAttr(9, 1)), ctl(3, 4, nil)...), false, nil, false},
		{"error message", ctl(2, 5, errMsg), false, nil, true},
		{"truncated message", diagMsg(5, vfsAttr(1, 1))[:30], false, nil, true},
		{"bad attribute length", func() []byte { m := diagMsg(5, vfsAttr(1, 1)); binary.NativeEndian.PutUint16(m[32:], 99); return m }(), false, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := map[vfsID]bool{}
			done, err := parseUnixDiag(tc.buf, 5, ids)
			if (err != nil) != tc.wantErr || done != tc.done {
				t.Fatalf("done %v err %v, want done %v error %v", done, err, tc.done, tc.wantErr)
			}
			if len(ids) != len(tc.ids) {
				t.Errorf("ids %v, want %v", ids, tc.ids)
			}
			for _, id := range tc.ids {
				if !ids[id] {
					t.Errorf("missing %+v in %v", id, ids)
				}
			}
		})
	}
}
