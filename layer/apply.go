package layer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/handback"
)

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// Logger receives the events layer.apply and layer.apply.conflict;
	// nil logs nowhere.
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
}

// ApplyResult is what Apply did.
type ApplyResult struct {
	// Applied lists the paths (relative to Lower, slash-separated) written
	// into or removed from Lower, sorted.
	Applied []string
	// Conflicts lists the paths Lower changed since the layer was made
	// (with ErrConflict; then nothing was applied), sorted.
	Conflicts []string
	// Merged lists the conflicting paths ApplyOptions.Merge merged (and
	// applied, unless other conflicts stopped the apply), sorted.
	Merged []string
	// Unmerged says, for each conflict Merge tried and could not merge,
	// why (ErrNoMergeBase, ErrMergeConflict, ErrIndexStaged).
	Unmerged map[string]string
	// Held are the selected changes Apply did not write because they are
	// risky (GatePolicy: git hooks and configuration at any depth, shell
	// start-up files, editor settings...) and not included, with why; they
	// stay in the layer.
	Held []handback.Risk
}

// ErrConflict means Lower changed, since the layer's base was recorded,
// at a path the layer changes too; Apply then writes nothing.
var ErrConflict = errors.New("the working directory changed since the session saw it")

// pendingPath is Apply's journal: the paths it is writing, so that a rerun
// after an interruption records them in base.json and cleans them from
// upper even though they no longer differ from Lower.
func (l *Layer) pendingPath() string { return filepath.Join(l.Dir, "apply.pending") }

// testHookAfterWrite runs between writing Lower and recording the
// result; a test makes it fail to stand for an interrupted apply.
var testHookAfterWrite func() error

