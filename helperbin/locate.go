package helperbin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/reexec"
)

// Name is the helper executable's file name, next to corral's executable
// and in the cache.
const Name = "corral-helper"

// FallbackEvent is the event logged (once per process and kind) when no
// helper is usable and corral's own executable serves instead.
const FallbackEvent = "helper.fallback"

// ShipAdvice is how a person installs the helper beside corral by hand:
// where only root writes, the one place a helper beside corral is taken
// from (Trusted).
const ShipAdvice = "install corral-helper beside corral where only root writes: CGO_ENABLED=0 go build -ldflags=-s -o corral-helper ./cmd/corral-helper in corral's source, then sudo install -m 755 corral corral-helper /usr/local/bin/"

// Advice is what the fallback event tells a person to do.
const Advice = ShipAdvice + ", or run corral doctor, which builds it into corral's cache when corral's source and the go command are at hand"

// answerTimeout bounds a candidate's answer to reexec.ProtocolMode: a Go
// program's start, with room for a busy machine.
const answerTimeout = 10 * time.Second

// maxAnswer bounds what a candidate may print that is read.
const maxAnswer = 64 << 10

// Options configure a Locator.
type Options struct {
	// Self is corral's executable (symlinks resolved); "" means
	// os.Executable().
	Self string
	// CacheDir is the cache directory the helper is built into and the
	// verdicts kept in (<CacheDir>/KEY/corral-helper,
	// <CacheDir>/verdicts/); "" means <os.UserCacheDir()>/corral/helper.
	CacheDir string
	// SourceDir is corral's module source, where Build runs the go
	// command; "" means the module this package was compiled from, when
	// its files are still there (not with -trimpath).
	SourceDir string
	// Go is the go command; "" looks it up on PATH.
	Go string
	// Logger receives helper.* events; nil discards them.
	Logger *slog.Logger
}

// trustHook, when set (tests only: their helpers lie in temporary
// directories that no sandbox reaches), replaces Trusted.
var trustHook func(src Source, path string) string

// Locator finds the helper, lazily: nothing is looked at before Path or
// Build is called, and Path looks once per process. It is safe for
// concurrent use.
type Locator struct {
	opts Options
	log  *slog.Logger

	once  sync.Once
	self  string
	cands []Facts
	want  string

	noteMu sync.Mutex
	noted  map[bool]bool
}

// New returns a Locator over o.
func New(o Options) *Locator {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Locator{opts: o, log: log, noted: map[bool]bool{}}
}

// Path returns the executable to hand sandboxes as their helper: the
// first usable candidate (see the package documentation), static when
// needStatic is set (docker, kubernetes), else corral's own executable, of
// which one helper.fallback event says why. It returns "" only when
// corral's own executable cannot be found either.
func (l *Locator) Path(needStatic bool) string {
	c := l.Choose(needStatic)
	if c.Source == SourceSelf {
		l.note(needStatic, c)
	}
	return c.Path
}

// Choose is Path's verdict with its reasons, without the event.
func (l *Locator) Choose(needStatic bool) Choice {
	l.once.Do(l.look)
	return Choose(l.cands, l.want, needStatic, l.self)
}

// note logs the fallback once per process and kind.
func (l *Locator) note(needStatic bool, c Choice) {
	l.noteMu.Lock()
	defer l.noteMu.Unlock()
	if l.noted[needStatic] {
		return
	}
	l.noted[needStatic] = true
	why := "no corral-helper next to corral's executable or in its cache"
	if len(c.Passed) > 0 {
		why = strings.Join(c.Passed, "; ")
	}
	l.log.Info(FallbackEvent, "executable", c.Path, "static_needed", needStatic, "why", why, "how", Advice)
}

// look gathers the candidates' facts: a stat each, and a stamp read or
// one exec for a candidate not checked before.
func (l *Locator) look() {
	l.self = l.selfPath()
	l.want = reexec.Answer()
	for _, c := range l.candidates() {
		l.cands = append(l.cands, l.facts(c.Source, c.Path))
	}
}

// trusted is Trusted for this process's effective uid (trustHook in
// tests).
func (l *Locator) trusted(src Source, path string) string {
	if trustHook != nil {
		return trustHook(src, path)
	}
	return Trusted(src, path, os.Geteuid(), lstatOwner)
}

// candidates returns the places a helper is looked for, in order.
func (l *Locator) candidates() []Facts {
	var out []Facts
	if l.self != "" {
		out = append(out, Facts{Source: SourceNext, Path: filepath.Join(filepath.Dir(l.self), Name)})
	}
	if p := l.cachePath(); p != "" {
		out = append(out, Facts{Source: SourceCache, Path: p})
	}
	return out
}

func (l *Locator) selfPath() string {
	if l.opts.Self != "" {
		return l.opts.Self
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe
}

// CacheDir returns the directory the helper is built into and the
// verdicts kept in (Options.CacheDir, else <user cache dir>/corral/helper),
// or "" when there is none. It looks at nothing but the environment:
// corral hides it from sandboxes, as its other directories.
func (l *Locator) CacheDir() string { return l.cacheRoot() }

// NextPath returns where a helper next to corral's executable would be
// (symlinks resolved), or "" when corral's executable cannot be found:
// corral runs that file to check it, so the bwrap backend pins it
// read-only where a sandbox could write it.
func (l *Locator) NextPath() string {
	self := l.selfPath()
	if self == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(self), Name)
}

