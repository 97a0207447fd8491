// Package transfer moves file trees in and out of a session's workspace as
// tar streams (`corral cp`, `corral sync`): Pack writes one from a tree,
// Unpack writes one into a directory. The same code runs on the host (the
// bwrap, docker and local backends, whose workspace is a host directory)
// and in a kubernetes pod (corral's helper, inside.ModeUntar and
// inside.ModeTar), so every backend refuses the same entries.
//
// Both sides work through an os.Root (openat2-style resolution: no path
// leaves the directory, symlinks included). Directories are recursive,
// permission bits and modification times are kept (setuid and setgid bits
// are dropped, ownership is the writer's), symlinks are copied as symlinks
// and never followed. Unpack refuses, before writing anything of it, an
// entry whose name is absolute or has a ".." component, an entry below a
// symlink (even one pointing inside), an entry of a kind other than file,
// directory or symlink (devices, fifos, hard links), and, with
// Options.Protected, a protected path of the workspace as the file tools
// refuse it (hostview.MatchProtectedIn).
//
// What comes out of a sandbox (Options.Top, Options.Gate) is checked
// again on the host's side, whatever the far end's helper did: every
// entry must lie at or below the top that was asked for, else the whole
// archive is refused (handback.Within), and what handback's policy holds
// back (git hooks and configuration at any depth, shell start-up files,
// editor settings...) is not written but listed in Stats.Held.
package transfer

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/dirlist"
	"github.com/corralhq/corral/internal/sparse"
)

// ErrRefused wraps every entry Unpack will not write and every source Pack
// will not read.
var ErrRefused = errors.New("refused")

// ErrTooLarge wraps the error of a copy whose archive grew past what its
// destination may receive (wscopy bounds a copy out by the free space of
// the host's destination): it is stopped while being received, before
// anything is written.
var ErrTooLarge = errors.New("too large")

// noFollow opens a file only if it is not a symlink (open(2) O_NOFOLLOW).
const noFollow = syscall.O_NOFOLLOW

// keepMode are the mode bits kept: permissions and the sticky bit; setuid
// and setgid are dropped (a copy must not make a privileged program).
const keepMode = fs.ModePerm | fs.ModeSticky

// Pack writes a tar of src, a path relative to the directory root (a file,
// a symlink or a directory, recursively; "." is root itself), to w. The
// entries are named top/REL; top "" names them REL (the contents of src).
// Symlinks are stored as symlinks, never followed; other kinds (sockets,
// devices, fifos) are skipped and counted in Stats.Skipped. It returns the
// counts; errors name the path.
func Pack(w io.Writer, root, src, top string) (Stats, error) {
	var st Stats
	r, err := os.OpenRoot(root)
	if err != nil {
		return st, err
	}
	defer r.Close()
	src = path.Clean(filepath.ToSlash(src))
	if bad := badName(src); bad != "" && src != "." {
		return st, fmt.Errorf("%w: %s: %s", ErrRefused, src, bad)
	}
	tw := tar.NewWriter(w)
	var walk func(rel, name string) error
	walk = func(rel, name string) error {
		fi, err := r.Lstat(rel)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		if fi.Mode()&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000 // tar's sticky bit (c_ISVTX)
		}
		switch {
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			f, err := r.OpenFile(rel, os.O_RDONLY|noFollow, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			n, err := io.CopyN(tw, f, fi.Size())
			if err != nil {
				return fmt.Errorf("%s: %w (it changed while being copied?)", rel, err)
			}
			st.Files++
			st.Bytes += n
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := r.Readlink(rel)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, t
			st.Symlinks++
			return tw.WriteHeader(hdr)
		case fi.IsDir():
			if name != "" {
				hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				st.Dirs++
			}
			names, err := listNames(r, rel)
			if err != nil {
				return err
			}
			return names.Each(func(n string) error {
				child := n
				if name != "" {
					child = name + "/" + n
				}
				return walk(path.Join(rel, n), child)
			})
		}
		st.Skipped = append(st.Skipped, rel)
		return nil
	}
	if err := walk(src, top); err != nil {
		return st, err
	}
	return st, tw.Close()
}

