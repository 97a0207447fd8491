package inside

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/corralhq/corral/seccomp"
)

// ModeAgent is the mode of corral's long-lived helper in a container: one
// per corral process and container, started with one docker exec, that
// runs every command of that process in the container as a child of its
// own. A docker exec costs a runc start (about 90 ms on Docker 20.10 on a
// small machine, whatever runs); a fork costs about a millisecond, so
// commands go through the agent.
const ModeAgent = "__corral-agent"

// KindOpen starts a command on a channel: its payload is a Start.
const KindOpen byte = 'O'

// Start is a command for the agent, sent as JSON in a KindOpen frame.
type Start struct {
	// Argv is the command; Argv[0] is looked up in Env's PATH.
	Argv []string `json:"argv"`
	// Env replaces or adds to the agent's environment (the container's).
	Env []string `json:"env,omitempty"`
	// Dir is where it starts.
	Dir string `json:"dir,omitempty"`
	// FDs is the number of extra output descriptors (3, 4, ...).
	FDs int `json:"fds,omitempty"`
	// Merged gives the command one pipe for stdout and stderr, relayed as
	// KindStdout, so the host reads them in the order they were written
	// (the host asked for one stream: sandbox.SameWriter).
	Merged bool `json:"merged,omitempty"`
	// Detach starts the command in a session of its own outside the
	// agent's reaping, so that it outlives the agent and its stream (a
	// background process's keeper, ModeBgKeep): its stdout and stderr are
	// relayed, as KindStdout, until it closes them (at most
	// maxDetachedOutput bytes), then the agent answers KindExit (Code 0)
	// without waiting for it; it gets no stdin and no signals.
	Detach bool `json:"detach,omitempty"`
}

// maxDetachedOutput bounds what the agent relays of a detached command.
const maxDetachedOutput = 64 << 10

// muxHeader is a kind byte, a big-endian uint32 channel and a big-endian
// uint32 length.
const muxHeader = 9

// WriteMux writes one frame of channel ch: kind, ch, the payload's length
// (all big-endian) and the payload (at most MaxFrame bytes). The agent's
// stdin and stdout carry these frames, with the kinds of WriteFrame plus
// KindOpen.
func WriteMux(w io.Writer, kind byte, ch uint32, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	buf := make([]byte, muxHeader+len(payload))
	buf[0] = kind
	binary.BigEndian.PutUint32(buf[1:5], ch)
	binary.BigEndian.PutUint32(buf[5:9], uint32(len(payload)))
	copy(buf[muxHeader:], payload)
	_, err := w.Write(buf)
	return err
}

// ReadMux reads one frame written by WriteMux into buf (grown as needed).
// At the end of the stream it returns io.EOF.
func ReadMux(r io.Reader, buf []byte) (kind byte, ch uint32, payload []byte, err error) {
	var h [muxHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > MaxFrame {
		return 0, 0, nil, fmt.Errorf("%w: length %d", ErrBadFrame, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, nil, err
	}
	return h[0], binary.BigEndian.Uint32(h[1:5]), buf, nil
}

// agentsMain is `__corral-agents [--except PID] [--except-owner ID]`: it
// prints the number of agents running in the container (processes whose
// argv[1] is ModeAgent, read from /proc/PID/cmdline), leaving out PID and
// every agent whose argv holds ID (agentMain's --owner mark: all agents of
// one corral process, including one still ending). A corral process that is
// about to remove a container it started asks this first: another corral's
// agent means the container is in use (corral exec joined it).
func agentsMain(args []string) int {
	except, exceptOwner := -1, ""
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--except":
			if n, err := strconv.Atoi(args[i+1]); err == nil {
				except = n
			}
		case "--except-owner":
			exceptOwner = args[i+1]
		}
	}
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == except {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) > 1 && argv[1] == ModeAgent && (exceptOwner == "" || !slices.Contains(argv, exceptOwner)) {
			n++
		}
	}
	fmt.Println(n)
	return 0
}