// Apply writes the layer's changes selected by paths (as in Changes; none
// selects all) into Lower, then removes them from the layer and raises its
// generation. The directories a selected path needs that the layer adds
// are applied with it.
//
// It is all or nothing per call: every selected path is checked first.
// A path whose Lower entry differs from base.json (type, size, mtime,
// mode; a path base.json lacks that Lower now has) unless it already
// holds what the layer has, is a conflict: Apply returns ErrConflict,
// with every such path in ApplyResult.Conflicts, and writes nothing. A
// special file (fifo, socket, device) made in the layer is an error too.
// With ApplyOptions.Merge, a conflicting file both sides modified is
// merged with git where git still holds its base (mergeFile), and the
// merge is written to Lower and the layer; only what cannot be merged
// remains a conflict.
//
// Each file is written to a temporary file in its directory, fsynced and
// renamed over the old one, with the layer's mode; when the process is
// root, a new entry gets the owner of its directory and a replaced one
// keeps its owner. Symlinks are recreated as symlinks, never followed:
// every path is reached beneath Lower and upper by openat2(2) with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS. Lower is written first and the
// layer cleaned after, with a journal in between: an interrupted Apply
// loses nothing, and running it again finishes it.
//
// The caller keeps the session's commands from running meanwhile
// (overlayfs.rst: changing the layers under a live mount is undefined).
func Apply(l *Layer, paths []string, opts ApplyOptions) (ApplyResult, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var res ApplyResult
	if err := l.finishPending(); err != nil {
		return res, err
	}
	all, err := Changes(l, nil)
	if err != nil {
		return res, err
	}
	sel, err := l.selection(paths)
	if err != nil {
		return res, err
	}
	chosen := choose(all, sel)
	// What would run on the host stays in the layer unless named.
	if res.Held, err = Risky(chosen, GatePolicy(opts.IncludeRisky), true); err != nil {
		return res, err
	}
	if len(res.Held) > 0 {
		held := map[string]bool{}
		for _, r := range res.Held {
			held[r.Path] = true
		}
		chosen = slices.DeleteFunc(chosen, func(ch Change) bool { return held[ch.Path] })
		log.Warn("layer.apply.held", "lower", l.Lower, "paths", len(res.Held))
	}
	if len(chosen) == 0 {
		return res, nil
	}
	s, err := l.open()
	if err != nil {
		return res, err
	}
	defer s.close()
	base, err := l.readBase()
	if err != nil {
		return res, err
	}

	// Check everything before writing anything.
	done := map[string]bool{} // already in Lower: an earlier run wrote it
	conflicts := map[string]bool{}
	s.merged = map[string]mergedFile{}
	for _, ch := range chosen {
		if ch.New != nil && ch.New.Type == "other" {
			return res, fmt.Errorf("%s is a special file (fifo, socket or device): it cannot be applied; discard it", ch.Path)
		}
		cur, err := s.lo.lstat(ch.Path)
		if err != nil {
			return res, err
		}
		if matchesBase(cur, base[ch.Path]) {
			continue
		}
		same, err := s.holds(ch, cur)
		if err != nil {
			return res, err
		}
		if same {
			done[ch.Path] = true
			continue
		}
		if opts.Overwrite {
			continue
		}
		if opts.Merge && mergeable(ch, cur) {
			m, err := s.merge(l.Lower, ch, cur, base[ch.Path])
			if err == nil {
				s.merged[ch.Path] = m
				res.Merged = append(res.Merged, ch.Path)
				continue
			}
			if !errors.Is(err, ErrNoMergeBase) && !errors.Is(err, ErrMergeConflict) && !errors.Is(err, ErrIndexStaged) {
				return res, fmt.Errorf("merging %s: %w", ch.Path, err)
			}
			if res.Unmerged == nil {
				res.Unmerged = map[string]string{}
			}
			res.Unmerged[ch.Path] = err.Error()
		}
		conflicts[ch.Path] = true
	}
	sort.Strings(res.Merged)
	for _, ch := range chosen {
		// A directory on the way that Lower turned into something else.
		for a := path.Dir(ch.Path); a != "."; a = path.Dir(a) {
			if isChosen(chosen, a) {
				continue
			}
			cur, err := s.lo.lstat(a)
			if err != nil {
				return res, err
			}
			if cur != nil && cur.Type != "dir" {
				conflicts[a] = true // even with Overwrite: the layer has no entry there to write
			}
		}
	}
	if len(conflicts) > 0 {
		for p := range conflicts {
			res.Conflicts = append(res.Conflicts, p)
		}
		sort.Strings(res.Conflicts)
		log.Warn("layer.apply.conflict", "lower", l.Lower, "paths", res.Conflicts)
		return res, fmt.Errorf("%w: %s", ErrConflict, strings.Join(res.Conflicts, ", "))
	}

	var pending []string
	for _, ch := range chosen {
		pending = append(pending, ch.Path)
	}
	if err := l.writePending(pending); err != nil {
		return res, err
	}
	defer s.unstage()
	if err := s.stage(chosen, done); err != nil {
		return res, fmt.Errorf("writing the new files beside their targets: %w (nothing was replaced)", err)
	}
	// A merged file goes into the layer too, so that the layer and Lower
	// agree and the journal's pruning drops it (an interrupted apply
	// leaves the merge in the layer, and a rerun merges it again cleanly).
	for _, p := range res.Merged {
		if err := s.writeUpper(p, s.merged[p]); err != nil {
			return res, fmt.Errorf("recording the merge of %s in the layer: %w (nothing was replaced)", p, err)
		}
	}
	for _, ch := range chosen {
		if done[ch.Path] {
			continue
		}
		if err := s.write(ch); err != nil {
			return res, fmt.Errorf("applying %s: %w (what was written so far stays in both; run apply again)", ch.Path, err)
		}
	}
	if testHookAfterWrite != nil {
		if err := testHookAfterWrite(); err != nil {
			return res, err
		}
	}
	if err := l.finishPending(); err != nil {
		return res, err
	}
	res.Applied = pending
	log.Info("layer.apply", "lower", l.Lower, "paths", len(pending))
	return res, nil
}