// cacheRoot returns the cache directory, or "" when there is none.
func (l *Locator) cacheRoot() string {
	if l.opts.CacheDir != "" {
		return l.opts.CacheDir
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "corral", "helper")
}

// cachePath returns where the cache holds the helper of this build, or ""
// when there is no cache directory or no key.
func (l *Locator) cachePath() string {
	root, key := l.cacheRoot(), BuildKey(l.self)
	if root == "" || key == "" {
		return ""
	}
	return filepath.Join(root, key, Name)
}

// BuildKey returns the cache key of the executable at exe: 16 bytes of the
// SHA-256 of its Go build ID note (.note.go.buildid, which changes with
// every different build), in hex; without the note, of its path, size and
// modification time. "" when exe cannot be read.
func BuildKey(exe string) string {
	if exe == "" {
		return ""
	}
	h := sha256.New()
	if f, err := elf.Open(exe); err == nil {
		sec := f.Section(".note.go.buildid")
		var data []byte
		if sec != nil {
			data, _ = sec.Data()
		}
		f.Close()
		if len(data) > 0 {
			h.Write(data)
			return hex.EncodeToString(h.Sum(nil)[:16])
		}
	}
	st, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	fmt.Fprintf(h, "%s|%d|%d", exe, st.Size(), st.ModTime().UnixNano())
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// facts returns what is known of the candidate at path: from its stamp
// when it was checked before as it is now, else by running it (and the
// stamp is written).
func (l *Locator) facts(src Source, path string) Facts {
	st, f, ok := regular(path)
	f.Source = src
	if !ok {
		return f
	}
	if why := l.trusted(src, path); why != "" {
		f.Err = "not run: " + why
		return f
	}
	stamp := l.stampPath(path, st)
	if stamp != "" {
		if b, err := os.ReadFile(stamp); err == nil {
			if g, ok := parseStamp(b); ok {
				g.Source, g.Path = src, path
				return g
			}
		}
	}
	f = Check(path)
	f.Source = src
	if stamp != "" {
		writeStamp(stamp, f)
	}
	l.log.Debug("helper.checked", "source", string(src), "path", path, "err", f.Err, "static", f.Static)
	return f
}

// regular stats path (following symlinks): ok when it is a regular file;
// else f says it is missing or not one.
func regular(path string) (st os.FileInfo, f Facts, ok bool) {
	f.Path = path
	st, err := os.Stat(path)
	switch {
	case err != nil:
		f.Missing = true
	case !st.Mode().IsRegular():
		f.Err = "not a regular file"
	default:
		return st, f, true
	}
	return st, f, false
}

// Check runs the executable at path in reexec.ProtocolMode and reads its
// ELF program headers: the Facts of one candidate, found the slow way.
func Check(path string) Facts {
	_, f, ok := regular(path)
	if !ok {
		return f
	}
	static, err := IsStatic(path)
	if err != nil {
		f.Err = err.Error()
		return f
	}
	f.Static = static
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, reexec.ProtocolMode)
	// A clean environment: no CORRAL_SANDBOXFS or the like may select
	// another mode.
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout = &limited{w: &out, n: maxAnswer}
	if err := cmd.Run(); err != nil {
		f.Err = fmt.Sprintf("does not answer %s: %v", reexec.ProtocolMode, err)
		return f
	}
	f.Answer = out.String()
	return f
}

// IsStatic reports whether the ELF executable at path needs no dynamic
// loader (no PT_INTERP program header). Errors: not an ELF file.
func IsStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("not an ELF executable: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// limited keeps the first n bytes written to it and drops the rest.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	if k > 0 {
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// stampPath returns the stamp file of the candidate at path as st shows
// it, for this executable's expected answer; "" when there is no cache
// directory. Any change of the file (replaced, rewritten, touched) or of
// what corral expects gives another stamp.
func (l *Locator) stampPath(path string, st os.FileInfo) string {
	root := l.cacheRoot()
	sys, ok := st.Sys().(*syscall.Stat_t)
	if root == "" || !ok {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d.%d\x00%d.%d\x00%s", path, sys.Dev, sys.Ino, sys.Size, sys.Mtim.Sec, sys.Mtim.Nsec, sys.Ctim.Sec, sys.Ctim.Nsec, l.want)
	return filepath.Join(root, "verdicts", hex.EncodeToString(h.Sum(nil)[:16]))
}

// A stamp holds "static" or "dynamic", a newline, and the answer (or
// "error: " and why it could not be asked).
func formatStamp(f Facts) []byte {
	kind := "dynamic"
	if f.Static {
		kind = "static"
	}
	if f.Err != "" {
		return []byte(kind + "\nerror: " + f.Err)
	}
	return []byte(kind + "\n" + f.Answer)
}

func parseStamp(b []byte) (Facts, bool) {
	kind, rest, ok := strings.Cut(string(b), "\n")
	if !ok || kind != "static" && kind != "dynamic" {
		return Facts{}, false
	}
	f := Facts{Static: kind == "static"}
	if e, isErr := strings.CutPrefix(rest, "error: "); isErr {
		f.Err = e
	} else {
		f.Answer = rest
	}
	return f, true
}

// writeStamp writes a stamp whole or not at all; a failure only costs the
// next process an exec.
func writeStamp(path string, f Facts) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".stamp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(formatStamp(f))
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}
