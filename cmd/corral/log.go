package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/audit"
	"github.com/corralhq/corral/config"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
)

// logOptions are the flags of `corral log`.
type logOptions struct {
	session string
	follow  bool
	asJSON  bool
	lines   int
}

func newLogCmd(g *globalOptions) *cobra.Command {
	o := &logOptions{}
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Show the audit log: one line per tool call of the MCP server",
		Long: `Show the audit log, oldest first: one line per tool call of the MCP server
with its time, session, tool, exit status, duration and arguments (cut short).
The log is audit/audit.jsonl in corral's state directory, one JSON object per
line, rotated at audit_max_mb with three older files kept (audit.jsonl.1 to
.3); --json prints those objects.

-f prints the last 10 calls (or -n N), then calls as they are made, across
rotation, until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.session, "session", "", "show only this session's calls (a glob such as 'tg:*' matches several)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep showing calls as they are made")
	f.BoolVar(&o.asJSON, "json", false, "print the log's JSON lines")
	f.IntVarP(&o.lines, "lines", "n", 0, "show only the last N calls; 0 shows all (default: all, 10 with -f)")
	return cmd
}

func (o *logOptions) run(c *cobra.Command) error {
	state := config.StateDir()
	if state == "" {
		return &exitError{Code: sandbox.ExitCorralError, Err: errors.New("no state directory: $HOME is not set and the user has no passwd entry")}
	}
	if o.session != "" {
		if _, err := path.Match(o.session, ""); err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("--session %q is not a valid glob", o.session)}
		}
	}
	if o.lines < 0 {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("--lines %d is below 0", o.lines)}
	}
	n := o.lines // 0: all
	if !c.Flags().Changed("lines") && o.follow {
		n = 10
	}
	dir := audit.Dir(state)
	out := c.OutOrStdout()
	show := o.printer(out)

	// Keep the last n matching records (a ring from next on), or print
	// them all as they come when n is 0.
	var ring []audit.Entry
	next := 0
	pos, err := audit.Read(dir, func(e audit.Entry) error {
		switch {
		case !o.match(e):
		case n == 0:
			return show(e)
		case len(ring) < n:
			ring = append(ring, e)
		default:
			ring[next] = e
			next = (next + 1) % n
		}
		return nil
	})
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("reading the audit log: %w", err)}
	}
	for i := range ring {
		if err := show(ring[(next+i)%len(ring)]); err != nil {
			return &exitError{Code: sandbox.ExitCorralError, Err: err}
		}
	}
	if !o.follow {
		return nil
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = audit.Follow(ctx, dir, pos, func(e audit.Entry) error {
		if !o.match(e) {
			return nil
		}
		return show(e)
	})
	if err != nil {
		return &exitError{Code: sandbox.ExitCorralError, Err: fmt.Errorf("following the audit log: %w", err)}
	}
	return nil
}

// match applies --session.
func (o *logOptions) match(e audit.Entry) bool {
	if o.session == "" {
		return true
	}
	if ok, _ := path.Match(o.session, e.Session); ok {
		return true
	}
	return e.Session == o.session
}

// printer returns the function that prints one record to w.
func (o *logOptions) printer(w io.Writer) func(audit.Entry) error {
	if o.asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return func(e audit.Entry) error { return enc.Encode(e) }
	}
	return func(e audit.Entry) error {
		_, err := fmt.Fprintln(w, formatEntry(e))
		return err
	}
}

// formatEntry renders a record on one line: local time, session, tool,
// exit status, duration, the arguments (cut to about 100 characters) and
// the error, if any.
func formatEntry(e audit.Entry) string {
	exit := "-"
	if e.ExitCode != nil {
		exit = strconv.Itoa(*e.ExitCode)
	}
	line := fmt.Sprintf("%s  %-14s %-12s exit %-3s %7s  %s",
		e.Time.Local().Format("2006-01-02 15:04:05.000"),
		clip(oneLine(e.Session), 30), clip(oneLine(e.Tool), 30), exit,
		formatDuration(e.DurationMS), clip(shortArgs(e.Arguments), 100))
	if e.Error != "" {
		line += "  error: " + clip(oneLine(e.Error), 200)
	}
	return strings.TrimRight(line, " ")
}

func formatDuration(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1fs", float64(ms)/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// shortArgs renders arguments as key=value pairs, the keys that say most
// first (command, path, code, pattern), strings quoted when they hold
// blanks or quotes.
func shortArgs(a any) string {
	m, ok := a.(map[string]any)
	if !ok {
		if a == nil {
			return ""
		}
		return argValue(a)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	first := []string{"command", "path", "code", "pattern", "id"}
	slices.SortFunc(keys, func(x, y string) int {
		ix, iy := slices.Index(first, x), slices.Index(first, y)
		switch {
		case ix >= 0 && iy >= 0:
			return ix - iy
		case ix >= 0:
			return -1
		case iy >= 0:
			return 1
		}
		return strings.Compare(x, y)
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(oneLine(k) + "=" + argValue(m[k]))
		if b.Len() > 200 {
			break
		}
	}
	return b.String()
}

func argValue(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" || strings.ContainsAny(x, " \t\n\r\"'`\\") || !utf8.ValidString(x) {
			return strconv.Quote(clip(x, 200))
		}
		return oneLine(x)
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return oneLine(string(b))
}

// oneLine replaces control characters (newlines, escapes) with spaces,
// and shows bidi controls as termsafe.Text does (<U+202E>).
func oneLine(s string) string {
	return termsafe.Text(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD")))
}

// clip cuts s to n characters, marking the cut with "…".
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
