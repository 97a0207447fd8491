package bwrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/sandbox"
)

// The user-notification structures of linux/seccomp.h (seccomp_unotify(2)).
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// pidfdThread is PIDFD_THREAD (O_EXCL, linux/pidfd.h, Linux 6.9): a pidfd
// of the thread itself, whose descriptor table pidfd_getfd(2) then reads.
const pidfdThread = unix.O_EXCL

func closeFDs(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

// deniedLogged is how many refused connects of one command are logged one
// by one (bwrap.unixsock.denied); stop logs how many more there were
// (bwrap.unixsock.denied_more).
const deniedLogged = 10

// unixSupervisor answers the connect(2) notifications of one command (see
// unixsock.go). It owns the listener and the sock_diag socket, serves until
// every task of the sandbox is gone (the listener reports POLLHUP) or stop
// is called, and answers each call from a goroutine of its own, so a
// blocking connect holds up no other.
type unixSupervisor struct {
	listener, diag, wake int // wake: an eventfd that stop writes
	log                  *slog.Logger
	// as is the sandbox's identity for a root caller (run_as), which the
	// connects take; nil connects with corral's own, which the sandbox's
	// user namespace maps already. work hands a connect to an idle thread
	// holding as (credWorker); workers counts those threads.
	as      *sandbox.RunAs
	work    chan func(error)
	workers sync.WaitGroup

	diagMu sync.Mutex // one dump at a time on the diag socket
	seq    uint32

	// denied counts refused connects: the first few are logged one by
	// one, the rest once at stop (a hostile loop must not flood the log).
	denied atomic.Int64

	mu      sync.Mutex
	pending map[int]bool // duplicates in a connect, shut down by stop
	wg      sync.WaitGroup
	once    sync.Once
}

// startUnixSupervisor takes ownership of listener and diag and starts
// serving; as is a root caller's run_as identity, or nil. The error (an
// eventfd that cannot be made) leaves both closed.
func startUnixSupervisor(listener, diag int, as *sandbox.RunAs, log *slog.Logger) (*unixSupervisor, error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		closeFDs(listener, diag)
		return nil, fmt.Errorf("eventfd for the connect(2) supervisor: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &unixSupervisor{listener: listener, diag: diag, wake: wake, log: log, as: as, work: make(chan func(error)), pending: map[int]bool{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// stop ends serving, interrupts connects in progress (shutdown(2) of their
// duplicates: a TCP connect to an address that never answers would take
// minutes), waits for every goroutine and closes the descriptors. A
// notification not yet answered then fails in the caller with ENOSYS
// (seccomp_unotify(2)), which only a task outliving its command can see.
func (s *unixSupervisor) stop() {
	s.once.Do(func() {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(s.wake, one[:])
		s.mu.Lock()
		for fd := range s.pending {
			_ = unix.Shutdown(fd, unix.SHUT_RDWR)
		}
		s.pending = nil
		s.mu.Unlock()
		s.wg.Wait()
		if n := s.denied.Load(); n > deniedLogged {
			s.log.Warn("bwrap.unixsock.denied_more", "count", n-deniedLogged, "total", n)
		}
		// Every connect has been answered: the identity threads end.
		close(s.work)
		s.workers.Wait()
		closeFDs(s.listener, s.diag, s.wake)
	})
}

func (s *unixSupervisor) serve() {
	defer s.wg.Done()
	for {
		fds := []unix.PollFd{{Fd: int32(s.listener), Events: unix.POLLIN}, {Fd: int32(s.wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			s.log.Warn("bwrap.unixsock.poll_failed", "error", err)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return // POLLHUP: every task of the sandbox is gone
		}
		var n seccompNotif
		if err := ioctlPtr(s.listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); err != nil {
			// ENOENT: the caller was interrupted or died before we read it.
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
				continue
			}
			s.log.Warn("bwrap.unixsock.recv_failed", "error", err)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.answer(n)
		}()
	}
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p)); e != 0 {
		return e
	}
	return nil
}

// valid reports whether notification id is still pending: the caller is
// alive and still waiting, so its pid and memory were its own when read.
func (s *unixSupervisor) valid(id uint64) bool {
	return ioctlPtr(s.listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

func (s *unixSupervisor) answer(n seccompNotif) {
	errno, ok := s.connect(n)
	if !ok {
		return // no longer pending: nobody to answer
	}
	resp := seccompNotifResp{ID: n.ID, Error: -int32(errno)}
	// ENOENT: the caller was interrupted by a signal meanwhile.
	_ = ioctlPtr(s.listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
}

// connect performs notification n's connect(2) on a duplicate of the
// caller's socket and returns its errno (0 for success); ok is false when
// the notification stopped being valid before anything was done.
func (s *unixSupervisor) connect(n seccompNotif) (errno unix.Errno, ok bool) {
	tid := int(n.Pid)
	fdnum := int(int32(n.Data.Args[0]))
	addrPtr := uintptr(n.Data.Args[1])
	addrLen := int(int32(n.Data.Args[2]))
	if addrLen < 0 || addrLen > maxSockaddr {
		return unix.EINVAL, true
	}
	pidfd, err := pidfdOf(tid)
	if err != nil {
		return unix.ESRCH, s.valid(n.ID)
	}
	dup, err := unix.PidfdGetfd(pidfd, fdnum, 0)
	unix.Close(pidfd)
	if err != nil {
		if !s.valid(n.ID) {
			return 0, false
		}
		return errnoOf(err), true
	}
	defer unix.Close(dup)
	addr := make([]byte, addrLen)
	if addrLen > 0 {
		got, err := unix.ProcessVMReadv(tid,
			[]unix.Iovec{{Base: &addr[0], Len: uint64(addrLen)}},
			[]unix.RemoteIovec{{Base: addrPtr, Len: addrLen}}, 0)
		if err != nil || got != addrLen {
			if !s.valid(n.ID) {
				return 0, false
			}
			return unix.EFAULT, true
		}
	}
	// The fd and the memory were the caller's: its tid was not reused.
	if !s.valid(n.ID) {
		return 0, false
	}
	domain, err := unix.GetsockoptInt(dup, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return errnoOf(err), true
	}
	action, p := classifyConnect(domain, addr)
	if action == connectAsGiven {
		return s.doConnect(dup, addr, domain == unix.AF_UNIX), true
	}
	target, v := s.resolve(tid, p)
	if target >= 0 {
		defer unix.Close(target)
	}
	if v.Errno != 0 {
		if v.Denied && s.denied.Add(1) <= deniedLogged {
			s.log.Warn("bwrap.unixsock.denied", "path", p, "pid", tid, "reason", "not a socket of the sandbox")
		}
		return v.Errno, true
	}
	via := "/proc/self/fd/" + strconv.Itoa(target)
	sa := make([]byte, sunPathOffset+len(via)+1)
	binary.NativeEndian.PutUint16(sa, unix.AF_UNIX)
	copy(sa[sunPathOffset:], via)
	return s.doConnect(dup, sa, true), true
}

// resolve opens path as thread tid sees it (its root; its working
// directory for a relative path; symlinks followed as connect(2) follows
// them) with O_PATH, and decides on it (decidePathname). target is the
// O_PATH descriptor, or -1.
func (s *unixSupervisor) resolve(tid int, p string) (target int, v pathVerdict) {
	proc := "/proc/" + strconv.Itoa(tid)
	if !path.IsAbs(p) {
		cwd, err := os.Readlink(proc + "/cwd")
		if err != nil || !path.IsAbs(cwd) || strings.HasSuffix(cwd, " (deleted)") {
			return -1, decidePathname(unix.ENOENT, false, false)
		}
		p = cwd + "/" + p
	}
	root, err := unix.Open(proc+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, decidePathname(errors.New("caller's root unreadable"), false, false)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return -1, decidePathname(errnoOf(err), false, false)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, decidePathname(errnoOf(err), false, false)
	}
	isSock := st.Mode&unix.S_IFMT == unix.S_IFSOCK
	bound := false
	if isSock {
		ids, err := s.boundSockets()
		if err != nil {
			s.log.Warn("bwrap.unixsock.diag_failed", "error", err)
		}
		bound = ids[statVFSID(st.Dev, st.Ino)]
	}
	return fd, decidePathname(nil, isSock, bound)
}

// boundSockets lists the files bound by the Unix sockets of the sandbox's
// network namespace (the diag socket was made there).
func (s *unixSupervisor) boundSockets() (map[vfsID]bool, error) {
	s.diagMu.Lock()
	defer s.diagMu.Unlock()
	s.seq++
	seq := s.seq
	if _, err := unix.Write(s.diag, unixDiagRequest(seq)); err != nil {
		return nil, fmt.Errorf("sending sock_diag request: %w", err)
	}
	ids := map[vfsID]bool{}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(s.diag, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading sock_diag answer: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("sock_diag: empty answer")
		}
		done, err := parseUnixDiag(buf[:n], seq, ids)
		if err != nil {
			return nil, err
		}
		if done {
			return ids, nil
		}
	}
}

// doConnect connects dup to the address bytes sa and returns the errno.
// dup is registered for stop's shutdown while the call runs. A Unix socket
// (unixPeer) is connected with the sandbox's identity where that is not
// corral's own (s.as), since the server inside sees it.
func (s *unixSupervisor) doConnect(dup int, sa []byte, unixPeer bool) unix.Errno {
	s.mu.Lock()
	if s.pending == nil {
		s.mu.Unlock()
		return unix.ECONNABORTED // stopping
	}
	s.pending[dup] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, dup)
		s.mu.Unlock()
	}()
	if s.as == nil || !unixPeer {
		return rawConnect(dup, sa)
	}
	// The connecting task's credentials become the peer's SO_PEERCRED
	// (unix_stream_connect): host root is unmapped in the sandbox's user
	// namespace and would show as the overflow uid 65534, so connect as
	// the sandbox's own identity, on a thread that holds it. Threads are
	// kept for the command (a new one per connect tripled its cost) and a
	// new one is made when none is idle, so a blocking connect holds up
	// no other.
	res := make(chan unix.Errno, 1)
	job := func(err error) {
		if err != nil {
			s.log.Warn("bwrap.unixsock.identity_failed", "run_as", s.as.String(), "error", err)
			res <- unix.EPERM
			return
		}
		res <- rawConnect(dup, sa)
	}
	select {
	case s.work <- job:
	default:
		s.workers.Add(1)
		credWorker(*s.as, s.work, job, s.workers.Done)
	}
	return <-res
}

// credWorker starts an OS thread that takes the identity as and runs first,
// then each job received from work until work is closed; done is called
// as it ends. The thread ends with it (onThrowawayThread), so the identity
// never reaches another goroutine. A job gets the error of taking the
// identity, after which the thread takes no more.
func credWorker(as sandbox.RunAs, work <-chan func(error), first func(error), done func()) {
	onThrowawayThread(func() {
		defer done()
		err := dropThreadCreds(as)
		first(err)
		if err != nil {
			return
		}
		for job := range work {
			job(nil)
		}
	})
}

// rawConnect is connect(2) of fd to the address bytes sa.
func rawConnect(fd int, sa []byte) unix.Errno {
	var p unsafe.Pointer
	if len(sa) > 0 {
		p = unsafe.Pointer(&sa[0])
	}
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(p), uintptr(len(sa)))
	return e
}

// pidfdOf opens a pidfd of thread tid, falling back to its thread group
// on kernels before PIDFD_THREAD (then a thread with a descriptor table of
// its own, from clone without CLONE_FILES, is read through its leader's).
func pidfdOf(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	if err == nil || !errors.Is(err, unix.EINVAL) {
		return fd, err
	}
	tgid, err := tgidOf(tid)
	if err != nil {
		return -1, err
	}
	return unix.PidfdOpen(tgid, 0)
}

func tgidOf(tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
