package layer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/sparse"
)

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// Logger receives the events layer.apply (with the time each phase
	// took: check, stage, write, finish), layer.apply.held,
	// layer.apply.conflict, layer.apply.recovered (a crashed apply's
	// journal finished: how many paths it proved written, how many not)
	// and layer.apply.old_journal; nil logs nowhere.
	Logger *slog.Logger
	// Overwrite applies over conflicting paths instead of stopping: a
	// person merged them by hand into the layer's version.
	Overwrite bool
	// Merge resolves a conflicting file that both sides modified with a
	// three-way merge (git merge-file) over the base git's index still
	// holds (see mergeFile): the merged file is applied. Conflicts it
	// cannot merge stop the apply as without it, with their reasons in
	// ApplyResult.Unmerged.
	Merge bool
	// IncludeRisky are paths (relative to Lower; a directory includes
	// what lies below it) that package handback calls risky and that the
	// person named to be applied anyway (the CLI's --include-risky).
	IncludeRisky []string
	// Protected are the protected-path patterns of the setting
	// protected_paths (nil when unset: handback's rules already hold what
	// sandbox.DefaultProtected names): a change at one is held back as
	// risky too.
	Protected []string
}

// ApplyResult is what Apply did. Its lists hold at most ListMax paths
// each, in path order (Changes' order); the counts beside them count all.
type ApplyResult struct {
	// Applied lists the paths (relative to Lower, slash-separated) written
	// into or removed from Lower; AppliedTotal counts them.
	Applied      []string
	AppliedTotal int
	// Conflicts lists the paths Lower changed since the layer was made
	// (with ErrConflict; then nothing was applied); ConflictsTotal counts
	// them.
	Conflicts      []string
	ConflictsTotal int
	// Merged lists the conflicting paths ApplyOptions.Merge merged (and
	// applied, unless other conflicts stopped the apply); MergedTotal
	// counts them.
	Merged      []string
	MergedTotal int
	// Unmerged says, for each listed conflict Merge tried and could not
	// merge, why (ErrNoMergeBase, ErrMergeConflict, ErrIndexStaged).
	Unmerged map[string]string
	// Held are the selected changes Apply did not write because they are
	// risky (GatePolicy: git hooks and configuration at any depth, shell
	// start-up files, editor settings...) and not included, with why; they
	// stay in the layer. HeldTotal counts them.
	Held      []handback.Risk
	HeldTotal int
	// Included are the risky changes applied because IncludeRisky named
	// them (past ListMax, still the first that each IncludeRisky path
	// names, so that a caller can tell a path that named none);
	// IncludedTotal counts them.
	Included      []handback.Risk
	IncludedTotal int
}

// ErrConflict means Lower changed, since the layer's base was recorded,
// at a path the layer changes too; Apply then writes nothing.
var ErrConflict = errors.New("the working directory changed since the session saw it")

// pendingPath is Apply's journal (see journal): what it is writing, so
// that a rerun after an interruption records in base.json and cleans from
// upper the paths it proves written, and removes its temporary files.
func (l *Layer) pendingPath() string { return filepath.Join(l.Dir, "apply.pending") }

// planPath is Apply's plan: the changes its check passed, one journal
// entry a line (with Done and the merge fields), read by its later
// passes instead of walking the layer again.
func (l *Layer) planPath() string { return filepath.Join(l.spoolDir(), "plan") }

// testHookAfterWrite runs between writing Lower and recording the
// result; a test makes it fail to stand for an interrupted apply.
var testHookAfterWrite func() error

// testHookWrote runs after each change written into Lower (n counts the
// selected changes, path is the one written); a test blocks in it to be
// killed mid-apply.
var testHookWrote func(n int, path string)