// Stats count what Pack read or Unpack wrote.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Skipped are entries of other kinds Pack left out.
	Skipped []string `json:",omitempty"`
	// Deleted are what Options.Delete removed.
	Deleted []string `json:",omitempty"`
	// SHA256 is the hash of the whole stream Unpack read (hex).
	SHA256 string
	// Held are the entries Options.Gate held back (not written, and
	// never deleted), with why; an entry the destination already holds
	// as it is (the same file, symlink or directory) is not listed.
	Held []handback.Risk `json:",omitempty"`
	// Included are the risky entries written because Options.Gate's
	// Include named them.
	Included []handback.Risk `json:",omitempty"`
}

// Options are what Unpack does besides writing the entries.
type Options struct {
	// Dir is the directory, relative to the root, the entries go into
	// ("" or "." for the root); it is made when missing.
	Dir string
	// Rename, when From is set, names the top-level entry From (and what
	// lies below it) To instead: `corral cp a b` where b does not exist.
	RenameFrom, RenameTo string
	// Dest and Top, when Dest is set, place an archive whose top-level
	// entry is Top as cp(1) and `docker cp` do: into Dest when Dest is an
	// existing directory, else as Dest itself (Dir and Rename* are then
	// derived from them).
	Dest, Top string
	// Protected are protected-path patterns relative to the root
	// (sandbox.DefaultProtected for a workspace); nil refuses none.
	Protected []string
	// Keep are protected-path patterns that Delete never removes, while
	// entries there are written (a person's own tree pushed into a
	// workspace: its .git/config goes in, the workspace's hooks stay).
	Keep []string `json:",omitempty"`
	// Delete removes what lies in Dir but not in the archive, once the
	// whole archive is written and its hash is WantSHA256 (required).
	Delete bool
	// WantSHA256, when set, is the hash the stream must have; a mismatch
	// (a stream cut short) is an error and deletes nothing.
	WantSHA256 string
	// Gate, when set, is the host's policy for what a sandbox hands back
	// (cp out, sync --pull): entries it calls risky and does not let
	// through are held back (Stats.Held). Paths are checked relative to
	// the root. It needs a seekable archive (a spooled one), read twice:
	// whether a directory is a git directory depends on entries that
	// may come later.
	Gate *handback.Policy `json:",omitempty"`
	// GroupReads gives every entry's group the owner's read and
	// execute (search) bits (0600 is written 0640, 0700 0750; write bits
	// are left as they are): for an archive written by another uid than
	// its readers', who share its group (a kubernetes pod's read-only
	// workspace, written by the helper container's uid and read through
	// the pod's fsGroup).
	GroupReads bool `json:",omitempty"`
}

// ErrHashMismatch is returned by Unpack when the stream's hash is not
// Options.WantSHA256.
var ErrHashMismatch = errors.New("the archive's SHA-256 does not match (the stream was cut short?)")

// badName returns why an entry name (slash-separated) is not acceptable,
// or "".
func badName(n string) string {
	switch {
	case n == "" || n == ".":
		return "empty name"
	case strings.HasPrefix(n, "/"):
		return "an absolute path"
	case strings.IndexByte(n, 0) >= 0:
		return "a NUL byte in the name"
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return `a ".." component`
		}
	}
	return ""
}

// CheckEntry returns why Unpack refuses an entry named name of type typ
// under Options o (pure: the symlink and protected-path checks look at
// the files and are Unpack's), or "" when its name and kind are fine.
func CheckEntry(name string, typ byte) string {
	n := strings.TrimSuffix(name, "/")
	if r := badName(n); r != "" {
		return r
	}
	switch typ {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		return ""
	case tar.TypeLink:
		return "a hard link (not copied: it could name a file outside the tree)"
	}
	return fmt.Sprintf("an entry of type %q (only files, directories and symlinks are copied)", typ)
}

