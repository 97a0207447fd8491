package inside

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Background processes of a session whose home is its sandbox (issue 29:
// a shared kubernetes pod; sandbox.BackgroundBackend). A process must
// outlive the corral that started it, so it is not the agent's: the agent
// starts a keeper (ModeBgKeep) detached (Start.Detach: a session of its
// own, outside the agent's reaping, so neither the agent's exit nor the
// loss of its exec stream ends it). The keeper runs the command under
// corral's reaper (runCommand) and writes, in DIR/bg/ID (DIR is the
// session's directory, TurnRequest.Dir):
//
//   - record: a BgRecord (JSON), written once the command runs;
//   - out: the command's stdout and stderr, merged, at most MaxBgOutput
//     bytes, then a note that the rest was dropped;
//   - status: a BgStatus (JSON), written whole once the command and
//     everything it started are gone and its output is drained.
//
// Any corral reads them through its own agent with ModeBg (list, read,
// kill), bounded. The files are the pod's user's, as the command is: the
// pod has one uid for its commands and no capability to change it, so a
// command of the session could rewrite them; the host treats them as
// hostile input (bounded reads, no symlink or fifo followed, JSON checked)
// and a forgery misleads only the same session, whose commands could as
// well print anything (docs/kubernetes.md).
const (
	// ModeBgKeep is `__corral-bgkeep --dir DIR --id ID [--timeout MS]
	// [--corral WHO] [--command TEXT] -- ARGV...`: the keeper of one
	// background process. It prints the BgRecord as one JSON line on its
	// stdout once the command runs (or a BgRecord with Error when it could
	// not), then closes its stdout and stderr and keeps the command.
	ModeBgKeep = "__corral-bgkeep"
	// ModeBg is `__corral-bg list DIR`, `__corral-bg read DIR ID OFFSET
	// MAX`, `__corral-bg kill DIR ID` and `__corral-bg state DIR`: a
	// session's background processes read and signalled from any corral,
	// and the session's saved state (TurnRequest.Dir's state) read for a
	// background command's start. Each prints one JSON value (a BgList,
	// a BgChunk, a BgKill, a BgState) on stdout.
	ModeBg = "__corral-bg"
)

// Bounds of the background processes kept in a session's pod.
const (
	// MaxBgOutput bounds one process's output file, in bytes; what comes
	// past it is dropped (counted) and a note ends the file.
	MaxBgOutput = 4 << 20
	// MaxBgProcs bounds the processes kept: a start past it removes the
	// oldest ended ones, and is refused when they all run. With
	// MaxBgOutput it bounds the space (48 MiB and the records).
	MaxBgProcs = 12
	// MaxBgRead bounds one read of output, in bytes.
	MaxBgRead = 64 << 10
	// MaxBgCommand bounds the command text a record keeps, in bytes.
	MaxBgCommand = 4 << 10
	// maxBgFile bounds a record or status file read.
	maxBgFile = 16 << 10
)

// BgRecord describes a background process in its session's pod.
type BgRecord struct {
	ID      string    `json:"id"`
	Command string    `json:"command"`
	Corral  string    `json:"corral,omitempty"` // the corral that started it: "pid N on HOST"
	Started time.Time `json:"started"`
	Keeper  int       `json:"keeper"` // the keeper's pid (pod's pid namespace)
	PGID    int       `json:"pgid"`   // the command's process group (0: it never started)
	// Error says why it did not start (the keeper's answer only).
	Error string `json:"error,omitempty"`
}

// BgStatus is how a background process ended.
type BgStatus struct {
	Exit
	Ended    time.Time `json:"ended"`
	TimedOut bool      `json:"timed_out,omitempty"`
	Killed   bool      `json:"killed,omitempty"` // ended by ModeBg kill
	// Dropped counts the output bytes past MaxBgOutput that were not kept.
	Dropped int64 `json:"dropped,omitempty"`
}

// BgInfo is one process of a BgList.
type BgInfo struct {
	BgRecord
	Status *BgStatus `json:"status,omitempty"` // nil while it runs
	Bytes  int64     `json:"bytes"`            // the output file's size
	// Problem says what could not be read of it ("" when all could).
	Problem string `json:"problem,omitempty"`
}

// BgList is ModeBg list's answer.
type BgList struct {
	Procs []BgInfo `json:"procs"`
	Error string   `json:"error,omitempty"`
}

// BgChunk is ModeBg read's answer: output from the asked offset (at most
// the asked size), the file's size, and the status when the process had
// ended before the read began (so the data of an ended process is whole).
type BgChunk struct {
	Data   []byte    `json:"data"`
	Size   int64     `json:"size"`
	Status *BgStatus `json:"status,omitempty"`
	// NotFound is set when the session has no process of that id.
	NotFound bool   `json:"not_found,omitempty"`
	Error    string `json:"error,omitempty"`
}

// BgKill is ModeBg kill's answer: the status once the process is gone
// (Ended: it had ended before), or why it could not be killed.
type BgKill struct {
	Status   *BgStatus `json:"status,omitempty"`
	Ended    bool      `json:"ended,omitempty"`
	NotFound bool      `json:"not_found,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// BgState is ModeBg state's answer: the session's saved state (Has
// false when none was saved), or why it could not be read.
type BgState struct {
	State []byte `json:"state,omitempty"`
	Has   bool   `json:"has,omitempty"`
	Error string `json:"error,omitempty"`
}

// ValidBgID reports whether id can name a background process in a pod
// (pure): "bg-" and 1 to 32 digits or lower-case letters, so it is a
// plain file name. A loop, not a package-level regexp: that cost 330
// allocations at every start of corral and its helpers (cmd/corral's
// TestInitAllocations).
func ValidBgID(id string) bool {
	rest, ok := strings.CutPrefix(id, "bg-")
	if !ok || len(rest) < 1 || len(rest) > 32 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// bgKeepMain is ModeBgKeep.
func bgKeepMain(args []string) int {
	fs := flag.NewFlagSet(ModeBgKeep, flag.ContinueOnError)
	dir := fs.String("dir", "", "the session's directory")
	id := fs.String("id", "", "the process's id")
	timeout := fs.Int64("timeout", 0, "milliseconds after which it is killed (0: none)")
	corral := fs.String("corral", "", "the corral that starts it")
	text := fs.String("command", "", "the command, as the agent gave it")
	if err := fs.Parse(args); err != nil {
		return fail(ModeBgKeep, err)
	}
	argv := fs.Args()
	answer := func(r BgRecord) {
		b, _ := json.Marshal(r)
		_, _ = os.Stdout.Write(append(b, '\n'))
		// The agent relays this stream until it ends: closing it tells
		// the agent the start is settled.
		if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
			_ = unix.Dup2(int(null.Fd()), 1)
			_ = unix.Dup2(int(null.Fd()), 2)
			null.Close()
		}
	}
	rec := BgRecord{ID: *id, Command: *text, Corral: *corral, Keeper: os.Getpid()}
	if len(rec.Command) > MaxBgCommand {
		rec.Command = rec.Command[:MaxBgCommand] + "..."
	}
	if len(argv) == 0 || !filepath.IsAbs(*dir) || !ValidBgID(*id) || *timeout < 0 {
		rec.Error = "bad background request"
		answer(rec)
		return 2
	}
	root := filepath.Join(*dir, "bg")
	if err := os.MkdirAll(root, 0o700); err != nil {
		rec.Error = err.Error()
		answer(rec)
		return 1
	}
	if err := bgMakeRoom(root); err != nil {
		rec.Error = err.Error()
		answer(rec)
		return 1
	}
	pdir := filepath.Join(root, *id)
	if err := os.Mkdir(pdir, 0o700); err != nil {
		rec.Error = err.Error()
		answer(rec)
		return 1
	}
	fd, err := openNoFollow(filepath.Join(pdir, "out"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_APPEND)
	if err != nil {
		rec.Error = err.Error()
		answer(rec)
		return 1
	}
	out := &bgOut{f: os.NewFile(uintptr(fd), "out")}
	defer out.f.Close()
	// SIGTERM (ModeBg kill) and the timeout end the command's whole tree.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var (
		mu               sync.Mutex
		killed, timedOut bool
		answered         bool
	)
	cwd, _ := os.Getwd()
	ex := runCommand(command{Argv: argv, Env: os.Environ(), Dir: cwd, Merged: true},
		func(kind byte, p []byte) error {
			switch kind {
			case KindStarted:
				rec.PGID, _ = strconv.Atoi(string(p))
			case KindStdout, KindStderr:
				out.write(p)
			}
			return nil
		},
		func(pgid int, sig func(syscall.Signal)) {
			rec.Started = time.Now().UTC()
			if err := writeWhole(filepath.Join(pdir, "record"), mustJSON(rec)); err != nil {
				// Unlisted, unreadable, unkillable from another corral:
				// it must not run.
				rec.Error = "recording the process: " + err.Error()
				sig(syscall.SIGKILL)
			}
			mu.Lock()
			answered = true
			mu.Unlock()
			answer(rec)
			go func() {
				var tc <-chan time.Time
				if *timeout > 0 {
					tc = time.After(time.Duration(*timeout) * time.Millisecond)
				}
				select {
				case <-sigs:
					mu.Lock()
					killed = true
					mu.Unlock()
				case <-tc:
					mu.Lock()
					timedOut = true
					mu.Unlock()
				}
				sig(syscall.SIGKILL)
			}()
		})
	mu.Lock()
	st := BgStatus{Exit: ex, Ended: time.Now().UTC(), Killed: killed, TimedOut: timedOut, Dropped: out.dropped}
	wasAnswered := answered
	mu.Unlock()
	if !wasAnswered {
		// It never ran (not found, cannot be run): recorded as such, so
		// that every corral sees it ended.
		rec.Started = time.Now().UTC()
		_ = writeWhole(filepath.Join(pdir, "record"), mustJSON(rec))
	}
	_ = writeWhole(filepath.Join(pdir, "status"), mustJSON(st))
	if !wasAnswered {
		answer(rec)
	}
	return 0
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// bgOut is a process's output file, bounded by MaxBgOutput.
type bgOut struct {
	mu      sync.Mutex
	f       *os.File
	n       int64
	dropped int64
	full    bool // the note is written
}

func (o *bgOut) write(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	keep := min(int64(len(p)), max(MaxBgOutput-o.n, 0))
	if keep > 0 {
		k, _ := o.f.Write(p[:keep])
		o.n += int64(k)
	}
	if rest := int64(len(p)) - keep; rest > 0 {
		o.dropped += rest
		if !o.full {
			o.full = true
			_, _ = fmt.Fprintf(o.f, "\n[corral: output past %d bytes is not kept]\n", MaxBgOutput)
		}
	}
}

// bgMakeRoom removes the oldest ended processes of root until fewer than
// MaxBgProcs are kept; it fails when they all still run.
func bgMakeRoom(root string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	type ended struct {
		name string
		at   time.Time
	}
	var done []ended
	n := 0
	for _, e := range ents {
		if !ValidBgID(e.Name()) {
			continue
		}
		n++
		if st, err := readStatus(filepath.Join(root, e.Name())); err == nil && st != nil {
			done = append(done, ended{e.Name(), st.Ended})
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i].at.Before(done[j].at) })
	for _, d := range done {
		if n < MaxBgProcs {
			break
		}
		if os.RemoveAll(filepath.Join(root, d.name)) == nil {
			n--
		}
	}
	if n >= MaxBgProcs {
		return fmt.Errorf("the session already has %d background processes running; kill one first", n)
	}
	return nil
}

// readStatus reads pdir's status: nil and no error while it runs.
func readStatus(pdir string) (*BgStatus, error) {
	b, err := readBounded(filepath.Join(pdir, "status"), maxBgFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st BgStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("status: %v", err)
	}
	return &st, nil
}

// lostKeeper is the Exit.Error of a process whose keeper is gone without
// writing its status.
const lostKeeper = "its keeper in the pod is gone without a status (killed: by the pod's memory limit, or by a command of the session); what it ran may still run"

// statusOrLost is readStatus, with a status saying so for a process
// whose keeper is gone without writing one (else it would look running
// for ever).
func statusOrLost(pdir string) (*BgStatus, error) {
	st, err := readStatus(pdir)
	if err != nil || st != nil {
		return st, err
	}
	r, err := readRecord(pdir)
	if err != nil || isKeeper(r.Keeper, r.ID) {
		return nil, nil // still starting, or running
	}
	// The keeper writes the status before it exits: read again.
	if st, err := readStatus(pdir); err != nil || st != nil {
		return st, err
	}
	return &BgStatus{Exit: Exit{Code: 125, Error: lostKeeper}}, nil
}

// readRecord reads pdir's record.
func readRecord(pdir string) (*BgRecord, error) {
	b, err := readBounded(filepath.Join(pdir, "record"), maxBgFile)
	if err != nil {
		return nil, err
	}
	var r BgRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("record: %v", err)
	}
	return &r, nil
}

// bgMain is ModeBg.
func bgMain(args []string) int {
	emit := func(v any) int {
		_, _ = os.Stdout.Write(append(mustJSON(v), '\n'))
		return 0
	}
	if len(args) < 2 || !filepath.IsAbs(args[1]) {
		return fail(ModeBg, errors.New("usage: __corral-bg list|read|kill DIR ..."))
	}
	root := filepath.Join(args[1], "bg")
	switch {
	case args[0] == "list" && len(args) == 2:
		return emit(bgList(root))
	case args[0] == "read" && len(args) == 5 && ValidBgID(args[2]):
		off, err1 := strconv.ParseInt(args[3], 10, 64)
		n, err2 := strconv.Atoi(args[4])
		if err1 != nil || err2 != nil || off < 0 || n < 0 {
			return emit(BgChunk{Error: "bad offset or size"})
		}
		return emit(bgRead(filepath.Join(root, args[2]), off, min(n, MaxBgRead)))
	case args[0] == "kill" && len(args) == 3 && ValidBgID(args[2]):
		return emit(bgKill(filepath.Join(root, args[2])))
	case args[0] == "state" && len(args) == 2:
		// Read without the turn: the file is replaced whole (rename), so
		// it is the state one command left.
		b, err := readBounded(filepath.Join(args[1], "state"), MaxTurnState)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return emit(BgState{})
		case err != nil:
			return emit(BgState{Error: err.Error()})
		}
		return emit(BgState{State: b, Has: true})
	}
	return fail(ModeBg, fmt.Errorf("bad arguments %q", args))
}

func bgList(root string) BgList {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return BgList{Procs: []BgInfo{}}
	}
	if err != nil {
		return BgList{Error: err.Error()}
	}
	l := BgList{Procs: []BgInfo{}}
	for _, e := range ents {
		if !ValidBgID(e.Name()) || len(l.Procs) >= 4*MaxBgProcs {
			continue
		}
		pdir := filepath.Join(root, e.Name())
		in := BgInfo{BgRecord: BgRecord{ID: e.Name()}}
		if r, err := readRecord(pdir); err != nil {
			in.Problem = err.Error()
		} else {
			in.BgRecord = *r
			in.ID = e.Name()
		}
		st, err := statusOrLost(pdir)
		if err != nil {
			in.Problem = err.Error()
		}
		in.Status = st
		if fi, err := os.Lstat(filepath.Join(pdir, "out")); err == nil && fi.Mode().IsRegular() {
			in.Bytes = fi.Size()
		}
		l.Procs = append(l.Procs, in)
	}
	return l
}

func bgRead(pdir string, off int64, n int) BgChunk {
	if _, err := os.Lstat(pdir); errors.Is(err, os.ErrNotExist) {
		return BgChunk{NotFound: true}
	}
	// The status first: when it is there, the output is whole.
	st, err := statusOrLost(pdir)
	if err != nil {
		return BgChunk{Error: err.Error()}
	}
	fd, err := openNoFollow(filepath.Join(pdir, "out"), unix.O_RDONLY)
	if err != nil {
		return BgChunk{Error: err.Error()}
	}
	f := os.NewFile(uintptr(fd), "out")
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return BgChunk{Error: "the output is not a regular file"}
	}
	c := BgChunk{Size: fi.Size(), Status: st, Data: []byte{}}
	if off < c.Size {
		buf := make([]byte, min(int64(n), c.Size-off))
		k, err := f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return BgChunk{Error: err.Error()}
		}
		c.Data = buf[:k]
	}
	return c
}

// bgKillWait bounds kill's wait for the process to be gone: the keeper
// kills the whole tree at once, so this is reached only when the keeper
// itself is stuck.
const bgKillWait = 30 * time.Second

func bgKill(pdir string) BgKill {
	if _, err := os.Lstat(pdir); errors.Is(err, os.ErrNotExist) {
		return BgKill{NotFound: true}
	}
	if st, err := readStatus(pdir); err != nil || st != nil {
		return BgKill{Status: st, Ended: st != nil, Error: errString(err)}
	}
	r, err := readRecord(pdir)
	if err != nil {
		return BgKill{Error: err.Error()}
	}
	// The keeper's pid is signalled only while it is that keeper (its
	// argv names its mode and id): a recycled pid is another process.
	if !isKeeper(r.Keeper, r.ID) {
		if st, _ := readStatus(pdir); st != nil {
			return BgKill{Status: st, Ended: true}
		}
		return BgKill{Error: "its keeper is gone and left no status (killed from inside the pod?)"}
	}
	if err := unix.Kill(r.Keeper, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		return BgKill{Error: err.Error()}
	}
	deadline := time.Now().Add(bgKillWait)
	for {
		st, err := readStatus(pdir)
		if err != nil || st != nil {
			return BgKill{Status: st, Error: errString(err)}
		}
		if !isKeeper(r.Keeper, r.ID) {
			return BgKill{Error: "its keeper went without a status"}
		}
		if time.Now().After(deadline) {
			return BgKill{Error: fmt.Sprintf("still running %s after it was told to end", bgKillWait)}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isKeeper reports whether pid is the keeper (ModeBgKeep) of id.
func isKeeper(pid int, id string) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := strings.Split(string(b), "\x00")
	return len(argv) > 1 && argv[1] == ModeBgKeep && strings.Contains(string(b), "\x00--id\x00"+id+"\x00")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