// Apply writes the layer's changes selected by paths (as in Changes; none
// selects all) into Lower, then removes them from the layer and raises its
// generation. The directories a selected path needs that the layer adds
// are applied with it.
//
// It is all or nothing per call: every selected path is checked first.
// A path whose Lower entry differs from base.json (type, size, mtime,
// mode; a path base.json lacks that Lower now has) unless it already
// holds what the layer has, is a conflict: Apply returns ErrConflict,
// with the paths in ApplyResult.Conflicts, and writes nothing. A
// special file (fifo, socket, device) made in the layer is an error too,
// naming what it is.
// With ApplyOptions.Merge, a conflicting file both sides modified is
// merged with git where git still holds its base (mergeFile), and the
// merge is written to Lower and the layer; only what cannot be merged
// remains a conflict.
//
// Each file is written to a temporary file in its directory (named with
// a random token of this apply's), with the layer's mode, and renamed
// over the old one once every file is written and the filesystem synced
// (syncfs(2)); when the process is root, a new entry gets the owner of
// its directory and a replaced one keeps its owner. Symlinks are
// recreated as symlinks, never followed: every path is reached beneath
// Lower and upper by openat2(2) with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS
// (a chain of them past PATH_MAX). Files are copied and compared in a
// stream, whatever their size.
//
// Lower is written first and the layer cleaned after, with a journal in
// between (see journal): an interrupted Apply loses nothing, and the
// next Apply or Discard takes as done only the paths that hold exactly
// what the journal says was written (a file's SHA-256); every other
// path is checked against the base again, so a host edit made after a
// crash is a conflict, not overwritten. It removes only its own
// temporary files.
//
// Memory does not grow with the number of changes: the layer is walked
// once (Walk), checked against base.json read alongside in the same
// order, and what the later passes need (the plan, the journal, the
// merges, what was proven written) goes to files of the layer's
// directory, read back one entry at a time; only the lists of
// ApplyResult are kept, capped at ListMax.
//
// The caller keeps the session's commands from running meanwhile
// (overlayfs.rst: changing the layers under a live mount is undefined).
func Apply(l *Layer, paths []string, opts ApplyOptions) (ApplyResult, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var res ApplyResult
	t0 := time.Now()
	var phases []any // the time each phase took, for the log
	phase := func(name string) {
		phases = append(phases, slog.Duration(name, time.Since(t0)))
		t0 = time.Now()
	}
	if err := l.finishPending(log); err != nil {
		return res, err
	}
	sel, err := l.selection(paths)
	if err != nil {
		return res, err
	}
	if err := l.newSpoolDir(); err != nil {
		return res, err
	}
	defer os.RemoveAll(l.spoolDir())
	s, err := l.open()
	if err != nil {
		return res, err
	}
	defer s.close()

	// Check everything before writing anything.
	planned := 0
	err = l.withBase(func(base *baseReader) error {
		res = ApplyResult{}
		var err error
		if planned, err = l.check(s, sel, base, opts, &res); err != nil {
			return err
		}
		// Read to its end: an entry out of order past the last path looked
		// up (an older corral's order) would have been missed.
		for base.head != nil && err == nil {
			err = base.next()
		}
		return err
	})
	if err != nil {
		return res, err
	}
	if res.HeldTotal > 0 {
		log.Info("layer.apply.held", "lower", l.Lower, "paths", res.HeldTotal)
	}
	if res.ConflictsTotal > 0 {
		// Info: the error returned says it to the person (the CLI's
		// default log level, warn, printed it twice, once as a log line).
		log.Info("layer.apply.conflict", "lower", l.Lower, "paths", res.Conflicts, "total", res.ConflictsTotal)
		return res, fmt.Errorf("%w: %s", ErrConflict, listText(res.Conflicts, res.ConflictsTotal))
	}
	if planned == 0 {
		return res, nil
	}
	phase("check")

	// The journal names this apply's temporary files before the first is
	// made, so that a rerun after a crash removes them and nothing else.
	j, err := l.createJournal(newToken())
	if err != nil {
		return res, err
	}
	s.token = j.token
	if err := s.stage(l.planPath(), j); err != nil {
		j.w.close(false)
		s.unstage(l.pendingPath(), 0)
		return res, fmt.Errorf("writing the new files beside their targets: %w (nothing was replaced)", err)
	}
	// A merged file goes into the layer too, so that the layer and Lower
	// agree and the journal's pruning drops it (an interrupted apply
	// leaves the merge in the layer, and a rerun merges it again cleanly).
	if res.MergedTotal > 0 {
		err := readSpool(l.planPath(), false, func(e journalEntry) error {
			if !e.Merged {
				return nil
			}
			if err := s.writeUpper(e.Path, e.Merge, e.Mode); err != nil {
				return fmt.Errorf("recording the merge of %s in the layer: %w", handback.QuotePath(e.Path), err)
			}
			return nil
		})
		if err != nil {
			j.w.close(false)
			s.unstage(l.pendingPath(), 0)
			return res, fmt.Errorf("%w (nothing was replaced)", err)
		}
	}
	// The staged bytes reach the disk before any file is renamed into
	// place (after a power loss a rename must not leave an empty file):
	// one syncfs(2) per filesystem instead of an fsync(2) per file.
	if err := s.syncLower(); err != nil {
		j.w.close(false)
		s.unstage(l.pendingPath(), 0)
		return res, fmt.Errorf("syncing the new files: %w (nothing was replaced)", err)
	}
	// Now with the hash of every file, on disk: what proves, after a
	// crash, that a path holds what this apply wrote rather than a later
	// host edit.
	if err := j.w.close(true); err != nil {
		s.unstage(l.pendingPath(), 0)
		return res, err
	}
	phase("stage")
	var applied capped[string]
	i := 0
	err = l.readJournal(func(e journalEntry) error {
		i++
		applied.add(e.Path)
		if e.Done {
			return nil
		}
		if err := s.writeEntry(e); err != nil {
			s.unstage(l.pendingPath(), i-1)
			return fmt.Errorf("applying %s: %w (what was written so far stays in both; run apply again)", handback.QuotePath(e.Path), err)
		}
		if testHookWrote != nil {
			testHookWrote(i, e.Path)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if err := s.syncLower(); err != nil {
		return res, fmt.Errorf("syncing the working directory: %w (run apply again)", err)
	}
	phase("write")
	if testHookAfterWrite != nil {
		if err := testHookAfterWrite(); err != nil {
			return res, err
		}
	}
	if err := l.finish(s, j.token, l.readJournal, true, log); err != nil {
		return res, err
	}
	phase("finish")
	res.Applied, res.AppliedTotal = applied.items, applied.total
	log.Info("layer.apply", append([]any{"lower", l.Lower, "paths", res.AppliedTotal}, phases...)...)
	return res, nil
}

// listText names the paths of a capped list, and how many more there are.
func listText(paths []string, total int) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = handback.QuotePath(p)
	}
	s := strings.Join(q, ", ")
	if total > len(paths) {
		s += fmt.Sprintf(" and %d more", total-len(paths))
	}
	return s
}

// check is Apply's first pass: it walks the changes sel chooses (choose)
// with base read alongside, sorts out the risky ones (Held, Included),
// finds the conflicts, merges what ApplyOptions.Merge can (into files of
// the spool directory), and writes the plan: a journal entry for each
// change to write, with Done set where Lower already holds it. It
// returns how many changes the plan holds. A special file is an error.
func (l *Layer) check(s *trees, sel selection, base *baseReader, opts ApplyOptions, res *ApplyResult) (int, error) {
	plan, err := createSpool(l.planPath())
	if err != nil {
		return 0, err
	}
	defer plan.close(false)
	v, err := openMergedView(l.Lower, l.Upper())
	if err != nil {
		return 0, err
	}
	defer v.close()
	policy := GatePolicy(l.Lower, opts.Protected, opts.IncludeRisky)
	var held, included capped[handback.Risk]
	var conflicts, merged capped[string]
	named := make([]bool, len(opts.IncludeRisky)) // an IncludeRisky path that named a listed risk
	// The chosen paths above the current one, and the directories above
	// it already checked for a type Lower changed: paths come in order,
	// so each is a chain of the current path's ancestors.
	var chosen, checked []string
	merges := 0
	err = l.choose(sel, func(ch Change) error {
		if why, ok := v.risk(policy, ch); why != "" {
			r := handback.Risk{Path: ch.Path, Why: why}
			if !ok {
				held.add(r)
				return nil
			}
			keep := len(included.items) < ListMax
			for i, inc := range opts.IncludeRisky {
				if !named[i] && (handback.Policy{Include: []string{inc}}).Included(ch.Path) {
					named[i], keep = true, true
				}
			}
			included.total++
			if keep {
				included.items = append(included.items, r)
			}
		}
		if ch.New != nil && ch.New.Type == "other" {
			return fmt.Errorf("%s is %s (a special file): it cannot be applied; discard it", handback.QuotePath(ch.Path), article(ch.New.Special))
		}
		// A directory on the way that Lower turned into something else.
		chosen, checked = chainTo(chosen, ch.Path), chainTo(checked, ch.Path)
		for _, a := range ancestors(ch.Path) {
			if slices.Contains(checked, a) {
				continue
			}
			checked = append(checked, a)
			if slices.Contains(chosen, a) {
				continue
			}
			cur, err := s.lo.lstat(a)
			if err != nil {
				return err
			}
			if cur != nil && cur.Type != "dir" {
				conflicts.add(a) // even with Overwrite: the layer has no entry there to write
			}
		}
		chosen = append(chosen, ch.Path)
		e := planEntry(ch)
		cur, err := s.loStat(ch.Path)
		if err != nil {
			return err
		}
		was, err := base.find(ch.Path)
		if err != nil {
			return err
		}
		if !matchesBase(cur, was) {
			same, err := s.holds(ch, cur)
			switch {
			case err != nil:
				return err
			case same:
				e.Done = true
			case opts.Overwrite:
			case opts.Merge && mergeable(ch, cur):
				m, err := s.merge(l.Lower, ch, cur, was)
				if err == nil {
					e.Merged, e.Mode = true, m.mode
					if !m.fromUpper {
						merges++
						e.Merge = filepath.Join(l.spoolDir(), fmt.Sprintf("merge-%d", merges))
						if err := os.WriteFile(e.Merge, m.data, 0o600); err != nil {
							return err
						}
					}
					merged.add(ch.Path)
					break
				}
				if !errors.Is(err, ErrNoMergeBase) && !errors.Is(err, ErrMergeConflict) && !errors.Is(err, ErrIndexStaged) {
					return fmt.Errorf("merging %s: %w", handback.QuotePath(ch.Path), err)
				}
				if conflicts.total < ListMax {
					if res.Unmerged == nil {
						res.Unmerged = map[string]string{}
					}
					res.Unmerged[ch.Path] = err.Error()
				}
				conflicts.add(ch.Path)
			default:
				conflicts.add(ch.Path)
			}
		}
		return plan.put(e)
	})
	res.Held, res.HeldTotal = held.items, held.total
	res.Included, res.IncludedTotal = included.items, included.total
	res.Conflicts, res.ConflictsTotal = conflicts.items, conflicts.total
	res.Merged, res.MergedTotal = merged.items, merged.total
	if err != nil {
		return 0, err
	}
	return plan.n, plan.close(false)
}

// chainTo keeps of chain, a list of nested paths, those above p.
func chainTo(chain []string, p string) []string {
	for len(chain) > 0 && !(isUnder(p, chain[len(chain)-1]) && p != chain[len(chain)-1]) {
		chain = chain[:len(chain)-1]
	}
	return chain
}

// planEntry is the journal entry of change ch, without a file's hash
// (stage adds it).
func planEntry(ch Change) journalEntry {
	e := journalEntry{Path: ch.Path}
	if ch.New == nil {
		return e
	}
	e.Type, e.Mode = ch.New.Type, ch.New.Mode
	if e.Type == "symlink" {
		e.Mode, e.Target = 0, ch.New.Target
	}
	return e
}

// choose calls fn with the changes sel selects, in order, each after the
// changes that add a directory above it (applying a file needs its
// directory) when sel does not select those. It holds only the chain of
// such directories above the walk's place.
func (l *Layer) choose(sel selection, fn func(Change) error) error {
	type pending struct {
		ch     Change
		passed bool
	}
	var above []pending
	return l.walk(sel, func(ch Change) error {
		for len(above) > 0 && !(isUnder(ch.Path, above[len(above)-1].ch.Path) && ch.Path != above[len(above)-1].ch.Path) {
			above = above[:len(above)-1]
		}
		if sel.match(ch.Path) {
			for i := range above {
				if !above[i].passed {
					above[i].passed = true
					if err := fn(above[i].ch); err != nil {
						return err
					}
				}
			}
			return fn(ch)
		}
		if ch.New != nil && ch.New.Type == "dir" && ch.Kind != Modified {
			above = append(above, pending{ch: ch})
		}
		return nil
	})
}

// matchesBase says whether Lower's entry (nil: none) is as base.json
// recorded it (nil: not recorded). A directory's mtime and size change
// with any entry made in it, so only its type and mode count.
func matchesBase(cur *node, e *Entry) bool {
	if cur == nil || e == nil {
		return cur == nil && e == nil
	}
	t := cur.Type
	if t == "whiteout" {
		t = "other"
	}
	if t != e.Type {
		return false
	}
	switch t {
	case "dir":
		return cur.Mode&0o777 == e.Mode&0o777
	case "file":
		return cur.Size == e.Size && cur.MTime == e.MTime && cur.Mode&0o777 == e.Mode&0o777
	case "symlink":
		return cur.Target == e.Target
	}
	return true
}

// trees is a layer opened for writing: Lower and upper.
type trees struct {
	lo, up *tree
	root   bool   // the process is root: new entries get their directory's owner
	prefix string // the overlay xattr prefix the layer's mount uses

	// token names this apply's temporary files (journal.Token); temps
	// counts them.
	token string
	temps int
	// lodirs and updirs cache descriptors of Lower's and upper's
	// directories, so that a directory of many files is walked to once;
	// isDir holds paths of Lower known to be directories.
	lodirs, updirs *dirCache
	isDir          dirSet
	// opaqueAt caches, during prune, whether an upper directory is
	// opaque (nil: not cached), at most maxOpaqueCache of them.
	opaqueAt map[string]bool
}

// maxOpaqueCache bounds trees.opaqueAt: paths come in order, so the
// directories asked of recently are those asked of next.
const maxOpaqueCache = 4096

// dirSet is a set of directories of Lower known to exist: the chain
// above the path being written (a passes go through paths in order, so
// what lies beside the chain is not asked of again), so that it holds
// the depth of one path, whatever the number.
type dirSet []string

func (d dirSet) has(p string) bool { return slices.Contains(d, p) }

// add notes directory p, dropping what does not lie above it.
func (d *dirSet) add(p string) {
	s := *d
	for len(s) > 0 && !isUnder(p, s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	if len(s) == 0 || s[len(s)-1] != p {
		s = append(s, p)
	}
	*d = s
}

// forget drops rel and what lies below it ("": all).
func (d *dirSet) forget(rel string) {
	*d = slices.DeleteFunc(*d, func(p string) bool { return rel == "" || isUnder(p, rel) })
}

// mergedFile is a merge's result: the bytes (or, fromUpper, the layer's
// file as it is) and the permission bits.
type mergedFile struct {
	data      []byte
	fromUpper bool
	mode      uint32
}

// mergeMaxSize bounds, in bytes, the files a merge reads into memory
// (the host's, the layer's and git's base): larger ones stay conflicts.
const mergeMaxSize = 8 << 20

// writeUpper replaces the layer's file rel, atomically, keeping its
// owner, by the merge in spool file from (with mode); from "" changes
// only its mode (a merge that takes the layer's file as it is).
func (s *trees) writeUpper(rel, from string, mode uint32) error {
	cur, err := s.up.lstat(rel)
	if err != nil {
		return err
	}
	if cur == nil || cur.Type != "file" {
		return fmt.Errorf("%s is no longer a file in the layer", handback.QuotePath(rel))
	}
	if from == "" {
		return s.chmod(s.up, rel, mode)
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	pfd, base, err := s.up.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	uid, gid := -1, -1
	if s.root {
		uid, gid = int(cur.UID), int(cur.GID)
	}
	tmp := s.tempName()
	if _, err := copyTo(in, pfd, tmp, mode, uid, gid, true); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.up.abs(rel), Err: err}
	}
	return nil
}

// mergeable says whether a conflict can be merged: a file both sides
// modified (a type change, an addition or a deletion cannot).
func mergeable(ch Change, cur *node) bool {
	return ch.Kind == Modified && ch.ContentChanged && ch.Old != nil && ch.New != nil &&
		ch.Old.Type == "file" && ch.New.Type == "file" && cur != nil && cur.Type == "file"
}

// merge merges Lower's file cur and the layer's at ch.Path over the base
// e (mergeFile). The result keeps the host's permission bits unless the
// session changed them.
func (s *trees) merge(lower string, ch Change, cur *node, e *Entry) (mergedFile, error) {
	if repo, ok := gitIndexOf(ch.Path); ok {
		// A repository's index: the session's commits and staging, against
		// an index the host's git rewrote (git status refreshes it).
		if err := hostIndexClean(lower, repo); err != nil {
			return mergedFile{}, err
		}
		return mergedFile{fromUpper: true, mode: cur.Mode & 0o7777}, nil
	}
	if cur.Size > mergeMaxSize || ch.New.Size > mergeMaxSize {
		return mergedFile{}, fmt.Errorf("%w (over %d MiB: too large to merge)", ErrMergeConflict, mergeMaxSize>>20)
	}
	ours, err := s.lo.readFile(ch.Path)
	if err != nil {
		return mergedFile{}, err
	}
	theirs, err := s.up.readFile(ch.Path)
	if err != nil {
		return mergedFile{}, err
	}
	data, err := mergeFile(lower, ch.Path, e, ours, theirs)
	if err != nil {
		return mergedFile{}, err
	}
	mode := cur.Mode & 0o7777
	if ch.ModeChanged {
		mode = ch.New.Mode
	}
	return mergedFile{data: data, mode: mode}, nil
}

// owner returns the owner a new or replaced entry of Lower gets (-1: the
// process's): as root, a replaced entry's own, else its directory's.
func (s *trees) owner(cur *node, dir dirEnt, typ string) (int, int) {
	if !s.root {
		return -1, -1
	}
	if cur != nil && cur.Type == typ {
		return int(cur.UID), int(cur.GID)
	}
	return int(dir.uid), int(dir.gid)
}

// source opens what journal entry e writes at a file: the merge the
// plan names (e.Merge), or the layer's file; with the mode it gets.
func (s *trees) source(e journalEntry) (io.ReadCloser, uint32, error) {
	if e.Merge != "" {
		f, err := os.Open(e.Merge)
		return f, e.Mode, err
	}
	dir, base := splitRel(e.Path)
	d, err := s.updirs.get(dir)
	if err != nil {
		return nil, 0, err
	}
	fd, err := unix.Openat(d.fd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: s.up.abs(e.Path), Err: err}
	}
	return fdCloser(fd), e.Mode, nil
}

