package docker

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
)

// quarantine moves out of c's workspace the protected paths that were not
// there when the container started (those are bound read-only) and have
// appeared since: after every command, as the bwrap backend does after
// every sandbox. They go to Options.QuarantineDir/<time>-<n>/<path with
// '/' as '_'> (or are removed when that is unset or on another file
// system). It returns, for the result's warnings, one line for all it held
// (handback.HeldNotice) and one per path it could not.
//
// The scan is hostview.FindProtected's, bounded in depth and breadth; a path
// reached through a symlink is not moved (the link may lead out of the
// workspace) but named in a warning.
func (e *Engine) quarantine(c *ctr) []string {
	if !c.ws.Writable || len(c.patterns) == 0 {
		return nil
	}
	if c.review != nil {
		return e.quarantineReview(c)
	}
	found, truncated, serr := hostview.FindProtectedErr(c.ws.Host, c.patterns)
	var notes []string
	switch {
	case serr != nil:
		// A passing cause (too many open files), not the tree's size:
		// the next command's scan (scanCut) looks again first.
		notes = append(notes, scanFailedNote(c.ws.Host, serr))
	case truncated:
		// What the scan did not reach is not checked; the next command is
		// refused (scanCut).
		notes = append(notes, hostview.ScanCutWarning(c.ws.Host, true))
	}
	var dest string
	var held []handback.Held
	var wsRoot *os.Root
	defer func() {
		if wsRoot != nil {
			wsRoot.Close()
		}
	}()
	for _, p := range found {
		if !p.Exists || slices.Contains(c.protected, p.Rel) {
			continue
		}
		st, err := os.Lstat(p.Path)
		if err != nil || (p.NotDir && st.IsDir()) {
			continue
		}
		if len(p.Links) > 0 {
			notes = append(notes, fmt.Sprintf("%s appeared in the workspace through a symlink; it is a protected path (programs on the host run it later): check it", termsafe.Path(p.Rel)))
			continue
		}
		if dest == "" && e.opts.QuarantineDir != "" {
			d := filepath.Join(e.opts.QuarantineDir, fmt.Sprintf("%s-%d", time.Now().UTC().Format("20060102T150405Z"), time.Now().UnixNano()%1e6))
			if os.MkdirAll(d, 0o700) == nil {
				dest = d
			}
		}
		// A git configuration: its safe part is written back once it
		// is out, through a root that no symlink leads out of.
		var cfg []byte
		if handback.IsGitConfigPattern(p.Pattern) && st.Mode().IsRegular() {
			if wsRoot == nil {
				wsRoot, _ = os.OpenRoot(c.ws.Host)
			}
			if wsRoot != nil {
				cfg = handback.ReadGitConfig(wsRoot, filepath.FromSlash(p.Rel))
			}
			if c.ownWriteBack(p.Rel, cfg) {
				continue
			}
		}
		where := "removed"
		moved := false
		if dest != "" {
			target := filepath.Join(dest, strings.ReplaceAll(p.Rel, "/", "_"))
			if os.Rename(p.Path, target) == nil {
				where, moved = target, true
			}
		}
		if !moved {
			if err := os.RemoveAll(p.Path); err != nil {
				notes = append(notes, fmt.Sprintf("%s is a protected path the command made and it could not be removed: %v", termsafe.Path(p.Rel), err))
				continue
			}
		}
		e.log.Info("docker.protected.quarantined", "container", c.name, "path", p.Rel, "to", where)
		kept := ""
		if cfg != nil {
			var written []byte
			kept, written = handback.WriteBackGitConfigContent(wsRoot, filepath.FromSlash(p.Rel), cfg)
			c.noteWriteBack(p.Rel, written)
		}
		held = append(held, handback.Held{Path: p.Rel, Removed: !moved, Kept: strings.TrimPrefix(kept, "; ")})
	}
	// One line for all it held, not one per file (git init makes two).
	if n := handback.HeldNotice(held, dest); n != "" {
		notes = append(notes, n)
	}
	return notes
}

// ownWriteBack reports whether cfg, the git configuration at rel, is the
// one corral wrote back there and nothing has changed it since.
func (c *ctr) ownWriteBack(rel string, cfg []byte) bool {
	c.wroteBackMu.Lock()
	defer c.wroteBackMu.Unlock()
	h, ok := c.wroteBack[rel]
	return ok && cfg != nil && sha256.Sum256(cfg) == h
}

// noteWriteBack records what corral wrote back at rel (nothing: forgets
// it).
func (c *ctr) noteWriteBack(rel string, written []byte) {
	c.wroteBackMu.Lock()
	defer c.wroteBackMu.Unlock()
	if written == nil {
		delete(c.wroteBack, rel)
		return
	}
	if c.wroteBack == nil {
		c.wroteBack = map[string][32]byte{}
	}
	c.wroteBack[rel] = sha256.Sum256(written)
}

