package portfwd

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/procfs"
)

// ErrHostNetwork means the sandbox shares the host's network namespace
// (the network profile): its ports are the host's already.
var ErrHostNetwork = errors.New("the sandbox shares the host's network")

// NamespacePID returns a process inside the network namespace of the
// sandbox whose outermost host process is hostPID (bwrap, which stays in
// corral's namespaces and makes the sandbox's in its child, bwrap(1)):
// the nearest descendant whose network namespace is not corral's. It
// returns ErrHostNetwork when the descendants share corral's, and an error
// when hostPID has no descendant (it ended, or has not forked yet).
func NamespacePID(hostPID int) (int, error) {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return 0, fmt.Errorf("reading corral's network namespace: %w", err)
	}
	children := childrenMap()
	queue := children[hostPID]
	shared := false
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			continue // ended, or not ours to read
		}
		if ns != own {
			return pid, nil
		}
		shared = true
		queue = append(queue, children[pid]...)
	}
	if shared {
		return 0, ErrHostNetwork
	}
	return 0, fmt.Errorf("the sandbox of process %d has no process running", hostPID)
}

// childrenMap maps each process id to its children's, from one pass over
// /proc (the children file, proc(5), needs CONFIG_PROC_CHILDREN).
func childrenMap() map[int][]int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	m := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := procfs.ParentID(pid); ok {
			m[pp] = append(m[pp], pid)
		}
	}
	return m
}

// Candidate is a sandboxed process that may hold the port: a session's
// background process and the listeners of its network namespace.
type Candidate struct {
	// ID and Command name it to a person ("bg-1", "python3 -m http.server").
	ID, Command string
	// Listeners are its namespace's listening sockets.
	Listeners []Listener
	// HostNetwork is set when it shares the host's network (no forward is
	// needed, nor possible).
	HostNetwork bool
	// Err is why its listeners could not be read, or nil.
	Err error
}

// Pick returns the index of the first candidate whose namespace listens on
// port and the address to relay to, or -1 and the error NotListening
// gives.
func Pick(session string, port uint16, cands []Candidate) (int, netip.AddrPort, error) {
	for i, c := range cands {
		if c.HostNetwork || c.Err != nil {
			continue
		}
		if a, ok := DialTarget(c.Listeners, port); ok {
			return i, a, nil
		}
	}
	return -1, netip.AddrPort{}, NotListening(session, port, cands)
}

// NotListening is the error for a port that no candidate listens on: it
// names the session and the port and lists what does listen, which
// processes share the host's network, and which could not be read.
func NotListening(session string, port uint16, cands []Candidate) error {
	var b strings.Builder
	fmt.Fprintf(&b, "no running background process of session %q listens on port %d", session, port)
	if len(cands) == 0 {
		// corral exec and corral run hold their processes in their own
		// sandboxes, which this session does not list: a person who tried
		// one needs to hear that, not only the MCP tool's flag.
		b.WriteString("; the session has no running background process (start the server as one: an MCP client's bash tool with background: true; a server under corral exec or corral run is not forwarded)")
		return errors.New(b.String())
	}
	var parts []string
	for _, c := range cands {
		name := c.ID
		if c.Command != "" {
			name += " (" + c.Command + ")"
		}
		switch {
		case c.HostNetwork:
			parts = append(parts, name+": shares the host's network, its ports are reachable on the host directly")
		case c.Err != nil:
			parts = append(parts, name+": "+c.Err.Error())
		case len(c.Listeners) == 0:
			parts = append(parts, name+": listens on no TCP port")
		default:
			var ls []string
			for _, l := range c.Listeners {
				ls = append(ls, l.String())
			}
			parts = append(parts, name+": listens on "+strings.Join(ls, ", "))
		}
	}
	b.WriteString("; ")
	b.WriteString(strings.Join(parts, "; "))
	return errors.New(b.String())
}