// fdCloser is an fdFile that closes.
type fdCloser int

func (f fdCloser) Read(b []byte) (int, error) { return fdFile(f).Read(b) }
func (f fdCloser) Close() error               { return unix.Close(int(f)) }

// stage reads the plan and writes the journal: each file's new content
// goes into a temporary file beside it in Lower (making the directories
// the layer adds on the way), named in its entry with its hash; it
// fsyncs nothing (Apply syncs each filesystem once). A file Lower
// already holds (Done), or whose way Lower blocks with another type (the
// layer turned a file into a directory), is only hashed here, and the
// latter written by writeEntry after the directory.
func (s *trees) stage(plan string, j *journalWriter) error {
	return readSpool(plan, false, func(e journalEntry) error {
		if e.Type == "file" {
			if err := s.stageFile(&e); err != nil {
				return err
			}
		}
		e.Merged = false
		e.Merge = "" // the merge is in the layer by the time writeEntry reads it
		return j.w.put(e)
	})
}

func (s *trees) stageFile(e *journalEntry) error {
	clear, err := s.clearWay(path.Dir(e.Path))
	if err != nil {
		return err
	}
	if e.Done || !clear {
		in, _, err := s.source(*e)
		if err != nil {
			return err
		}
		h := sha256.New()
		buf := copyBufs.Get().(*[]byte)
		_, err = io.CopyBuffer(h, in, *buf)
		copyBufs.Put(buf)
		in.Close()
		if err != nil {
			return err
		}
		e.SHA256 = hex.EncodeToString(h.Sum(nil))
		return nil
	}
	d, _, cur, err := s.placeOf(e.Path)
	if err != nil {
		return err
	}
	pfd := d.fd
	uid, gid := s.owner(cur, d, "file")
	in, mode, err := s.source(*e)
	if err != nil {
		return err
	}
	tmp := s.tempName()
	e.SHA256, err = copyTo(in, pfd, tmp, mode, uid, gid, false)
	in.Close()
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	e.Tmp = tmp
	return nil
}