// Discard drops the layer's changes selected by paths (as in Changes;
// none selects all): the session sees Lower's entries there again. Lower
// is not touched. It raises the generation.
func Discard(l *Layer, paths []string) error {
	if err := l.finishPending(); err != nil {
		return err
	}
	all, err := Changes(l, nil)
	if err != nil {
		return err
	}
	sel, err := l.selection(paths)
	if err != nil {
		return err
	}
	chosen := choose(all, sel)
	if len(chosen) == 0 {
		return nil
	}
	s, err := l.open()
	if err != nil {
		return err
	}
	defer s.close()
	var gone []string // removed whole from upper: nothing below is left to do
	var touched []string
	for _, ch := range chosen {
		if under(gone, ch.Path) {
			continue
		}
		touched = append(touched, ch.Path)
		if ch.Kind == Modified && ch.New.Type == "dir" {
			if err := s.chmod(s.up, ch.Path, ch.Old.Mode); err != nil {
				return err
			}
			continue
		}
		if ch.Kind != Deleted {
			if err := s.up.removeAll(ch.Path); err != nil {
				return err
			}
			gone = append(gone, ch.Path)
		} else if err := s.unwhiteout(ch.Path); err != nil {
			return err
		}
		if ch.Kind == Added {
			continue
		}
		hidden, err := s.hidden(ch.Path)
		if err != nil {
			return err
		}
		if hidden { // an opaque directory above: Lower's entry shows only as a copy
			if err := s.copyIn(ch.Path); err != nil {
				return err
			}
			gone = append(gone, ch.Path)
		}
	}
	if err := s.prune(touched); err != nil {
		return err
	}
	return l.Bump()
}

