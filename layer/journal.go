package layer

import (
	"bufio"
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
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/dirlist"
)

// journal is what an Apply writes into Lower, kept in apply.pending
// from before its first temporary file until the layer is cleaned: a
// kill -9 or a power loss can stop an apply anywhere, and the rerun must
// tell what this apply wrote (recorded in base.json as the new base and
// dropped from the layer) from what the host changed since (left to the
// rerun's check against the base, which finds the conflict). A path
// counts as written only when Lower holds exactly the entry the journal
// says: the same type, mode, symlink target, or a file's SHA-256.
//
// On disk (version 2) it is lines of JSON: a journalHeader, written and
// synced before the first temporary file is made, then one journalEntry
// per selected change in path order, each written once its file is
// staged (so with its hash), all synced before the first rename into
// Lower. It is read one entry at a time. A crash while it is written
// leaves a last line cut short, which is no entry. Version 1 (an older
// corral's) was one object holding the token and every entry.
type journalHeader struct {
	// Token names this apply's temporary files in Lower (tempPrefix +
	// Token + "-" + a counter): a rerun removes those and no other name.
	Token   string `json:"token"`
	Version int    `json:"version,omitempty"`
	// Entries are version 1's, sorted by path as plain strings.
	Entries []journalEntry `json:"entries,omitempty"`
}

// journalVersion is the journal's form this corral writes.
const journalVersion = 2

// journalEntry is what one path of Lower becomes. Apply's plan (see
// planPath) is made of them too, with the plan's own fields.
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
	// Tmp is the temporary file staged beside Path in Lower, which the
	// write renames into place ("" when the entry is written directly).
	Tmp string `json:"tmp,omitempty"`
	// Done: Lower already held this when the apply checked it.
	Done bool `json:"done,omitempty"`

	// The plan's: Merged marks a file ApplyOptions.Merge merged, written
	// with Mode, from the spool file Merge ("": the layer's own).
	Merged bool   `json:"merged,omitempty"`
	Merge  string `json:"merge,omitempty"`
}

// journalWriter appends a journal's entries.
type journalWriter struct {
	token string
	w     *spoolWriter
}

// newToken returns 16 random hex digits.
func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// createJournal starts apply.pending with token's header, synced, and
// returns it open for the entries.
func (l *Layer) createJournal(token string) (*journalWriter, error) {
	w, err := createSpool(l.pendingPath())
	if err != nil {
		return nil, err
	}
	if err := w.put(journalHeader{Token: token, Version: journalVersion}); err == nil {
		err = w.bw.Flush()
		if err == nil {
			err = w.f.Sync()
		}
		if err == nil {
			w.n = 0
			return &journalWriter{token: token, w: w}, nil
		}
	}
	w.close(false)
	return nil, err
}

// readJournal calls fn with each entry of apply.pending, in order.
func (l *Layer) readJournal(fn func(journalEntry) error) error {
	return readJournalFile(l.pendingPath(), fn)
}

// readJournalFile calls fn with each entry of the version 2 journal p;
// a last entry cut short is none.
func readJournalFile(p string, fn func(journalEntry) error) error {
	first := true
	return readSpool(p, true, func(e journalEntry) error {
		if first { // the header
			first = false
			return nil
		}
		return fn(e)
	})
}

// finishPending completes an Apply that a crash interrupted: what the
// journal proves written is recorded and dropped from the layer, the
// rest left to the next check (finish, untrusted). Without a journal it
// does nothing. A journal of an older corral (a list of paths, no
// hashes) proves nothing: it is dropped, and its paths are checked
// again; one cut short before its header was whole made no file yet.
func (l *Layer) finishPending(log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := os.Open(l.pendingPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	head, _ := br.Peek(64)
	if bytes.HasPrefix(bytes.TrimSpace(head), []byte("[")) {
		var old []string
		if err := json.NewDecoder(br).Decode(&old); err != nil {
			return fmt.Errorf("reading %s: %w", l.pendingPath(), err)
		}
		log.Warn("layer.apply.old_journal", "lower", l.Lower, "paths", len(old))
		if err := os.Remove(l.pendingPath()); err != nil {
			return err
		}
		return l.Bump()
	}
	var h journalHeader
	if err := json.NewDecoder(br).Decode(&h); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			if err := os.Remove(l.pendingPath()); err != nil {
				return err
			}
			return l.Bump()
		}
		return fmt.Errorf("reading %s: %w", l.pendingPath(), err)
	}
	f.Close()
	entries := l.readJournal
	if h.Version < journalVersion {
		// Version 1 holds its entries (already in memory) in string
		// order: sorted into path order, which finish reads base.json in.
		list := h.Entries
		slices.SortFunc(list, func(a, b journalEntry) int { return cmpPath(a.Path, b.Path) })
		entries = func(fn func(journalEntry) error) error {
			for _, e := range list {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		}
	}
	s, err := l.open()
	if err != nil {
		return err
	}
	defer s.close()
	return l.finish(s, h.Token, entries, false, log)
}

// provenPath is finish's list of the paths it proved written, for the
// pruning after it.
func (l *Layer) provenPath() string { return filepath.Join(l.spoolDir(), "proven") }