// clearWay says whether every directory on the way to dir in Lower is a
// directory or missing (stage may make it), not another type.
func (s *trees) clearWay(dir string) (bool, error) {
	for d := dir; d != "." && d != ""; d = path.Dir(d) {
		if s.isDir.has(d) {
			return true, nil
		}
		cur, err := s.lo.lstat(d)
		if err != nil {
			return false, err
		}
		if cur == nil {
			continue
		}
		if cur.Type != "dir" {
			return false, nil
		}
		s.isDir.add(d)
		return true, nil
	}
	return true, nil
}

// splitRel splits slash path rel into its directory ("." at the top)
// and last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// dirCache keeps open descriptors of a tree's directories by path (at
// most maxCachedDirs; all are closed when it is full), with their owner.
// Whoever removes or replaces a directory forgets it first.
type dirCache struct {
	t     *tree
	flags int
	ents  map[string]dirEnt
	// devs, when not nil, gets one descriptor (a dup, O_RDONLY) per
	// filesystem the cached directories lie on, for syncfs(2).
	devs map[uint64]int
}

// dirEnt is a cached directory: its descriptor and owner.
type dirEnt struct {
	fd       int
	uid, gid uint32
}

func newDirCache(t *tree, flags int, devs bool) *dirCache {
	c := &dirCache{t: t, flags: flags, ents: map[string]dirEnt{}}
	if devs {
		c.devs = map[uint64]int{}
	}
	return c
}

