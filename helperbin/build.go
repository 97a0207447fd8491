package helperbin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/tail"
	"github.com/corralhq/corral/reexec"
)

// ModulePath is corral's Go module, whose cmd/corral-helper Build builds.
const ModulePath = "github.com/corralhq/corral"

// Errors of Build that a person can act on (corral doctor says what to
// do); errors.Is finds them.
var (
	// ErrNoToolchain: the go command is not on PATH.
	ErrNoToolchain = errors.New("the go command is not on PATH")
	// ErrNoSource: corral's module source is not where corral was built
	// from (a -trimpath build, or the source was moved or removed).
	ErrNoSource = errors.New("corral's source is not at hand")
	// ErrNoCache: there is no cache directory to build into.
	ErrNoCache = errors.New("no cache directory (set XDG_CACHE_HOME or HOME)")
	// ErrColdCache: the go command has no build cache here, so the
	// helper's build would compile every package it links (a minute and
	// more on two cores) where, after README's build of corral, it links
	// what that build compiled (half a second).
	ErrColdCache = errors.New("the go command has no build cache here, and a first build of the helper takes a minute or more")
)

// goBuildCache returns the go command's build cache directory as the go
// command finds it (`go help cache`: $GOCACHE, else the go-build
// directory of the user cache directory) and whether it holds anything.
// "off" counts as cold.
func goBuildCache(getenv func(string) string) (string, bool) {
	d := getenv("GOCACHE")
	if d == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "no user cache directory (HOME, XDG_CACHE_HOME)", false
		}
		d = filepath.Join(uc, "go-build")
	}
	if d == "off" {
		return "GOCACHE=off", false
	}
	ents, err := os.ReadDir(d)
	if err != nil || len(ents) == 0 {
		return d + " is empty or missing", false
	}
	return d, true
}

// Built is Build's result.
type Built struct {
	// Source is where the helper in use is: SourceNext (nothing was
	// built) or SourceCache.
	Source Source
	// Path is the helper's file, Size its size in bytes.
	Path string
	Size int64
	// Took is the build's time; zero when the helper was there already.
	Took time.Duration
}