// Unpack writes the tar stream r into the directory root (os.Root: no
// entry lands outside it), as Options say, reading r to its end (so a
// sender's stream is drained and its hash is of everything sent). It
// refuses the whole archive at its first bad entry (CheckEntry, an entry
// below a symlink, a protected path, a directory in the way of a file).
// When r is an io.ReadSeeker (a spooled archive: the host's side of every
// copy) every entry is checked first (precheck) and a refused archive
// writes nothing; from a plain stream (the pod's side) the entries before
// the bad one are written. An existing file or symlink is replaced, never
// written through.
func Unpack(r io.Reader, root string, o Options) (Stats, error) {
	var st Stats
	h := sha256.New()
	tee := io.TeeReader(r, h)
	finish := func(err error) (Stats, error) {
		_, _ = io.Copy(io.Discard, tee)
		st.SHA256 = hex.EncodeToString(h.Sum(nil))
		if err == nil && o.WantSHA256 != "" && st.SHA256 != o.WantSHA256 {
			err = ErrHashMismatch
		}
		return st, err
	}
	if o.Delete && o.WantSHA256 == "" {
		return finish(errors.New("transfer: Delete needs WantSHA256"))
	}
	rt, err := os.OpenRoot(root)
	if err != nil {
		return finish(err)
	}
	defer rt.Close()
	if o.Dest != "" {
		dest := path.Clean(filepath.ToSlash(o.Dest))
		if fi, err := rt.Lstat(dest); err == nil && fi.IsDir() || dest == "." {
			o.Dir, o.RenameFrom = dest, ""
		} else {
			o.Dir, o.RenameFrom, o.RenameTo = path.Dir(dest), o.Top, path.Base(dest)
		}
	}
	dir := path.Clean(filepath.ToSlash(o.Dir))
	if dir == "/" || dir == "" {
		dir = "."
	}
	if dir != "." {
		if r := badName(dir); r != "" {
			return finish(fmt.Errorf("%w: destination %s: %s", ErrRefused, dir, r))
		}
		if err := noSymlinkIn(rt, dir, true); err != nil {
			return finish(err)
		}
	}
	if o.Gate != nil && o.Gate.Host == nil {
		// What the host's own repositories run from their trees (husky's
		// core.hooksPath, a hook symlinked to a script) is risky too.
		if abs, err := filepath.Abs(root); err == nil {
			g := *o.Gate
			g.Host = handback.NewHostGit(abs).Why
			o.Gate = &g
		}
	}
	var types map[string]byte
	if rs, ok := r.(io.ReadSeeker); ok && seekable(rs) {
		if types, err = precheck(rs, rt, root, dir, o); err != nil {
			return finish(err)
		}
	} else if o.Gate != nil {
		return finish(errors.New("transfer: Gate needs a seekable archive"))
	}
	isGitDir := func(d string) bool { return gitDirIn(rt, types, d) }
	if dir != "." {
		if err := rt.MkdirAll(dir, 0o755); err != nil {
			return finish(err)
		}
	}
	// What the archive wrote, for Delete only: 8 bytes a path, not the
	// path (memory stays small for millions of entries; two paths that
	// hash alike keep a file that should go, never the other way).
	var seen pathSet
	if o.Delete {
		seen = pathSet{}
	}
	var dirs []dirMode
	// heldDirs are the directories the gate held back (a git directory's
	// objects/ that would make one, WhyMakesGit): what the archive holds
	// below them is held with them, not written into a directory that
	// is not there (that failed the whole unpack with ENOENT halfway).
	var heldDirs []string
	tr := tar.NewReader(tee)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return finish(fmt.Errorf("reading the archive: %w", err))
		}
		rel, err := entryPath(hdr, dir, o)
		if err != nil {
			return finish(err)
		}
		if err := noSymlinkIn(rt, rel, false); err != nil {
			return finish(err)
		}
		if err := protectedEntry(root, rel, hdr.Typeflag == tar.TypeDir, o); err != nil {
			return finish(err)
		}
		seen.add(rel)
		if o.Gate != nil && slices.ContainsFunc(heldDirs, func(d string) bool { return strings.HasPrefix(rel, d+"/") }) {
			continue
		}
		if o.Gate != nil {
			why, ok := o.Gate.Check(rel, kindOf(hdr.Typeflag), isGitDir)
			if hdr.Typeflag == tar.TypeSymlink {
				why, ok = o.Gate.CheckLink(rel, hdr.Linkname, isGitDir)
			}
			if d, marker := handback.GitDirMarker(rel); why == "" && marker && isGitDir(d) && !gitDirOnDisk(rt, d) && gitRunnablesOnDisk(rt, d) {
				why, ok = handback.WhyMakesGit, o.Gate.Included(rel)
			}
			if why != "" && ok {
				st.Included = append(st.Included, handback.Risk{Path: rel, Why: why})
			}
			if !ok {
				same, err := sameAsDisk(rt, rel, hdr, tr)
				if err != nil {
					return finish(err)
				}
				if !same {
					st.Held = append(st.Held, handback.Risk{Path: rel, Why: why})
					if hdr.Typeflag == tar.TypeDir {
						heldDirs = append(heldDirs, rel)
					}
				}
				continue
			}
		}
		mode := hdr.FileInfo().Mode() & keepMode
		if o.GroupReads {
			mode |= (mode & 0o500) >> 3
		}
		old, lerr := rt.Lstat(rel)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if lerr == nil && !old.IsDir() {
				if err := rt.Remove(rel); err != nil {
					return finish(err)
				}
				lerr = os.ErrNotExist
			}
			if lerr != nil {
				if err := rt.Mkdir(rel, 0o700); err != nil {
					return finish(err)
				}
			}
			// The final mode and time are set at the end: a read-only
			// directory must still take its entries.
			dirs = append(dirs, dirMode{rel, mode, hdr.ModTime})
			st.Dirs++
		case tar.TypeReg, tar.TypeSymlink:
			if lerr == nil {
				if old.IsDir() {
					return finish(fmt.Errorf("%w: %s: a directory is in the way of a %s", ErrRefused, rel, kind(hdr.Typeflag)))
				}
				if err := rt.Remove(rel); err != nil {
					return finish(err)
				}
			}
			if hdr.Typeflag == tar.TypeSymlink {
				if err := rt.Symlink(hdr.Linkname, rel); err != nil {
					return finish(err)
				}
				st.Symlinks++
				continue
			}
			f, err := rt.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
			if err != nil {
				return finish(err)
			}
			n, err := sparse.Copy(f, tr) // zeros as holes: an archive's sparse file stays sparse
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return finish(fmt.Errorf("%s: %w", rel, err))
			}
			if err := rt.Chmod(rel, mode); err != nil {
				return finish(err)
			}
			_ = rt.Chtimes(rel, hdr.ModTime, hdr.ModTime)
			st.Files++
			st.Bytes += n
		}
	}
	// Drain and hash before anything irreversible: Delete only after the
	// whole stream arrived as sent.
	st, err = finish(nil)
	if err != nil {
		return st, err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := rt.Chmod(d.rel, d.mode|0o700); err != nil {
			return st, err
		}
		_ = rt.Chtimes(d.rel, d.mtime, d.mtime)
	}
	if o.Delete {
		st.Deleted, err = deleteUnseen(rt, root, dir, seen, o, isGitDir)
	}
	return st, err
}

