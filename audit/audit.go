// Package audit keeps corral's audit log: one JSON line per tool call of
// the MCP server (time, session, tool, arguments cut to a bound, exit code,
// duration, error), appended to audit.jsonl in the audit directory of the
// state directory ([Dir]) and rotated by size.
//
// Writers in one process share a [Log] (a mutex orders them); writers in
// several processes each open their own. Every record is one write(2) on a
// file opened with O_APPEND, so records from several processes never
// interleave, and rotation is serialised by an flock(2) on audit.lock in
// the same directory. When another process has rotated the file, a Log
// notices before its next write and reopens audit.jsonl.
//
// The log is a record for people, not a security control: a command in the
// sandbox cannot reach it (corral's state directory is hidden from
// sandboxes), but anyone with the user's own rights can edit it.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	// FileName is the current log file in the audit directory; rotated
	// files add .1 (the newest) to .Keep (the oldest).
	FileName = "audit.jsonl"
	// Keep is the number of rotated files kept (audit.jsonl.1 to
	// audit.jsonl.3); older records are deleted.
	Keep = 3
	// DefaultMaxBytes is the size at which the log is rotated when Open is
	// given 0: 10 MiB, the default of the audit_max_mb setting.
	DefaultMaxBytes = 10 << 20
	// MaxStringBytes bounds every string in a record (each argument
	// string, map key, session, tool and error), in bytes of UTF-8.
	MaxStringBytes = 2 << 10
	// MaxArgumentsBytes bounds the arguments of a record, encoded as JSON,
	// in bytes.
	MaxArgumentsBytes = 8 << 10
	// maxItems bounds the elements of one argument array or object before
	// the budget shrinks it further.
	maxItems = 100
	lockName = "audit.lock"
)

// Entry is one record: one tool call.
type Entry struct {
	// Time is when the call started (Record sets the current time when it
	// is zero). It is written in UTC as RFC 3339 with nanoseconds.
	Time time.Time `json:"time"`
	// Session is the corral session the call ran in.
	Session string `json:"session"`
	// Tool is the MCP tool's name ("bash", "read_file").
	Tool string `json:"tool"`
	// Arguments are the call's arguments: anything encoding/json encodes,
	// or a json.RawMessage or []byte holding JSON (bytes that are not JSON
	// are kept as a string). Record cuts them to MaxStringBytes per string
	// and MaxArgumentsBytes in all; read back they are the decoded JSON
	// (map[string]any, with json.Number for numbers).
	Arguments any `json:"arguments,omitempty"`
	// ExitCode is the command's exit status for tools that run one; nil
	// for the others.
	ExitCode *int `json:"exit_code,omitempty"`
	// DurationMS is how long the call took, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Error is the tool error the call ended with, "" for none.
	Error string `json:"error,omitempty"`
	// Denials are how the command hit the sandbox's wall, one
	// "KIND PATH-OR-HOST" each ("read-only /home/u/.npm",
	// "network evil.test"; hostview.ExplainDenials).
	Denials []string `json:"denials,omitempty"`
	// Truncated is set by Record when it cut any of the strings or the
	// arguments.
	Truncated bool `json:"truncated,omitempty"`
}

// Dir returns the audit directory of the state directory stateDir (see
// config.StateDir): stateDir/audit.
func Dir(stateDir string) string { return filepath.Join(stateDir, "audit") }

// Log appends records to the audit log in one directory. Its methods are
// safe for concurrent use.
type Log struct {
	dir, path string
	max       int64

	mu sync.Mutex
	f  *os.File // nil once closed
}

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("audit log is closed")

// Open opens (creating them, mode 0700 and 0600) the directory dir and
// the log file dir/audit.jsonl for appending. maxBytes is the size in
// bytes past which the file is rotated before a record is written; 0 or
// less means DefaultMaxBytes. A record larger than maxBytes is still
// written, alone in its file. Errors are those of mkdir and open.
func Open(dir string, maxBytes int64) (*Log, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	l := &Log{dir: dir, path: filepath.Join(dir, FileName), max: maxBytes}
	f, err := l.open()
	if err != nil {
		return nil, err
	}
	l.f = f
	return l, nil
}

// Path returns the current log file, dir/audit.jsonl.
func (l *Log) Path() string { return l.path }

