package bwrap

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Unix sockets under the restricted, workspace and allowlist profiles.
//
// Why mediation, and why this way: a read-only mount does not stop
// connect(2) to a pathname Unix socket (only the socket file's permissions
// do), so a sandbox that sees the host's root would reach every host socket
// it can name (the Docker daemon, ssh and gpg agents, D-Bus, a socket
// planted anywhere), and Landlock here (ABI 7) has no rule for pathname
// sockets. Refusing socket(AF_UNIX) outright broke what a command does with
// its own sockets (a test suite's PostgreSQL or Redis in /tmp, Python's
// multiprocessing managers, language servers). So connect(2) is handed to
// corral (seccomp_unotify(2)), which allows a pathname only when the inode
// it names is bound by a socket of the sandbox's own network namespace: a
// Unix socket belongs to the namespace of the process that created it, so a
// host process's socket is never one of them, whatever its path, mode or
// owner, and however the sandbox names it (symlink, relative path, a bind
// mount).
//
// The pieces:
//
//   - the ptrace gate (startGated) stops bwrap's sandbox child at its
//     birth, already in the sandbox's user and network namespaces, and
//     executes two calls in it: seccomp(2) with a filter that notifies
//     connect(2) (seccomp.ConnectNotifyBPF) and a new listener, and
//     socket(AF_NETLINK, NETLINK_SOCK_DIAG), which lists the sockets of the
//     namespace it is made in. Both are taken out with pidfd_getfd(2) and
//     closed in the child: the listener never stays in the sandbox, as
//     whoever holds it answers the notifications;
//   - bwrap then loads corral's main filter with
//     seccomp.Options.MediatedUnixSockets: stream and seqpacket AF_UNIX
//     sockets may be made, datagram ones still not (a datagram socket names
//     its peer in every send, which only a supervisor sending every message
//     itself could mediate), and no filter of the command's own may take a
//     listener (its supervisor would get connect(2) first);
//   - unixSupervisor (unixsock_linux.go) answers each connect(2) for the
//     command's lifetime. It never lets the call continue in the kernel
//     (SECCOMP_USER_NOTIF_FLAG_CONTINUE): another thread of the caller could
//     swap the descriptor or rewrite the address between the check and the
//     kernel's own read. It takes a duplicate of the caller's socket
//     (pidfd_getfd: the same open file, so O_NONBLOCK, SO_SNDTIMEO and the
//     socket's network namespace hold), copies the address, decides on the
//     copy, performs the connect itself and returns its result.
//
// The decision (decideConnect, pure): a socket that is not AF_UNIX, or an
// AF_UNIX address that is abstract (looked up in the socket's own network
// namespace, the sandbox's) or malformed (the kernel's error is the
// answer), is connected as given. A pathname is resolved as the caller sees
// it (its root and working directory, symlinks followed), must be a socket
// (else ECONNREFUSED, as the kernel says), and its inode must be one that a
// socket of the sandbox's network namespace is bound to (sock_diag,
// UDIAG_SHOW_VFS); then the duplicate is connected to that very inode
// through /proc/self/fd/N of an O_PATH descriptor of it. Anything else
// fails with EACCES and is logged as bwrap.unixsock.denied. Under allowlist
// the network namespace is the session's egress namespace, so commands of
// the same session can reach each other's sockets.
//
// Costs and limits: two injected calls per command, one round trip to
// corral per connect(2). The peer of a connection made this way sees the
// connecting thread's credentials in SO_PEERCRED (the kernel takes them
// from the task that connects: unix_stream_connect), so a server inside
// that authenticates peers by uid sees the sandbox's own uid and pid 0:
// corral's uid, which the sandbox maps, or for a root caller run_as's, as
// the connect runs on a throwaway thread that drops to it (host root is
// unmapped inside and would show as 65534). sock_diag reports only the low 32 bits of the
// inode number. Where the gate cannot inject calls (arm64, ptrace refused,
// a setuid bwrap) AF_UNIX sockets are refused as before
// (seccomp.Options.DenyUnixSockets without mediation).

// connectAction is what the supervisor does with one connect(2).
type connectAction int

const (
	// connectAsGiven connects the duplicate to the caller's address
	// (copied): not AF_UNIX, abstract, or malformed.
	connectAsGiven connectAction = iota
	// connectPathname resolves the pathname first (decideConnect).
	connectPathname
)

// sunPathOffset is offsetof(struct sockaddr_un, sun_path) (unix(7)).
const sunPathOffset = 2

// maxSockaddr is sizeof(struct sockaddr_storage): connect(2) fails with
// EINVAL for a longer address (move_addr_to_kernel, net/socket.c).
const maxSockaddr = 128

// classifyConnect decides how to handle connect(2) on a socket of domain
// (SO_DOMAIN of the duplicate, never what the address claims) with addr,
// the caller's address bytes as the kernel would copy them (addrlen bytes).
// For connectPathname it returns the path: sun_path up to its first NUL
// (unix_mkname_bsd terminates it at addrlen).
func classifyConnect(domain int, addr []byte) (connectAction, string) {
	if domain != unix.AF_UNIX || len(addr) <= sunPathOffset {
		return connectAsGiven, ""
	}
	if binary.NativeEndian.Uint16(addr) != unix.AF_UNIX {
		// AF_UNSPEC dissolves a datagram association; anything else is
		// EINVAL from the kernel. Neither reaches a socket.
		return connectAsGiven, ""
	}
	path := addr[sunPathOffset:]
	if path[0] == 0 {
		return connectAsGiven, "" // abstract: the sandbox's own namespace
	}
	if i := bytes.IndexByte(path, 0); i >= 0 {
		path = path[:i]
	}
	return connectPathname, string(path)
}