// entryPath returns where hdr lands below dir (relative to the root), o's
// rename applied, or an error wrapping ErrRefused (CheckEntry).
func entryPath(hdr *tar.Header, dir string, o Options) (string, error) {
	if why := CheckEntry(hdr.Name, hdr.Typeflag); why != "" {
		return "", fmt.Errorf("%w: archive entry %q: %s", ErrRefused, hdr.Name, why)
	}
	name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
	if !handback.Within(name, o.Top) {
		return "", fmt.Errorf("%w: archive entry %q lies outside %q, the top that was asked for (a forged helper's?)", ErrRefused, hdr.Name, o.Top)
	}
	if o.RenameFrom != "" {
		if name == o.RenameFrom {
			name = o.RenameTo
		} else if rest, ok := strings.CutPrefix(name, o.RenameFrom+"/"); ok {
			name = o.RenameTo + "/" + rest
		}
	}
	return path.Join(dir, name), nil
}

// protectedEntry refuses rel when it is one of o.Protected.
func protectedEntry(root, rel string, isDir bool, o Options) error {
	if len(o.Protected) == 0 {
		return nil
	}
	if m, ok := hostview.MatchProtectedIn(root, rel, isDir, o.Protected); ok {
		return fmt.Errorf("%w: %s is a protected path (%s): corral never writes it into a workspace", ErrRefused, rel, m)
	}
	return nil
}

// seekable reports whether rs can seek: an *os.File is an io.ReadSeeker
// even when it is a pipe (the pod side's stdin), where Seek fails.
func seekable(rs io.ReadSeeker) bool {
	_, err := rs.Seek(0, io.SeekCurrent)
	return err == nil
}

