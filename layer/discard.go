package layer

import (
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// discardItem is what Discard's spool keeps of a change it drops.
type discardItem struct {
	Path    string `json:"p"`
	Kind    Kind   `json:"k"`
	NewDir  bool   `json:"d,omitempty"` // the layer's side is a directory
	OldMode uint32 `json:"m,omitempty"` // Lower's permission bits
}

// Discard drops the layer's changes selected by paths (as in Changes;
// none selects all): the session sees Lower's entries there again. Lower
// is not touched. It raises the generation. Like Apply, it keeps what it
// walked in a spool file, not in memory, and changes the layer only once
// the walk is over.
func Discard(l *Layer, paths []string) error {
	if err := l.finishPending(nil); err != nil {
		return err
	}
	sel, err := l.selection(paths)
	if err != nil {
		return err
	}
	if err := l.newSpoolDir(); err != nil {
		return err
	}
	defer os.RemoveAll(l.spoolDir())
	list := filepath.Join(l.spoolDir(), "discard")
	w, err := createSpool(list)
	if err != nil {
		return err
	}
	err = l.choose(sel, func(ch Change) error {
		it := discardItem{Path: ch.Path, Kind: ch.Kind, NewDir: ch.New != nil && ch.New.Type == "dir"}
		if ch.Old != nil {
			it.OldMode = ch.Old.Mode
		}
		return w.put(it)
	})
	if cerr := w.close(false); err == nil {
		err = cerr
	}
	if err != nil || w.n == 0 {
		return err
	}
	s, err := l.open()
	if err != nil {
		return err
	}
	defer s.close()
	touchedPath := filepath.Join(l.spoolDir(), "touched")
	touched, err := createSpool(touchedPath)
	if err != nil {
		return err
	}
	gone := "" // removed whole from upper: nothing below is left to do
	err = readSpool(list, false, func(it discardItem) error {
		if gone != "" && isUnder(it.Path, gone) {
			return nil
		}
		gone = ""
		if err := touched.put(provenItem{Path: it.Path}); err != nil {
			return err
		}
		if it.Kind == Modified && it.NewDir {
			return s.chmod(s.up, it.Path, it.OldMode)
		}
		if it.Kind != Deleted {
			if err := s.up.removeAll(it.Path); err != nil {
				return err
			}
			gone = it.Path
		} else if err := s.unwhiteout(it.Path); err != nil {
			return err
		}
		if it.Kind == Added {
			return nil
		}
		hidden, err := s.hidden(it.Path)
		if err != nil {
			return err
		}
		if hidden { // an opaque directory above: Lower's entry shows only as a copy
			if err := s.copyIn(it.Path); err != nil {
				return err
			}
			gone = it.Path
		}
		return nil
	})
	if cerr := touched.close(false); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = s.prune(func(fn func(provenItem) error) error { return readSpool(touchedPath, false, fn) })
	if err != nil {
		return err
	}
	return l.Bump()
}

// prune removes from upper what no longer differs from Lower among the
// paths items yields (in path order) and the directories above them,
// repeating until nothing more goes: a whiteout of what Lower no longer
// has, a file or symlink identical to Lower's, an empty directory like
// Lower's; an opaque directory that hides nothing of Lower (Lower's
// entries all have one in upper) stops being opaque, its subdirectories
// that lie over Lower's becoming opaque in its stead (overlayfs.rst:
// below an opaque directory lower layers are not looked up). Nothing is
// removed below an opaque directory, where removing would hide Lower's
// entry instead of showing it.
//
// Known items are files the caller knows Lower and upper hold alike
// (what the apply just wrote from upper): they are not read again, and
// are removed first, in parallel (unlinkKnown). Then each path is looked
// at after what lies below it (a directory's emptied entries before the
// directory), with a stack of the directories above the current path:
// memory follows the depth, not the number of paths.
func (s *trees) prune(items func(func(provenItem) error) error) error {
	s.opaqueAt = map[string]bool{}
	defer func() { s.opaqueAt = nil }()
	if err := s.unlinkKnown(items); err != nil {
		return err
	}
	type frame struct {
		path string
		skip bool // a known file unlinkKnown removed
	}
	for pass := 0; ; pass++ {
		// Only a directory that stopped being opaque can make entries below
		// it removable, and needs another pass.
		again := false
		var stack []frame // stack[i] lies at depth i+1, above the current path
		popTo := func(p string, all bool) error {
			for len(stack) > 0 {
				top := stack[len(stack)-1]
				if !all && isUnder(p, top.path) && p != top.path {
					return nil
				}
				stack = stack[:len(stack)-1]
				if top.skip {
					continue
				}
				c, err := s.pruneOne(top.path)
				if err != nil {
					return err
				}
				if c == unopaqued {
					again = true
					clear(s.opaqueAt)
				}
			}
			return nil
		}
		err := items(func(it provenItem) error {
			if err := popTo(it.Path, false); err != nil {
				return err
			}
			if anc := ancestors(it.Path); len(stack) < len(anc) {
				for _, a := range anc[len(stack):] {
					stack = append(stack, frame{path: a})
				}
			}
			skip := false
			// unlinkKnown removed a known file unless a directory above it was
			// opaque; after a pass that made one stop being opaque, what it
			// kept is looked at like any other.
			if it.Known && pass == 0 {
				hidden, err := s.hidden(it.Path)
				if err != nil {
					return err
				}
				skip = !hidden
			}
			stack = append(stack, frame{path: it.Path, skip: skip})
			return nil
		})
		if err == nil {
			err = popTo("", true)
		}
		if err != nil || !again {
			return err
		}
	}
}

// pruned is what pruneOne did.
type pruned int

const (
	kept pruned = iota
	removed
	unopaqued
)

// unlinkKnown removes from upper the known files of items that no opaque
// directory above keeps, in batches of one directory's (at most
// unlinkBatch names), several at a time: each unlink waits on the
// filesystem's journal, and waits in flight overlap.
func (s *trees) unlinkKnown(items func(func(provenItem) error) error) error {
	type batch struct {
		dir   string
		names []string
	}
	work := make(chan batch, pruneWorkers)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range pruneWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				fd, err := s.up.open(b.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
				if err == nil {
					for _, base := range b.names {
						if e := unix.Unlinkat(fd, base, 0); e != nil && !errors.Is(e, unix.ENOENT) {
							err = &os.PathError{Op: "remove", Path: s.up.abs(b.dir + "/" + base), Err: e}
							break
						}
					}
					unix.Close(fd)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	var cur batch
	flush := func() {
		if len(cur.names) > 0 {
			work <- cur
		}
		cur = batch{}
	}
	err := items(func(it provenItem) error {
		if !it.Known {
			return nil
		}
		hidden, err := s.hidden(it.Path)
		if err != nil || hidden {
			return err
		}
		dir, base := splitRel(it.Path)
		if dir != cur.dir || len(cur.names) >= unlinkBatch {
			flush()
			cur.dir = dir
		}
		cur.names = append(cur.names, base)
		return nil
	})
	flush()
	close(work)
	wg.Wait()
	return errors.Join(append([]error{err}, errs...)...)
}

const (
	// pruneWorkers is how many batches unlinkKnown removes at a time.
	pruneWorkers = 8
	// unlinkBatch bounds the names of one batch.
	unlinkBatch = 1024
)