// maxCachedDirs bounds the descriptors a dirCache keeps open.
const maxCachedDirs = 256

// get returns directory dir ("." the root), opened beneath the tree; the
// descriptor stays the cache's.
func (c *dirCache) get(dir string) (dirEnt, error) {
	if e, ok := c.ents[dir]; ok {
		return e, nil
	}
	if len(c.ents) >= maxCachedDirs {
		c.forget("")
	}
	fd, err := c.t.open(dir, c.flags|unix.O_DIRECTORY, 0)
	if err != nil {
		return dirEnt{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return dirEnt{}, err
	}
	if _, ok := c.devs[st.Dev]; !ok && c.devs != nil {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			unix.Close(fd)
			return dirEnt{}, err
		}
		c.devs[st.Dev] = d
	}
	e := dirEnt{fd: fd, uid: st.Uid, gid: st.Gid}
	c.ents[dir] = e
	return e, nil
}

// forget closes the cached descriptors of rel and below ("": all).
func (c *dirCache) forget(rel string) {
	for d, e := range c.ents {
		if rel == "" || d == rel || strings.HasPrefix(d, rel+"/") {
			unix.Close(e.fd)
			delete(c.ents, d)
		}
	}
}

func (c *dirCache) close() {
	c.forget("")
	for _, fd := range c.devs {
		unix.Close(fd)
	}
}

