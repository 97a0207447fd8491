package layer

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
)

// journal is what an Apply writes into Lower, kept in apply.pending
// from before its first temporary file until the layer is cleaned: a
// kill -9 or a power loss can stop an apply anywhere, and the rerun must
// tell what this apply wrote (recorded in base.json as the new base and
// dropped from the layer) from what the host changed since (left to the
// rerun's check against the base, which finds the conflict). A path
// counts as written only when Lower holds exactly the entry the journal
// says: the same type, mode, symlink target, or a file's SHA-256.
type journal struct {
	// Token names this apply's temporary files in Lower (tempPrefix +
	// Token + "-" + a counter): a rerun removes those and no other name.
	Token string `json:"token"`
	// Entries are the selected changes, sorted by path. A file's SHA256
	// is empty in the journal written before staging: no file of it was
	// renamed into place yet.
	Entries []journalEntry `json:"entries"`
}

// journalEntry is what one path of Lower becomes.
type journalEntry struct {
	// Path is relative to Lower, slash-separated.
	Path string `json:"path"`
	// Type is "file", "dir", "symlink", or "" for a deletion.
	Type string `json:"type,omitempty"`
	// Mode holds the permission bits of a file or directory.
	Mode uint32 `json:"mode,omitempty"`
	// SHA256 is a file's content hash (hex), Target a symlink's target.
	SHA256 string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"`
}

// planned is the journal entry of change ch, without a file's hash
// (stage adds it); merged holds the files ApplyOptions.Merge made.
func planned(ch Change, merged map[string]mergedFile) journalEntry {
	e := journalEntry{Path: ch.Path}
	if ch.New == nil {
		return e
	}
	e.Type, e.Mode = ch.New.Type, ch.New.Mode
	switch e.Type {
	case "symlink":
		e.Mode, e.Target = 0, ch.New.Target
	case "file":
		if m, ok := merged[ch.Path]; ok {
			e.Mode = m.mode
		}
	}
	return e
}

// newToken returns 16 random hex digits.
func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (l *Layer) writeJournal(j *journal) error {
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return writeAtomic(l.pendingPath(), data)
}

// finishPending completes an Apply that a crash interrupted: what the
// journal proves written is recorded and dropped from the layer, the
// rest left to the next check (finish, untrusted). Without a journal it
// does nothing. A journal of an older corral (a list of paths, no
// hashes) proves nothing: it is dropped, and its paths are checked
// again.
func (l *Layer) finishPending(log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := os.ReadFile(l.pendingPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	j := &journal{}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		var old []string
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("reading %s: %w", l.pendingPath(), err)
		}
		log.Warn("layer.apply.old_journal", "lower", l.Lower, "paths", len(old))
		if err := os.Remove(l.pendingPath()); err != nil {
			return err
		}
		return l.Bump()
	}
	if err := json.Unmarshal(b, j); err != nil {
		return fmt.Errorf("reading %s: %w", l.pendingPath(), err)
	}
	s, err := l.open()
	if err != nil {
		return err
	}
	defer s.close()
	return l.finish(s, j, false, log)
}

// finish records in base.json the journal's paths that Lower holds as
// the journal says (with their directories), removes from upper what
// Lower now holds among them, removes the apply's temporary files,
// drops the journal and raises the generation. trusted says the caller
// is the apply that just wrote them, so files are not hashed again and
// no temporary file is left; a rerun after a crash hashes each file.
// A path not proven keeps its base entry: the next apply checks it
// against the base like any other, so a host edit made after the crash
// is a conflict, not overwritten.
func (l *Layer) finish(s *trees, j *journal, trusted bool, log *slog.Logger) error {
	base, err := l.readBase()
	if err != nil {
		return err
	}
	var proven, unproven []string
	known := map[string]bool{} // files Lower and upper hold alike
	for _, e := range j.Entries {
		cur, err := s.loStat(e.Path)
		if err != nil {
			return err
		}
		ok, err := s.proves(e, cur, trusted)
		if err != nil {
			return err
		}
		if !ok {
			unproven = append(unproven, e.Path)
			continue
		}
		proven = append(proven, e.Path)
		if trusted && e.Type == "file" {
			known[e.Path] = true
		}
		// Record the path and the directories above it apply may have made.
		for q := e.Path; q != "."; q = path.Dir(q) {
			if q != e.Path {
				if base[q] != nil {
					break
				}
				if cur, err = s.lo.lstat(q); err != nil {
					return err
				}
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
			be := Entry{Path: q, Type: cur.Type, Mode: cur.Mode & 0o777, MTime: cur.MTime, Target: cur.Target}
			if cur.Type == "file" {
				be.Size = cur.Size
			}
			if be.Type == "whiteout" {
				be.Type = "other"
			}
			base[q] = &be
		}
	}
	if !trusted {
		log.Warn("layer.apply.recovered", "lower", l.Lower, "proven", len(proven), "unproven", len(unproven))
	}
	if err := l.writeBase(base); err != nil {
		return err
	}
	if !trusted {
		if err := s.sweepTemps(j); err != nil {
			return err
		}
	}
	if err := s.prune(proven, known); err != nil {
		return err
	}
	if err := os.Remove(l.pendingPath()); err != nil {
		return err
	}
	return l.Bump()
}

// proves says whether Lower's entry cur is what journal entry e says
// this apply wrote; trusted skips hashing a file.
func (s *trees) proves(e journalEntry, cur *node, trusted bool) (bool, error) {
	if e.Type == "" {
		return cur == nil, nil
	}
	if cur == nil || cur.Type != e.Type {
		return false, nil
	}
	switch e.Type {
	case "dir":
		return cur.Mode == e.Mode, nil
	case "symlink":
		return cur.Target == e.Target, nil
	case "file":
		if e.SHA256 == "" || cur.Mode != e.Mode {
			return false, nil
		}
		if trusted {
			return true, nil
		}
		h, err := s.lo.hashFile(e.Path)
		return h == e.SHA256, err
	}
	return false, nil
}

// sweepTemps removes the temporary files named with j's token from the
// directories of j's paths, in Lower and in upper (a merge's), and
// nothing else: a name like them of the host's or the session's is
// theirs.
func (s *trees) sweepTemps(j *journal) error {
	if j.Token == "" {
		return nil
	}
	prefix := tempPrefix + j.Token + "-"
	dirs := map[string]bool{}
	for _, e := range j.Entries {
		dirs[path.Dir(e.Path)] = true
	}
	for d := range dirs {
		for _, t := range []*tree{s.lo, s.up} {
			names, err := t.names(d)
			if err != nil {
				continue // gone, or no longer a directory: nothing of ours there
			}
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					if err := t.removeAll(path.Join(d, n)); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
