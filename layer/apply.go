package layer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

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
	// Included are the risky changes applied because IncludeRisky named
	// them.
	Included []handback.Risk
}

// ErrConflict means Lower changed, since the layer's base was recorded,
// at a path the layer changes too; Apply then writes nothing.
var ErrConflict = errors.New("the working directory changed since the session saw it")

// pendingPath is Apply's journal (see journal): what it is writing, so
// that a rerun after an interruption records in base.json and cleans from
// upper the paths it proves written, and removes its temporary files.
func (l *Layer) pendingPath() string { return filepath.Join(l.Dir, "apply.pending") }

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
// with every such path in ApplyResult.Conflicts, and writes nothing. A
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
	if res.Held, err = Risky(chosen, GatePolicy(opts.Protected, opts.IncludeRisky), true); err != nil {
		return res, err
	}
	if len(opts.IncludeRisky) > 0 {
		risky, err := Risky(chosen, GatePolicy(opts.Protected, opts.IncludeRisky), false)
		if err != nil {
			return res, err
		}
		res.Included = slices.DeleteFunc(risky, func(r handback.Risk) bool { return slices.Contains(res.Held, r) })
	}
	if len(res.Held) > 0 {
		held := map[string]bool{}
		for _, r := range res.Held {
			held[r.Path] = true
		}
		chosen = slices.DeleteFunc(chosen, func(ch Change) bool { return held[ch.Path] })
		log.Info("layer.apply.held", "lower", l.Lower, "paths", len(res.Held))
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
			return res, fmt.Errorf("%s is %s (a special file): it cannot be applied; discard it", handback.QuotePath(ch.Path), article(ch.New.Special))
		}
		cur, err := s.loStat(ch.Path)
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
	seen := map[string]bool{} // directories checked, with all above them
	for _, ch := range chosen {
		// A directory on the way that Lower turned into something else.
		for a := path.Dir(ch.Path); a != "."; a = path.Dir(a) {
			if seen[a] {
				break
			}
			seen[a] = true
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

	phase("check")
	j := &journal{Token: newToken()}
	for _, ch := range chosen {
		j.Entries = append(j.Entries, planned(ch, s.merged))
	}
	// The journal names this apply's temporary files before the first is
	// made, so that a rerun after a crash removes them and nothing else.
	if err := l.writeJournal(j); err != nil {
		return res, err
	}
	s.token = j.Token
	defer s.unstage()
	if err := s.stage(chosen, done, j); err != nil {
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
	// The staged bytes reach the disk before any file is renamed into
	// place (after a power loss a rename must not leave an empty file):
	// one syncfs(2) per filesystem instead of an fsync(2) per file.
	if err := s.syncLower(); err != nil {
		return res, fmt.Errorf("syncing the new files: %w (nothing was replaced)", err)
	}
	phase("stage")
	// Now with the hash of every file: what proves, after a crash, that
	// a path holds what this apply wrote rather than a later host edit.
	if err := l.writeJournal(j); err != nil {
		return res, err
	}
	for i, ch := range chosen {
		if done[ch.Path] {
			continue
		}
		if err := s.write(ch); err != nil {
			return res, fmt.Errorf("applying %s: %w (what was written so far stays in both; run apply again)", handback.QuotePath(ch.Path), err)
		}
		if testHookWrote != nil {
			testHookWrote(i+1, ch.Path)
		}
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
	if err := l.finish(s, j, true, log); err != nil {
		return res, err
	}
	phase("finish")
	for _, ch := range chosen {
		res.Applied = append(res.Applied, ch.Path)
	}
	log.Info("layer.apply", append([]any{"lower", l.Lower, "paths", len(res.Applied)}, phases...)...)
	return res, nil
}

// Discard drops the layer's changes selected by paths (as in Changes;
// none selects all): the session sees Lower's entries there again. Lower
// is not touched. It raises the generation.
func Discard(l *Layer, paths []string) error {
	if err := l.finishPending(nil); err != nil {
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
	gone := map[string]bool{} // removed whole from upper: nothing below is left to do
	var touched []string
	for _, ch := range chosen {
		if underAny(gone, ch.Path) {
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
			gone[ch.Path] = true
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
			gone[ch.Path] = true
		}
	}
	if err := s.prune(touched, nil); err != nil {
		return err
	}
	return l.Bump()
}

// underAny says whether p or a directory above it is in roots.
func underAny(roots map[string]bool, p string) bool {
	for q := p; q != "." && q != ""; q = path.Dir(q) {
		if roots[q] {
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

// trees is a layer opened for writing: Lower and upper.
type trees struct {
	lo, up *tree
	root   bool   // the process is root: new entries get their directory's owner
	prefix string // the overlay xattr prefix the layer's mount uses

	// token names this apply's temporary files (journal.Token); temps
	// counts them.
	token string
	temps int
	// staged maps a path to the temporary file, already written beside
	// it in Lower, that write renames into place.
	staged map[string]string
	// merged maps a path to the file ApplyOptions.Merge made of it, which
	// is written instead of the layer's.
	merged map[string]mergedFile
	// lodirs and updirs cache descriptors of Lower's and upper's
	// directories, so that a directory of many files is walked to once;
	// isDir caches the paths of Lower known to be directories.
	lodirs, updirs *dirCache
	isDir          map[string]bool
	// opaqueAt caches, during prune, whether an upper directory is
	// opaque (nil: not cached).
	opaqueAt map[string]bool
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
	if m.fromUpper {
		return s.chmod(s.up, rel, m.mode)
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
	tmp := s.tempName()
	if _, err := copyTo(bytes.NewReader(m.data), pfd, tmp, m.mode, uid, gid, true); err != nil {
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

// source opens what change ch writes at a file: the merge, or the
// layer's file; with the mode it gets.
func (s *trees) source(ch Change) (io.ReadCloser, uint32, error) {
	m, merged := s.merged[ch.Path]
	if merged && !m.fromUpper {
		return io.NopCloser(bytes.NewReader(m.data)), m.mode, nil
	}
	dir, base := splitRel(ch.Path)
	d, err := s.updirs.get(dir)
	if err != nil {
		return nil, 0, err
	}
	fd, err := unix.Openat(d.fd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, &os.PathError{Op: "open", Path: s.up.abs(ch.Path), Err: err}
	}
	mode := ch.New.Mode
	if merged {
		mode = m.mode
	}
	return fdCloser(fd), mode, nil
}

// fdCloser is an fdFile that closes.
type fdCloser int

func (f fdCloser) Read(b []byte) (int, error) { return fdFile(f).Read(b) }
func (f fdCloser) Close() error               { return unix.Close(int(f)) }

// stage writes the new file of each change into a temporary file beside
// it in Lower (making the directories the layer adds on the way), and
// fills in each file's hash in j; it fsyncs nothing (Apply syncs each
// filesystem once). A file whose way Lower blocks with another type
// (the layer turned a file into a directory) is only hashed here, and
// written by write after the directory.
func (s *trees) stage(changes []Change, done map[string]bool, j *journal) error {
	s.staged = map[string]string{}
	for i, ch := range changes {
		if ch.New == nil || ch.New.Type != "file" {
			continue
		}
		e := &j.Entries[i]
		clear, err := s.clearWay(path.Dir(ch.Path))
		if err != nil {
			return err
		}
		if done[ch.Path] || !clear {
			in, _, err := s.source(ch)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, in)
			in.Close()
			if err != nil {
				return err
			}
			e.SHA256 = hex.EncodeToString(h.Sum(nil))
			continue
		}
		dir, base := splitRel(ch.Path)
		if err := s.mkdirs(dir); err != nil {
			return err
		}
		d, err := s.dirFD(dir)
		if err != nil {
			return err
		}
		pfd := d.fd
		cur, err := lstatAt(pfd, base, s.lo.abs(ch.Path))
		if err != nil {
			return err
		}
		uid, gid := s.owner(cur, d, "file")
		in, mode, err := s.source(ch)
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
		s.staged[ch.Path] = tmp
	}
	return nil
}

// clearWay says whether every directory on the way to dir in Lower is a
// directory or missing (stage may make it), not another type.
func (s *trees) clearWay(dir string) (bool, error) {
	for d := dir; d != "." && d != ""; d = path.Dir(d) {
		if s.isDir[d] {
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
		s.isDir[d] = true
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
		s.isDir[dir] = true
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
	for d := range s.isDir {
		if rel == "" || d == rel || strings.HasPrefix(d, rel+"/") {
			delete(s.isDir, d)
		}
	}
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

// unstage removes the temporary files write did not rename.
func (s *trees) unstage() {
	for rel, tmp := range s.staged {
		if d, err := s.dirFD(path.Dir(rel)); err == nil {
			unix.Unlinkat(d.fd, tmp, 0)
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
	return &trees{lo: lo, up: up, root: os.Geteuid() == 0, prefix: xattrPrefixes[0],
		lodirs: newDirCache(lo, unix.O_RDONLY, true), updirs: newDirCache(up, unix.O_PATH, false),
		isDir: map[string]bool{}}, nil
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
	if ch.New == nil {
		s.forget(ch.Path)
		return s.lo.removeAll(ch.Path)
	}
	dir, base := splitRel(ch.Path)
	if err := s.mkdirs(dir); err != nil {
		return err
	}
	d, err := s.dirFD(dir)
	if err != nil {
		return err
	}
	pfd := d.fd
	cur, err := lstatAt(pfd, base, s.lo.abs(ch.Path))
	if err != nil {
		return err
	}
	uid, gid := s.owner(cur, d, ch.New.Type)
	if ch.New.Type == "dir" {
		if cur != nil && cur.Type == "dir" {
			return s.chmod(s.lo, ch.Path, ch.New.Mode)
		}
		if cur != nil {
			if err := s.lo.removeAll(ch.Path); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, ch.New.Mode&0o777); err != nil {
			return &os.PathError{Op: "mkdir", Path: s.lo.abs(ch.Path), Err: err}
		}
		if uid >= 0 {
			if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		s.isDir[ch.Path] = true
		// The umask, a setgid parent or chown may have changed the bits.
		if now, err := lstatAt(pfd, base, s.lo.abs(ch.Path)); err != nil || now == nil || now.Mode != ch.New.Mode || uid >= 0 {
			return s.chmod(s.lo, ch.Path, ch.New.Mode)
		}
		return nil
	}
	if cur != nil && cur.Type == "dir" { // a type change: rename cannot replace a directory
		s.forget(ch.Path)
		if err := s.lo.removeAll(ch.Path); err != nil {
			return err
		}
	}
	tmp := ""
	switch ch.New.Type {
	case "symlink":
		tmp = s.tempName()
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
			break
		}
		in, mode, err := s.source(ch)
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
		return fmt.Errorf("%s: cannot apply %s", s.lo.abs(ch.Path), article(ch.New.Special))
	}
	if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &os.PathError{Op: "rename", Path: s.lo.abs(ch.Path), Err: err}
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
// what it wrote. It streams: memory does not grow with the file.
func copyTo(in io.Reader, pfd int, tmp string, mode uint32, uid, gid int, sync bool) (string, error) {
	// Made with its final permission bits (it holds what the file will):
	// an fchmod(2) is needed only for bits mkdir's umask or chown take.
	dst, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	h := sha256.New()
	buf := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(io.MultiWriter(fdFile(dst), h), in, *buf)
	copyBufs.Put(buf)
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
	if dir == "." || dir == "" || s.isDir[dir] {
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
		s.isDir[dir] = true
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
		_, err = copyTo(in, pfd, base, ln.Mode, -1, -1, false)
		return err
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
//
// known are files the caller knows Lower and upper hold alike (what the
// apply just wrote from upper): they are not read again, and are
// removed first, in parallel (unlinkKnown).
func (s *trees) prune(paths []string, known map[string]bool) error {
	s.opaqueAt = map[string]bool{}
	defer func() { s.opaqueAt = nil }()
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
	if len(known) > 0 {
		gone, err := s.unlinkKnown(known)
		if err != nil {
			return err
		}
		order = slices.DeleteFunc(order, func(p string) bool { return gone[p] })
	}
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
			if c == unopaqued {
				again = true
				clear(s.opaqueAt)
			}
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

// unlinkKnown removes from upper the files of known that no opaque
// directory above keeps, several directories at a time (each unlink
// waits on the filesystem's journal, and waits in flight overlap), and
// returns those it removed.
func (s *trees) unlinkKnown(known map[string]bool) (map[string]bool, error) {
	byDir := map[string][]string{}
	for p := range known {
		hidden, err := s.hidden(p)
		if err != nil {
			return nil, err
		}
		if !hidden {
			dir, base := splitRel(p)
			byDir[dir] = append(byDir[dir], base)
		}
	}
	var mu sync.Mutex
	gone := map[string]bool{}
	var errs []error
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(pruneWorkers, len(byDir)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dir := range work {
				var done []string
				fd, err := s.up.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
				if err == nil {
					for _, base := range byDir[dir] {
						if e := unix.Unlinkat(fd, base, 0); e != nil && !errors.Is(e, unix.ENOENT) {
							err = &os.PathError{Op: "remove", Path: s.up.abs(path.Join(dir, base)), Err: e}
							break
						}
						done = append(done, base)
					}
					unix.Close(fd)
				}
				mu.Lock()
				for _, base := range done {
					gone[path.Join(dir, base)] = true
				}
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for dir := range byDir {
		work <- dir
	}
	close(work)
	wg.Wait()
	return gone, errors.Join(errs...)
}

// pruneWorkers is how many directories unlinkKnown empties at a time.
const pruneWorkers = 8

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
		s.updirs.forget(p)
		return removed, s.up.removeAll(p)
	}
	return kept, nil
}