// dirFD returns Lower's directory dir from the cache, noted as a
// directory.
func (s *trees) dirFD(dir string) (dirEnt, error) {
	e, err := s.lodirs.get(dir)
	if err == nil {
		s.isDir.add(dir)
	}
	return e, err
}

// loStat is Lower's rel, looked up in its cached directory (nil when it
// or its directory is missing).
func (s *trees) loStat(rel string) (*node, error) {
	dir, base := splitRel(rel)
	e, err := s.lodirs.get(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return lstatAt(e.fd, base, s.lo.abs(rel))
}

// forget drops what is cached of Lower's rel and below ("": all), before
// rel is removed or replaced.
func (s *trees) forget(rel string) {
	s.lodirs.forget(rel)
	s.isDir.forget(rel)
}

// syncLower flushes the filesystems of the directories written so far
// (syncfs(2)): their files' data and the directories' entries.
func (s *trees) syncLower() error {
	for _, fd := range s.lodirs.devs {
		if err := unix.Syncfs(fd); err != nil {
			return &os.PathError{Op: "syncfs", Path: s.lo.root, Err: err}
		}
	}
	return nil
}

// lstatAt returns entry name of directory pfd (nil when missing); abs
// names it in errors.
// placeOf makes path's parent directory in Lower when missing and
// returns it, path's last component, and what Lower holds at path now
// (lstatAt): what staging and writing an entry both start from.
func (s *trees) placeOf(path string) (d dirEnt, base string, cur *node, err error) {
	dir, base := splitRel(path)
	if err := s.mkdirs(dir); err != nil {
		return dirEnt{}, "", nil, err
	}
	if d, err = s.dirFD(dir); err != nil {
		return dirEnt{}, "", nil, err
	}
	cur, err = lstatAt(d.fd, base, s.lo.abs(path))
	return d, base, cur, err
}

func lstatAt(pfd int, name, abs string) (*node, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "lstat", Path: abs, Err: err}
	}
	n := nodeOf(&st, "")
	if n.Type == "symlink" {
		buf := make([]byte, unix.PathMax)
		k, err := unix.Readlinkat(pfd, name, buf)
		if err != nil {
			return nil, &os.PathError{Op: "readlink", Path: abs, Err: err}
		}
		n.Target = string(buf[:k])
	}
	return n, nil
}

// unstage removes the temporary files the journal at p names from its
// entry from on (counting from 0): those staged and not renamed into
// place. A missing one is no error: it was renamed, or never made.
func (s *trees) unstage(p string, from int) {
	i := 0
	readJournalFile(p, func(e journalEntry) error {
		if i++; i > from && e.Tmp != "" {
			if d, err := s.dirFD(path.Dir(e.Path)); err == nil {
				unix.Unlinkat(d.fd, e.Tmp, 0)
			}
		}
		return nil
	})
}

func (l *Layer) open() (*trees, error) {
	up, err := openTree(l.Upper())
	if err != nil {
		return nil, fmt.Errorf("opening the layer: %w", err)
	}
	lo, err := openTree(l.Lower)
	if err != nil {
		up.close()
		return nil, fmt.Errorf("opening the working directory: %w", err)
	}
	lo.spill, up.spill = l.Dir, l.Dir
	return &trees{lo: lo, up: up, root: os.Geteuid() == 0, prefix: xattrPrefixes[0],
		lodirs: newDirCache(lo, unix.O_RDONLY, true), updirs: newDirCache(up, unix.O_PATH, false)}, nil
}

func (s *trees) close() {
	s.lodirs.close()
	s.updirs.close()
	s.lo.close()
	s.up.close()
}

// holds says whether Lower's entry cur already is what change ch makes
// it: an earlier, interrupted apply wrote it.
func (s *trees) holds(ch Change, cur *node) (bool, error) {
	if ch.New == nil {
		return cur == nil, nil
	}
	if cur == nil || cur.Type != ch.New.Type {
		return false, nil
	}
	switch cur.Type {
	case "dir":
		return cur.Mode == ch.New.Mode, nil
	case "symlink":
		return cur.Target == ch.New.Target, nil
	case "file":
		if cur.Mode != ch.New.Mode || cur.Size != ch.New.Size {
			return false, nil
		}
		return sameContent(s.lo, ch.Path, s.up, ch.Path)
	}
	return false, nil
}

// write makes Lower's entry at ch.Path what the layer has.
func (s *trees) write(ch Change) error {
	return s.writeEntry(planEntry(ch))
}