// precheck reads the archive rs to its end, refusing it as Unpack would
// at its first bad entry but writing nothing, then seeks back to the
// start. A path is a symlink on an entry's way when the archive's latest
// entry for it is one, or, where the archive has none, the disk's is: an
// archive that replaces a symlink with a directory is fine, one that makes
// a symlink and then writes below it (a forged archive) is refused before
// its first entry lands.
//
// It returns the type of every path the archive holds (its last entry's).
func precheck(rs io.ReadSeeker, rt *os.Root, root, dir string, o Options) (map[string]byte, error) {
	start, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	types := map[string]byte{}
	tr := tar.NewReader(rs)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the archive: %w", err)
		}
		rel, err := entryPath(hdr, dir, o)
		if err != nil {
			return nil, err
		}
		comps := strings.Split(rel, "/")
		for i := 1; i < len(comps); i++ {
			p := strings.Join(comps[:i], "/")
			t, inArchive := types[p]
			if !inArchive {
				fi, err := rt.Lstat(p)
				if err != nil {
					break // not there: nothing below it is either
				}
				if fi.Mode()&fs.ModeSymlink != 0 {
					t = tar.TypeSymlink
				}
			}
			if t == tar.TypeSymlink {
				return nil, fmt.Errorf("%w: %s lies below the symlink %s: corral never writes through a symlink", ErrRefused, rel, p)
			}
		}
		if err := protectedEntry(root, rel, hdr.Typeflag == tar.TypeDir, o); err != nil {
			return nil, err
		}
		// Only what a later entry's checks ask about is kept (a path on
		// its way, a git directory's markers): a directory or a symlink,
		// HEAD, objects, refs, commondir. Files, the bulk of a tree,
		// are not, so memory follows the directories, not the files.
		if _, marker := handback.GitDirMarker(rel); marker || hdr.Typeflag == tar.TypeDir || hdr.Typeflag == tar.TypeSymlink {
			types[rel] = hdr.Typeflag
		} else {
			delete(types, rel)
		}
	}
	_, err = rs.Seek(start, io.SeekStart)
	return types, err
}