// scanCut refuses a command in the running container c when the scan of
// its workspace is cut short (hostview.FindProtected's bounds): a protected
// path a command made past them (a nested repository's configuration, a
// submodule's git directory or gitfile) is neither bound read-only (the
// mounts were fixed at the start) nor moved out after a command, so it
// would stay writable. It is the scan quarantine makes, once more before
// the command: a fraction of a millisecond for a small project, next to the
// tens of milliseconds of an exec.
func (e *Engine) scanCut(c *ctr) error {
	if !c.ws.Writable || len(c.patterns) == 0 {
		return nil
	}
	root := c.ws.Host
	if c.review != nil {
		// The overlay, as the container sees it.
		root = c.view + "/root" + c.ws.Target
	}
	_, truncated, err := hostview.FindProtectedErr(root, c.patterns)
	switch {
	case err != nil:
		// Not the tree's size: a passing cause, the caller may retry.
		return sandbox.NotStarted(fmt.Errorf("%w: looking for protected paths in %s: %w", sandbox.ErrUnavailable, c.ws.Host, err))
	case truncated:
		return hostview.ScanCutError(c.ws.Host, true)
	}
	return nil
}

// scanFailedNote says that the check after a command could not finish for
// a passing cause (hostview.FindProtectedErr's error).
func scanFailedNote(root string, err error) string {
	return fmt.Sprintf("the check for protected paths after the command could not read all of %s (%v, which passes by itself); what the command made there at a protected path is moved out after the next command instead", root, err)
}

// quarantineReview is quarantine for a review container (review.go): the
// scan is of the overlay, seen through the container's root, and a
// protected path is covered when it is a mount point in the container
// (each one the merged view held when the container was made is mounted
// read-only; one a command moved away from its mount, or made since, is
// not). Uncovered ones are removed from the layer through the overlay
// (beneath the container's root, following no symlink out of it: os.Root);
// a move to QuarantineDir would cross file systems.
func (e *Engine) quarantineReview(c *ctr) []string {
	if c.view == "" {
		return nil // never started
	}
	root := c.view + "/root" + c.ws.Target
	mounts, err := mountPoints(c.view)
	if err != nil {
		if _, serr := os.Stat(c.view); serr != nil {
			return nil // the container is gone: nothing of it can run later
		}
		e.log.Info("docker.protected.unchecked", "container", c.name, "error", err)
		return []string{fmt.Sprintf("the protected paths of the review layer could not be checked after the command: %v", err)}
	}
	found, truncated, serr := hostview.FindProtectedErr(root, c.patterns)
	var notes []string
	switch {
	case serr != nil:
		notes = append(notes, scanFailedNote(c.ws.Host, serr))
	case truncated:
		notes = append(notes, hostview.ScanCutWarning(c.ws.Host, true))
	}
	var croot *os.Root
	defer func() {
		if croot != nil {
			croot.Close()
		}
	}()
	for _, p := range found {
		if !p.Exists || mounts[filepath.Join(c.ws.Target, filepath.FromSlash(p.Rel))] {
			continue
		}
		st, err := os.Lstat(p.Path)
		if err != nil || (p.NotDir && st.IsDir()) {
			continue
		}
		if len(p.Links) > 0 {
			notes = append(notes, fmt.Sprintf("%s appeared in the workspace's review layer through a symlink; it is a protected path (programs on the host run it once applied): check it before corral apply", termsafe.Path(p.Rel)))
			continue
		}
		if croot == nil {
			if croot, err = os.OpenRoot(c.view + "/root"); err != nil {
				notes = append(notes, fmt.Sprintf("%s is a protected path the command made in the review layer and it could not be removed: %v", termsafe.Path(p.Rel), err))
				continue
			}
		}
		rel := filepath.Join(strings.TrimPrefix(c.ws.Target, "/"), filepath.FromSlash(p.Rel))
		var cfg []byte
		if handback.IsGitConfigPattern(p.Pattern) && st.Mode().IsRegular() {
			cfg = handback.ReadGitConfig(croot, rel)
			if c.ownWriteBack(p.Rel, cfg) {
				continue
			}
		}
		if err := croot.RemoveAll(rel); err != nil {
			notes = append(notes, fmt.Sprintf("%s is a protected path the command made in the review layer and it could not be removed: %v", termsafe.Path(p.Rel), err))
			continue
		}
		e.log.Info("docker.protected.quarantined", "container", c.name, "path", p.Rel, "to", "removed", "layer", c.review.l.Dir)
		kept := ""
		if cfg != nil {
			var written []byte
			kept, written = handback.WriteBackGitConfigContent(croot, rel, cfg)
			c.noteWriteBack(p.Rel, written)
		}
		notes = append(notes, fmt.Sprintf("%s is a protected path (programs on the host run it later) that the command made in the review layer; it was removed%s", termsafe.Path(p.Rel), kept))
	}
	return notes
}
