package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/metrics"
)

// stderr is where corral's own lines for the person go (notes, warnings,
// errors, progress, its log): os.Stderr through termsafe.Text, since
// they quote what sandboxes chose (paths, commands, messages), which must
// not drive the person's terminal. The sandboxed command's own stderr
// goes to os.Stderr untouched, as ssh passes it.
var stderr io.Writer = textWriter{os.Stderr}

// commandOutputs returns the writers a sandboxed command's stdout and
// stderr go to: os.Stdout and os.Stderr, or os.Stdout for both when the
// two are one open file (fstat(2): the same device and inode, as after
// `2>&1`, `|&`, or on one terminal). One writer for both is what the
// backends give one pipe (sandbox.SameWriter), so the reader gets the
// command's lines in the order it wrote them; two pipes are read apart
// and that order is lost.
func commandOutputs() (stdout, stderr io.Writer) {
	if sameFile(os.Stdout, os.Stderr) {
		return os.Stdout, os.Stdout
	}
	return os.Stdout, os.Stderr
}

// sameFile reports whether a and b are open on one file (the same device
// and inode: a pipe, a terminal, a regular file).
func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Rdev == sb.Rdev
}

// hideDefaults keeps the help from printing the named flags' defaults
// ("(default -1)", "(default 0s)"): those are "unset", which the usage
// says means a setting; pflag leaves out a default it takes for zero.
func hideDefaults(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if fl := f.Lookup(n); fl != nil {
			fl.DefValue = "0"
		}
	}
}

// textWriter writes each write as termsafe.Text shows it; a write is one
// whole message (fmt.Fprintf's, slog's record), so no UTF-8 sequence is
// cut between two.
type textWriter struct{ w io.Writer }

func (t textWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, termsafe.Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newLogger returns the stderr logger at the --log-level given.
func newLogger(g *globalOptions) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
}

// oneShotSweepEvery spaces out the orphan sweep of the one-shot verbs
// (run, exec, shell): scanning /proc was about 6% of `corral run`'s CPU,
// and orphans are rare (a corral killed while starting a sandbox).
// `corral cleanup` and the MCP server sweep regardless.
const oneShotSweepEvery = 5 * time.Minute

// openHost opens the corral Host of this process over the --config
// settings; o's flags, when given, override the settings of every command
// (and its session's route). Close it before corral exits: it ends the
// background processes and removes the containers it made.
func (g *globalOptions) openHost(o *runOptions, logger *slog.Logger) (*corral.Host, error) {
	return g.openHostWith(o, logger, nil)
}

// openHostWith is openHost whose Host counts into reg (corral serve's
// /metrics); nil counts nothing.
func (g *globalOptions) openHostWith(o *runOptions, logger *slog.Logger, reg *metrics.Registry) (*corral.Host, error) {
	opts := corral.Options{ConfigPath: g.configPath, Logger: logger, Command: g.selfCommand(), JoinContainers: g.joinContainers, Metrics: reg}
	if o != nil {
		opts.Override = o.override
		opts.SweepEvery = oneShotSweepEvery
		opts.OneShot = true
	}
	return corral.Open(opts)
}

// openHostAnyway opens the Host as openHost(nil, logger) does, for the
// verbs that must work although the settings file is broken (doctor
// reports it, cleanup removes what it can): when the settings cannot be
// read it opens the Host over the defaults instead and returns the
// settings' error as settingsErr. err is what leaves no Host at all (no
// state directory).
func (g *globalOptions) openHostAnyway(logger *slog.Logger) (h *corral.Host, settingsErr, err error) {
	h, err = g.openHost(nil, logger)
	if err == nil || errors.Is(err, corral.ErrNoStateDir) {
		return h, nil, err
	}
	settingsErr = err
	h, err = corral.Open(corral.Options{Settings: config.Defaults(), Logger: logger, Command: g.selfCommand(), JoinContainers: g.joinContainers})
	return h, settingsErr, err
}

// ensureDir creates d (0700, with parents) and returns it; errors surface
// when d is used.
func ensureDir(d string) string {
	_ = os.MkdirAll(d, 0o700)
	return d
}

// contextWithSignal returns a context cancelled when a signal arrives on sigs.
func contextWithSignal(parent context.Context, sigs <-chan os.Signal) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// selfCommand is the argv that starts corral with this process's settings
// file: the start of a session's stream prefix (corral exec).
func (g *globalOptions) selfCommand() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	argv := []string{exe}
	if g.configPath != "" {
		if abs, err := startdir.Abs(g.configPath); err == nil {
			argv = append(argv, "--config", abs)
		}
	}
	return argv
}

// secondsFlag is a duration flag that also takes whole seconds ("90"), as
// the timeout setting does (config's KindDuration): pflag's DurationVar
// takes only Go durations and refused --timeout 2.
type secondsFlag struct{ d *time.Duration }

func (f secondsFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f secondsFlag) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Second) {
			return fmt.Errorf("%d seconds is out of range", n)
		}
		*f.d = time.Duration(n) * time.Second
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration such as 90s or 5m, or whole seconds")
	}
	*f.d = d
	return nil
}

func (f secondsFlag) Type() string { return "duration" }

// shellWord returns s as one shell word a person can paste: as it is when
// it holds only characters no shell treats specially, else single-quoted;
// made safe for a terminal (termsafe.Text), as every name from a sandbox
// or a settings file is.
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r)) {
			return termsafe.Text("'" + strings.ReplaceAll(s, "'", `'\''`) + "'")
		}
	}
	if s == "" {
		return "''"
	}
	return s
}
