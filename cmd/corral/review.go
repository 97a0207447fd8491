package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/reexec"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/session"
)

// reviewTarget is the session a review verb works on and its layer.
type reviewTarget struct {
	name string
	dir  string
	l    *layer.Layer
}

// sessionLayer finds session name (default: the session the MCP server
// uses for the current directory, "dir:" + its path) and its layer.
func sessionLayer(g *globalOptions, name string) (*reviewTarget, error) {
	name, err := sessionOrDir(name)
	if err != nil {
		return nil, err
	}
	infos, err := stateManager(g).List()
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if in.Name != name {
			continue
		}
		l, err := layer.Open(filepath.Join(in.Dir, "layer"))
		if errors.Is(err, layer.ErrNoLayer) {
			return nil, fmt.Errorf("session %q has no layer: its workspace_mode is direct, so its commands wrote %s itself and there is nothing to review", name, orUnknown(in.Workdir))
		}
		if err != nil {
			return nil, err
		}
		return &reviewTarget{name: name, dir: in.Dir, l: l}, nil
	}
	return nil, fmt.Errorf("no session %q (corral sessions list shows them; --session names one)", name)
}

func orUnknown(s string) string {
	if s == "" {
		return "the working directory"
	}
	return s
}

// lock takes the session's command lock, saying so when a command runs.
func (t *reviewTarget) lock() (func(), error) {
	release, held, err := session.LockDir(t.dir, false)
	if err != nil {
		return nil, err
	}
	if !held {
		return release, nil
	}
	fmt.Fprintf(stderr, "corral: a command of session %q is running; waiting for it to end\n", t.name)
	release, _, err = session.LockDir(t.dir, true)
	return release, err
}