// writeEntry makes Lower's entry at e.Path what journal entry e says:
// its staged temporary file (e.Tmp) renamed into place, or the layer's
// entry written now.
func (s *trees) writeEntry(e journalEntry) error {
	if e.Type == "" {
		s.forget(e.Path)
		return s.lo.removeAll(e.Path)
	}
	d, base, cur, err := s.placeOf(e.Path)
	if err != nil {
		return err
	}
	pfd := d.fd
	uid, gid := s.owner(cur, d, e.Type)
	if e.Type == "dir" {
		if cur != nil && cur.Type == "dir" {
			return s.chmod(s.lo, e.Path, e.Mode)
		}
		if cur != nil {
			if err := s.lo.removeAll(e.Path); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, e.Mode&0o777); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.lo.abs(e.Path), Err: err}
		}
		if uid >= 0 {
			if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		s.isDir.add(e.Path)
		// The umask, a setgid parent or chown may have changed the bits.
		if now, err := lstatAt(pfd, base, s.lo.abs(e.Path)); err != nil || now == nil || now.Mode != e.Mode || uid >= 0 {
			return s.chmod(s.lo, e.Path, e.Mode)
		}
		return nil
	}
	if cur != nil && cur.Type == "dir" { // a type change: rename cannot replace a directory
		s.forget(e.Path)
		if err := s.lo.removeAll(e.Path); err != nil {
			return err
		}
	}
	tmp := ""
	switch e.Type {
	case "symlink":
		tmp = s.tempName()
		if err := unix.Symlinkat(e.Target, pfd, tmp); err != nil {
			return &os.PathError{Op: "symlink", Path: s.lo.abs(e.Path), Err: err}
		}
		if uid >= 0 {
			unix.Fchownat(pfd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
	case "file":
		if e.Tmp != "" {
			tmp = e.Tmp
			break
		}
		in, mode, err := s.source(e)
		if err != nil {
			return err
		}
		tmp = s.tempName()
		_, err = copyTo(in, pfd, tmp, mode, uid, gid, true)
		in.Close()
		if err != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return err
		}
	default:
		return fmt.Errorf("%s: cannot apply %s", handback.QuotePath(s.lo.abs(e.Path)), article(""))
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.lo.abs(e.Path), Err: err}
	}
	return nil
}

// article puts "a" or "an" before a special file's kind.
func article(kind string) string {
	if kind == "" {
		kind = "special file"
	}
	return "a " + kind
}

// copyTo copies in into a new file tmp of directory pfd, with mode and
// (uid >= 0) owner, fsynced when sync; it returns the SHA-256 (hex) of
// what it wrote. It streams: memory does not grow with the file. Blocks
// of zeros become holes (internal/sparse): a sparse file in the layer
// (`truncate -s 100G` takes no disk there) takes no more disk on the host.
func copyTo(in io.Reader, pfd int, tmp string, mode uint32, uid, gid int, sync bool) (string, error) {
	// Made with its final permission bits (it holds what the file will):
	// an fchmod(2) is needed only for bits mkdir's umask or chown take.
	dst, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	h := sha256.New()
	buf := copyBufs.Get().(*[]byte)
	sw := sparse.NewWriter(fdFile(dst))
	_, err = io.CopyBuffer(io.MultiWriter(sw, h), in, *buf)
	copyBufs.Put(buf)
	if err == nil {
		err = sw.Finish()
	}
	if err == nil && uid >= 0 {
		err = unix.Fchown(dst, uid, gid)
	}
	if err == nil && (mode&^0o777 != 0 || mode&processUmask() != 0) {
		err = unix.Fchmod(dst, mode) // after chown, which clears setuid bits
	}
	if err == nil && sync {
		err = unix.Fsync(dst)
	}
	if err != nil {
		err = &os.PathError{Op: "write", Path: tmp, Err: err}
	}
	return hex.EncodeToString(h.Sum(nil)), errors.Join(err, unix.Close(dst))
}

// processUmask is the process's umask, read from /proc/self/status
// (umask(2) reads it only by changing it, which would race other
// threads' creations); 0o777 when unknown, so that every file is
// chmodded.
var processUmask = sync.OnceValue(func() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
})

// copyBufs holds copyTo's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 128<<10); return &b }}

// tempPrefix starts the names of Apply's temporary files; the journal's
// token and a counter follow.
const tempPrefix = ".corral-apply-"

func (s *trees) tempName() string {
	s.temps++
	return fmt.Sprintf("%s%s-%d", tempPrefix, s.token, s.temps)
}

// mkdirs makes the directories of Lower on the way to dir that are
// missing, with the layer's modes.
func (s *trees) mkdirs(dir string) error {
	if dir == "." || dir == "" || s.isDir.has(dir) {
		return nil
	}
	cur, err := s.lo.lstat(dir)
	if err != nil {
		return err
	}
	if cur != nil {
		if cur.Type != "dir" {
			return fmt.Errorf("%s is not a directory", handback.QuotePath(s.lo.abs(dir)))
		}
		s.isDir.add(dir)
		return nil
	}
	if err := s.mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	un, err := s.up.lstat(dir)
	if err != nil {
		return err
	}
	mode := uint32(0o755)
	if un != nil && un.Type == "dir" {
		mode = un.Mode
	}
	return s.write(Change{Path: dir, Kind: Added, New: &Side{Type: "dir", Mode: mode}})
}

// chmod sets the mode of directory or file rel of t through a descriptor,
// so that a symlink is never followed.
func (s *trees) chmod(t *tree, rel string, mode uint32) error {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: t.abs(rel), Err: err}
	}
	return nil
}