// pathVerdict is the outcome for a pathname connect.
type pathVerdict struct {
	// Errno is the answer when not zero: the resolution's error,
	// ECONNREFUSED for a file that is not a socket (unix_find_bsd), EACCES
	// for a socket not bound in the sandbox's network namespace.
	Errno unix.Errno
	// Denied marks the policy refusal (EACCES), which is logged.
	Denied bool
}

// decidePathname decides a pathname connect from what was found: the
// error resolving the path as the caller sees it (nil when it resolved),
// whether the file is a socket, and whether its inode is bound by a socket
// of the sandbox's network namespace. A zero verdict means connect.
func decidePathname(resolveErr error, isSocket, boundInSandbox bool) pathVerdict {
	switch {
	case resolveErr != nil:
		if e, ok := resolveErr.(unix.Errno); ok && e != 0 {
			return pathVerdict{Errno: e}
		}
		return pathVerdict{Errno: unix.EACCES, Denied: true}
	case !isSocket:
		return pathVerdict{Errno: unix.ECONNREFUSED}
	case !boundInSandbox:
		return pathVerdict{Errno: unix.EACCES, Denied: true}
	}
	return pathVerdict{}
}

// vfsID names a socket file as sock_diag reports it: the filesystem's
// device in stat(2)'s encoding and the low 32 bits of the inode number
// (struct unix_diag_vfs has a __u32 udiag_vfs_ino).
type vfsID struct {
	Dev uint64
	Ino uint32
}

// statVFSID is the vfsID of a file from fstat(2)'s st_dev and st_ino.
func statVFSID(dev, ino uint64) vfsID { return vfsID{Dev: dev, Ino: uint32(ino)} }

// diagDev converts UNIX_DIAG_VFS's udiag_vfs_dev, which is the kernel's
// internal dev_t (sb->s_dev: major in the top 12 bits, minor in the low 20,
// include/linux/kdev_t.h), to stat(2)'s st_dev encoding (new_encode_dev,
// as unix.Mkdev builds it).
func diagDev(d uint32) uint64 { return unix.Mkdev(d>>20, d&0xfffff) }

// Netlink and sock_diag constants (linux/netlink.h, linux/sock_diag.h,
// linux/unix_diag.h).
const (
	nlmsgHdrLen     = 16 // struct nlmsghdr
	unixDiagReqLen  = 24 // struct unix_diag_req
	unixDiagMsgLen  = 16 // struct unix_diag_msg
	udiagShowVFS    = 0x2
	unixDiagAttrVFS = 1 // UNIX_DIAG_VFS
	nlmsgError      = 2 // NLMSG_ERROR
	nlmsgDone       = 3 // NLMSG_DONE
)

// unixDiagRequest builds a SOCK_DIAG_BY_FAMILY dump request for every
// AF_UNIX socket of the diag socket's network namespace, in every state,
// with its bound file (UDIAG_SHOW_VFS): a struct nlmsghdr (NLM_F_REQUEST |
// NLM_F_DUMP) followed by a struct unix_diag_req.
func unixDiagRequest(seq uint32) []byte {
	b := make([]byte, nlmsgHdrLen+unixDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(b[8:], seq)
	r := b[nlmsgHdrLen:]
	r[0] = unix.AF_UNIX                // sdiag_family
	ne.PutUint32(r[4:], 0xffffffff)    // udiag_states: all
	ne.PutUint32(r[12:], udiagShowVFS) // udiag_show
	return b
}

// parseUnixDiag reads one recv(2) buffer of a dump's answer: the bound
// files of the sockets it lists are added to ids, and done reports
// NLMSG_DONE. An NLMSG_ERROR, or a message that does not fit, is an error.
// Messages whose sequence number is not seq (a reply to an earlier,
// abandoned request) are skipped.
func parseUnixDiag(b []byte, seq uint32, ids map[vfsID]bool) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b))
		if l < nlmsgHdrLen || l > len(b) {
			return false, fmt.Errorf("sock_diag: message length %d of %d bytes", l, len(b))
		}
		typ, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		msg := b[nlmsgHdrLen:l]
		b = b[min(nlmAlign(l), len(b)):]
		if mseq != seq {
			continue
		}
		switch typ {
		case nlmsgDone:
			return true, nil
		case nlmsgError:
			if len(msg) >= 4 {
				if e := int32(ne.Uint32(msg)); e < 0 {
					return false, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
				}
			}
			return false, fmt.Errorf("sock_diag: error message")
		case unix.SOCK_DIAG_BY_FAMILY:
		default:
			continue
		}
		if len(msg) < unixDiagMsgLen {
			return false, fmt.Errorf("sock_diag: short unix_diag_msg (%d bytes)", len(msg))
		}
		attrs := msg[unixDiagMsgLen:]
		for len(attrs) >= 4 {
			al, at := int(ne.Uint16(attrs)), ne.Uint16(attrs[2:])
			if al < 4 || al > len(attrs) {
				return false, fmt.Errorf("sock_diag: attribute length %d of %d bytes", al, len(attrs))
			}
			if at == unixDiagAttrVFS && al >= 4+8 {
				ino, dev := ne.Uint32(attrs[4:]), ne.Uint32(attrs[8:])
				ids[vfsID{Dev: diagDev(dev), Ino: ino}] = true
			}
			attrs = attrs[min(nlmAlign(al), len(attrs)):]
		}
	}
	return false, nil
}

// nlmAlign rounds up to NLMSG_ALIGNTO (and RTA_ALIGNTO), 4 bytes.
func nlmAlign(n int) int { return (n + 3) &^ 3 }