// Build makes sure a usable static helper is at hand for later corral
// processes: it returns the one next to corral's executable or in the
// cache when either passes the check, else it builds cmd/corral-helper
// from corral's module source with the go command (CGO_ENABLED=0,
// -ldflags=-s; without -trimpath, so the go command's build cache of the
// README's build of corral serves and only the link is new) into the cache, under a lock so that two
// processes do not both build, to a temporary name that is checked (the
// protocol answer, static) before it is renamed into place. It is what
// corral doctor runs; the build takes seconds with a warm Go build cache,
// minutes with a cold one.
//
// starting, when not nil, is called just before the go command runs
// (with the helper's path to be), so a person is told why they wait.
//
// Errors wrap ErrNoToolchain, ErrNoSource, ErrColdCache or ErrNoCache when the helper
// cannot be built for that reason, or say why the build or its check
// failed; corral keeps using its own executable then.
func (l *Locator) Build(ctx context.Context, starting func(dest string)) (Built, error) {
	self := l.selfPath()
	if self == "" {
		return Built{}, errors.New("cannot find corral's own executable")
	}
	want := reexec.Answer()
	next := filepath.Join(filepath.Dir(self), Name)
	if _, err := os.Lstat(next); err == nil && l.trusted(SourceNext, next) == "" {
		if f := Check(next); f.Err == "" && Compatible(f.Answer, want) == nil && f.Static {
			return built(SourceNext, next, 0)
		}
	}
	root, key := l.cacheRoot(), BuildKey(self)
	if root == "" {
		return Built{}, ErrNoCache
	}
	if key == "" {
		return Built{}, fmt.Errorf("cannot read corral's executable %s for its build ID", self)
	}
	dir := filepath.Join(root, key)
	dest := filepath.Join(dir, Name)
	usable := func() bool {
		if _, err := os.Lstat(dest); err != nil || l.trusted(SourceCache, dest) != "" {
			return false
		}
		f := Check(dest)
		return !f.Missing && f.Err == "" && Compatible(f.Answer, want) == nil && f.Static
	}
	if usable() {
		return built(SourceCache, dest, 0)
	}
	// What a build needs, before anything is made in the cache.
	gocmd := l.opts.Go
	if gocmd == "" {
		gocmd = "go"
	}
	gocmd, err := exec.LookPath(gocmd)
	if err != nil {
		return Built{}, fmt.Errorf("%w (%v)", ErrNoToolchain, err)
	}
	src, err := l.sourceDir()
	if err != nil {
		return Built{}, err
	}
	if c, ok := goBuildCache(os.Getenv); !ok {
		return Built{}, fmt.Errorf("%w: %s", ErrColdCache, c)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Built{}, fmt.Errorf("making the helper's cache directory: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return Built{}, err
	}
	defer unlock()
	// Another process may have built it while this one waited.
	if usable() {
		return built(SourceCache, dest, 0)
	}
	if starting != nil {
		starting(dest)
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", Name, os.Getpid()))
	defer os.Remove(tmp)
	start := time.Now()
	cmd := exec.CommandContext(ctx, gocmd, "build", "-ldflags=-s", "-o", tmp, "./cmd/corral-helper")
	cmd.Dir = src
	// The executable must run here and in any image: this system and
	// architecture, no C library; the module alone (no go.work).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH, "GOWORK=off")
	// The go command's compilers and linker are its children: ctx's end
	// kills the whole process group, so none goes on compiling after
	// Build returned. What they compiled stays in the build cache, so the
	// next Build goes on from there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var errb tail.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return Built{}, fmt.Errorf("go build of cmd/corral-helper in %s did not finish in time (%w): what it compiled is kept in the go build cache, so running it again goes on from there", src, ctx.Err())
		}
		return Built{}, fmt.Errorf("go build of cmd/corral-helper in %s: %v: %s", src, err, strings.TrimSpace(errb.String()))
	}
	took := time.Since(start)
	f := Check(tmp)
	switch {
	case f.Err != "":
		return Built{}, fmt.Errorf("the helper built in %s: %s", src, f.Err)
	case !f.Static:
		return Built{}, fmt.Errorf("the helper built in %s is dynamically linked", src)
	}
	if err := Compatible(f.Answer, want); err != nil {
		return Built{}, fmt.Errorf("the helper built from %s %v: the source changed since this corral was built; rebuild corral", src, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Built{}, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return Built{}, fmt.Errorf("putting the helper in place: %w", err)
	}
	l.log.Info("helper.built", "path", dest, "took", took.String(), "source", src)
	return built(SourceCache, dest, took)
}

func built(src Source, path string, took time.Duration) (Built, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Built{}, err
	}
	return Built{Source: src, Path: path, Size: st.Size(), Took: took}, nil
}

// sourceDir returns corral's module source: Options.SourceDir, else the
// directory this file was compiled from, two levels up, when its go.mod
// names ModulePath. Errors wrap ErrNoSource.
func (l *Locator) sourceDir() (string, error) {
	dir := l.opts.SourceDir
	if dir == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok || !filepath.IsAbs(file) {
			return "", fmt.Errorf("%w: corral was built with -trimpath, so it does not know where its source is", ErrNoSource)
		}
		dir = filepath.Dir(filepath.Dir(file))
	}
	mod, err := modulePath(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoSource, err)
	}
	if mod != ModulePath {
		return "", fmt.Errorf("%w: %s is module %s, not %s", ErrNoSource, dir, mod, ModulePath)
	}
	return dir, nil
}

// modulePath returns the module line of the go.mod at path.
func modulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("%s has no module line", path)
}

// lockFile takes an exclusive flock(2) on path, made when missing, and
// returns its release. It waits for another holder, polling so that ctx
// can end the wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("the helper's build lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("the helper's build lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
