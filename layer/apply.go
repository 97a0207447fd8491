package layer

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/handback"
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
	// Own are corral's own files and directories (absolute, resolved:
	// handback.Policy.Own), held as risky wherever a change would write
	// them.
	Own []string
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
	policy := GatePolicy(l.Lower, opts.Protected, opts.IncludeRisky, opts.Own)
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