// agentChan is one command of the agent.
type agentChan struct {
	stdin chan []byte   // nil entry: EOF
	done  chan struct{} // closed when the command has ended
	mu    sync.Mutex
	// send signals every process of the command (its reaper's
	// descendants), once it has started.
	send   func(syscall.Signal)
	closed bool // stdin closed
	// pending is a signal that came before the command was started
	// (send nil), sent to it as soon as it is: dropping it would let a
	// command that a person ended at its start run on as if nothing came.
	// SIGKILL when corral went away first.
	pending syscall.Signal
}

// signal sends sig to every process of the command, whatever its session,
// or keeps it for the command when that has not been started yet; a
// SIGKILL kept is not replaced. c.mu is held.
func (c *agentChan) signal(sig syscall.Signal) {
	if c.send != nil {
		c.send(sig)
		return
	}
	if c.pending != syscall.SIGKILL {
		c.pending = sig
	}
}

// agentMain is `__corral-agent [--deny-unix]`: it serves commands on stdin
// and stdout until stdin ends, then kills every command it started (corral
// is gone) and exits. With --deny-unix it first loads corral's syscall
// filter with AF_UNIX sockets denied into itself (seccomp.Install), so
// every command inherits it; if that fails it exits 125 and runs nothing.
func agentMain(args []string) int {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--deny-unix":
			if err := seccomp.Install(seccomp.Options{DenyUnixSockets: true}); err != nil {
				return fail(ModeAgent, fmt.Errorf("loading the syscall filter: %w", err))
			}
		case a == "--owner" && i+1 < len(args):
			i++ // a mark in the agent's argv for ModeAgents, nothing more
		default:
			return fail(ModeAgent, fmt.Errorf("unknown argument %q", a))
		}
	}
	becomeSubreaper()
	out := &muxWriter{w: os.Stdout}
	// Channel 0 carries the agent's own pid first.
	_ = out.frame(KindStarted, 0, []byte(strconv.Itoa(os.Getpid())))
	var (
		mu    sync.Mutex
		chans = map[uint32]*agentChan{}
		// turns are the session turns this agent holds or waits for
		// (turn.go); they end with the agent, which lets their locks go.
		turns = map[uint32]*turnChan{}
	)
	buf := make([]byte, MaxFrame)
	for {
		kind, id, p, err := ReadMux(os.Stdin, buf)
		if err != nil {
			mu.Lock()
			for _, c := range chans {
				c.mu.Lock()
				c.signal(syscall.SIGKILL)
				c.mu.Unlock()
			}
			mu.Unlock()
			return 0
		}
		mu.Lock()
		c := chans[id]
		t := turns[id]
		mu.Unlock()
		switch kind {
		case KindTurn:
			var req TurnRequest
			if c != nil || t != nil || json.Unmarshal(p, &req) != nil {
				b, _ := json.Marshal(Exit{Code: 125, Error: "bad turn request"})
				_ = out.frame(KindExit, id, b)
				continue
			}
			t = newTurnChan()
			mu.Lock()
			turns[id] = t
			mu.Unlock()
			go func() {
				agentTurn(id, t, req, out)
				mu.Lock()
				delete(turns, id)
				mu.Unlock()
			}()
		case KindTurnState:
			if t != nil {
				t.addState(p)
			}
		case KindTurnEnd:
			var end TurnEnd
			if t != nil && json.Unmarshal(p, &end) == nil {
				select {
				case t.end <- end:
				default:
				}
			}
		case KindOpen:
			var st Start
			if c != nil || json.Unmarshal(p, &st) != nil || len(st.Argv) == 0 || st.FDs < 0 || st.FDs > 8 {
				b, _ := json.Marshal(Exit{Code: 125, Error: "bad start request"})
				_ = out.frame(KindExit, id, b)
				continue
			}
			if st.Detach {
				go agentDetach(id, st, out)
				continue
			}
			c = &agentChan{stdin: make(chan []byte, 256), done: make(chan struct{})}
			mu.Lock()
			chans[id] = c
			mu.Unlock()
			go func() {
				agentRun(id, c, st, out)
				mu.Lock()
				delete(chans, id)
				mu.Unlock()
			}()
		case KindStdin:
			// A command that does not read its stdin holds this loop once
			// 256 chunks are queued, until it reads or ends.
			if c != nil && !c.closed {
				select {
				case c.stdin <- append([]byte(nil), p...):
				case <-c.done:
				}
			}
		case KindStdinEOF:
			if c != nil && !c.closed {
				c.closed = true
				select {
				case c.stdin <- nil:
				case <-c.done:
				}
			}
		case KindSignal:
			if t != nil {
				t.callOff()
				continue
			}
			if c == nil {
				continue
			}
			n, err := strconv.Atoi(string(p))
			c.mu.Lock()
			if err == nil && n > 0 && n < 65 {
				c.signal(syscall.Signal(n))
			}
			c.mu.Unlock()
		}
	}
}