// sortedNames returns the names in the directory rel of rt, sorted: an
// archive and a deletion walk the tree in the same order every time.
func sortedNames(rt *os.Root, rel string) ([]string, error) {
	d, err := rt.Open(rel)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// listNames lists directory rel of rt in sorted order, in bounded memory
// (a workspace's directory of a million names is not held whole;
// internal/dirlist spills to os.TempDir).
func listNames(rt *os.Root, rel string) (*dirlist.Listing, error) {
	d, err := rt.Open(rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return dirlist.List(int(d.Fd()), path.Join(rt.Name(), rel), "")
}

// dirMode is a directory's mode and time, set once its entries are in.
// The owner keeps rwx (so later copies can write there again).
type dirMode struct {
	rel   string
	mode  fs.FileMode
	mtime time.Time
}

// deleteUnseen removes, below dir of rt, what seen does not hold (deepest
// first), never a protected path (nor the directories holding one) and
// never through a symlink (a symlink is removed as itself).
//
// With o.Gate, what it calls risky is not deleted either: a hand-back
// that lacks the host's hook neither writes nor removes one.
func deleteUnseen(rt *os.Root, root, dir string, seen pathSet, o Options, isGitDir func(string) bool) ([]string, error) {
	protected := slices.Concat(o.Protected, o.Keep)
	var gone []string
	var walk func(rel string) error
	walk = func(rel string) error {
		names, err := listNames(rt, rel)
		if err != nil {
			return err
		}
		return names.Each(func(n string) error {
			c := path.Join(rel, n)
			fi, err := rt.Lstat(c)
			if err != nil {
				return err
			}
			if len(protected) > 0 {
				if _, ok := hostview.MatchProtectedIn(root, c, fi.IsDir(), protected); ok {
					return nil
				}
			}
			if o.Gate != nil {
				if why, _ := o.Gate.Check(c, kindOfMode(fi.Mode()), isGitDir); why != "" {
					return nil
				}
			}
			if fi.IsDir() {
				// Descend even into a directory the archive lacks: it
				// may hold protected paths, which stay (and it with them).
				if err := walk(c); err != nil {
					return err
				}
			}
			if seen.has(c) {
				return nil
			}
			if err := rt.Remove(c); err != nil {
				if fi.IsDir() && errors.Is(err, syscall.ENOTEMPTY) {
					return nil
				}
				return err
			}
			gone = append(gone, c)
			return nil
		})
	}
	return gone, walk(dir)
}

func kind(t byte) string {
	if t == tar.TypeSymlink {
		return "symlink"
	}
	return "file"
}

// noSymlinkIn refuses rel when a directory on its way (or, with self, rel
// itself) is a symlink: an archive entry is never written through one,
// even one pointing inside the root (os.Root would keep it inside, but a
// tree that links a/ to b/ must not have b/ written as a/).
func noSymlinkIn(rt *os.Root, rel string, self bool) error {
	comps := strings.Split(rel, "/")
	n := len(comps) - 1
	if self {
		n++
	}
	for i := 1; i <= n; i++ {
		p := strings.Join(comps[:i], "/")
		fi, err := rt.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if p == rel {
				return fmt.Errorf("%w: %s is a symlink: corral never writes through a symlink", ErrRefused, rel)
			}
			return fmt.Errorf("%w: %s lies below the symlink %s: corral never writes through a symlink", ErrRefused, rel, p)
		}
	}
	return nil
}

// kindOf is a tar entry's kind for handback.
func kindOf(typ byte) handback.Kind {
	switch typ {
	case tar.TypeReg:
		return handback.File
	case tar.TypeDir:
		return handback.Dir
	case tar.TypeSymlink:
		return handback.Symlink
	}
	return handback.Other
}

// kindOfMode is a file's kind for handback.
func kindOfMode(m fs.FileMode) handback.Kind {
	switch {
	case m.IsRegular():
		return handback.File
	case m.IsDir():
		return handback.Dir
	case m&fs.ModeSymlink != 0:
		return handback.Symlink
	}
	return handback.Other
}

// gitDirIn reports whether the directory d (relative to rt) is a git
// directory once the archive is written: HEAD, and objects and refs or
// commondir (git's is_git_directory), each as the archive has it, else as
// the disk does. Any kind counts: git follows symlinks there (a HEAD that
// links to refs/heads/main, objects linked elsewhere), so this errs
// towards calling a directory a git directory.
func gitDirIn(rt *os.Root, types map[string]byte, d string) bool {
	has := func(name string) bool {
		p := path.Join(d, name)
		if _, ok := types[p]; ok {
			return true
		}
		_, err := rt.Lstat(p)
		return err == nil
	}
	return has("HEAD") && (has("objects") && has("refs") || has("commondir"))
}

// gitRunnablesOnDisk is handback.HasGitRunnables on the disk below rt.
func gitRunnablesOnDisk(rt *os.Root, d string) bool {
	exists := func(p string) bool { _, err := rt.Lstat(p); return err == nil }
	list := func(p string) []string { n, _ := sortedNames(rt, p); return n }
	return handback.HasGitRunnables(d, exists, list)
}

// gitDirOnDisk is gitDirIn before the archive: the disk alone.
func gitDirOnDisk(rt *os.Root, d string) bool { return gitDirIn(rt, nil, d) }

// sameAsDisk reports whether the destination already holds what hdr (and,
// for a file, the body tr reads) would write at rel: a directory, a
// symlink to the same target, or a file with the same bytes. It reads the
// body to its end and the file at most as far (a constant amount of
// memory, whatever the sizes).
func sameAsDisk(rt *os.Root, rel string, hdr *tar.Header, tr io.Reader) (bool, error) {
	fi, err := rt.Lstat(rel)
	if err != nil {
		return false, nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return fi.IsDir(), nil
	case tar.TypeSymlink:
		if fi.Mode()&fs.ModeSymlink == 0 {
			return false, nil
		}
		t, err := rt.Readlink(rel)
		return err == nil && t == hdr.Linkname, nil
	case tar.TypeReg:
		if !fi.Mode().IsRegular() || fi.Size() != hdr.Size {
			return false, nil
		}
		f, err := rt.OpenFile(rel, os.O_RDONLY|noFollow, 0)
		if err != nil {
			return false, nil
		}
		defer f.Close()
		a, b := sha256.New(), sha256.New()
		if _, err := io.Copy(a, tr); err != nil {
			return false, fmt.Errorf("reading the archive: %w", err)
		}
		if _, err := io.Copy(b, io.LimitReader(f, hdr.Size+1)); err != nil {
			return false, nil
		}
		return string(a.Sum(nil)) == string(b.Sum(nil)), nil
	}
	return false, nil
}

// pathSet is a set of paths kept as 64-bit hashes.
type pathSet map[uint64]struct{}

// pathSeed makes pathSet's hashes; per process is enough (a set never
// leaves it).
var pathSeed = maphash.MakeSeed()

func (s pathSet) add(p string) {
	if s != nil {
		s[maphash.String(pathSeed, p)] = struct{}{}
	}
}

func (s pathSet) has(p string) bool {
	_, ok := s[maphash.String(pathSeed, p)]
	return ok
}
