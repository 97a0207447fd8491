package inside

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Modes of the port forward (package portfwd through the docker backend):
// ModePortList prints the container's listening sockets, ModePortConnect
// relays one connection.
const (
	// ModePortList prints /proc/net/tcp then /proc/net/tcp6 of the
	// container's network namespace (the second may be missing).
	ModePortList = "__corral-port-list"
	// ModePortConnect connects to its argument ("127.0.0.1:3000") inside
	// the container and copies stdin to the connection and the connection
	// to stdout, until both directions have ended.
	ModePortConnect = "__corral-port-connect"
)

// portDialTimeout bounds the connect to a server on the container's
// loopback, which answers at once; a backstop only.
const portDialTimeout = 30 * time.Second

func portListMain([]string) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return fail(ModePortList, err)
	}
	_, _ = os.Stdout.Write(b)
	if b, err := os.ReadFile("/proc/net/tcp6"); err == nil {
		_, _ = os.Stdout.Write(b)
	}
	return 0
}

func portConnectMain(args []string) int {
	if len(args) != 1 {
		return fail(ModePortConnect, errors.New("usage: __corral-port-connect ADDR:PORT"))
	}
	c, err := net.DialTimeout("tcp", args[0], portDialTimeout)
	if err != nil {
		return fail(ModePortConnect, err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(c, os.Stdin)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(os.Stdout, c)
		_ = os.Stdout.Close()
	}()
	wg.Wait()
	return 0
}