// provenItem is one path finish proved written; Known says Lower and
// upper hold the same file (an apply's own, trusted), so pruning need not
// read it.
type provenItem struct {
	Path  string `json:"p"`
	Known bool   `json:"k,omitempty"`
}

// finish records in base.json the journal's paths that Lower holds as
// the journal says (with their directories), removes from upper what
// Lower now holds among them, removes the apply's temporary files,
// drops the journal and raises the generation. entries yields the
// journal's entries in path order. trusted says the caller is the apply
// that just wrote them, so files are not hashed again and no temporary
// file is left; a rerun after a crash hashes each file. A path not
// proven keeps its base entry: the next apply checks it against the base
// like any other, so a host edit made after the crash is a conflict, not
// overwritten.
//
// base.json is rewritten in one pass beside the journal (both are in
// path order); the proven paths go to a spool file that the pruning
// reads.
func (l *Layer) finish(s *trees, token string, entries func(func(journalEntry) error) error, trusted bool, log *slog.Logger) error {
	if err := os.MkdirAll(l.spoolDir(), 0o700); err != nil {
		return err
	}
	var proven, unproven int
	err := l.withBase(func(base *baseReader) error {
		proven, unproven = 0, 0
		spool, err := createSpool(l.provenPath())
		if err != nil {
			return err
		}
		defer spool.close(false)
		w, err := l.newBaseWriter()
		if err != nil {
			return err
		}
		// copyTo writes base's entries before p.
		copyTo := func(p string) error {
			for base.head != nil && cmpPath(base.head.Path, p) < 0 {
				if err := w.put(*base.head); err != nil {
					return err
				}
				if err := base.next(); err != nil {
					return err
				}
			}
			return nil
		}
		err = entries(func(e journalEntry) error {
			cur, err := s.loStat(e.Path)
			if err != nil {
				return err
			}
			ok, err := s.proves(e, cur, trusted)
			if err != nil {
				return err
			}
			if !ok {
				unproven++
				return nil
			}
			proven++
			if err := spool.put(provenItem{Path: e.Path, Known: trusted && e.Type == "file"}); err != nil {
				return err
			}
			// The directories above it that apply may have made.
			for _, q := range ancestors(e.Path) {
				if err := copyTo(q); err != nil {
					return err
				}
				if base.head != nil && base.head.Path == q || w.n > 0 && cmpPath(q, w.last) <= 0 {
					continue // recorded, or just now
				}
				n, err := s.lo.lstat(q)
				if err != nil {
					return err
				}
				if n != nil {
					if err := w.put(entryOf(q, n)); err != nil {
						return err
					}
				}
			}
			if err := copyTo(e.Path); err != nil {
				return err
			}
			var was *Entry
			if base.head != nil && base.head.Path == e.Path {
				was = base.head
				if err := base.next(); err != nil {
					return err
				}
			}
			if cur != nil {
				if err := w.put(entryOf(e.Path, cur)); err != nil {
					return err
				}
			}
			if was != nil && was.Type == "dir" && (cur == nil || cur.Type != "dir") {
				// What base recorded below it is gone.
				for base.head != nil && isUnder(base.head.Path, e.Path) {
					if err := base.next(); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			err = copyTo("\xff") // the rest: a path ordered after all
			for err == nil && base.head != nil {
				if err = w.put(*base.head); err == nil {
					err = base.next()
				}
			}
		}
		if err == nil {
			err = spool.close(false)
		}
		if err != nil {
			w.abort()
			return err
		}
		return w.commit()
	})
	if err != nil {
		return err
	}
	if !trusted {
		log.Warn("layer.apply.recovered", "lower", l.Lower, "proven", proven, "unproven", unproven)
		if err := s.sweepTemps(token); err != nil {
			return err
		}
	}
	err = s.prune(func(fn func(provenItem) error) error {
		return readSpool(l.provenPath(), false, fn)
	})
	if err != nil {
		return err
	}
	os.Remove(l.provenPath())
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

// sweepTemps removes the temporary files named with token from Lower's
// and upper's directories that upper has (every temporary file an apply
// makes lies in a directory of a change it writes, so of upper, or is a
// merge's in upper), and nothing else: a name like them of the host's or
// the session's is theirs. It walks upper's directories, not the
// journal, whose last entries a crash may have kept from the disk.
func (s *trees) sweepTemps(token string) error {
	if token == "" {
		return nil
	}
	prefix := tempPrefix + token + "-"
	var sweep func(d string) error
	sweep = func(d string) error {
		for _, t := range []*tree{s.lo, s.up} {
			names, err := t.list(d)
			if err != nil {
				continue // gone, or no longer a directory: nothing of ours there
			}
			err = names.Each(func(n string) error {
				if strings.HasPrefix(n, prefix) {
					return t.removeAll(path.Join(d, n))
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		fd, err := s.up.open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil
		}
		defer unix.Close(fd)
		names, err := dirlist.List(fd, s.up.abs(d), s.up.spill)
		if err != nil {
			return err
		}
		return names.Each(func(n string) error {
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return sweep(path.Join(d, n))
			}
			return nil
		})
	}
	return sweep("")
}
