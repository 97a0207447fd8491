package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/internal/termsafe"
)

// stderr is where corral's own lines for the person go (notes, warnings,
// errors, progress, its log): os.Stderr through termsafe.Text, since
// they quote what sandboxes chose (paths, commands, messages), which must
// not drive the person's terminal. The sandboxed command's own stderr
// goes to os.Stderr untouched, as ssh passes it.
var stderr io.Writer = textWriter{os.Stderr}

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
	opts := corral.Options{ConfigPath: g.configPath, Logger: logger, Command: g.selfCommand(), JoinContainers: g.joinContainers}
	if o != nil {
		opts.Override = o.override
		opts.SweepEvery = oneShotSweepEvery
		opts.OneShot = true
	}
	return corral.Open(opts)
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