func under(roots []string, p string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// choose returns the changes sel selects, with the changes that add a
// directory above one of them (applying a file needs its directory).
func choose(all []Change, sel selection) []Change {
	byPath := map[string]int{}
	for i, ch := range all {
		byPath[ch.Path] = i
	}
	take := map[int]bool{}
	for i, ch := range all {
		if !sel.match(ch.Path) {
			continue
		}
		take[i] = true
		for a := path.Dir(ch.Path); a != "."; a = path.Dir(a) {
			if j, ok := byPath[a]; ok && all[j].New != nil && all[j].New.Type == "dir" && all[j].Kind != Modified {
				take[j] = true
			}
		}
	}
	var out []Change
	for i, ch := range all {
		if take[i] {
			out = append(out, ch)
		}
	}
	return out
}

func isChosen(chosen []Change, p string) bool {
	i := sort.Search(len(chosen), func(i int) bool { return chosen[i].Path >= p })
	return i < len(chosen) && chosen[i].Path == p
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

func (l *Layer) readBase() (map[string]*Entry, error) {
	b, err := os.ReadFile(l.BasePath())
	if err != nil {
		return nil, fmt.Errorf("reading the layer's base: %w", err)
	}
	var list []Entry
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("reading %s: %w", l.BasePath(), err)
	}
	m := make(map[string]*Entry, len(list))
	for i := range list {
		m[list[i].Path] = &list[i]
	}
	return m, nil
}

func (l *Layer) writeBase(m map[string]*Entry) error {
	list := make([]Entry, 0, len(m))
	for _, e := range m {
		list = append(list, *e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return writeAtomic(l.BasePath(), data)
}

func (l *Layer) writePending(paths []string) error {
	data, err := json.Marshal(paths)
	if err != nil {
		return err
	}
	return writeAtomic(l.pendingPath(), data)
}

// finishPending completes an Apply that wrote Lower: it records the
// journal's paths in base.json as Lower has them now, removes from upper
// what Lower now holds, drops the journal and raises the generation.
// Without a journal it does nothing.
func (l *Layer) finishPending() error {
	b, err := os.ReadFile(l.pendingPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var paths []string
	if err := json.Unmarshal(b, &paths); err != nil {
		return fmt.Errorf("reading %s: %w", l.pendingPath(), err)
	}
	s, err := l.open()
	if err != nil {
		return err
	}
	defer s.close()
	base, err := l.readBase()
	if err != nil {
		return err
	}
	for _, p := range paths {
		// Record p and the directories above it that apply may have made.
		for q := p; q != "."; q = path.Dir(q) {
			cur, err := s.lo.lstat(q)
			if err != nil {
				return err
			}
			if was := base[q]; was != nil && was.Type == "dir" && (cur == nil || cur.Type != "dir") {
				for k := range base {
					if strings.HasPrefix(k, q+"/") {
						delete(base, k)
					}
				}
			}
			if cur == nil {
				delete(base, q)
				continue
			}
			if q != p && base[q] != nil {
				break
			}
			e := Entry{Path: q, Type: cur.Type, Mode: cur.Mode & 0o777, MTime: cur.MTime, Target: cur.Target}
			if cur.Type == "file" {
				e.Size = cur.Size
			}
			if e.Type == "whiteout" {
				e.Type = "other"
			}
			base[q] = &e
		}
	}
	if err := l.writeBase(base); err != nil {
		return err
	}
	if err := s.sweepTemps(paths); err != nil {
		return err
	}
	if err := s.prune(paths); err != nil {
		return err
	}
	if err := os.Remove(l.pendingPath()); err != nil {
		return err
	}
	return l.Bump()
}

// trees is a layer opened for writing: Lower and upper.
type trees struct {
	lo, up *tree
	root   bool   // the process is root: new entries get their directory's owner
	prefix string // the overlay xattr prefix the layer's mount uses

	// staged maps a path to the temporary file, already written and
	// fsynced beside it in Lower, that write renames into place.
	staged map[string]string
	// merged maps a path to the file ApplyOptions.Merge made of it, which
	// is written instead of the layer's.
	merged map[string]mergedFile
}

// mergedFile is a merge's result: the bytes and the permission bits.
type mergedFile struct {
	data []byte
	mode uint32
}

// writeUpper replaces the layer's file rel by m, atomically, keeping its
// owner.
func (s *trees) writeUpper(rel string, m mergedFile) error {
	cur, err := s.up.lstat(rel)
	if err != nil {
		return err
	}
	if cur == nil || cur.Type != "file" {
		return fmt.Errorf("%s is no longer a file in the layer", rel)
	}
	pfd, base, err := s.up.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	uid, gid := -1, -1
	if s.root {
		uid, gid = int(cur.UID), int(cur.GID)
	}
	tmp := tempName(base)
	if err := copyTo(bytes.NewReader(m.data), pfd, tmp, m.mode, uid, gid, true); err != nil {
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
		data, err := s.up.readFile(ch.Path)
		if err != nil {
			return mergedFile{}, err
		}
		if err := hostIndexClean(lower, repo); err != nil {
			return mergedFile{}, err
		}
		return mergedFile{data, cur.Mode & 0o7777}, nil
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
	return mergedFile{data, mode}, nil
}

// owner returns the owner a new or replaced entry of Lower gets (-1: the
// process's): as root, a replaced entry's own, else its directory's.
func (s *trees) owner(cur *node, pfd int, typ string) (int, int) {
	if !s.root {
		return -1, -1
	}
	if cur != nil && cur.Type == typ {
		return int(cur.UID), int(cur.GID)
	}
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

// stage writes the new files of changes whose directory Lower already
// has to temporary files beside them, then fsyncs them all at once:
// each fsync(2) waits for a journal commit (about 10 ms here), and
// concurrent ones share commits, which makes applying 100 files ~10x
// faster than a write, fsync and rename per file.
func (s *trees) stage(changes []Change, done map[string]bool) error {
	s.staged = map[string]string{}
	var tmps [][2]string // path, temporary name
	for _, ch := range changes {
		if done[ch.Path] || ch.New == nil || ch.New.Type != "file" {
			continue
		}
		dir, err := s.lo.lstat(path.Dir(ch.Path))
		if err != nil {
			return err
		}
		if dir == nil || dir.Type != "dir" {
			continue // write makes the directory, then the file
		}
		cur, err := s.lo.lstat(ch.Path)
		if err != nil {
			return err
		}
		pfd, base, err := s.lo.parentDir(ch.Path)
		if err != nil {
			return err
		}
		uid, gid := s.owner(cur, pfd, "file")
		tmp := tempName(base)
		if m, ok := s.merged[ch.Path]; ok {
			err = copyTo(bytes.NewReader(m.data), pfd, tmp, m.mode, uid, gid, false)
		} else {
			err = s.copyFile(ch.Path, pfd, tmp, ch.New.Mode, uid, gid, false)
		}
		if err != nil {
			unix.Unlinkat(pfd, tmp, 0)
		}
		unix.Close(pfd)
		if err != nil {
			return err
		}
		s.staged[ch.Path] = tmp
		tmps = append(tmps, [2]string{ch.Path, tmp})
	}
	work := make(chan [2]string)
	errs := make(chan error, len(tmps))
	var wg sync.WaitGroup
	for range min(16, len(tmps)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				errs <- s.fsyncTemp(t[0], t[1])
			}
		}()
	}
	for _, t := range tmps {
		work <- t
	}
	close(work)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (s *trees) fsyncTemp(rel, tmp string) error {
	pfd, _, err := s.lo.parentDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, tmp, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	defer unix.Close(fd)
	return unix.Fsync(fd)
}

// unstage removes the temporary files write did not rename.
func (s *trees) unstage() {
	for rel, tmp := range s.staged {
		if pfd, _, err := s.lo.parentDir(rel); err == nil {
			unix.Unlinkat(pfd, tmp, 0)
			unix.Close(pfd)
		}
	}
	s.staged = nil
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
	return &trees{lo: lo, up: up, root: os.Geteuid() == 0, prefix: xattrPrefixes[0]}, nil
}

func (s *trees) close() { s.lo.close(); s.up.close() }

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
		if cur.Mode != ch.New.Mode {
			return false, nil
		}
		a, err := s.lo.readFile(ch.Path)
		if err != nil {
			return false, err
		}
		b, err := s.up.readFile(ch.Path)
		if err != nil {
			return false, err
		}
		return bytes.Equal(a, b), nil
	}
	return false, nil
}

// write makes Lower's entry at ch.Path what the layer has.
func (s *trees) write(ch Change) error {
	if ch.New == nil {
		return s.lo.removeAll(ch.Path)
	}
	if err := s.mkdirs(path.Dir(ch.Path)); err != nil {
		return err
	}
	cur, err := s.lo.lstat(ch.Path)
	if err != nil {
		return err
	}
	pfd, base, err := s.lo.parentDir(ch.Path)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	uid, gid := s.owner(cur, pfd, ch.New.Type)
	if ch.New.Type == "dir" {
		if cur != nil && cur.Type == "dir" {
			return s.chmod(s.lo, ch.Path, ch.New.Mode)
		}
		if cur != nil {
			if err := s.lo.removeAll(ch.Path); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.lo.abs(ch.Path), Err: err}
		}
		if uid >= 0 {
			if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		return s.chmod(s.lo, ch.Path, ch.New.Mode)
	}
	if cur != nil && cur.Type == "dir" { // a type change: rename cannot replace a directory
		if err := s.lo.removeAll(ch.Path); err != nil {
			return err
		}
	}
	tmp := tempName(base)
	switch ch.New.Type {
	case "symlink":
		if err := unix.Symlinkat(ch.New.Target, pfd, tmp); err != nil {
			return &os.PathError{Op: "symlink", Path: s.lo.abs(ch.Path), Err: err}
		}
		if uid >= 0 {
			unix.Fchownat(pfd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
	case "file":
		if staged, ok := s.staged[ch.Path]; ok {
			tmp = staged
			delete(s.staged, ch.Path)
		} else if m, ok := s.merged[ch.Path]; ok {
			if err := copyTo(bytes.NewReader(m.data), pfd, tmp, m.mode, uid, gid, true); err != nil {
				unix.Unlinkat(pfd, tmp, 0)
				return err
			}
		} else if err := s.copyFile(ch.Path, pfd, tmp, ch.New.Mode, uid, gid, true); err != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.lo.abs(ch.Path), Err: err}
	}
	return nil
}

// copyFile copies upper's file rel into a new file tmp of directory pfd
// in Lower, with mode and (uid >= 0) owner, and fsyncs it.
func (s *trees) copyFile(rel string, pfd int, tmp string, mode uint32, uid, gid int, sync bool) error {
	src, err := s.up.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(src), s.up.abs(rel))
	defer in.Close()
	return copyTo(in, pfd, tmp, mode, uid, gid, sync)
}

func copyTo(in io.Reader, pfd int, tmp string, mode uint32, uid, gid int, sync bool) error {
	dst, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	out := os.NewFile(uintptr(dst), tmp)
	_, err = io.Copy(out, in)
	if err == nil && uid >= 0 {
		err = out.Chown(uid, gid)
	}
	if err == nil {
		err = unix.Fchmod(dst, mode) // after chown, which clears setuid bits
	}
	if err == nil && sync {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}

// tempPrefix starts the names of Apply's temporary files in Lower.
const tempPrefix = ".corral-apply-"

func tempName(base string) string {
	b := make([]byte, 6)
	rand.Read(b)
	name := tempPrefix + hex.EncodeToString(b) + "-" + base
	if len(name) > 255 {
		name = name[:255]
	}
	return name
}

// mkdirs makes the directories of Lower on the way to dir that are
// missing, with the layer's modes.
func (s *trees) mkdirs(dir string) error {
	if dir == "." || dir == "" {
		return nil
	}
	cur, err := s.lo.lstat(dir)
	if err != nil {
		return err
	}
	if cur != nil {
		if cur.Type != "dir" {
			return fmt.Errorf("%s is not a directory", s.lo.abs(dir))
		}
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
		n, err := s.up.lstat(a)
		if err != nil {
			return false, err
		}
		if n == nil || n.Type != "dir" {
			continue
		}
		op, _, err := s.up.opaque(a)
		if err != nil || op {
			return op, err
		}
	}
	return false, nil
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
			return fmt.Errorf("marking %s opaque: %w", s.up.abs(a), err)
		}
	}
	return nil
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
		names, err := s.lo.names(rel)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := s.copyIn(path.Join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	case "symlink":
		return unix.Symlinkat(ln.Target, pfd, base)
	case "file":
		fd, err := s.lo.open(rel, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		in := os.NewFile(uintptr(fd), s.lo.abs(rel))
		defer in.Close()
		return copyTo(in, pfd, base, ln.Mode, -1, -1, false)
	}
	return fmt.Errorf("%s: cannot copy a special file into the layer", s.lo.abs(rel))
}

// prune removes from upper what no longer differs from Lower among paths
// and the directories above them, repeating until nothing more goes:
// a whiteout of what Lower no longer has, a file or symlink identical to
// Lower's, an empty directory like Lower's; an opaque directory that
// hides nothing of Lower (Lower's entries all have one in upper) stops
// being opaque, its subdirectories that lie over Lower's becoming opaque
// in its stead (overlayfs.rst: below an opaque directory lower layers are
// not looked up). Nothing is removed below an opaque directory, where
// removing would hide Lower's entry instead of showing it.
func (s *trees) prune(paths []string) error {
	set := map[string]bool{}
	for _, p := range paths {
		for q := p; q != "." && q != ""; q = path.Dir(q) {
			set[q] = true
		}
	}
	order := make([]string, 0, len(set))
	for p := range set {
		order = append(order, p)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(order))) // deepest first
	for {
		// Deepest first, a pass removes a directory's emptied entries
		// before the directory; only a directory that stopped being opaque
		// can make entries below it removable, and needs another pass.
		again := false
		for _, p := range order {
			c, err := s.pruneOne(p)
			if err != nil {
				return err
			}
			again = again || c == unopaqued
		}
		if !again {
			return nil
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
		unames, err := s.up.names(p)
		if err != nil {
			return kept, err
		}
		if op {
			lnames, err := s.lo.names(p)
			if err != nil {
				return kept, err
			}
			have := map[string]bool{}
			for _, n := range unames {
				have[n] = true
			}
			for _, n := range lnames {
				if !have[n] {
					return kept, nil
				}
			}
			for _, n := range unames {
				c := path.Join(p, n)
				cu, err := s.up.lstat(c)
				if err != nil {
					return kept, err
				}
				cl, err := s.lo.lstat(c)
				if err != nil {
					return kept, err
				}
				if cu != nil && cu.Type == "dir" && cl != nil && cl.Type == "dir" {
					if err := s.up.setOverlayXattr(c, pre, "opaque", "y"); err != nil {
						return kept, fmt.Errorf("marking %s opaque: %w", s.up.abs(c), err)
					}
				}
			}
			return unopaqued, s.up.removeOverlayXattr(p, "opaque")
		}
		if hidden || len(unames) > 0 || un.Mode != ln.Mode {
			return kept, nil
		}
		return removed, s.up.removeAll(p)
	}
	return kept, nil
}

// sweepTemps removes the temporary files an Apply killed before renaming
// them left in the directories of paths.
func (s *trees) sweepTemps(paths []string) error {
	dirs := map[string]bool{}
	for _, p := range paths {
		dirs[path.Dir(p)] = true
	}
	for d := range dirs {
		if d == "." {
			d = ""
		}
		names, err := s.lo.names(d)
		if err != nil {
			continue // gone, or no longer a directory: nothing of ours there
		}
		for _, n := range names {
			if strings.HasPrefix(n, tempPrefix) {
				if err := s.lo.removeAll(path.Join(d, n)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
