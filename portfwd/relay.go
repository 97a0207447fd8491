package portfwd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/reexec"

	_ "github.com/corralhq/corral/internal/linuxonly" // Linux alone: say so elsewhere
)

// RelayArg is the argv mode of the relay helper (os.Args[1]): corral's
// executable run as `exe corral-port-relay ADDR:PORT` inside the sandbox's
// network namespace, with its end of the descriptor-passing socket as
// descriptor 3.
const RelayArg = "corral-port-relay"

// relayDialTimeout bounds one connect to the server inside; a loopback
// connect is answered at once, so this is only a backstop.
const relayDialTimeout = 30 * time.Second

func init() { reexec.Register(RelayArg, relayMain) }

// relayMain receives connection descriptors (SCM_RIGHTS, one or more per
// message) on descriptor 3 and relays each to the address in args[0]
// until the socket reaches end of file: corral closed the forward, or
// died. Returning ends every connection with the process.
func relayMain(args []string) int {
	// Not dumpable: no process of the sandbox's uid may ptrace it or read
	// its memory (ptrace(2), PR_SET_DUMPABLE).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// nsenter's namespace descriptors (4, and 5 when it entered a user
	// namespace too; Start) go. Only those: by now the Go runtime may
	// hold descriptors of its own above 3 (its poller's epoll and eventfd,
	// made by whichever package's init first opened a file), and closing
	// them broke every connection (net.FileConn: EBADF from epoll_ctl).
	dropNamespaceFDs()
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: %s ADDR:PORT\n", RelayArg)
		return 2
	}
	target := args[0]
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, _, _, err := unix.Recvmsg(3, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "receiving a connection: %v\n", err)
			return 1
		}
		if n == 0 && oobn == 0 {
			return 0 // corral closed the forward
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			continue
		}
		for i := range msgs {
			fds, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				continue
			}
			for _, fd := range fds {
				go relayConn(fd, target)
			}
		}
	}
}

// relayConn connects to target and copies between it and the connection
// fd until both directions are done (each half closed on its own, so a
// client that shuts down its writing side still gets the reply).
func relayConn(fd int, target string) {
	f := os.NewFile(uintptr(fd), "conn")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return
	}
	defer c.Close()
	d, err := net.DialTimeout("tcp", target, relayDialTimeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "connecting to %s: %v\n", target, err)
		return
	}
	defer d.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	go pipe(d, c)
	go pipe(c, d)
	wg.Wait()
}

// dropNamespaceFDs closes descriptors 4 and 5 where they are namespaces
// (their /proc/self/fd links read "user:[...]" or "net:[...]",
// namespaces(7)), the ones Start passes nsenter, which leaves them open
// across its exec.
func dropNamespaceFDs() {
	for fd := 4; fd <= 5; fd++ {
		l, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err == nil && (strings.HasPrefix(l, "user:[") || strings.HasPrefix(l, "net:[")) {
			_ = unix.Close(fd)
		}
	}
}