func (l *Log) open() (*os.File, error) {
	f, err := openRegular(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return f, nil
}

// Record appends e as one line of JSON, after cutting its strings and
// arguments to their bounds; it rotates the file first when the line
// would take it past the size limit. The line is written with a single
// write call. Errors are those of stat, rename, open and write, or
// ErrClosed.
func (l *Log) Record(e Entry) error {
	line := encode(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ErrClosed
	}
	size, err := l.current()
	if err != nil {
		return err
	}
	if size > 0 && size+int64(len(line)) > l.max {
		if err := l.rotate(int64(len(line))); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// current makes sure l.f is the file at l.path (another process may have
// rotated it away) and returns its size.
func (l *Log) current() (int64, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	if pi, err := os.Stat(l.path); err == nil && os.SameFile(fi, pi) {
		return fi.Size(), nil
	}
	return l.reopen()
}

// reopen replaces l.f with the file at l.path and returns its size.
func (l *Log) reopen() (int64, error) {
	f, err := l.open()
	if err != nil {
		return 0, err
	}
	l.f.Close()
	l.f = f
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("audit log: %w", err)
	}
	return fi.Size(), nil
}

// rotate shifts audit.jsonl to .1, .1 to .2 and so on, dropping the
// oldest, and opens a new audit.jsonl; n is the size of the line about to
// be written. It holds audit.lock so that two processes do not both
// rotate: under the lock it checks again whether rotation is still due.
func (l *Log) rotate(n int64) error {
	lk, err := openRegular(filepath.Join(l.dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer lk.Close()
	if err := flock(lk); err != nil {
		return fmt.Errorf("audit log: locking %s: %w", lk.Name(), err)
	}
	size, err := l.current()
	if err != nil {
		return err
	}
	if size == 0 || size+n <= l.max {
		return nil // another process rotated meanwhile
	}
	for i := Keep - 1; i >= 1; i-- {
		err := os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("audit log: %w", err)
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	_, err = l.reopen()
	return err
}

// flock takes an exclusive lock on f, retrying on EINTR; closing f
// releases it.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// Close closes the log file. Later Records fail with ErrClosed; Close
// may be called more than once.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// encode returns e as a line of JSON ending in '\n', with its strings and
// arguments cut to their bounds.
func encode(e Entry) []byte {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	var cutAny bool
	e.Session, cutAny = cutString(e.Session, MaxStringBytes)
	var c bool
	e.Tool, c = cutString(e.Tool, MaxStringBytes)
	cutAny = cutAny || c
	e.Error, c = cutString(e.Error, MaxStringBytes)
	cutAny = cutAny || c
	if e.Arguments != nil {
		e.Arguments, c = cutArguments(e.Arguments)
		cutAny = cutAny || c
	}
	e.Truncated = e.Truncated || cutAny
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		// Only the arguments can fail to encode, and cutArguments
		// returns plain JSON values; keep the record anyway.
		e.Arguments = "arguments could not be encoded: " + err.Error()
		b.Reset()
		enc.Encode(e)
	}
	return b.Bytes()
}

// cutString returns s cut to at most n bytes at a character boundary,
// with a note of the original size, and whether it cut.
func cutString(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	note := fmt.Sprintf("…[cut, %d bytes]", len(s))
	i := max(n-len(note), 0)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + note, true
}

// cutArguments turns v into plain JSON values (map[string]any, []any,
// string, json.Number, bool, nil) whose encoding fits MaxArgumentsBytes,
// and reports whether anything was cut. It cuts each string (and map key)
// to a bound and each array and object to a number of elements, halving
// the bounds until the whole fits; arguments that cannot fit even so (very
// deep nesting) are replaced by the start of their JSON text, as a string.
func cutArguments(v any) (any, bool) {
	g, _ := plain(v)
	strLimit, items := MaxStringBytes, maxItems
	for {
		cut := false
		c := cutValue(g, strLimit, items, 0, &cut)
		b, err := json.Marshal(c)
		if err == nil && len(b) <= MaxArgumentsBytes {
			return c, cut
		}
		if strLimit <= 16 && items <= 1 {
			s, _ := cutString(string(b), MaxArgumentsBytes/8)
			return s, true
		}
		strLimit, items = max(strLimit/4, 16), max(items/4, 1)
	}
}

// plain converts v to the values encoding/json decodes into any. The
// common shapes (maps, slices and strings) are walked without encoding;
// other values go through json.Marshal, and a value it refuses becomes a
// string saying why.
func plain(v any) (any, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return plainJSON(x), nil
	case []byte:
		return plainJSON(x), nil
	case string, bool, nil, json.Number:
		return x, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k], _ = plain(e)
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i], _ = plain(e)
		}
		return out, nil
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out, nil
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = e
		}
		return out, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "unencodable value: " + err.Error(), err
	}
	return plainJSON(b), nil
}

// plainJSON decodes raw, or returns it as a string when it is not one
// JSON value.
func plainJSON(raw []byte) any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var g any
	if err := d.Decode(&g); err != nil || d.More() {
		return string(raw)
	}
	return g
}

// cutValue returns g with strings cut to strLimit bytes and arrays and
// objects to items elements; past depth 64 a value becomes "…".
func cutValue(g any, strLimit, items, depth int, cut *bool) any {
	if depth > 64 {
		*cut = true
		return "…"
	}
	switch x := g.(type) {
	case string:
		s, c := cutString(x, strLimit)
		*cut = *cut || c
		return s
	case []any:
		n := min(len(x), items)
		out := make([]any, 0, n+1)
		for _, e := range x[:n] {
			out = append(out, cutValue(e, strLimit, items, depth+1, cut))
		}
		if len(x) > n {
			*cut = true
			out = append(out, fmt.Sprintf("…[%d more]", len(x)-n))
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := min(len(keys), items)
		out := make(map[string]any, n+1)
		for _, k := range keys[:n] {
			ck, c := cutString(k, strLimit)
			*cut = *cut || c
			out[ck] = cutValue(x[k], strLimit, items, depth+1, cut)
		}
		if len(keys) > n {
			*cut = true
			out["…"] = fmt.Sprintf("%d more keys", len(keys)-n)
		}
		return out
	}
	return g
}
