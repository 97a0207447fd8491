package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corralhq/corral/backend/registry"
	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/mcpserver"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/wscopy"
)

func newCpCmd(g *globalOptions) *cobra.Command {
	var sess string
	var include []string
	cmd := &cobra.Command{
		Use:   "cp [--session NAME] SRC DST",
		Short: "Copy files between the host and a session's workspace",
		Long: `cp copies a file or a directory (recursively) between the host and a
session's workspace, as cp -a or docker cp: into DST when it is a
directory, else as DST. One side is SESSION:PATH, or :PATH for the session
of --session (default: the one corral mcp, diff and apply use for the
current directory, "dir:" + its path; a name with a colon, such as that
one, can only be given this way); PATH is relative to the session's
current directory (where its next command starts, as for the MCP file
tools), or absolute below its working directory. A path starting with / or . is
the host's (symlinks on the way to it are the host's own and followed).

Modes and times are kept, symlinks are copied as symlinks and never
followed; archive entries with "..", absolute names, entries below a
symlink, hard links and devices are refused. On kubernetes the files go
through the session's pod (which lives as long as the corral that made
it, such as corral mcp).

What comes out of a workspace is checked on the host: an entry outside
the path asked for refuses the whole copy, and what would make the host
run code when you use the project (git hooks and configuration at any
depth, gitfiles, .gitattributes, .envrc, shell start-up files, .vscode,
.idea and agents' settings, the protected paths) is held back: listed
first, with why, and written only when named with --include-risky PATH
(as listed; a directory includes what lies below it).

  corral cp ./src demo:src          # host ./src -> the workspace's src
  corral cp --session demo :out .   # the workspace's out -> ./out`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			def, err := sessionOrDir(sess)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			src, dst, err := wscopy.ParsePair(args[0], args[1], def)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			name := src.Session + dst.Session
			w, protected, own, closeWS, err := openWorkspace(c.Context(), g, name)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			defer closeWS()
			var res wscopy.Result
			if dst.Session != "" {
				res, err = wscopy.CopyIn(c.Context(), w, src.Path, dst.Path)
			} else {
				res, err = wscopy.CopyOut(c.Context(), w, src.Path, dst.Path, wscopy.Out{IncludeRisky: include, Protected: protected, Own: own})
			}
			if err != nil {
				return &exitError{Code: 1, Err: err}
			}
			warnUnmatched(stderr, "corral cp", include, res.Held, res.Included)
			printHeld(stderr, "corral cp", res.Held, len(res.Held))
			fmt.Fprintf(stderr, "corral cp: %s -> %s\n", copyCounts(res.Files, res.Bytes, res.Dirs, res.Symlinks), res.Into)
			if res.Files+res.Dirs+res.Symlinks == 0 && len(res.Held) > 0 {
				// A script's `corral cp S:x y && use y` must not go on:
				// all it asked for was held back.
				return &exitError{Code: 1, Err: errors.New("nothing was copied: what was asked for was held back (listed above); --include-risky PATH writes it")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&sess, "session", "", `the session of a :PATH argument (default: "dir:" + the working directory)`)
	cmd.Flags().StringArrayVar(&include, "include-risky", nil, "write this held-back PATH too (as listed; repeatable)")
	return cmd
}

// warnUnmatched says which --include-risky paths named no risky path of
// this hand-back (held or written): a typo, or a path not as listed
// (relative to DEST's parent for cp, to DIR for sync, to the working
// directory for apply), would otherwise pass silently.
func warnUnmatched(w io.Writer, cmd string, include []string, held, included []handback.Risk) {
	for _, inc := range include {
		if strings.TrimSpace(inc) == "" {
			fmt.Fprintf(w, "%s: --include-risky with an empty path names nothing\n", cmd)
			continue
		}
		p := handback.Policy{Include: []string{inc}}
		matched := false
		for _, r := range append(slices.Clip(held), included...) {
			if p.Included(r.Path) {
				matched = true
				break
			}
		}
		if !matched {
			fmt.Fprintf(w, "%s: --include-risky %s names no risky path here (name them as listed)\n", cmd, handback.QuotePath(inc))
		}
	}
}

// printHeld lists what a hand-back held back, with why and how to have
// it written, before the command's summary; total counts them all when
// held lists only the first (layer.ListMax).
func printHeld(w io.Writer, cmd string, held []handback.Risk, total int) {
	total = max(total, len(held))
	if total == 0 {
		return
	}
	fmt.Fprintf(w, "%s: held back %d risky path%s (not written; to write one, name it with --include-risky PATH):\n", cmd, total, plural(total))
	for _, r := range held {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if more := total - len(held); more > 0 {
		fmt.Fprintf(w, "  and %d more\n", more)
	}
}

func newSyncCmd(g *globalOptions) *cobra.Command {
	var sess string
	var pull, del bool
	var include []string
	cmd := &cobra.Command{
		Use:   "sync [--session NAME] [--pull] [--delete] DIR",
		Short: "Push a directory into a session's workspace, or pull the workspace back",
		Long: `sync copies the contents of the host directory DIR into the top of the
session's workspace (its working directory), or with --pull the
workspace's contents into DIR. Nothing is deleted unless --delete: then
what the receiving side has and the sending side lacks is removed, once
the whole stream has arrived intact (never the workspace's protected
paths). A pull is checked on the host as corral cp's way out is: risky
paths are held back unless named with --include-risky PATH (relative
to DIR), and never deleted. The session is --session, by default the one corral mcp uses for
the current directory ("dir:" + its path). Same rules as corral cp
otherwise. Note that DIR's contents land at the workspace's top, not in a
directory named after DIR (corral cp ./DIR S:DIR copies the directory).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name, err := sessionOrDir(sess)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			w, protected, own, closeWS, err := openWorkspace(c.Context(), g, name)
			if err != nil {
				return &exitError{Code: sandbox.ExitCorralError, Err: err}
			}
			defer closeWS()
			res, err := wscopy.Sync(c.Context(), w, args[0], pull, del, wscopy.Out{IncludeRisky: include, Protected: protected, Own: own})
			if err != nil {
				return &exitError{Code: 1, Err: err}
			}
			warnUnmatched(stderr, "corral sync", include, res.Held, res.Included)
			printHeld(stderr, "corral sync", res.Held, len(res.Held))
			fmt.Fprintf(stderr, "corral sync: %s, %d deleted -> %s\n", copyCounts(res.Files, res.Bytes, res.Dirs, res.Symlinks), len(res.Deleted), res.Into)
			return nil
		},
	}
	cmd.Flags().StringVar(&sess, "session", "", `the session (default: "dir:" + the working directory)`)
	cmd.Flags().BoolVar(&pull, "pull", false, "bring the workspace back into DIR")
	cmd.Flags().BoolVar(&del, "delete", false, "delete what the sending side lacks")
	cmd.Flags().StringArrayVar(&include, "include-risky", nil, "with --pull, write this held-back PATH too (relative to DIR; repeatable)")
	return cmd
}

// sessionOrDir returns name, or when it is "" the session corral mcp,
// diff and apply use for the current directory (mcpserver.DirSessionName).
func sessionOrDir(name string) (string, error) {
	if name != "" {
		return name, nil
	}
	wd, err := startdir.Get()
	if err != nil {
		return "", fmt.Errorf("finding the current directory: %w", err)
	}
	return mcpserver.DirSessionName(wd), nil
}

// openWorkspace finds session name's workspace: its working directory on
// the host, or its pod on kubernetes (the backend it last ran with),
// through the Host's own kubernetes engine. It returns the Host's
// protected_paths setting too (nil when unset: sandbox.DefaultProtected
// applies), which a hand-back holds back as risky. Call done when the
// copy is over: it closes the Host.
func openWorkspace(ctx context.Context, g *globalOptions, name string) (w *wscopy.Workspace, protected, own []string, done func(), err error) {
	h, err := g.openHost(nil, newLogger(g))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	st, err := h.Settings()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	infos, err := h.Manager().List()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	for _, in := range infos {
		if in.Name != name {
			continue
		}
		// A backend that keeps the workspace away from the host (a pod)
		// says where (registry.Driver.Workspace); otherwise it is the
		// session's working directory on the host.
		d, _ := registry.Lookup(in.Backend)
		if d == nil || d.Workspace == nil {
			if in.Workdir == "" {
				return nil, nil, nil, nil, fmt.Errorf("session %s has no working directory on record; run a command in it first", name)
			}
			// A review-mode session's files are its layer over the working
			// directory: a copy of the directory itself would write the
			// project past review, read what the session does not see,
			// and let sync --delete remove the project's own files.
			if _, lerr := layer.Open(filepath.Join(in.Dir, "layer")); !errors.Is(lerr, layer.ErrNoLayer) {
				return nil, nil, nil, nil, fmt.Errorf("session %s is in review mode (workspace_mode: review): cp and sync would read and write %s itself, past the layer that holds the session's changes, so they refuse review-mode sessions; copy with the session's own commands or file tools (corral run --session %s), or use a session in direct mode", name, in.Workdir, name)
			}
			return &wscopy.Workspace{Session: name, Root: in.Workdir, Cwd: in.Cwd}, st.ProtectedPaths, h.OwnPaths(), func() { h.Close() }, nil
		}
		e, err := h.Engine(d.Name)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		rem, err := d.Workspace(ctx, e, st, name)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		return &wscopy.Workspace{Session: name, Root: rem.Root(), Cwd: in.Cwd, Remote: rem}, st.ProtectedPaths, h.OwnPaths(), func() { h.Close() }, nil
	}
	return nil, nil, nil, nil, fmt.Errorf("no session %q (corral sessions list shows them; a session exists once a command ran in it): start it with `corral run --session %s -- true`", name, shellWord(name))
}

// protectedPaths returns the setting protected_paths as the Host reads
// it, which a hand-back holds back as risky: nil when unset
// (sandbox.DefaultProtected applies); and corral's own files and
// directories (Host.OwnPaths), which a hand-back never writes.
func protectedPaths(g *globalOptions) (protected, own []string, err error) {
	h, err := g.openHost(nil, newLogger(g))
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	st, err := h.Settings()
	if err != nil {
		return nil, nil, err
	}
	return st.ProtectedPaths, h.OwnPaths(), nil
}

// copyCounts is the summary line's counts ("1 file (3 bytes), 2
// directories, 0 symlinks"), each noun in the number it counts: "1 files"
// was the first thing a new user's corral cp printed.
func copyCounts(files int, bytes int64, dirs, symlinks int) string {
	return fmt.Sprintf("%s (%d byte%s), %s, %s",
		count(files, "file", "files"), bytes, plural(int(min(bytes, 2))),
		count(dirs, "directory", "directories"), count(symlinks, "symlink", "symlinks"))
}

// count is n with the noun in its number: one before many.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