// agentRun runs one command of the agent and sends its exit report.
func agentRun(id uint32, c *agentChan, st Start, out *muxWriter) {
	r, w, err := os.Pipe()
	if err != nil {
		b, _ := json.Marshal(Exit{Code: 125, Error: err.Error()})
		_ = out.frame(KindExit, id, b)
		return
	}
	go func() {
		defer w.Close()
		for {
			select {
			case b := <-c.stdin:
				if b == nil {
					return
				}
				if _, err := w.Write(b); err != nil {
					return
				}
			case <-c.done:
				return
			}
		}
	}()
	env := mergeEnv(os.Environ(), st.Env)
	ex := runCommand(command{Argv: st.Argv, Env: env, Dir: st.Dir, NFDs: st.FDs, Merged: st.Merged, Stdin: r},
		func(kind byte, p []byte) error { return out.frame(kind, id, p) },
		func(pgid int, signal func(syscall.Signal)) {
			r.Close()
			c.mu.Lock()
			c.send = signal
			if c.pending != 0 {
				signal(c.pending)
			}
			c.mu.Unlock()
		})
	r.Close() // when the command never started
	close(c.done)
	b, _ := json.Marshal(ex)
	_ = out.frame(KindExit, id, b)
}

// agentDetach starts a detached command (Start.Detach) and relays its
// output until it closes it. It is counted among the reapers, so that
// the agent's sweeps (sweepOrphans) leave it and what runs under it
// alone; the agent reaps it if it ends first, else the pod's init does.
func agentDetach(id uint32, st Start, out *muxWriter) {
	exit := func(code int, msg string) {
		b, _ := json.Marshal(Exit{Code: code, Error: msg})
		_ = out.frame(KindExit, id, b)
	}
	env := mergeEnv(os.Environ(), st.Env)
	path, err := lookPathIn(st.Argv[0], env)
	if err != nil {
		exit(127, fmt.Sprintf("%s: %v", st.Argv[0], err))
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		exit(125, err.Error())
		return
	}
	cmd := exec.Command(path)
	cmd.Args, cmd.Env, cmd.Dir = st.Argv, env, st.Dir
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	reapersMu.Lock()
	err = cmd.Start()
	if err == nil {
		if reapers == nil {
			reapers = map[int]bool{}
		}
		reapers[cmd.Process.Pid] = true
	}
	reapersMu.Unlock()
	w.Close()
	if err != nil {
		r.Close()
		exit(126, err.Error())
		return
	}
	go func() {
		_ = cmd.Wait()
		reapersMu.Lock()
		delete(reapers, cmd.Process.Pid)
		reapersMu.Unlock()
	}()
	_ = out.frame(KindStarted, id, []byte(strconv.Itoa(cmd.Process.Pid)))
	buf := make([]byte, 32<<10)
	sent := 0
	for {
		n, err := r.Read(buf)
		if n > 0 && sent < maxDetachedOutput {
			n = min(n, maxDetachedOutput-sent)
			sent += n
			_ = out.frame(KindStdout, id, buf[:n])
		}
		if err != nil {
			break
		}
	}
	r.Close()
	exit(0, "")
}

// mergeEnv is base with the entries of set replacing those of the same
// name, as docker exec merges its Env over the container's.
func mergeEnv(base, set []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range append(append([]string(nil), base...), set...) {
		name := kv
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				name = kv[:i]
				break
			}
		}
		if i, ok := idx[name]; ok {
			out[i] = kv
			continue
		}
		idx[name] = len(out)
		out = append(out, kv)
	}
	return out
}

// muxWriter serializes agent frames.
type muxWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (m *muxWriter) frame(kind byte, ch uint32, p []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return WriteMux(m.w, kind, ch, p)
}