func newDiffCmd(g *globalOptions) *cobra.Command {
	var name string
	var stat bool
	cmd := &cobra.Command{
		Use:   "diff [--session S] [--stat] [PATH...]",
		Short: "Show what a review-mode session changed in the working directory",
		Long: `Show the changes a session (workspace_mode: review) holds in its layer, as
git diff shows them: unified diffs with 3 lines of context, new, deleted and
binary files, mode changes, symlinks; files over 2 MiB by their sizes, and
fifos, sockets and devices by what they are. PATHs (relative to the working
directory, or absolute inside it) limit it to themselves and what lies below.
The default session is the one the MCP server uses for the current directory.
What the session's commands chose cannot drive the terminal: paths are quoted
as git quotes them, and in the contents control characters other than tab
show in caret notation (ESC as ^[, CR as ^M), C1 and bidi controls as
<U+XXXX>, stray bytes as <XX>, as less shows them; corral apply writes the
exact bytes.`,
		RunE: func(c *cobra.Command, args []string) error {
			t, err := sessionLayer(g, name)
			if err != nil {
				return corralErr(err)
			}
			protected, own, err := protectedPaths(g)
			if err != nil {
				return corralErr(err)
			}
			color := term.IsTerminal(int(os.Stdout.Fd()))
			// Streamed from the layer: memory does not grow with the number
			// of changes.
			if _, err := layer.DiffLayer(os.Stdout, t.l, args, layer.DiffOptions{Stat: stat, Color: color, Protected: protected, Own: own}); err != nil {
				return corralErr(err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "session", "", "session (default: the MCP server's session of the current directory)")
	cmd.Flags().BoolVar(&stat, "stat", false, "print changed lines per file and a summary instead of the diff")
	return cmd
}

func newApplyCmd(g *globalOptions) *cobra.Command {
	var name string
	var overwrite, merge bool
	var include []string
	cmd := &cobra.Command{
		Use:   "apply [--session S] [--merge | --overwrite] [--include-risky PATH]... [PATH...]",
		Short: "Write a review-mode session's changes into the working directory",
		Long: `Write the changes a session (workspace_mode: review) holds into the working
directory, all of them or those at and below PATHs, and drop them from the
session's layer. Each file is replaced atomically. When a file changed in
the working directory since the session first saw it, nothing is applied
and the files are named. --merge merges such a file when both sides edited
it in different places (git merge-file, over the version git's index still
holds of it as the session first saw it) and applies the result; otherwise
merge by hand, then apply with --overwrite, or discard the session's version.
It waits for a running command of the session to end.

What would make the host run code once applied (git hooks and configuration
at any depth, gitfiles, .gitattributes, .envrc, shell start-up files,
.vscode, .idea and agents' settings) is held back: listed first, with why,
left in the session's layer, and applied only when named with
--include-risky PATH (a directory includes what lies below it). corral diff
lists the same paths at its top.`,
		RunE: func(c *cobra.Command, args []string) error {
			t, err := sessionLayer(g, name)
			if err != nil {
				return corralErr(err)
			}
			release, err := t.lock()
			if err != nil {
				return corralErr(err)
			}
			defer release()
			if err := t.checkUsers("apply"); err != nil {
				return corralErr(err)
			}
			if merge && overwrite {
				return corralErr(fmt.Errorf("%w: --merge and --overwrite: choose one", sandbox.ErrBadRequest))
			}
			protected, own, err := protectedPaths(g)
			if err != nil {
				return corralErr(err)
			}
			res, err := layer.Apply(t.l, args, layer.ApplyOptions{Logger: newLogger(g), Overwrite: overwrite, Merge: merge, IncludeRisky: include, Protected: protected, Own: own})
			warnUnmatched(stderr, "corral apply", include, res.Held, res.Included)
			printHeld(stderr, "corral apply", res.Held, res.HeldTotal)
			if errors.Is(err, layer.ErrConflict) {
				return corralErr(conflictMessage(t, res, merge))
			}
			if err != nil {
				return corralErr(err)
			}
			if res.AppliedTotal == 0 {
				fmt.Fprintln(stderr, "corral: nothing to apply")
				return nil
			}
			for _, p := range res.Merged {
				fmt.Fprintf(stderr, "corral: merged %s (the working directory's and the session's changes)\n", handback.QuotePath(p))
			}
			if more := res.MergedTotal - len(res.Merged); more > 0 {
				fmt.Fprintf(stderr, "corral: merged %d more\n", more)
			}
			fmt.Fprintf(stderr, "corral: applied %d change%s to %s\n", res.AppliedTotal, plural(res.AppliedTotal), t.l.Lower)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "session", "", "session (default: the MCP server's session of the current directory)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "apply over files changed in the working directory since the session saw them (after merging them by hand)")
	cmd.Flags().BoolVar(&merge, "merge", false, "merge files changed both in the working directory and in the session, where git can (three-way, git merge-file)")
	cmd.Flags().StringArrayVar(&include, "include-risky", nil, "apply this held-back PATH too (as listed; repeatable)")
	return cmd
}

// conflictMessage names the conflicting paths and what a person can do;
// after --merge (merged), why each could not be merged.
func conflictMessage(t *reviewTarget, res layer.ApplyResult, merged bool) error {
	paths := res.Conflicts
	n := max(res.ConflictsTotal, len(paths))
	var b strings.Builder
	fmt.Fprintf(&b, "nothing applied: %d path%s changed in %s since session %q first saw %s, and the session changed %s too:\n",
		n, plural(n), t.l.Lower, t.name, them(n), them(n))
	for _, p := range paths {
		if why, ok := res.Unmerged[p]; ok {
			fmt.Fprintf(&b, "  %s (no merge: %s)\n", handback.QuotePath(p), why)
			continue
		}
		fmt.Fprintf(&b, "  %s\n", handback.QuotePath(p))
	}
	if more := n - len(paths); more > 0 {
		fmt.Fprintf(&b, "  and %d more (corral apply PATH checks fewer at a time)\n", more)
	}
	sess := ""
	if t.name != "" {
		sess = fmt.Sprintf(" --session %q", t.name)
	}
	if len(res.Merged) > 0 {
		q := make([]string, len(res.Merged))
		for i, p := range res.Merged {
			q[i] = handback.QuotePath(p)
		}
		merged := strings.Join(q, ", ")
		if more := res.MergedTotal - len(res.Merged); more > 0 {
			merged += fmt.Sprintf(" and %d more", more)
		}
		fmt.Fprintf(&b, "(%s would merge cleanly.)\n", merged)
	}
	if !merged {
		fmt.Fprintf(&b, "Where both sides edited a file in different places, corral apply%s --merge merges it (git merge-file).\n", sess)
	}
	fmt.Fprintf(&b, "For each: merge by hand (corral diff%s PATH shows the session's change), then corral apply%s --overwrite PATH;\n", sess, sess)
	fmt.Fprintf(&b, "or keep the working directory's version: corral discard%s PATH", sess)
	return errors.New(b.String())
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func newDiscardCmd(g *globalOptions) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "discard [--session S] [PATH...]",
		Short: "Drop a review-mode session's changes",
		Long: `Drop the changes a session (workspace_mode: review) holds, all of them or
those at and below PATHs: the session sees the working directory's files
there again. The working directory is not touched.`,
		RunE: func(c *cobra.Command, args []string) error {
			t, err := sessionLayer(g, name)
			if err != nil {
				return corralErr(err)
			}
			release, err := t.lock()
			if err != nil {
				return corralErr(err)
			}
			defer release()
			if err := t.checkUsers("discard"); err != nil {
				return corralErr(err)
			}
			// Counted, not kept: a layer may hold any number of changes.
			n := 0
			for _, err := range layer.Walk(t.l, args) {
				if err != nil {
					return corralErr(err)
				}
				n++
			}
			if n == 0 {
				fmt.Fprintln(stderr, "corral: nothing to discard")
				return nil
			}
			if err := layer.Discard(t.l, args); err != nil {
				return corralErr(err)
			}
			fmt.Fprintf(stderr, "corral: discarded %d change%s\n", n, plural(n))
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "session", "", "session (default: the MCP server's session of the current directory)")
	return cmd
}

// supervisors are programs that hold a sandbox's namespaces without
// writing its files (bwrap's monitor, a container's init: Docker's
// docker-init or tini; Podman's catatonit, which it binds into the
// container at /run/podman-init, libpod's define.ContainerInitPath).
var supervisors = map[string]bool{"bwrap": true, "docker-init": true, "tini": true, "podman-init": true, "catatonit": true}

// checkUsers refuses verb while a process other than corral's own helpers
// still has the session's layer mounted: a background process of the
// session (the MCP server's), which would go on writing through a mount
// whose layer apply or discard changes beneath it (overlayfs leaves that
// undefined, and such writes can be lost). corral's helpers (the layer's
// holder, the file server) are replaced at the next command.
func (t *reviewTarget) checkUsers(verb string) error {
	ps, err := layer.Users(t.l)
	if err != nil {
		return fmt.Errorf("finding the processes that use the session's layer: %w", err)
	}
	var busy []string
	// A background command's sandbox counts from its start, before its
	// processes have mounted the layer: LockDir waited for any still
	// starting to be listed.
	for _, b := range session.Background(t.dir) {
		busy = append(busy, fmt.Sprintf("  pid %d: %s (background %s)", b.PID, clip(oneLine(b.Command), 80), b.ID))
	}
	for _, p := range ps {
		if len(p.Args) == 0 || supervisors[filepath.Base(p.Args[0])] {
			continue
		}
		if _, _, helper := reexec.Lookup(p.Args, environOf(p.PID)); helper {
			continue
		}
		busy = append(busy, fmt.Sprintf("  pid %d: %s", p.PID, clip(oneLine(strings.Join(p.Args, " ")), 80)))
	}
	if len(busy) == 0 {
		return nil
	}
	if len(busy) > 10 {
		busy = append(busy[:10], fmt.Sprintf("  and %d more", len(busy)-10))
	}
	return fmt.Errorf("nothing done: session %q has processes running that still see its layer, and would go on writing through it while %s changes it (what they write could be lost):\n%s\nStop them first (the agent's bash_kill, or end the session's MCP server), then %s again",
		t.name, verb, strings.Join(busy, "\n"), verb)
}

// environOf returns a getenv over /proc/PID/environ (empty when it
// cannot be read).
func environOf(pid int) func(string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return func(k string) string { return env[k] }
}