// parentDir opens rel's parent directory for reading (so that it can be
// fsynced) and returns it with rel's last component.
func (t *tree) parentDir(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	fd, err := t.open(strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// hidden says whether a directory above rel in upper is opaque, so that
// Lower's entries at rel do not show through.
func (s *trees) hidden(rel string) (bool, error) {
	for a := path.Dir(rel); a != "."; a = path.Dir(a) {
		if op, ok := s.opaqueAt[a]; ok {
			if op {
				return true, nil
			}
			continue
		}
		op, err := s.opaqueDir(a)
		if err != nil || op {
			return op, err
		}
	}
	return false, nil
}

// opaqueDir says whether upper's a is an opaque directory, cached in
// opaqueAt during prune.
func (s *trees) opaqueDir(a string) (op bool, err error) {
	defer func() {
		if err == nil && s.opaqueAt != nil {
			if len(s.opaqueAt) >= maxOpaqueCache {
				clear(s.opaqueAt)
			}
			s.opaqueAt[a] = op
		}
	}()
	n, err := s.up.lstat(a)
	if err != nil || n == nil || n.Type != "dir" {
		return false, err
	}
	op, _, err = s.up.opaque(a)
	return op, err
}

// unwhiteout makes Lower's rel show again where a whiteout hides it or a
// directory above it: a whiteout of rel is removed, a whiteout of a
// directory above becomes an opaque directory (the rest stays deleted).
func (s *trees) unwhiteout(rel string) error {
	var chain []string
	for a := rel; a != "."; a = path.Dir(a) {
		chain = append([]string{a}, chain...)
	}
	for _, a := range chain {
		n, err := s.up.lstat(a)
		if err != nil {
			return err
		}
		if n == nil || n.Type != "whiteout" {
			continue
		}
		if err := s.up.removeAll(a); err != nil {
			return err
		}
		if a == rel {
			return nil
		}
		ln, err := s.lo.lstat(a)
		if err != nil {
			return err
		}
		pfd, base, err := s.up.parent(a)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, base, ln.Mode&0o7777)
		unix.Close(pfd)
		if err != nil {
			return &os.PathError{Op: "mkdir", Path: s.up.abs(a), Err: err}
		}
		if err := s.up.setOverlayXattr(a, s.prefix, "opaque", "y"); err != nil {
			return fmt.Errorf("marking %s opaque: %w", handback.QuotePath(s.up.abs(a)), err)
		}
	}
	return nil
}

// unopaque takes the opaque mark off upper's directory p when upper
// holds every name Lower's does (so the mark hides nothing), marking
// opaque instead each of its subdirectories that has one in Lower too;
// else it keeps p as it is. pre is the xattr prefix p's mark has. Upper's
// and Lower's listings are merged in order: memory stays bounded however
// many names they hold.
func (s *trees) unopaque(p, pre string) (pruned, error) {
	unames, err := s.up.list(p)
	if err != nil {
		return kept, err
	}
	defer unames.Close()
	lnames, err := s.lo.list(p)
	if err != nil {
		return kept, err
	}
	defer lnames.Close()
	un, uok, err := unames.Next()
	for err == nil {
		var ln string
		var lok bool
		if ln, lok, err = lnames.Next(); err != nil || !lok {
			break
		}
		for err == nil && uok && un < ln {
			un, uok, err = unames.Next()
		}
		if err == nil && (!uok || un != ln) {
			return kept, nil // Lower has a name upper does not: the mark hides it
		}
	}
	if err != nil {
		return kept, err
	}
	unames.Close()
	if unames, err = s.up.list(p); err != nil {
		return kept, err
	}
	err = unames.Each(func(n string) error {
		c := path.Join(p, n)
		cu, err := s.up.lstat(c)
		if err != nil {
			return err
		}
		cl, err := s.lo.lstat(c)
		if err != nil {
			return err
		}
		if cu != nil && cu.Type == "dir" && cl != nil && cl.Type == "dir" {
			if err := s.up.setOverlayXattr(c, pre, "opaque", "y"); err != nil {
				return fmt.Errorf("marking %s opaque: %w", handback.QuotePath(s.up.abs(c)), err)
			}
		}
		return nil
	})
	if err != nil {
		return kept, err
	}
	return unopaqued, s.up.removeOverlayXattr(p, "opaque")
}

// copyIn copies Lower's rel (a directory with all it holds) into upper.
func (s *trees) copyIn(rel string) error {
	ln, err := s.lo.lstat(rel)
	if err != nil || ln == nil {
		return err
	}
	pfd, base, err := s.up.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch ln.Type {
	case "dir":
		if err := unix.Mkdirat(pfd, base, ln.Mode&0o7777); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.up.abs(rel), Err: err}
		}
		names, err := s.lo.list(rel)
		if err != nil {
			return err
		}
		return names.Each(func(n string) error { return s.copyIn(path.Join(rel, n)) })
	case "symlink":
		return unix.Symlinkat(ln.Target, pfd, base)
	case "file":
		fd, err := s.lo.open(rel, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		in := os.NewFile(uintptr(fd), s.lo.abs(rel))
		defer in.Close()
		_, err = copyTo(in, pfd, base, ln.Mode, -1, -1, false)
		return err
	}
	return fmt.Errorf("%s: cannot copy a special file into the layer", handback.QuotePath(s.lo.abs(rel)))
}

func (s *trees) pruneOne(p string) (pruned, error) {
	un, err := s.up.lstat(p)
	if err != nil || un == nil {
		return kept, err
	}
	ln, err := s.lo.lstat(p)
	if err != nil {
		return kept, err
	}
	if un.Type == "whiteout" {
		if ln != nil {
			return kept, nil
		}
		return removed, s.up.removeAll(p)
	}
	hidden, err := s.hidden(p)
	if err != nil || ln == nil || ln.Type != un.Type {
		return kept, err
	}
	switch un.Type {
	case "file", "symlink":
		if hidden {
			return kept, nil
		}
		same, err := s.holds(Change{Path: p, New: side(un)}, ln)
		if err != nil || !same {
			return kept, err
		}
		return removed, s.up.removeAll(p)
	case "dir":
		op, pre, err := s.up.opaque(p)
		if err != nil {
			return kept, err
		}
		if op {
			return s.unopaque(p, pre)
		}
		empty, err := s.up.empty(p)
		if err != nil {
			return kept, err
		}
		if hidden || !empty || un.Mode != ln.Mode {
			return kept, nil
		}
		s.updirs.forget(p)
		return removed, s.up.removeAll(p)
	}
	return kept, nil
}
